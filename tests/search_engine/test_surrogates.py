"""Forecast parsing, the LLM client's retries, the LLM surrogate's abstentions and cache, the learned
and roofline surrogates."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import openai
import pytest
from openai.types.chat import ChatCompletion

from search_engine import scoring
from search_engine.bins import DEFAULT_BINS
from search_engine.generators.base import ProposalContext
from search_engine.generators.llm import LLMGenerator
from search_engine.llm_client import LLMClient
from search_engine.prompts import AnswerError, forecast_messages, parse_forecast
from search_engine.surrogates.base import Forecast, ForecastRequest
from search_engine.surrogates.cache import JsonFileCache, MemoryCache, SqliteCache
from search_engine.surrogates.learned import LearnedSurrogate, _matrix
from search_engine.surrogates.llm import LLMSurrogate
from search_engine.surrogates.roofline import RooflineSurrogate
from tests.search_engine.fakes import REFERENCE, render, space, true_speedup

try:
    import httpx2 as httpx
except ImportError:  # an openai release on plain httpx
    import httpx

PROBLEM = {"name": "scale", "sizes": {"N": 1 << 24}, "roofline": {"bytes": "8*N", "flops": "N"}}


def request(knobs=None):
    candidate = render(knobs or {"BLOCK": 256, "ITEMS": 2, "VEC": 4, "ALGO": "naive"})
    return ForecastRequest(reference=REFERENCE, candidate=candidate, hardware={"name": "H200", "sm_count": 132},
                           problem=PROBLEM, reference_ms=0.5)


# ---- parsing ------------------------------------------------------------------------------------

def test_a_tool_call_is_parsed_and_renormalised_with_the_raw_sum_kept():
    args = json.dumps({"reasoning": "float4 halves the load count", "probabilities": [0, 0, 0, 0.1, 0.2, 0.4, 0.2, 0.1],
                       "predicted_bin": 6})
    parsed = parse_forecast(args, None)
    assert parsed.predicted_bin == 6 and parsed.raw_sum == pytest.approx(1.0)
    doubled = parse_forecast(json.dumps({"probabilities": [0.2] * 8, "predicted_bin": 1}), None)
    assert doubled.raw_sum == pytest.approx(1.6) and sum(doubled.probabilities) == pytest.approx(1.0)


def test_a_json_object_in_the_content_is_the_fallback():
    content = 'Thinking...\n```json\n{"reasoning": "r", "probabilities": [0,0,0,0,1,0,0,0], "predicted_bin": 5}\n```'
    assert parse_forecast(None, content).predicted_bin == 5
    assert parse_forecast(None, 'sure: {"probs": [0,0,0,0,0,0,0,1], "bin": 8} done').predicted_bin == 8


def test_a_stated_bin_that_disagrees_is_noted_in_the_reasoning():
    parsed = parse_forecast({"reasoning": "r", "probabilities": [0, 0, 0, 0, 1, 0, 0, 0], "predicted_bin": 2}, None)
    assert parsed.predicted_bin == 5 and "stated bin 2" in parsed.reasoning


@pytest.mark.parametrize("args, content, reason", [
    ('{"probabilities": [1, 2, 3, 4, 5', None, "not valid JSON"),
    (None, "I'm unable to help with that.", "refused"),
    (None, "The candidate is faster.", "no forecast"),
    ('{"probabilities": [0.5, 0.5], "predicted_bin": 1}', None, "2 probabilities instead of 8"),
    ('{"probabilities": [1, 2, 3, 4, 5, 6, 7, 8], "predicted_bin": 8}', None, "out of range"),
    ('{"probabilities": [0, 0, 0, 0, 0, 0, 0, 0], "predicted_bin": 8}', None, "sum to zero"),
    ('{"probabilities": [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.3], "predicted_bin": 1000}', None, "predicted bin"),
    ('{"probabilities": ["a", 0, 0, 0, 0, 0, 0, 1], "predicted_bin": 8}', None, "not a number"),
    ('{"reasoning": "no numbers"}', None, "no list of probabilities"),
])
def test_unusable_answers_are_refused_with_a_reason(args, content, reason):
    with pytest.raises(AnswerError, match=reason):
        parse_forecast(args, content)


def test_the_prompt_holds_the_simulator_role_bins_checklist_and_hardware():
    system, user = forecast_messages(request())
    assert "GPU execution simulator" in system["content"]
    assert "extreme speedup" in system["content"] and "coalescing" in system["content"].lower()
    assert "tensor cores" in system["content"]
    assert "## Reference kernel" in user["content"] and "## Candidate kernel" in user["content"]
    assert "| SMs | 132 |" in user["content"]


# ---- a scripted OpenAI-compatible client ----------------------------------------------------------

def completion(content=None, tool_args=None, prompt_tokens=100, completion_tokens=20, finish="stop"):
    message = {"role": "assistant", "content": content}
    if tool_args is not None:
        message["tool_calls"] = [{"id": "c1", "type": "function",
                                  "function": {"name": "submit_forecast", "arguments": tool_args}}]
    return ChatCompletion.model_validate({
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    })


def timeout_error():
    return openai.APITimeoutError(request=httpx.Request("POST", "http://127.0.0.1/v1/chat/completions"))


def bad_request():
    response = httpx.Response(400, request=httpx.Request("POST", "http://127.0.0.1/v1/chat/completions"))
    return openai.BadRequestError("tools are not supported", response=response, body=None)


class ScriptedClient:
    """Plays a list of responses (or exceptions) and records the requests."""

    def __init__(self, script):
        self.script = list(script)
        self.calls = []
        self.chat = self
        self.completions = self

    def create(self, **kwargs):
        self.calls.append(kwargs)
        item = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(item, Exception):
            raise item
        return item


def client(script, **kw):
    sleeps = []
    c = LLMClient(base_url=None, api_key=None, model="m", client=ScriptedClient(script), sleep=sleeps.append, **kw)
    return c, sleeps


GOOD_TOOL = json.dumps({"reasoning": "r", "probabilities": [0, 0, 0, 0, 0.1, 0.7, 0.2, 0], "predicted_bin": 6})


def test_the_client_forces_the_tool_call_and_counts_tokens():
    c, _ = client([completion(tool_args=GOOD_TOOL, prompt_tokens=321, completion_tokens=45)])
    surrogate = LLMSurrogate(c)
    forecast = surrogate.forecast(request())
    sent = c.client.calls[0]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "submit_forecast"}}
    assert sent["tools"][0]["function"]["parameters"]["properties"]["probabilities"]["minItems"] == 8
    assert forecast.bin == 6 and forecast.confidence == pytest.approx(0.7)
    assert (forecast.tokens_in, forecast.tokens_out) == (321, 45)
    assert not forecast.abstained and forecast.surrogate == "llm@m/p1"


def test_timeouts_are_retried_with_growing_back_off_then_abstain():
    c, sleeps = client([timeout_error()], max_retries=3, backoff_s=0.5)
    forecast = LLMSurrogate(c).forecast(request())
    assert forecast.abstained and "did not answer after 4 attempts" in forecast.abstain_reason
    assert sleeps == [0.5, 1.0, 2.0]
    c, sleeps = client([timeout_error(), completion(tool_args=GOOD_TOOL)], max_retries=3, backoff_s=0.5)
    assert LLMSurrogate(c).forecast(request()).bin == 6 and sleeps == [0.5]


def test_a_server_that_refuses_tools_is_asked_for_json_content_instead():
    content = '{"reasoning": "r", "probabilities": [0, 0, 0, 1, 0, 0, 0, 0], "predicted_bin": 4}'
    c, _ = client([bad_request(), completion(content=content)])
    forecast = LLMSurrogate(c).forecast(request())
    assert forecast.bin == 4
    assert "tools" in c.client.calls[0] and "tools" not in c.client.calls[1]


def test_garbled_and_cut_off_answers_become_abstentions_with_the_reason():
    c, _ = client([completion(tool_args='{"reasoning": "...", "probabilities": [1, 2, 3', finish="length")])
    forecast = LLMSurrogate(c).forecast(request())
    assert forecast.abstained and "token limit" in forecast.abstain_reason
    assert "probabilities" in forecast.reasoning  # the raw excerpt is kept


def test_usable_answers_are_cached_and_abstentions_are_not(tmp_path):
    c, _ = client([completion(tool_args=GOOD_TOOL)])
    surrogate = LLMSurrogate(c, cache=JsonFileCache(tmp_path / "cache.json"))
    first = surrogate.forecast(request())
    second = surrogate.forecast(request())
    assert len(c.client.calls) == 1 and second.cached and second.probabilities == first.probabilities
    reopened = LLMSurrogate(c, cache=JsonFileCache(tmp_path / "cache.json"))
    assert reopened.forecast(request()).cached and len(c.client.calls) == 1
    other = request({"BLOCK": 128, "ITEMS": 2, "VEC": 4, "ALGO": "naive"})
    assert not reopened.forecast(other).cached
    bad, _ = client([completion(content="no idea")])
    s = LLMSurrogate(bad, cache=MemoryCache())
    s.forecast(request())
    s.forecast(request())
    assert len(bad.client.calls) == 2


def test_the_sqlite_cache_keeps_forecasts(tmp_path):
    cache = SqliteCache(tmp_path / "f.sqlite")
    cache.put("k", {"probabilities": [1.0], "bin": 1})
    assert SqliteCache(tmp_path / "f.sqlite").get("k") == {"probabilities": [1.0], "bin": 1}
    assert cache.get("missing") is None


def test_the_concurrency_limit_holds_under_forecast_many():
    active, peak = [0], [0]

    class Slow(ScriptedClient):
        def create(self, **kwargs):
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            time.sleep(0.02)
            active[0] -= 1
            return completion(tool_args=GOOD_TOOL)

    c = LLMClient(base_url=None, api_key=None, model="m", client=Slow([None]), max_concurrency=2)
    surrogate = LLMSurrogate(c, cache=MemoryCache())
    requests = [request({"BLOCK": b, "ITEMS": i, "VEC": 1, "ALGO": "naive"}) for b in (128, 256, 512) for i in (1, 2)]
    forecasts = surrogate.forecast_many(requests)
    assert len(forecasts) == 6 and all(f.bin == 6 for f in forecasts)
    assert peak[0] == 2


def test_the_llm_generator_records_wrong_signatures_and_garbage_as_failed_proposals():
    wrong_signature = "Rationale: fewer args\n```cuda\n__global__ void scale(float* y) { y[0] = 1; }\n```"
    renamed = "```cuda\n__global__ void other(const float* x, float* y, int n) { }\n```"
    good = ("Rationale: fine\n```cuda\n__global__ void scale(const float* __restrict__ x, float* y, int n) "
            "{ int i = threadIdx.x; if (i < n) y[i] = 2.0f * x[i]; }\n```")
    c, _ = client([completion(content=wrong_signature), completion(content="no code at all"),
                   completion(content=renamed), completion(content=good)], max_concurrency=1)
    import random
    ctx = ProposalContext(node_id=0, parent=REFERENCE, reference=REFERENCE, rng=random.Random(0))
    proposals = LLMGenerator(c, feedback="raw").propose(ctx, 4)
    reasons = [p.failure for p in proposals]
    assert "takes 1 parameters but the launch plan passes 3" in reasons[0]
    assert "no CUDA code" in reasons[1]
    assert "does not define" in reasons[2]
    assert reasons[3] is None and proposals[3].candidate["launch"] == REFERENCE["launch"]
    assert proposals[3].rationale == "fine"


def test_generator_feedback_modes_show_notes_raw_metrics_or_nothing():
    from search_engine.prompts import generator_messages
    import random
    ctx = ProposalContext(node_id=0, parent=REFERENCE, reference=REFERENCE, rng=random.Random(0),
                          parent_measurement={"speedup": 1.0, "profiler": {"dram__throughput.pct": 41.0}},
                          parent_expert_notes=[{"expert": "memory", "severity": "high",
                                                "finding": "loads are not coalesced", "advice": "use float4"}],
                          memory_text="- [improved, measured] VEC 1 -> 4 -> measured 1.8x")
    notes = generator_messages(ctx, feedback="notes")[1]["content"]
    raw = generator_messages(ctx, feedback="raw")[1]["content"]
    none = generator_messages(ctx, feedback="none")[1]["content"]
    assert "loads are not coalesced" in notes and "dram__throughput" not in notes
    assert "dram__throughput" in raw and "coalesced" not in raw
    assert "coalesced" not in none and "dram__throughput" not in none
    assert all("VEC 1 -> 4" in text for text in (notes, raw, none))
    with pytest.raises(ValueError):
        LLMGenerator(None, feedback="everything")


# ---- learned and roofline surrogates --------------------------------------------------------------

def family_rows(seed=0):
    rows = []
    for knobs in space().all_valid():
        s = true_speedup(knobs)
        if isinstance(s, str):
            continue
        rows.append({"reference": REFERENCE, "candidate": render(knobs), "problem": PROBLEM, "speedup": s,
                     "reference_ms": 0.5, "hardware": {"sm_count": 132}})
    return rows


@pytest.fixture(scope="module")
def trained():
    rows = family_rows()
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(rows))
    train = [rows[i] for i in idx[: len(rows) * 2 // 3]]
    test = [rows[i] for i in idx[len(rows) * 2 // 3:]]
    # The synthetic rows carry no reference counters: the profile's columns would be constant here.
    return LearnedSurrogate(seed=0, reference_profile=False).fit(train), train, test


def test_the_learned_surrogate_beats_a_uniform_forecast_on_held_out_variants(trained):
    model, _, test = trained
    forecasts = model.forecast_many([ForecastRequest(reference=r["reference"], candidate=r["candidate"],
                                                     problem=r["problem"], reference_ms=0.5) for r in test])
    truth = [DEFAULT_BINS.bin_of(r["speedup"]) for r in test]
    crps = np.mean([scoring.crps(f.probabilities, t) for f, t in zip(forecasts, truth)])
    uniform = np.mean([scoring.crps([1 / 8] * 8, t) for t in truth])
    within_one = np.mean([abs(f.bin - t) <= 1 for f, t in zip(forecasts, truth)])
    assert crps < 0.6 * uniform
    assert within_one >= 0.7
    assert all(len(f.probabilities) == 8 and abs(sum(f.probabilities) - 1) < 1e-9 for f in forecasts)


def test_the_learned_surrogate_saves_and_loads(trained, tmp_path):
    model, train, test = trained
    model.save(tmp_path / "m.joblib")
    again = LearnedSurrogate.load(tmp_path / "m.joblib")
    reqs = [ForecastRequest(reference=r["reference"], candidate=r["candidate"], problem=r["problem"],
                            reference_ms=0.5) for r in test]
    assert np.allclose(again.predict_proba(reqs), model.predict_proba(reqs))
    # A model saved before the features changed is refused with a reason, not used with wrong columns.
    import copy

    older = copy.deepcopy(model)
    older.feature_names = older.feature_names[:-1] + ["a_feature_of_an_older_version"]
    older.save(tmp_path / "old.joblib")
    with pytest.raises(ValueError, match="another set of features"):
        LearnedSurrogate.load(tmp_path / "old.joblib")


@pytest.mark.parametrize("online", ["local", "refit"])
def test_the_learned_surrogate_learns_from_the_runs_own_measurements(trained, tmp_path, online):
    model, train, test = trained
    model.save(tmp_path / "m.joblib")
    again = LearnedSurrogate.load(tmp_path / "m.joblib")
    again.online = online
    reqs = [ForecastRequest(reference=r["reference"], candidate=r["candidate"], problem=r["problem"],
                            reference_ms=0.5) for r in test]
    before = again.predict_proba(reqs)
    again.learn([{"request": q, "speedup": 9.0} for q in reqs])  # the run says: all extreme speedups
    after = again.predict_proba(reqs)
    assert after[:, 7].mean() > before[:, 7].mean() + 0.2
    if online == "refit":
        assert again.trained_rows == len(train) + len(reqs)


def test_the_run_local_model_alone_ranks_by_the_runs_knobs():
    rows = family_rows()
    rng = np.random.default_rng(1)
    idx = rng.permutation(len(rows))
    seen, unseen = [rows[i] for i in idx[:40]], [rows[i] for i in idx[40:]]
    model = LearnedSurrogate()  # no recorded data at all: only what the run measured
    assert model.forecast_many([ForecastRequest(reference=REFERENCE, candidate=unseen[0]["candidate"])])[0].abstained
    model.learn(seen)
    forecasts = model.forecast_many([ForecastRequest(reference=r["reference"], candidate=r["candidate"],
                                                     problem=r["problem"]) for r in unseen])
    scores = [f.expected_log_speedup() for f in forecasts]
    truth = [r["speedup"] for r in unseen]
    assert np.corrcoef(scores, np.log(truth))[0, 1] > 0.7
    assert "and 40 of this run's (a Gaussian process over its knob values, weighted 100%)" in forecasts[0].reasoning


def test_an_untrained_learned_surrogate_abstains():
    forecasts = LearnedSurrogate().forecast_many([request()])
    assert forecasts[0].abstained and "not trained" in forecasts[0].abstain_reason


def test_the_roofline_heuristic_centres_its_forecast_on_its_guess():
    itself = ForecastRequest(reference=REFERENCE, candidate=REFERENCE, problem=PROBLEM)
    surrogate = RooflineSurrogate()
    assert surrogate.estimate_speedup(itself) == pytest.approx(1.0)
    f = surrogate.forecast(itself)
    assert len(f.probabilities) == 8 and f.bin in (4, 5) and f.confidence < 0.5
    assert "roofline heuristic" in f.reasoning
    # A reference 100x slower than the roofline leaves room for an extreme speedup.
    slow = ForecastRequest(reference=REFERENCE, candidate=REFERENCE, problem=PROBLEM, reference_ms=100 * 0.028)
    assert surrogate.forecast(slow).bin == 8


def test_forecast_round_trips_through_a_dict():
    f = Forecast.from_probabilities([0, 0, 0, 0, 0.25, 0.5, 0.25, 0], surrogate="s", tokens_in=5)
    assert Forecast.from_dict(json.loads(json.dumps(f.to_dict()))) == f
    assert f.expected_speedup() == pytest.approx(math.exp(0.25 * math.log(DEFAULT_BINS.representative(5))
                                                          + 0.5 * math.log(DEFAULT_BINS.representative(6))
                                                          + 0.25 * math.log(DEFAULT_BINS.representative(7))))


def _requests_of(rows):
    return [ForecastRequest(reference=r["reference"], candidate=r["candidate"], problem=r["problem"],
                            reference_ms=0.5) for r in rows]


def test_the_runs_own_rows_take_over_only_where_the_recorded_data_misjudges_the_problem(trained, tmp_path):
    _, train, test = trained
    model = LearnedSurrogate(seed=0, target="absolute").fit(train)
    model.save(tmp_path / "m.joblib")
    rows = test[:8]

    def learnt(speedup_of, weigh_calibrated):
        m = LearnedSurrogate.load(tmp_path / "m.joblib")
        m.weigh_calibrated = weigh_calibrated
        # the forest's weight: a Gaussian process on the recorded-data model's errors nests that model, and where
        # it forecasts well the process adds little and earns its weight anyway (0.97 here)
        m.local_model = "forest"
        m.learn([{"request": q, "speedup": speedup_of(r["speedup"])} for q, r in zip(_requests_of(rows), rows)])
        return m

    for weigh_calibrated in (False, True):
        agreeing = learnt(lambda s: s, weigh_calibrated)
        # The recorded data predicts this family well: the run's eight rows add to it without taking over.
        assert agreeing._local.weight < 0.9
        # The run ranks the variants the other way round: its rows win.
        backwards = learnt(lambda s: 1 / s, weigh_calibrated)
        assert backwards._local.weight > 0.95 and backwards._local.calibration[0] == 0.0
        assert "weighted" in backwards.forecast(_requests_of(test[8:9])[0]).reasoning
    # The run says every variant is 40x faster than the recorded data thinks, in the same order. Against the
    # model as trained its rows win; against the model recalibrated on them (the default, which moves the
    # recorded-data model to the run's level) they only share the say, as the agreeing run's do.
    assert learnt(lambda s: 40 * s, False)._local.weight > 0.95
    faster = learnt(lambda s: 40 * s, True)
    assert faster._local.calibration[0] == 1.0 and faster._local.weight < 0.6


def test_the_centred_model_moves_to_the_runs_level_and_hands_over_a_ranking_it_gets_wrong(trained, tmp_path):
    model, train, test = trained
    assert model.target == "centred"
    # Trained on one problem, it starts at that problem's level: it forecasts like an absolute model.
    level = np.mean(np.log([r["speedup"] for r in train]))
    assert model._level == pytest.approx(level)
    model.save(tmp_path / "m.joblib")
    rows, reqs = test[:8], _requests_of(test[:8])
    others = _requests_of(test[8:40])

    def learnt(speedups):
        m = LearnedSurrogate.load(tmp_path / "m.joblib")
        m.learn([{"request": q, "speedup": s} for q, s in zip(reqs, speedups)])
        return m

    agreeing = learnt([r["speedup"] for r in rows])
    shifted = learnt([40 * r["speedup"] for r in rows])
    reversed_ = learnt([1 / r["speedup"] for r in rows])
    # Every variant 40x faster than recorded: the level moves by about log 40 (shrunk by one pseudo
    # row), the recorded ranking still holds, so the run's rows do not take over.
    assert shifted._level - agreeing._level == pytest.approx(math.log(40) * 8 / 9, abs=0.15)
    assert shifted._local.weight < 0.9
    fresh = LearnedSurrogate.load(tmp_path / "m.joblib")
    before = np.array([f.expected_log_speedup() for f in fresh.forecast_many(others)])
    after = np.array([f.expected_log_speedup() for f in shifted.forecast_many(others)])
    assert np.median(after - before) > 2.0
    # The run ranks its variants the other way round: no level explains that, so its rows win.
    assert reversed_._local.weight > max(agreeing._local.weight, shifted._local.weight)


def test_the_centred_target_centres_each_problem_on_its_own():
    from search_engine.surrogates.learned import _centred, _shift_bins

    rows = [{"speedup": 2.0}, {"speedup": 8.0}, {"speedup": 0.5}, {"speedup": 0.125}, {"speedup": None}]
    out, centres = _centred(rows, ["a", "a", "b", "b", "b"])
    assert centres == {"a": pytest.approx(4.0), "b": pytest.approx(0.25)}
    assert [r["speedup"] for r in out] == [pytest.approx(0.5), pytest.approx(2.0), pytest.approx(2.0),
                                           pytest.approx(0.5), None]
    # Moving bin probabilities along log speedup keeps their mass and order; no move changes nothing.
    probabilities = np.array([[0.1, 0.2, 0.3, 0.2, 0.1, 0.05, 0.03, 0.02]])
    assert np.allclose(_shift_bins(probabilities, 0.0, DEFAULT_BINS), probabilities)
    up = _shift_bins(probabilities, math.log(4.0), DEFAULT_BINS)
    reps = np.log(DEFAULT_BINS.representatives())
    assert up.sum() == pytest.approx(1.0) and (up @ reps) > (probabilities @ reps) + 0.5
    assert _shift_bins(probabilities, 50.0, DEFAULT_BINS)[0, -1] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="centred"):
        LearnedSurrogate(target="median")


def test_after_learning_a_forecast_also_gives_a_continuous_log_speedup_that_ranks_within_a_bin(trained, tmp_path):
    model, train, test = trained
    model.save(tmp_path / "m.joblib")
    again = LearnedSurrogate.load(tmp_path / "m.joblib")
    reqs = _requests_of(test)
    assert all(f.log_mean is None and f.log_sd is None for f in again.forecast_many(reqs[:5]))
    again.learn([{"request": q, "speedup": r["speedup"]} for q, r in zip(reqs[:15], test[:15])])
    forecasts = again.forecast_many(reqs[15:])
    assert all(f.log_sd > 0 and math.isfinite(f.log_mean) for f in forecasts)
    assert all(f.expected_log_speedup() == f.log_mean for f in forecasts)
    truth = np.log([r["speedup"] for r in test[15:]])
    assert np.corrcoef([f.log_mean for f in forecasts], truth)[0, 1] > 0.6
    # The continuous part agrees with the bins it came with: its mean lies in a bin holding mass.
    for f in forecasts:
        assert f.probabilities[DEFAULT_BINS.bin_of(math.exp(f.log_mean)) - 1] > 0.05


def test_prob_above_reads_the_continuous_part_where_there_is_one():
    from search_engine.policy import prob_above

    f = Forecast.from_probabilities([0, 0, 0, 0, 0, 0, 0, 1.0])  # "extreme speedup": 4.3x and 7x look alike
    assert prob_above(f, 5.0) == prob_above(Forecast.from_probabilities([0, 0, 0, 0, 0, 0, 0, 1.0]), 5.0)
    f.log_mean, f.log_sd = math.log(7.0), 0.05
    g = Forecast.from_probabilities([0, 0, 0, 0, 0, 0, 0, 1.0])
    g.log_mean, g.log_sd = math.log(4.3), 0.05
    assert prob_above(f, 7.0) == pytest.approx(0.5)
    assert prob_above(f, 6.0) > 0.99 and prob_above(g, 6.0) < 0.01
    again = Forecast.from_dict(json.loads(json.dumps(f.to_dict())))
    assert again == f and again.log_mean == pytest.approx(math.log(7.0))


def test_the_memory_parallelism_features_follow_the_grid_the_occupancy_and_the_load_width():
    from search_engine.surrogates.features import feature_names, request_features

    names = feature_names()

    def feats(knobs, n=1 << 24, registers=32):
        q = request(knobs)
        q.problem = dict(PROBLEM, sizes={"N": n})
        q.compiler_facts = {"registers": registers, "shared_bytes": 0}
        row = request_features(q)
        return {k: row[names.index(k)] for k in ("sm_fill", "log_resident_threads_per_sm", "load_bytes",
                                                  "log_bytes_in_flight_per_sm")}

    wide = feats({"BLOCK": 256, "ITEMS": 2, "VEC": 4, "ALGO": "naive"})
    assert wide["sm_fill"] == 1.0
    assert math.exp(wide["log_resident_threads_per_sm"]) == pytest.approx(2048)  # 8 blocks of 256 fill an SM
    # The family's float loads widen only through the loop (no vector type), so the width stays 4 bytes,
    # and the loop's literal trip count (ITEMS * VEC = 8) multiplies what each thread has in flight.
    assert wide["load_bytes"] == 4.0
    assert math.exp(wide["log_bytes_in_flight_per_sm"]) == pytest.approx(2048 * 4 * 8)
    # A grid of 32 blocks on 132 SMs leaves most SMs idle and one block on each busy one.
    small = feats({"BLOCK": 256, "ITEMS": 2, "VEC": 4, "ALGO": "naive"}, n=32 * 256 * 8)
    assert small["sm_fill"] == pytest.approx(32 / 132)
    assert math.exp(small["log_resident_threads_per_sm"]) == pytest.approx(256)
    # Registers cap the blocks resident on an SM: 128 registers per thread allow two blocks of 256.
    heavy = feats({"BLOCK": 256, "ITEMS": 2, "VEC": 4, "ALGO": "naive"}, registers=128)
    assert math.exp(heavy["log_resident_threads_per_sm"]) == pytest.approx(512)


def test_the_load_width_is_the_widest_vector_type_the_variant_keeps():
    from search_engine.surrogates.features import _load_bytes

    assert _load_bytes("#define V 4\n#if V == 4\ntypedef float4 v_t;\n#else\ntypedef float v_t;\n#endif\n") == 16
    assert _load_bytes("#define V 2\n#if V == 4\ntypedef float4 v_t;\n#elif V == 2\ntypedef float2 v_t;\n#endif\n") == 8
    assert _load_bytes("__global__ void k(const float* x) {}") == 4


def test_a_second_pass_over_a_family_of_a_thousand_variants_prepares_no_source_again(monkeypatch):
    from search_engine.surrogates import features

    launch = [{"kernel": "k", "block": ["256"], "grid": ["n / 256"]}]
    reference = {"source": "__global__ void k(const float* x, float* y) { y[0] = x[0]; }", "launch": launch}
    requests = [ForecastRequest(reference=reference, problem={"sizes": {"n": 1 << 20}},
                                candidate={"source": f"#define ITEMS {i}\n" + reference["source"], "launch": launch})
                for i in range(1000)]
    features._source_facts.cache_clear()
    first = features.features_matrix(requests)
    prepared = []
    real_preprocess = features._preprocess_pieces
    monkeypatch.setattr(features, "_preprocess_pieces", lambda source: prepared.append(source) or real_preprocess(source))
    second = features.features_matrix(requests)
    assert prepared == []  # the 512-entry cache it replaces prepared every source again
    np.testing.assert_array_equal(first, second)
    assert features._source_facts.cache_info().maxsize >= 1000


def test_with_moments_from_the_level_a_run_above_the_top_bin_is_forecast_at_its_own_level(trained, tmp_path):
    from search_engine.policy import prob_above

    model, _, test = trained
    model.save(tmp_path / "m.joblib")
    rows, reqs, others = test[:8], _requests_of(test[:8]), _requests_of(test[8:40])

    def loaded(moments, factor=None):
        m = LearnedSurrogate.load(tmp_path / "m.joblib")
        m.moments = moments
        m.order_prior_rows = None  # the moments alone: the order's recalibration also carries the run's level
        # the forest, constant at the run's rows: the Gaussian process learns the level from its errors whatever
        # the moments
        m.local_model = "forest"
        if factor:
            m.learn([{"request": q, "speedup": factor * r["speedup"]} for q, r in zip(reqs, rows)])
        return m

    def means(m):
        return np.array([f.expected_log_speedup() for f in m.forecast_many(others)])

    # Before any measurement the level is the recorded problems': every forecast carries a mean and a
    # spread, and they agree with the bins there, which do not cut them off yet.
    fresh = loaded("level").forecast_many(others)
    assert all(f.log_mean is not None and f.log_sd > 0 for f in fresh)
    assert np.median(np.abs(means(loaded("level")) - means(loaded("bins")))) < 0.3
    # The run's variants run 40x faster than recorded, far above the top bin (>= 4x): from the bins the
    # forecasts stop near its representative; from the level they move with the run's measurements.
    bins, level = loaded("bins", 40), loaded("level", 40)
    moved_bins = np.median(means(bins) - means(loaded("bins")))
    moved_level = np.median(means(level) - means(loaded("level")))
    assert moved_level == pytest.approx(math.log(40) * 8 / 9, abs=0.5)
    assert moved_level > moved_bins + 0.5
    # So a candidate can still beat a best measured at 40x the recorded speedups: from the bins it cannot.
    best = 40 * max(r["speedup"] for r in rows)
    assert max(prob_above(f, best) for f in level.forecast_many(others)) > 0.15
    assert max(prob_above(f, best) for f in bins.forecast_many(others)) < max(
        prob_above(f, best) for f in level.forecast_many(others))
    with pytest.raises(ValueError, match="mean and spread"):
        LearnedSurrogate(moments="median")


@pytest.mark.parametrize("local_model", ["forest", "gp-novelty"])
def test_knob_values_the_run_has_not_measured_widen_the_run_local_forecast_with_local_novelty(local_model):
    from search_engine.surrogates.learned import _unseen_share

    rows = family_rows()
    # the run has measured only VEC 1 and 2 variants; VEC 4 (the fastest) is a value it has not seen
    measured = [r for r in rows if r["candidate"]["knobs"]["VEC"] != 4][::3]
    alike_seen = next(r for r in rows if r["candidate"]["knobs"]["VEC"] == 2 and r not in measured)
    alike_new = next(r for r in rows if r["candidate"]["knobs"]["VEC"] == 4 and all(
        r["candidate"]["knobs"][k] == alike_seen["candidate"]["knobs"][k] for k in ("BLOCK", "ITEMS", "ALGO")))
    requests = [ForecastRequest(reference=r["reference"], candidate=r["candidate"], problem=r["problem"])
                for r in (alike_seen, alike_new)]
    plain = LearnedSurrogate(local_novelty=0.0, local_model=local_model)
    novel = LearnedSurrogate(local_novelty=1.0, local_model=local_model)
    for model in (plain, novel):
        model.learn(measured)
    assert (novel._local.gp is not None) is (local_model == "gp-novelty")
    seen_values = novel._local.seen_values
    assert list(_unseen_share(requests, seen_values)) == [0.0, 0.25]  # one of four knobs new
    (p_seen, p_new), (n_seen, n_new) = plain.forecast_many(requests), novel.forecast_many(requests)
    # Without it a forest forecasts the unseen value with the doubt of the seen ones it resembles (a Gaussian process
    # with no more than the errors' amplitude it fitted); with it the unseen value's forecast is wider, by a quarter
    # of the run's variance, and a seen one's is not.
    assert n_seen.log_sd == pytest.approx(p_seen.log_sd)
    assert n_new.log_sd ** 2 == pytest.approx(p_new.log_sd ** 2 + 0.25 * novel._local.run_var)
    assert n_new.log_mean == pytest.approx(p_new.log_mean)
    run_var = np.var(np.log([r["speedup"] for r in measured]))
    assert novel._local.run_var == pytest.approx(max(run_var, novel.local_min_sigma ** 2))


def test_local_incumbent_gives_the_run_local_forest_each_variants_distance_to_the_runs_best():
    from search_engine.surrogates.learned import _defines, _incumbent_distance

    rows = family_rows()
    measured = rows[::7]
    best = max(measured, key=lambda r: r["speedup"])
    plain, near = (LearnedSurrogate(local_incumbent=False, local_model="forest"),
                   LearnedSurrogate(local_incumbent=True, local_model="forest"))
    for model in (plain, near):
        model.learn(measured)
    assert plain._local.incumbent is None
    assert near._local.incumbent == _defines(best["candidate"]["source"]) and len(near._local.incumbent) == 4
    # one more feature, the last
    assert near._local.forest.n_features_in_ == plain._local.forest.n_features_in_ + 1
    # by hand: the share of the best's four knob values a variant does not share; none without #defines
    knobs = best["candidate"]["knobs"]
    one_off = next(r for r in rows if sum(r["candidate"]["knobs"][k] != knobs[k] for k in knobs) == 1)
    two_off = next(r for r in rows if sum(r["candidate"]["knobs"][k] != knobs[k] for k in knobs) == 2)
    bare = {"source": "__global__ void k() {}"}
    requests = [ForecastRequest(reference=r["reference"], candidate=r["candidate"], problem=r["problem"])
                for r in (best, one_off, two_off)]
    requests.append(ForecastRequest(reference=best["reference"], candidate=bare, problem=best["problem"]))
    assert list(_incumbent_distance(requests, near._local.incumbent)) == [0.0, 0.25, 0.5, 1.0]
    # the forecasts read it: the forest's means of the same candidates differ from the plain forest's
    others = [ForecastRequest(reference=r["reference"], candidate=r["candidate"], problem=r["problem"])
              for r in rows[3::11]]
    assert [f.log_mean for f in near.forecast_many(others)] != [f.log_mean for f in plain.forecast_many(others)]
    # a run of variants without knobs has no incumbent, and so no such feature
    bare_rows = [{"request": ForecastRequest(reference=best["reference"], candidate={"source": f"// v{i}\n" + bare["source"]},
                                             problem=best["problem"]), "speedup": 1.0 + i / 10} for i in range(4)]
    near.learn(bare_rows)
    assert near._local.incumbent is None


def test_order_prior_rows_recalibrates_the_recorded_data_models_order_on_the_runs_measurements(trained, tmp_path):
    model, _, test = trained
    model.save(tmp_path / "m.joblib")
    rows, reqs = test[:8], _requests_of(test[:8])
    others = _requests_of(test[8:40])

    def learnt(speedups, k):
        m = LearnedSurrogate.load(tmp_path / "m.joblib")
        # the recalibration alone: with weigh_calibrated it would also change the run-local weight, and so the bins
        # (and, as before protocol 18, on the published bins' moments with the model's own spread)
        m.order_prior_rows, m.weigh_calibrated = k, False
        m.calibrated_moments, m.pooled_spread = "bins", False
        # the forest, whose bins the recalibration leaves alone (a Gaussian process models the recalibrated errors)
        m.local_model = "forest"
        m.learn([{"request": q, "speedup": s} for q, s in zip(reqs, speedups)])
        return m

    truth = [r["speedup"] for r in rows]
    backwards = [1 / s for s in truth]
    # The run agrees with the model's order: the slope stays near 1. It runs it backwards: the slope is
    # held at 0, and fewer pseudo rows let the run's rows say so sooner.
    assert learnt(truth, 8)._local.calibration[0] > 0.7
    assert learnt(backwards, 3)._local.calibration[0] == 0.0
    assert learnt(backwards, 3)._local.calibration[0] <= learnt(backwards, 8)._local.calibration[0] < 1.0
    off, on = learnt(backwards, None), learnt(backwards, 3)
    assert off._local.calibration is None
    f_off, f_on = off.forecast_many(others), on.forecast_many(others)
    # The bins, and so the confidence, do not change; the continuous part does.
    assert np.allclose([f.probabilities for f in f_off], [f.probabilities for f in f_on])
    # With beta 0 the recorded-data model forecasts every candidate at the run's mean log speedup, with the
    # run's variance: what is left of the differences between candidates is the run-local model's.
    w = on._local.weight
    X = np.vstack([on._local_matrix(others, on._matrix(others), on._local.vocabulary)])
    mu = np.mean([tree.predict(X) for tree in on._local.forest.estimators_], axis=0)
    y_bar = np.mean(np.log(backwards))
    assert [f.log_mean for f in f_on] == pytest.approx(list((1 - w) * y_bar + w * mu))
    assert on._local.calibration[3] == pytest.approx(max(np.var(np.log(backwards)), on.local_min_sigma ** 2))
    # Fewer than three measured rows: nothing to recalibrate from.
    assert learnt(backwards[:2], 3)._local.calibration is None


def test_weigh_calibrated_earns_the_run_local_weight_against_the_recalibrated_model_left_out_row_by_row(trained, tmp_path):
    from scipy.stats import norm

    from search_engine.surrogates.learned import _calibration

    model, _, test = trained
    model.save(tmp_path / "m.joblib")
    rows, reqs = test[:6], _requests_of(test[:6])
    # the run's rows all at a fifth of what was recorded: the model as trained misjudges the level, while its
    # order (what the recalibration keeps) is right
    run = [{"request": q, "speedup": r["speedup"] / 5} for q, r in zip(reqs, rows)]

    def learnt(weigh, k=8.0, n=len(run)):
        m = LearnedSurrogate.load(tmp_path / "m.joblib")
        m.order_prior_rows, m.weigh_calibrated = k, weigh
        m.calibrated_moments = "bins"  # (the published bins' moments, as before protocol 18)
        m.local_model = "forest"  # (its out-of-bag forecasts are read by hand below)
        m.learn(run[:n])
        return m

    plain, weighed = learnt(False), learnt(True)
    # the same run-local forest and recalibration; only the weight differs
    assert plain._local.calibration == weighed._local.calibration
    assert weighed._local.weight < plain._local.weight
    # the weight by hand: each row's probability under the normal recalibrated on the other five rows
    m = weighed
    _, base_mean, base_var = m._base(m._matrix(reqs))
    y = np.log([r["speedup"] for r in run])
    X = m._local_matrix(reqs, m._matrix(reqs), m._local.vocabulary, base_mean)
    per_tree = np.stack([t.predict(X) for t in m._local.forest.estimators_])
    oob = np.ones_like(per_tree, dtype=bool)
    for t, samples in enumerate(m._local.forest.estimators_samples_):
        oob[t, samples] = False
    seen = oob.sum(axis=0) > 0
    oob_mu = (per_tree * oob).sum(axis=0) / np.maximum(oob.sum(axis=0), 1)
    edges = np.log(m.bins.edges)

    def p_bin(mu, sd, v):
        k = m.bins.bin_of(math.exp(v)) - 1
        hi = norm.cdf((edges[k] - mu) / sd) if k < len(edges) else 1.0
        lo = norm.cdf((edges[k - 1] - mu) / sd) if k > 0 else 0.0
        return (hi - lo + 1e-4) / (1 + m.bins.n_bins * 1e-4)

    ll_base = ll_local = 0.0
    for i in np.flatnonzero(seen):
        others = np.arange(len(y)) != i
        var = max(np.var(y[others]), m.local_min_sigma ** 2)
        beta, m_bar, y_bar, _ = _calibration(base_mean[others], y[others], 8.0, var)
        ll_base += math.log(max(p_bin(y_bar + beta * (base_mean[i] - m_bar),
                                      math.sqrt(beta ** 2 * base_var[i] + (1 - beta ** 2) * var), y[i]), 1e-6))
        ll_local += math.log(max(p_bin(oob_mu[i], math.sqrt(m._local.error_var), y[i]), 1e-6))
    log_odds = max(-8.0, min(8.0, math.log(len(y) / m.local_prior_rows) + ll_local - ll_base))
    assert m._local.weight == pytest.approx(1 / (1 + math.exp(-log_odds)), rel=1e-6)
    # without the recalibration (off, or fewer than 3 rows) the weight is earned as before
    assert learnt(True, None)._local.weight == learnt(False, None)._local.weight
    assert learnt(True, n=2)._local.weight == learnt(False, n=2)._local.weight


def test_spread_prior_rows_rescales_the_recalibrated_models_spread_by_its_error_on_the_runs_rows(trained, tmp_path):
    model, _, test = trained
    model.save(tmp_path / "m.joblib")
    reqs = _requests_of(test[:8])
    others = _requests_of(test[8:40])
    truth = [r["speedup"] for r in test[:8]]

    def learnt(speedups, k, n=8):
        m = LearnedSurrogate.load(tmp_path / "m.joblib")
        m.spread_prior_rows = k
        m.calibrated_moments, m.pooled_spread = "bins", False  # (the factor alone, as before protocol 18)
        m.learn([{"request": q, "speedup": s} for q, s in zip(reqs[:n], speedups[:n])])
        return m

    off = learnt(truth, None)
    assert off._local.spread == 1.0
    on = learnt(truth, 3.0)
    # the factor by hand: each row's squared error under the recalibration fitted on the other rows, in units
    # of that forecast's variance, averaged with 3 pseudo rows of 1
    _, base_mean, base_var = on._base(_matrix(reqs))
    y = np.log(truth)
    mu, sd = on._left_out_calibrated(base_mean, base_var, y)
    sd = np.maximum(sd, on.local_min_sigma)
    assert on._local.spread == pytest.approx((np.sum(((y - mu) / sd) ** 2) + 3) / 11)
    # the recorded-data model's normal in each forecast: the same mean, its variance times the factor (held at
    # least local_min_sigma squared); the run-local model's normal and the weights do not change
    for f_off, f_on in zip(off.forecast_many(others), on.forecast_many(others)):
        (w0, a0, s0), (w1, b0, t0) = f_off.log_mixture
        (v0, a1, s1), (v1, b1, t1) = f_on.log_mixture
        assert (v0, v1, a1, b1, t1) == pytest.approx((w0, w1, a0, b0, t0))
        assert s1 ** 2 == pytest.approx(max(on._local.spread * s0 ** 2, on.local_min_sigma ** 2))
    # a run whose rows the recalibrated model forecasts far off widens it; no recalibration (fewer than 3 rows,
    # or order_prior_rows off), no factor
    scrambled = [truth[i] * (8.0 if i % 2 else 1 / 8.0) for i in range(8)]
    assert learnt(scrambled, 3.0)._local.spread > 1.0 > on._local.spread
    assert learnt(truth, 3.0, n=2)._local.spread == 1.0
    m = LearnedSurrogate.load(tmp_path / "m.joblib")
    m.spread_prior_rows, m.order_prior_rows = 3.0, None
    m.pooled_spread = False
    m.learn([{"request": q, "speedup": s} for q, s in zip(reqs, truth)])
    assert m._local.spread == 1.0
    # a recorded-data model sure of one bin (a variance near 0) does not blow the factor up: its sd counts as at
    # least local_min_sigma
    sure = LearnedSurrogate.load(tmp_path / "m.joblib")
    sure.spread_prior_rows = 3.0
    sure.calibrated_moments, sure.pooled_spread = "bins", False
    base = sure._base
    sure._base = lambda X, moments=None: (lambda p, m, v: (p, m, np.full_like(v, 1e-12)))(*base(X, moments))
    sure.learn([{"request": q, "speedup": s} for q, s in zip(reqs, truth)])
    _, base_mean, _ = base(_matrix(reqs))
    mu, _ = sure._left_out_calibrated(base_mean, np.full(8, 1e-12), y)
    assert sure._local.spread == pytest.approx((np.sum(((y - mu) / sure.local_min_sigma) ** 2) + 3) / 11)


def test_calibrated_moments_level_recalibrates_the_relative_bins_moments_from_the_third_row(trained, tmp_path):
    from search_engine.surrogates.learned import _calibration

    model, _, test = trained
    model.save(tmp_path / "m.joblib")
    reqs, others = _requests_of(test[:6]), _requests_of(test[6:30])
    # a run far above the recorded speedups, where the published bins' top bin cuts their moments off
    run = [{"request": q, "speedup": r["speedup"] * 40} for q, r in zip(reqs, test[:6])]

    def learnt(moments, n=6):
        m = LearnedSurrogate.load(tmp_path / "m.joblib")
        m.calibrated_moments, m.spread_prior_rows, m.pooled_spread = moments, None, False
        m.learn(run[:n])
        return m

    bins, level = learnt("bins"), learnt("level")
    assert bins._local.moments == "bins" and level._local.moments == "level"
    # the recalibration by hand on the relative bins' moments moved by the level
    _, mean, var = level._base(_matrix(reqs), "level")
    y = np.log([r["speedup"] for r in run])
    run_var = max(float(np.var(y)), level.local_min_sigma ** 2)
    beta, m_bar, y_bar, run_var = _calibration(mean, y, level.order_prior_rows, run_var)
    assert level._local.calibration == pytest.approx((beta, m_bar, y_bar, run_var))
    _, o_mean, o_var = level._base(_matrix(others), "level")
    for f, a, v in zip(level.forecast_many(others), o_mean, o_var):
        (_, base_mean, base_sd), _ = f.log_mixture
        assert base_mean == pytest.approx(y_bar + beta * (a - m_bar))
        assert base_sd ** 2 == pytest.approx(beta ** 2 * v + (1 - beta ** 2) * run_var)
    # the bins' moments differ there (their top bin cuts them off); with 2 rows, before any recalibration,
    # both forecast alike
    assert [f.log_mixture for f in bins.forecast_many(others)] != [f.log_mixture for f in level.forecast_many(others)]
    two_bins, two_level = learnt("bins", 2), learnt("level", 2)
    assert two_level._local.moments == "bins"
    assert [f.log_mixture for f in two_bins.forecast_many(others)] == [f.log_mixture for f in two_level.forecast_many(others)]
    with pytest.raises(ValueError, match="mean and spread"):
        LearnedSurrogate(calibrated_moments="median")


def test_pooled_spread_gives_every_candidate_of_the_recalibrated_model_one_spread_from_its_error(trained, tmp_path):
    model, _, test = trained
    model.save(tmp_path / "m.joblib")
    reqs, others = _requests_of(test[:8]), _requests_of(test[8:40])
    truth = [r["speedup"] for r in test[:8]]

    def learnt(pooled, n=8):
        m = LearnedSurrogate.load(tmp_path / "m.joblib")
        m.pooled_spread = pooled
        m.learn([{"request": q, "speedup": s} for q, s in zip(reqs[:n], truth[:n])])
        return m

    off, on = learnt(False), learnt(True)
    assert off._local.pooled_var is None
    # by hand: the left-out recalibrated forecasts' squared errors with 3 (spread_prior_rows) pseudo rows at the
    # mean of their own variances
    _, base_mean, base_var = on._base(_matrix(reqs), on._local.moments)
    y = np.log(truth)
    mu, sd = on._left_out_calibrated(base_mean, base_var, y)
    assert on._local.pooled_var == pytest.approx(max((np.sum((y - mu) ** 2) + 3 * np.mean(sd ** 2)) / 11,
                                                     on.local_min_sigma ** 2))
    # one spread for every candidate, the same means and run-local normals as without it
    for f_off, f_on in zip(off.forecast_many(others), on.forecast_many(others)):
        (w0, a0, _), local0 = f_off.log_mixture
        (v0, a1, s1), local1 = f_on.log_mixture
        assert (v0, a1) == pytest.approx((w0, a0)) and local1 == pytest.approx(local0)
        assert s1 ** 2 == pytest.approx(on._local.pooled_var)
    # no recalibration yet (2 rows): nothing pooled
    assert learnt(True, 2)._local.pooled_var is None


@pytest.mark.parametrize("setting, off", [("weigh_calibrated", False), ("spread_prior_rows", None),
                                          ("calibrated_moments", "bins"), ("pooled_spread", False)])
def test_a_model_saved_before_a_run_local_setting_loads_with_it_off(trained, tmp_path, setting, off):
    model = LearnedSurrogate.load(_saved(trained[0], tmp_path / "m.joblib"))
    assert getattr(model, setting) != off  # today's default is on
    del model.__dict__[setting]
    assert getattr(LearnedSurrogate.load(_saved(model, tmp_path / "old.joblib")), setting) == off


def _saved(model, path):
    model.save(path)
    return path


def test_with_mixture_a_forecast_carries_both_models_normals_whose_moments_are_its_own(trained, tmp_path):
    from search_engine.policy import expected_log_improvement

    model, _, test = trained
    model.save(tmp_path / "m.joblib")
    rows, reqs = test[:8], _requests_of(test[:8])
    others = _requests_of(test[8:40])

    def learnt(mixture):
        m = LearnedSurrogate.load(tmp_path / "m.joblib")
        m.mixture = mixture
        # the run ranks its variants the other way round from the recorded data: the two models disagree
        m.learn([{"request": q, "speedup": 1 / r["speedup"]} for q, r in zip(reqs, rows)])
        return m

    plain, mixed = learnt(False).forecast_many(others), learnt(True).forecast_many(others)
    assert all(f.log_mixture is None for f in plain)
    w = learnt(True)._local.weight
    for p, m in zip(plain, mixed):
        assert m.probabilities == p.probabilities and m.log_mean == pytest.approx(p.log_mean)
        (w0, a, sa), (w1, b, sb) = m.log_mixture
        assert (w0, w1) == pytest.approx((1 - w, w))
        assert w0 * a + w1 * b == pytest.approx(m.log_mean)
        assert w0 * (sa ** 2 + (a - m.log_mean) ** 2) + w1 * (sb ** 2 + (b - m.log_mean) ** 2) == \
            pytest.approx(m.log_sd ** 2)
    # Where the two disagree most, one normal of the moments overstates the gain the components give.
    best = max(r["speedup"] for r in rows)
    gap = [abs(m.log_mixture[0][1] - m.log_mixture[1][1]) for m in mixed]
    i = int(np.argmax(gap))
    assert expected_log_improvement(mixed[i], 1 / best) < expected_log_improvement(plain[i], 1 / best)
    # Before the run-local model there is one model: no mixture.
    assert LearnedSurrogate.load(tmp_path / "m.joblib").forecast(others[0]).log_mixture is None


def test_local_reach_lowers_the_run_local_weight_only_outside_the_range_of_the_runs_rows(trained, tmp_path):
    model, _, test = trained
    model.save(tmp_path / "m.joblib")
    m = LearnedSurrogate.load(tmp_path / "m.joblib")
    # the run measured only variants the recorded-data model forecasts fastest
    reqs = _requests_of(test)
    means = np.array([f.expected_log_speedup() for f in m.forecast_many(reqs)])
    top = np.argsort(-means)[:6]
    m.learn([{"request": reqs[i], "speedup": test[i]["speedup"]} for i in top])
    lo, hi, spread = m._local.reach
    assert spread >= m.local_min_sigma and lo <= hi
    inside = next(i for i in top)
    outside = int(np.argmin(means))  # far below anything the run measured
    m.local_reach = None
    flat = m.forecast_many([reqs[inside], reqs[outside]])
    assert [f.log_mixture[1][0] for f in flat] == pytest.approx([m._local.weight] * 2)
    m.local_reach = 1.0
    near, far = m.forecast_many([reqs[inside], reqs[outside]])
    assert near.log_mixture[1][0] == pytest.approx(m._local.weight)  # inside the range: the full weight
    assert far.log_mixture[1][0] < 0.5 * m._local.weight  # outside: the recorded-data model keeps its say
    (w0, a, _), (w1, b, _) = far.log_mixture
    assert far.log_mean == pytest.approx(w0 * a + w1 * b)
    # the bins blend with the same weight
    X = m._matrix([reqs[outside]])
    base, base_mean, _ = m._base(X, m._local.moments)  # (the moments the run-local model was fitted against)
    local = m._local_forecast([reqs[outside]], X, base_mean)[0]
    assert list(far.probabilities) == pytest.approx(list((1 - w1) * base[0] + w1 * local[0]))


def profiled_family_rows(l1_hit: float, name: str):
    """The fake family under a reference whose profile says how its loads hit L1: the shared-memory variants win
    where the reference's loads miss (a staged tile saves traffic) and lose where L1 already serves them."""
    profile = {"l1tex__t_sector_hit_rate.pct": l1_hit, "lts__t_sector_hit_rate.pct": 40.0,
               "dram__bytes_read.sum": 8e6, "dram__bytes_write.sum": 4e6}
    rows = []
    for row in family_rows():
        shared = row["candidate"]["knobs"]["ALGO"] == "shared"
        factor = (1.6 if l1_hit < 50 else 0.6) / 0.7 if shared else 1.0
        rows.append({**row, "speedup": row["speedup"] * factor, "reference_profile": profile, "problem_name": name})
    return rows


