"""QA round 3 (area kb), the LLM answers and the LLM client: valid CUDA is never refused for its braces (finding 1),
a recorded kernel copied by the model keeps its recorded source hash (7), the answer size messages name the
configured limit (6), endpoint addresses are shown without credentials (4), and an endpoint that fails every call
(401/403/404 at once, 5xx/429/time-outs after every retry) stops its caller after UNREACHABLE_AFTER_CALLS calls
in a row (2)."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from search_engine.generators.base import ProposalContext
from search_engine.generators.llm import LLMGenerator
from search_engine.llm_client import (UNREACHABLE_AFTER_CALLS, LLMCallBudget, LLMClient, LLMUnreachable,
                                      redact_url)
from search_engine.prompts import parse_forecast, parse_generated
from tests.llm_stub import Answer, ChatServer, text_answer
from tests.search_engine.fakes import REFERENCE

PROBLEMS = Path(__file__).resolve().parents[2] / "kernellab" / "problems"
# The families whose recorded variants all failed the old brace count (#if GRID == 0 { #else for (...) { #endif).
QA_FAMILIES = ("bincount", "dot", "gelu", "gemv", "histogram256", "reduce_sum")
OTHERS_SAMPLED = 25  # recorded variants read of every other bundled family


def context():
    return ProposalContext(node_id=0, parent=REFERENCE, reference=REFERENCE, rng=random.Random(0))


def recorded_variants(folder: Path, limit: int | None = None) -> list[dict]:
    """The recorded variants of a bundled family, rendered (the records hold their source hashes, not sources)."""
    from gpu_runner import load_problem, render_variant, source_hash, valid_variants
    from gpu_runner.backends.replay import read_records

    spec = load_problem(folder)
    recorded = {r.get("source_hash") for r in read_records(folder / "records" / "h200.jsonl.gz")}
    variants = []
    for knobs in valid_variants(spec):
        candidate = render_variant(spec, knobs).to_dict()
        if source_hash(candidate["source"]) in recorded:
            variants.append(candidate)
            if limit is not None and len(variants) >= limit:
                break
    return variants


def families() -> list[Path]:
    return sorted(p for p in PROBLEMS.iterdir()
                  if (p / "family.cu").is_file() and (p / "records" / "h200.jsonl.gz").is_file())


# ---- 1. braces -------------------------------------------------------------------------------------

QA_SNIPPET = '''Rationale: r
```cuda
// the loop body below is the old '{' block, unrolled
extern "C" __global__ void scale(const float* x, float* y, int n) { int i = blockIdx.x*blockDim.x+threadIdx.x; if (i < n) y[i] = 2.0f*x[i]; }
```'''

BRANCHES = '''Rationale: grid-stride or not
```cuda
extern "C" __global__ void scale(const float* x, float* y, int n) {
#if GRID == 0
    int i = blockIdx.x * blockDim.x + threadIdx.x; {
#else
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
#endif
        if (i < n) y[i] = 2.0f * x[i];   /* "}" closes it */
    }
    const char* note = "{{";  (void)note;
}
```'''


@pytest.mark.parametrize("answer", [QA_SNIPPET, BRANCHES], ids=["brace-in-a-comment", "if-else-branches"])
def test_valid_cuda_with_braces_in_comments_strings_or_preprocessor_branches_is_read(answer):
    generated = parse_generated(answer)
    assert "__global__ void scale" in generated.source
    proposal = LLMGenerator(_scripted(text_answer(answer))).propose(context(), 1)[0]
    assert proposal.candidate is not None, proposal.failure


def test_every_recorded_variant_of_the_bundled_families_is_read_back_as_recorded():
    """A model that answers with a recorded variant, in either fence style, gives the recorded source exactly: never
    refused (1), and found by the replay lookup, whose key is the exact source's hash (7)."""
    from gpu_runner import source_hash

    read = 0
    for folder in families():
        variants = recorded_variants(folder, None if folder.name in QA_FAMILIES else OTHERS_SAMPLED)
        assert variants, folder.name
        for variant in variants:
            source = variant["source"]
            launch = json.dumps(variant["launch"])
            for answer in (f"Rationale: r\n```cuda\n{source}\n```\n```json\n{launch}\n```",   # the QA stub's
                           f"Rationale: r\n```cuda\n{source}```\n```json\n{launch}\n```"):
                generated = parse_generated(answer)
                assert generated.source == source and source_hash(generated.source) == source_hash(source), folder.name
                assert generated.launch == variant["launch"]
            read += 1
    assert read > 4000


