"""The LLM surrogate and generator against a real OpenAI-compatible server (llama.cpp, Gemma 3 270M).

A 270M model answers badly: these tests hold the code to turning whatever comes back into a forecast,
an abstention with its reason, a candidate or a failed proposal with its reason — never a crash.
"""

from __future__ import annotations

import random

import pytest

from search_engine.driver import SearchDriver
from search_engine.search_settings import SearchSettings
from search_engine.generators.base import ProposalContext
from search_engine.generators.llm import LLMGenerator
from search_engine.generators.template import TemplateGenerator
from search_engine.llm_client import LLMClient
from search_engine.policy import PolicySettings
from search_engine.surrogates.base import ForecastRequest
from search_engine.surrogates.cache import MemoryCache
from search_engine.surrogates.llm import LLMSurrogate
from tests.search_engine.fakes import REFERENCE, FakePort, render, space

pytestmark = [pytest.mark.llm, pytest.mark.timeout(1800)]

HARDWARE = {"name": "NVIDIA H200", "sm_count": 132, "memory_bandwidth_gbs": 4800, "compute_capability": "9.0"}


def client(server, **kw):
    return LLMClient(base_url=server["base_url"], api_key="not-needed", model=server["model"], fold_system=True,
                     timeout_s=600, max_retries=1, max_concurrency=2, **kw)


def assert_forecast_or_reasoned_abstention(f):
    assert f.tokens_in > 0 and f.latency_s > 0
    if f.abstained:
        assert f.abstain_reason and not f.probabilities and f.bin is None
    else:
        assert len(f.probabilities) == 8 and abs(sum(f.probabilities) - 1) < 1e-9 and 1 <= f.bin <= 8
        assert f.raw_sum is not None and f.raw_sum > 0
        assert f.confidence == max(f.probabilities)


def test_the_surrogate_turns_real_answers_into_forecasts_or_abstentions(llm_server):
    surrogate = LLMSurrogate(client(llm_server), max_tokens=160, cache=MemoryCache())
    requests = [ForecastRequest(reference=REFERENCE, candidate=render(k), hardware=HARDWARE,
                                problem={"name": "scale", "sizes": {"N": 1 << 24}})
                for k in ({"BLOCK": 256, "ITEMS": 2, "VEC": 4, "ALGO": "naive"},
                          {"BLOCK": 64, "ITEMS": 1, "VEC": 1, "ALGO": "shared"})]
    forecasts = surrogate.forecast_many(requests)
    assert len(forecasts) == 2
    for f in forecasts:
        assert_forecast_or_reasoned_abstention(f)
        assert f.surrogate == f"llm@{llm_server['model']}/p1"


def test_the_json_content_fallback_works_against_the_same_server(llm_server):
    surrogate = LLMSurrogate(client(llm_server), use_tools=False, max_tokens=120)
    f = surrogate.forecast(ForecastRequest(reference=REFERENCE, candidate=render(
        {"BLOCK": 512, "ITEMS": 4, "VEC": 4, "ALGO": "naive"}), hardware=HARDWARE))
    assert_forecast_or_reasoned_abstention(f)


def test_the_generator_returns_a_candidate_or_a_failed_proposal_with_the_reason(llm_server):
    generator = LLMGenerator(client(llm_server), feedback="notes", max_tokens=200)
    context = ProposalContext(node_id=0, parent=REFERENCE, reference=REFERENCE, parent_speedup=1.0,
                              hardware=HARDWARE, rng=random.Random(0),
                              parent_expert_notes=[{"expert": "memory", "severity": "high",
                                                    "finding": "each thread loads one float",
                                                    "advice": "load float4"}])
    proposals = generator.propose(context, 1)
    assert len(proposals) == 1
    p = proposals[0]
    assert p.tokens_in > 0
    if p.candidate is None:
        assert p.failure
    else:
        assert "__global__" in p.candidate["source"] and p.candidate["launch"]


def test_a_search_step_with_the_real_llm_surrogate_records_what_it_said(llm_server):
    port = FakePort()
    surrogate = LLMSurrogate(client(llm_server), max_tokens=120)
    settings = SearchSettings(policy=PolicySettings(gpu_budget=5, threshold=0.6), children_per_expansion=1)
    driver = SearchDriver(port=port, generator=TemplateGenerator(space(), render), surrogate=surrogate,
                          reference=REFERENCE, hardware=HARDWARE, problem={"name": "scale"}, settings=settings)
    report = driver.step()
    assert report.status == "expanded" and len(report.created) == 1
    node = driver.tree.nodes[report.created[0]]
    assert node.forecast is not None
    if node.forecast["abstained"]:
        # Deferred to the GPU: measured, with the abstention's reason kept on the forecast.
        assert node.state in ("measured", "failed-correctness") and node.forecast["abstain_reason"]
    else:
        assert node.state in ("accepted-by-forecast", "measured", "forecast", "failed-correctness")
    assert driver.counters["llm_tokens_in"] > 0