def test_reference_profile_features_read_the_counters_and_say_nan_where_missing():
    from search_engine.surrogates.features import REFERENCE_PROFILE_FEATURES, reference_profile_features

    profile = {"l1tex__t_sector_hit_rate.pct": 68.0, "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": 80.0,
               "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 400.0,
               "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": 100.0,
               "dram__bytes_read.sum": 3.0e6, "dram__bytes_write.sum": 1.0e6}
    problem = {"sizes": {"N": 1000}, "roofline": {"bytes": "2000 * N"}}
    row = dict(zip(REFERENCE_PROFILE_FEATURES, reference_profile_features(profile, problem)))
    assert row["ref_l1_hit_pct"] == 68.0 and row["ref_dram_pct_of_peak"] == 80.0
    assert row["ref_sectors_per_load"] == 4.0
    assert row["ref_log_dram_over_roofline"] == pytest.approx(math.log(4.0e6 / 2.0e6))
    assert math.isnan(row["ref_l2_hit_pct"]) and math.isnan(row["ref_occupancy_pct"])
    assert np.isnan(reference_profile_features(None, problem)).all()
    assert np.isnan(reference_profile_features({"l1tex__t_sector_hit_rate.pct": "n/a"}, {}))[0]


def test_with_reference_profile_the_model_carries_where_a_kind_of_variant_pays_to_a_problem_it_never_saw(tmp_path):
    hits = {"a": 10.0, "b": 25.0, "c": 35.0, "d": 65.0, "e": 80.0, "f": 92.0}
    train = [r for name, hit in hits.items() for r in profiled_family_rows(hit, name)]
    groups = [r["problem_name"] for r in train]
    with_profile = LearnedSurrogate(seed=0, reference_profile=True).fit(train, groups=groups)
    without = LearnedSurrogate(seed=0, reference_profile=False).fit(train, groups=groups)
    from search_engine.surrogates.features import REFERENCE_COUNTER_SETS
    from search_engine.surrogates.learned import DEFAULT_REFERENCE_COUNTERS

    assert with_profile._base_X.shape[1] == \
        without._base_X.shape[1] + len(REFERENCE_COUNTER_SETS[DEFAULT_REFERENCE_COUNTERS])

    def shared_minus_naive(model, hit):
        rows = profiled_family_rows(hit, "new")
        means = [f.expected_log_speedup() for f in model.forecast_many([
            ForecastRequest(reference=r["reference"], candidate=r["candidate"], problem=r["problem"],
                            hardware=r["hardware"], reference_ms=0.5, reference_profile=r["reference_profile"])
            for r in rows])]
        shared = [m for m, r in zip(means, rows) if r["candidate"]["knobs"]["ALGO"] == "shared"]
        naive = [m for m, r in zip(means, rows) if r["candidate"]["knobs"]["ALGO"] == "naive"]
        return np.mean(shared) - np.mean(naive)

    # the model with the counters ranks the staged variants above where the reference misses L1, below where it hits
    assert shared_minus_naive(with_profile, 15.0) > 0.2 and shared_minus_naive(with_profile, 85.0) < -0.2
    # without them it cannot tell the two problems apart
    assert shared_minus_naive(without, 15.0) == pytest.approx(shared_minus_naive(without, 85.0))
    # saved and loaded, it still reads them; a model saved without the option loads with it off
    with_profile.save(tmp_path / "p.joblib")
    again = LearnedSurrogate.load(tmp_path / "p.joblib")
    assert again.reference_profile and shared_minus_naive(again, 15.0) == pytest.approx(
        shared_minus_naive(with_profile, 15.0))