def test_an_answer_cut_at_the_token_limit_is_refused_by_the_generator_not_by_counting_braces():
    cut = "Rationale: r\n```cuda\n" + REFERENCE["source"].replace("}\n", "") + "```"
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": cut}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    proposal = LLMGenerator(_scripted(Answer("cut", "fail", body))).propose(context(), 1)[0]
    assert proposal.candidate is None and proposal.failure == "The answer hit the token limit, so its kernel may be cut off."


def _scripted(answer: Answer) -> LLMClient:
    """An LLMClient whose openai client returns `answer`'s body, with no server."""
    body = answer.body

    class Fake:
        def __init__(self):
            self.chat = self.completions = self

        def create(self, **kwargs):
            return body

    return LLMClient(base_url="http://x/v1", api_key="k", model="m", client=Fake(), sleep=lambda s: None)


# ---- 6. size messages ----------------------------------------------------------------------------------

def test_an_answer_over_the_size_limit_is_refused_naming_the_configured_limit_and_its_setting():
    limit = 8 * 1024  # the client reads at most 2 x 8 + 64 = 80 KiB of HTTP body
    with ChatServer(lambda request: text_answer("x" * (20 * 1024))) as long, \
            ChatServer(lambda request: text_answer("\n" * (60 * 1024))) as escaped:
        text = LLMClient(base_url=long.base_url, api_key="k", model="m", max_answer_chars=limit, max_retries=0)
        body = LLMClient(base_url=escaped.base_url, api_key="k", model="m", max_answer_chars=limit, max_retries=0)
        read = text.chat([{"role": "user", "content": "hi"}])
        stopped = body.chat([{"role": "user", "content": "hi"}])
    assert read.error == "The LLM answer is 20 KiB long, over the 8 KiB limit (KERNELLAB_LLM_MAX_ANSWER_KB)."
    # (60 K newlines are 120 KiB of JSON: the transport stops reading at its own cap, and says whose limit it is)
    assert stopped.error == ("The LLM answer is over the 8 KiB limit (KERNELLAB_LLM_MAX_ANSWER_KB); "
                             "reading stopped at 80 KiB.")


def test_a_limit_raised_above_256_kib_is_the_readers_limit_too():
    code = "Rationale: long\n```cuda\n" + "// pad\n" * 50_000 + REFERENCE["source"] + "```"  # 342 KiB
    assert len(code) > 256 * 1024
    assert "__global__" in parse_generated(code, max_chars=1024 * 1024).source
    forecast = json.dumps({"reasoning": "r" * (300 * 1024), "probabilities": [0, 0, 0, 0, 1, 0, 0, 0]})
    assert parse_forecast(forecast, None, max_chars=1024 * 1024).predicted_bin == 5


# ---- 4. credentials ----------------------------------------------------------------------------------

@pytest.mark.parametrize("url, shown", [
    ("http://qa:URLSECRETPW@127.0.0.1:8113/v1", "http://127.0.0.1:8113/v1"),
    ("https://user@llm.example.com/v1?api-key=URLSECRETPW#frag", "https://llm.example.com/v1"),
    ("http://qa:pass@word@host:1/v1", "http://host:1/v1"),
    ("qa:URLSECRETPW@host/v1", "host/v1"),
    ("http://[::1]:8080/v1", "http://[::1]:8080/v1"),
    (None, "(default)"),
])
def test_an_endpoint_address_is_shown_without_user_password_or_query(url, shown):
    assert redact_url(url) == shown


SECRET_URL = "http://qa:URLSECRETPW@127.0.0.1:9/v1?token=QUERYSECRET"  # discard port: refused at once


def test_no_message_about_an_endpoint_shows_its_credentials():
    client = LLMClient(base_url=SECRET_URL, api_key="sk-KEYSECRET", model="m", max_retries=0, timeout_s=2)
    with pytest.raises(LLMUnreachable) as raised:
        for _ in range(UNREACHABLE_AFTER_CALLS):
            client.chat([{"role": "user", "content": "hi"}])
    exc = raised.value
    shown = " ".join([str(exc), exc.problem, exc.base_url, repr(client)])
    assert "127.0.0.1:9/v1" in shown
    assert not any(secret in shown for secret in ("URLSECRETPW", "QUERYSECRET", "qa:", "KEYSECRET"))

    class Limit:
        def __init__(self):
            self.chat = self.completions = self

        def create(self, **kwargs):
            raise SoftTimeLimitExceeded()

    limited = LLMClient(base_url=SECRET_URL, api_key="k", model="m", client=Limit())
    with pytest.raises(SoftTimeLimitExceeded) as waited:
        limited.chat([{"role": "user", "content": "hi"}])
    assert waited.value.waiting_for == "an answer from the LLM endpoint http://127.0.0.1:9/v1 (model m)"
    with pytest.raises(SoftTimeLimitExceeded) as waited:
        LLMGenerator(LLMClient(base_url=SECRET_URL, api_key="k", model="m", client=Limit())).propose(context(), 2)
    assert "SECRET" not in waited.value.waiting_for


