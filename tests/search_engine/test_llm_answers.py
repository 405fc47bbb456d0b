"""Malformed LLM answers, sent over HTTP by a stub OpenAI-compatible server, become abstentions and
failed proposals with a readable reason: none raises out of the client, the surrogate or the generator."""
from __future__ import annotations

import json
import random
import time

import pytest

from search_engine.generators.base import ProposalContext
from search_engine.generators.llm import LLMGenerator
from search_engine.llm_client import LLMCallBudget, LLMClient
from search_engine.prompts import AnswerError, find_json_object, parse_forecast
from search_engine.surrogates.base import ForecastRequest
from search_engine.surrogates.cache import MemoryCache
from search_engine.surrogates.llm import LLMSurrogate
from tests.llm_stub import DEEP, Answer, readable
from tests.search_engine.fakes import REFERENCE


class OneAnswer:
    """A catalogue that always answers the same way."""

    def __init__(self, body=None, raw=None):
        self.answer = Answer("fixed", "fail", body=body, raw=raw)

    def generator(self):
        return self.answer

    surrogate = generator


def served(body=None, raw=None):
    from tests.llm_stub import StubServer

    return StubServer(OneAnswer(body, raw))


def completion(message=None, **fields):
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5}, **fields}


def tool(arguments):
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "submit_forecast", "arguments": arguments}}]}


def forecast_with(raw_bin: str) -> str:
    return '{"reasoning": "r", "probabilities": [0, 0, 0, 0, 0.5, 0.5, 0, 0], "predicted_bin": ' + raw_bin + "}"


def client(server, **kw):
    return LLMClient(base_url=server.base_url, api_key="x", model="m", timeout_s=2, max_retries=0, **kw)


def forecast_from(body=None, raw=None):
    with served(body, raw) as server:
        return LLMSurrogate(client(server), cache=MemoryCache()).forecast(
            ForecastRequest(reference=REFERENCE, candidate=REFERENCE))


def proposal_from(body=None, raw=None):
    with served(body, raw) as server:
        context = ProposalContext(node_id=0, parent=REFERENCE, reference=REFERENCE, rng=random.Random(0))
        return LLMGenerator(client(server)).propose(context, 1)[0]


CASES = {
    "message null": dict(body=completion(None)),
    "choices a string": dict(body={**completion(None), "choices": "abc"}),
    "a tool call without a function": dict(body=completion({"role": "assistant", "tool_calls": [{"function": None}]})),
    "predicted bin Infinity": dict(body=completion(tool(forecast_with("Infinity")))),
    "predicted bin NaN": dict(body=completion(tool(forecast_with("NaN")))),
    "predicted bin 1e400": dict(body=completion(tool(forecast_with("1e400")))),
    "a probability of 10**400": dict(body=completion(tool('{"probabilities": [1' + "0" * 400 + ", 0, 0, 0, 0, 0, 0, 0]}"))),
    "arguments nested 100k deep": dict(body=completion(tool('{"a": ' * DEEP + "1" + "}" * DEEP))),
    "a body nested 100k deep": dict(raw=b'{"choices": ' + b"[" * DEEP + b"]" * DEEP + b"}"),
    "content 12345": dict(body=completion({"role": "assistant", "content": 12345})),
    "a cut-off body": dict(raw=b'{"id": "x", "choices": [{"message": {"content": "Ratio'),
    "an answer over the size cap": dict(body=completion({"role": "assistant", "content": "{" * 300_000})),
}


@pytest.mark.parametrize("case", CASES)
def test_a_malformed_answer_becomes_an_abstention_with_a_readable_reason(case):
    forecast = forecast_from(**CASES[case])
    assert forecast.abstained and readable(forecast.abstain_reason), forecast.abstain_reason


@pytest.mark.parametrize("case", CASES)
def test_a_malformed_answer_becomes_a_failed_proposal_with_a_readable_reason(case):
    proposal = proposal_from(**CASES[case])
    assert proposal.failed and readable(proposal.failure), proposal.failure


def test_token_counts_in_words_are_read_as_zero_and_the_forecast_stands():
    good = '{"reasoning": "r", "probabilities": [0, 0, 0, 0, 0.5, 0.5, 0, 0], "predicted_bin": 5}'
    forecast = forecast_from(body={**completion(tool(good)), "usage": {"prompt_tokens": "many", "completion_tokens": None}})
    assert not forecast.abstained and forecast.bin == 5 and forecast.tokens_in == 0


def test_predicted_bins_that_are_not_finite_are_refused_by_the_parser():
    for raw in ("Infinity", "NaN", "-Infinity", "1e400"):
        with pytest.raises(AnswerError):
            parse_forecast(forecast_with(raw), None)
        with pytest.raises(AnswerError):
            parse_forecast({"probabilities": [0, 0, 0, 0, 0.5, 0.5, 0, 0], "predicted_bin": float(raw)}, None)


def test_finding_a_json_object_takes_linear_time_in_the_answer():
    started = time.perf_counter()
    for text in ("{" * 250_000, '{"a":' * 50_000, '"{' * 120_000, '{"a": "' + "\\" * 250_000):
        assert find_json_object(text) is None
    assert time.perf_counter() - started < 3.0  # 40 KB of "{" alone took 146 s before
    assert find_json_object('noise {not json} then {"probabilities": [1], "s": "}{"} tail') == {"probabilities": [1], "s": "}{"}
    assert find_json_object('```json\n{"a": 1}\n``` and {"b": 2}') == {"a": 1}


def test_a_spent_call_budget_refuses_further_calls_without_asking_the_endpoint():
    good = json.dumps({"reasoning": "r", "probabilities": [0, 0, 0, 0, 0.5, 0.5, 0, 0], "predicted_bin": 5})
    budget = LLMCallBudget(limit=2)
    with served(completion(tool(good))) as server:
        surrogate = LLMSurrogate(client(server, budget=budget), cache=MemoryCache())
        forecasts = [surrogate.forecast(ForecastRequest(reference=REFERENCE, candidate={**REFERENCE, "source": s}))
                     for s in ("__global__ void a(){}", "__global__ void b(){}", "__global__ void c(){}")]
        assert len(server.served) == 2
    assert [f.abstained for f in forecasts] == [False, False, True]
    assert forecasts[2].abstain_reason == "The run's budget of 2 LLM calls is spent."
    assert budget.used == 2 and budget.spent