def test_equal_family_weights_give_every_family_the_same_total_and_move_the_fit():
    from search_engine.surrogates.learned import _family_weights

    weights = _family_weights(["a"] * 6 + ["b"] * 2, "equal")
    assert list(weights) == [8 / (2 * 6)] * 6 + [8 / (2 * 2)] * 2 and weights.mean() == pytest.approx(1.0)
    assert weights[:6].sum() == pytest.approx(weights[6:].sum())
    assert list(_family_weights(["a", "b", "b"], "rows")) == [1.0, 1.0, 1.0]
    halfway = _family_weights(["a"] * 16 + ["b"] * 4, "sqrt")
    assert halfway.mean() == pytest.approx(1.0) and halfway[:16].sum() == pytest.approx(2 * halfway[16:].sum())
    with pytest.raises(ValueError, match="Family weights"):
        LearnedSurrogate(family_weights="bytes")
    # a big family where the staged variants win, two small ones where they lose: weighing rows, the big one decides
    big = [r for r in profiled_family_rows(10.0, "big")]
    small = [r for name in ("s1", "s2") for r in profiled_family_rows(90.0, name)[::6]]
    train = big + small
    groups = [r["problem_name"] for r in train]

    def shared_minus_naive(model):
        rows = profiled_family_rows(50.0, "new")
        means = [f.expected_log_speedup() for f in model.forecast_many([
            ForecastRequest(reference=r["reference"], candidate=r["candidate"], problem=r["problem"],
                            hardware=r["hardware"], reference_ms=0.5) for r in rows])]
        shared = [m for m, r in zip(means, rows) if r["candidate"]["knobs"]["ALGO"] == "shared"]
        naive = [m for m, r in zip(means, rows) if r["candidate"]["knobs"]["ALGO"] == "naive"]
        return np.mean(shared) - np.mean(naive)

    # (synthetic rows without reference counters: the profile's columns would be constant)
    by_rows = shared_minus_naive(LearnedSurrogate(seed=0, family_weights="rows", reference_profile=False)
                                 .fit(train, groups=groups))
    by_family = shared_minus_naive(LearnedSurrogate(seed=0, family_weights="equal", reference_profile=False)
                                   .fit(train, groups=groups))
    assert by_rows > 0.1 and by_family < by_rows - 0.05  # (0.18 and 0.09 when written)