# ---- 2. an endpoint that fails every call --------------------------------------------------------------

def _failing(status: int, message: str):
    return lambda request: Answer("", "", {"error": {"message": message}}, status=status)


@pytest.mark.parametrize("status, kind, says, check", [
    (404, "not-found", "answered HTTP 404 for model stubgen: no such model", "check MODEL and URL"),
    (401, "auth", "refused the API key (HTTP 401): nope", "check KEY"),
    (403, "auth", "refused the API key (HTTP 403): nope", "check KEY"),
    (500, "server", "answered HTTP 500 to 3 calls in a row: nope", "check the server's logs"),
    (503, "server", "answered HTTP 503 to 3 calls in a row: nope", "check the server's logs"),
    (429, "overloaded", "answered HTTP 429 to 3 calls in a row: nope", "check the server's rate limits"),
])
def test_an_endpoint_that_answers_every_call_with_an_error_stops_the_caller_after_k_calls(status, kind, says, check):
    budget = LLMCallBudget(limit=500)
    with ChatServer(_failing(status, "no such model" if status == 404 else "nope")) as server:
        client = LLMClient(base_url=server.base_url, api_key="k", model="stubgen", max_retries=1, budget=budget,
                           sleep=lambda s: None)
        for _ in range(UNREACHABLE_AFTER_CALLS - 1):
            assert client.chat([{"role": "user", "content": "hi"}]).error
        with pytest.raises(LLMUnreachable) as raised:
            client.chat([{"role": "user", "content": "hi"}])
    exc = raised.value
    assert exc.kind == kind and says in exc.problem and server.base_url in exc.problem
    assert exc.check(base_url="URL", api_key="KEY", model="MODEL", timeout="T") == check
    retried = status >= 429 and status != 404
    assert len(server.requests) == UNREACHABLE_AFTER_CALLS * (2 if retried else 1)  # 401/403/404 are not retried
    assert budget.used == UNREACHABLE_AFTER_CALLS and budget.every_call_failed and budget.last_error
    assert str(exc) == exc.problem[0].upper() + exc.problem[1:] + "."


def test_time_outs_after_every_retry_stop_the_caller_too():
    with ChatServer(lambda request: Answer("slow", "fail", {"choices": []}, delay_s=1.0)) as server:
        client = LLMClient(base_url=server.base_url, api_key="k", model="m", max_retries=0, timeout_s=0.3)
        for _ in range(UNREACHABLE_AFTER_CALLS - 1):
            assert "did not answer after 1 attempt:" in client.chat([{"role": "user", "content": "hi"}]).error
        with pytest.raises(LLMUnreachable) as raised:
            client.chat([{"role": "user", "content": "hi"}])
    assert raised.value.kind == "timeout" and raised.value.problem.endswith(" timed out on 3 calls in a row")
    assert raised.value.check(base_url="U", api_key="K", model="M", timeout="T") == "check the server or raise T"


def test_an_answer_between_endpoint_errors_starts_the_count_again():
    served = []

    def answer(request):
        served.append(1)
        if len(served) % UNREACHABLE_AFTER_CALLS == 0:
            return Answer("", "", {"id": "x", "object": "chat.completion", "choices": "garbled"})
        return Answer("", "", {"error": {"message": "no such model"}}, status=404)

    with ChatServer(answer) as server:
        client = LLMClient(base_url=server.base_url, api_key="k", model="m", max_retries=0)
        answers = [client.chat([{"role": "user", "content": "hi"}]) for _ in range(3 * UNREACHABLE_AFTER_CALLS)]
    assert all(a.error for a in answers)


def test_the_budget_knows_whether_any_call_gave_the_search_something():
    budget = LLMCallBudget(limit=10)
    generator = LLMGenerator(LLMClient(base_url="http://x/v1", api_key="k", model="m", budget=budget,
                                       client=_scripted(text_answer("I would unroll it.")).client))
    assert all(p.failure for p in generator.propose(context(), 2))
    assert budget.used == 2 and budget.every_call_failed and budget.last_error == "The answer holds no CUDA code block."
    good = "Rationale: r\n```cuda\n" + REFERENCE["source"].replace("2.0f", "3.0f") + "```"
    generator.client.client = _scripted(text_answer(good)).client
    assert generator.propose(context(), 1)[0].candidate is not None
    assert budget.useful == 1 and not budget.every_call_failed