def test_similar_family_weights_weigh_the_families_like_the_searched_problem_more():
    from search_engine.surrogates.learned import _MISSING, _similar_weights

    # columns: a problem feature, a candidate feature (constant in every family too), a problem feature unknown
    # for one family; families a and b sit near the searched problem on the first, c far from it
    X = np.array([[0.0, 1.0, 2.0]] * 4 + [[0.2, 1.0, 2.0]] * 2 + [[5.0, 3.0, _MISSING]] * 2)
    groups = ["a"] * 4 + ["b"] * 2 + ["c"] * 2
    like = np.array([[0.1, 3.0, 2.0]] * 3)
    eligible = np.array([True, False, True])
    weights, kernel, columns = _similar_weights(X, groups, like, 1.0, eligible)
    assert list(columns) == [True, False, False]  # the candidate's column is not read, nor one a family lacks
    assert kernel["a"] == pytest.approx(kernel["b"]) and kernel["c"] < 0.5 * kernel["a"]
    assert weights.mean() == pytest.approx(1.0)
    assert len(set(weights[:4])) == 1 and weights[0] == pytest.approx(weights[4]) and weights[0] > weights[6]
    # the strength scales the likeness's say: at 0 every row weighs 1
    assert list(_similar_weights(X, groups, like, 0.0, eligible)[0]) == pytest.approx([1.0] * 8)
    # nothing to compare: every row weighs 1
    assert list(_similar_weights(X, groups, like, 1.0, np.zeros(3, dtype=bool))[0]) == [1.0] * 8


def test_a_model_with_similar_family_weights_learns_most_from_the_families_like_the_searched_one(tmp_path):
    # three families whose reference loads miss L1 (staged tiles win), two where they hit (they lose)
    hits = {"a": 10.0, "b": 15.0, "c": 20.0, "d": 88.0, "e": 92.0}
    train = [r for name, hit in hits.items() for r in profiled_family_rows(hit, name)]
    groups = [r["problem_name"] for r in train]
    new = profiled_family_rows(90.0, "new")
    requests = [ForecastRequest(reference=r["reference"], candidate=r["candidate"], problem=r["problem"],
                                hardware=r["hardware"], reference_ms=0.5, reference_profile=r["reference_profile"])
                for r in new]
    alike = LearnedSurrogate(seed=0, family_weights="similar", similar_strength=3.0).fit(
        train, groups=groups, like=requests)
    assert max(alike.family_similarity, key=alike.family_similarity.get) in {"d", "e"}
    assert "ref_l1_hit_pct" in alike.similarity_features
    assert all(not name.startswith(("cand_", "delta_")) for name in alike.similarity_features)
    by_family = {g: w for g, w in zip(alike._base_groups, alike._base_weights)}
    assert min(by_family["d"], by_family["e"]) > 1.3 * max(by_family[k] for k in "abc")  # (1.6 times when written)
    # without the searched problem's requests, every row weighs the same, as with "rows"
    blind = LearnedSurrogate(seed=0, family_weights="similar").fit(train, groups=groups)
    assert blind.family_similarity == {} and set(blind._base_weights) == {1.0}
    # the weights reach the ranking prior: its scores move
    ranked = LearnedSurrogate(seed=0, family_weights="similar", similar_strength=3.0, ranker_weight=0.5).fit(
        train, groups=groups, like=requests)
    plain = LearnedSurrogate(seed=0, ranker_weight=0.5).fit(train, groups=groups)
    X = ranked._matrix(requests)
    assert not np.allclose(ranked._ranker.z(X), plain._ranker.z(X))
    # saved and loaded it forecasts the same, and a run's refit reads the same weights
    ranked.save(tmp_path / "s.joblib")
    again = LearnedSurrogate.load(tmp_path / "s.joblib")
    assert [f.expected_log_speedup() for f in again.forecast_many(requests[:5])] == pytest.approx(
        [f.expected_log_speedup() for f in ranked.forecast_many(requests[:5])])
    assert list(again._base_weights) == pytest.approx(list(ranked._base_weights))


def test_the_ranking_prior_with_equal_weights_ranks_as_without():
    from search_engine.surrogates.ranker import RankPrior

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    y = X[:, 0] + 0.1 * rng.normal(size=120)
    groups = np.repeat(["p", "q", "r"], 40)
    plain = RankPrior(seed=0).fit(X, y, groups)
    weighed = RankPrior(seed=0).fit(X, y, groups, weights=np.ones(120))
    assert weighed.z(X) == pytest.approx(plain.z(X))
    heavier = RankPrior(seed=0).fit(X, y, groups, weights=np.repeat([1.0, 1.0, 5.0], 40))
    assert not np.allclose(heavier.z(X), plain.z(X))


def test_the_counters_a_run_keeps_give_the_same_features_as_the_whole_profile():
    import gzip
    from pathlib import Path

    from search_engine.surrogates.features import reference_profile_features, reference_profile_inputs

    records = Path(__file__).resolve().parents[2] / "kernellab" / "problems" / "maxpool2d" / "records" / "h200.jsonl.gz"
    with gzip.open(records, "rt") as handle:
        profile = next(r["profiler"] for r in map(json.loads, handle) if r.get("profiler"))
    kept = reference_profile_inputs(profile)
    problem = {"sizes": {"N": 1 << 24}, "roofline": {"bytes": "16 * N"}}
    assert len(kept) == 10 and len(profile) > 100
    assert np.array_equal(reference_profile_features(kept, problem), reference_profile_features(profile, problem))
    assert not np.isnan(reference_profile_features(kept, problem)).any()
    assert reference_profile_inputs(None) is None and reference_profile_inputs({}) is None


def test_with_the_portable_counters_the_model_reads_the_access_pattern_and_not_the_memorys_speed(tmp_path):
    from search_engine.surrogates.features import PORTABLE_REFERENCE_PROFILE_FEATURES, REFERENCE_PROFILE_FEATURES

    assert set(PORTABLE_REFERENCE_PROFILE_FEATURES) < set(REFERENCE_PROFILE_FEATURES)
    with pytest.raises(ValueError, match="reference's counters must be one of all, portable"):
        LearnedSurrogate(reference_counters="some")
    hits = {"a": 10.0, "b": 25.0, "c": 35.0, "d": 65.0, "e": 80.0, "f": 92.0}
    train = [r for name, hit in hits.items() for r in profiled_family_rows(hit, name)]
    # the same access pattern, read on a card whose memory is faster: the DRAM share of peak differs with the card
    for i, row in enumerate(train):
        row["reference_profile"] = {**row["reference_profile"],
                                    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": 40.0 + 10 * (i % 4)}
    groups = [r["problem_name"] for r in train]
    portable = LearnedSurrogate(seed=0, reference_counters="portable").fit(train, groups=groups)
    every = LearnedSurrogate(seed=0, reference_counters="all").fit(train, groups=groups)
    assert portable._feature_names()[-4:] == PORTABLE_REFERENCE_PROFILE_FEATURES
    assert every._base_X.shape[1] == portable._base_X.shape[1] + 4

    def forecasts(model, hit, dram_pct):
        rows = profiled_family_rows(hit, "new")
        return np.array([f.expected_log_speedup() for f in model.forecast_many([
            ForecastRequest(reference=r["reference"], candidate=r["candidate"], problem=r["problem"],
                            hardware=r["hardware"], reference_ms=0.5,
                            reference_profile={**r["reference_profile"],
                                               "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": dram_pct})
            for r in rows])])

    # the L1 hit rate still carries where the staged variants pay
    staged = np.array([r["candidate"]["knobs"]["ALGO"] == "shared" for r in profiled_family_rows(15.0, "new")])
    low, high = forecasts(portable, 15.0, 50.0), forecasts(portable, 85.0, 50.0)
    assert low[staged].mean() - low[~staged].mean() > 0.2 and high[staged].mean() - high[~staged].mean() < -0.2
    # and the DRAM share of peak, which follows the card's memory, moves nothing
    assert forecasts(portable, 15.0, 20.0) == pytest.approx(forecasts(portable, 15.0, 90.0))
    # a model saved before the option loads as reading all eight
    every.__dict__.pop("reference_counters")
    every.save(tmp_path / "old.joblib")
    assert LearnedSurrogate.load(tmp_path / "old.joblib")._feature_names()[-8:] == REFERENCE_PROFILE_FEATURES


def test_the_gaussian_process_run_local_model_interpolates_the_runs_rows_and_hands_back_far_from_them():
    rows = family_rows()
    measured = [r for r in rows if r["candidate"]["knobs"]["ALGO"] == "naive" and r["candidate"]["knobs"]["VEC"] != 4][::2]
    model = LearnedSurrogate(local_model="gp")  # no recorded data: the process's prior mean is the run's mean
    model.learn(measured)
    assert model._local.gp is not None and model._local.forest is None
    requests = [ForecastRequest(reference=r["reference"], candidate=r["candidate"], problem=r["problem"])
                for r in measured]
    # at the run's rows it forecasts what was measured, within its noise and at least local_min_sigma wide
    means = np.array([f.log_mean for f in model.forecast_many(requests)])
    truth = np.log([r["speedup"] for r in measured])
    assert np.max(np.abs(means - truth)) < 0.1
    assert min(f.log_sd for f in model.forecast_many(requests)) >= model.local_min_sigma - 1e-9
    # a variant unlike every measured one (the shared kind and VEC 4, neither measured) is forecast wider
    far = next(r for r in rows if r["candidate"]["knobs"]["ALGO"] == "shared" and r["candidate"]["knobs"]["VEC"] == 4)
    near = next(r for r in rows if r not in measured and r["candidate"]["knobs"]["ALGO"] == "naive"
                and r["candidate"]["knobs"]["VEC"] != 4)
    f_far, f_near = model.forecast_many([ForecastRequest(reference=r["reference"], candidate=r["candidate"],
                                                         problem=r["problem"]) for r in (far, near)])
    assert f_far.log_sd > f_near.log_sd
    # and its mean goes back towards the run's mean, the prior's
    assert abs(f_far.log_mean - np.mean(truth)) < abs(f_near.log_mean - np.mean(truth)) + 0.5
    with pytest.raises(ValueError, match="run-local model"):
        LearnedSurrogate(local_model="tree")


def test_the_gaussian_process_left_out_forecasts_are_those_of_a_process_fitted_without_the_row():
    from sklearn.gaussian_process import GaussianProcessRegressor

    from search_engine.surrogates.learned import _LocalProcess

    rng = np.random.default_rng(3)
    Z = rng.integers(0, 5, size=(9, 3)).astype(float)
    r = np.sin(Z[:, 0]) * 0.3 + 0.1 * Z[:, 1] + rng.normal(0, 0.05, 9)
    process = _LocalProcess.fit(Z, r, min_sigma=0.15)
    mean, var = process.left_out()
    for i in range(len(r)):
        keep = np.arange(len(r)) != i
        again = GaussianProcessRegressor(kernel=process.process.kernel_, optimizer=None).fit(Z[keep], r[keep])
        m, sd = again.predict(Z[i:i + 1], return_std=True)
        assert mean[i] == pytest.approx(m[0], abs=1e-6)
        assert var[i] == pytest.approx(sd[0] ** 2, rel=1e-4)


def test_the_gaussian_process_corrects_the_recorded_data_model_near_the_rows_it_missed(trained):
    model, train, _ = trained
    rows = family_rows()
    # the run's family differs from the recorded one: its ITEMS 8 variants run twice as fast
    shifted = [dict(r, speedup=r["speedup"] * (2.0 if r["candidate"]["knobs"]["ITEMS"] == 8 else 1.0)) for r in rows]
    measured = shifted[::4]
    import copy

    # (a copy of the trained model for each run-local model, and one that learns nothing)
    gp, forest, cold = copy.deepcopy(model), copy.deepcopy(model), copy.deepcopy(model)
    gp.local_model, forest.local_model = "gp", "forest"
    for m in (gp, forest):
        m.learn(measured)
    assert gp._local.gp is not None and forest._local.gp is None
    others = shifted[1::4]
    requests = [ForecastRequest(reference=r["reference"], candidate=r["candidate"], problem=r["problem"])
                for r in others]
    forecasts = gp.forecast_many(requests)
    eight = np.array([r["candidate"]["knobs"]["ITEMS"] == 8 for r in others])

    def gap(means):  # how much further below the truth the ITEMS 8 variants are forecast than the others
        error = np.array(means) - np.log([r["speedup"] for r in others])
        return float(np.mean(error[~eight]) - np.mean(error[eight]))

    # the recorded-data model misses the ITEMS 8 variants by about log 2; the process learnt a good part of that
    # error from 24 rows, more than the forest did (0.32, 0.48 and 0.57 when written)
    cold_gap = gap([f.expected_log_speedup() for f in cold.forecast_many(requests)])
    assert cold_gap > 0.5
    assert gap([f.log_mean for f in forecasts]) < min(0.7 * cold_gap, gap([f.log_mean for f in
                                                                            forest.forecast_many(requests)]))
    # it is the process's: its weight is earned from left-out forecasts, and the forecasts are its own, not the forest's
    assert 0.0 < gp._local.weight <= 1.0


def test_a_run_whose_variants_have_no_define_keeps_the_forest_under_the_gaussian_process_setting():
    rows = family_rows()[::5]
    bare = [dict(r, candidate=dict(r["candidate"], source=r["candidate"]["source"].replace("#define", "// def")))
            for r in rows]
    model = LearnedSurrogate(local_model="gp")
    model.learn(bare)
    assert model._local.gp is None and model._local.forest is not None
    # and its forecasts say which run-local model spoke
    forecast = model.forecast(ForecastRequest(reference=bare[0]["reference"], candidate=bare[0]["candidate"]))
    assert f"and {len(bare)} of this run's (a forest, weighted" in forecast.reasoning

