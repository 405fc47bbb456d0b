"""An LLM endpoint nobody answers at stops the caller (LLMUnreachable) after a few calls instead of spending
the run's budget; a worker's time limit (celery's SoftTimeLimitExceeded) is never swallowed as a bad answer;
the retries of one call count once against the LLM call budget."""
from __future__ import annotations

import random
import threading

import openai
import pytest
from celery.exceptions import SoftTimeLimitExceeded

from search_engine.generators.base import ProposalContext
from search_engine.generators.llm import LLMGenerator
from search_engine.llm_client import UNREACHABLE_AFTER_CALLS, LLMCallBudget, LLMClient, LLMUnreachable
from search_engine.surrogates.base import ForecastRequest
from search_engine.surrogates.cache import MemoryCache
from search_engine.surrogates.llm import LLMSurrogate
from tests.llm_stub import Answer, StubServer
from tests.search_engine.fakes import REFERENCE

DEAD = "http://127.0.0.1:9"  # discard port: nothing listens, the connection is refused at once


def dead_client(**kw):
    kw.setdefault("max_retries", 3)
    return LLMClient(base_url=DEAD, api_key="x", model="m", timeout_s=2, sleep=lambda s: None, **kw)


def context():
    return ProposalContext(node_id=0, parent=REFERENCE, reference=REFERENCE, rng=random.Random(0))


def request(i=0):
    return ForecastRequest(reference=REFERENCE, candidate={**REFERENCE, "source": f"__global__ void k{i}(){{}}"})


def test_the_client_gives_up_after_k_calls_in_a_row_without_a_connection_and_each_call_counts_once():
    budget = LLMCallBudget(limit=500)
    client = dead_client(budget=budget)
    for _ in range(UNREACHABLE_AFTER_CALLS - 1):
        answer = client.chat([{"role": "user", "content": "hi"}])
        assert "did not answer after 4 attempts" in answer.error and answer.attempts == 4
    with pytest.raises(LLMUnreachable) as raised:
        client.chat([{"role": "user", "content": "hi"}])
    message = str(raised.value)
    # What happened, as one sentence; what to check is the caller's to say, in its own names (a run's settings,
    # a command's flags): LLMUnreachable.check.
    assert message == f"The LLM endpoint {DEAD} did not answer: Connection error."
    assert raised.value.check(base_url="--base-url", api_key="K", model="M", timeout="T") == (
        "check --base-url and that the server runs")
    # Four attempts a call, but one unit of the budget a call.
    assert budget.used == UNREACHABLE_AFTER_CALLS


def test_garbled_answers_do_not_count_towards_unreachable():
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": "garbled"}

    class Garbled:
        def generator(self):
            return Answer("fixed", "fail", body=body)

        surrogate = generator

    with StubServer(Garbled()) as server:
        client = LLMClient(base_url=server.base_url, api_key="x", model="m", timeout_s=2, max_retries=0)
        answers = [client.chat([{"role": "user", "content": "hi"}]) for _ in range(UNREACHABLE_AFTER_CALLS + 2)]
    assert all(a.error for a in answers)


def test_the_llm_generator_raises_unreachable_instead_of_failed_proposals():
    generator = LLMGenerator(dead_client(max_retries=0, max_concurrency=2))
    assert all(p.failure for p in generator.propose(context(), UNREACHABLE_AFTER_CALLS - 1))
    with pytest.raises(LLMUnreachable):
        generator.propose(context(), 3)


def test_the_llm_surrogate_raises_unreachable_instead_of_abstaining_on():
    surrogate = LLMSurrogate(dead_client(max_retries=0), cache=MemoryCache())
    with pytest.raises(LLMUnreachable):
        surrogate.forecast_many([request(i) for i in range(UNREACHABLE_AFTER_CALLS + 2)])


class BlockingThenLimit:
    """An openai client whose create() blocks as if the endpoint never answered, then raises the soft limit."""

    def __init__(self):
        self.chat = self
        self.completions = self
        self.calls = 0

    def create(self, **kwargs):
        self.calls += 1
        raise SoftTimeLimitExceeded()


def test_the_soft_time_limit_propagates_out_of_the_client_noting_what_it_waited_for():
    client = LLMClient(base_url="http://never", api_key="x", model="m", client=BlockingThenLimit())
    with pytest.raises(SoftTimeLimitExceeded) as raised:
        client.chat([{"role": "user", "content": "hi"}])
    assert "http://never" in raised.value.waiting_for
    assert client.client.calls == 1  # not retried either


def test_the_soft_time_limit_propagates_out_of_the_generator_and_the_surrogate():
    client = LLMClient(base_url="http://never", api_key="x", model="m", client=BlockingThenLimit())
    with pytest.raises(SoftTimeLimitExceeded):
        LLMGenerator(client).propose(context(), 2)
    with pytest.raises(SoftTimeLimitExceeded):
        LLMSurrogate(client, cache=MemoryCache()).forecast(request())
    with pytest.raises(SoftTimeLimitExceeded):
        LLMSurrogate(client, cache=MemoryCache()).forecast_many([request(1), request(2)])


def test_an_interrupted_propose_does_not_wait_for_calls_still_out():
    """The soft limit arrives in the main thread while the proposals wait in pool threads: propose must end
    at once, not wait (past the hard limit) for calls to an endpoint that never answers."""
    release = threading.Event()

    class Hanging:
        def __init__(self):
            self.chat = self.completions = self

        def create(self, **kwargs):
            release.wait(30)
            raise openai.APIConnectionError(request=None)

    client = LLMClient(base_url="http://never", api_key="x", model="m", client=Hanging(), max_retries=0)
    generator = LLMGenerator(client)
    import signal
    import time

    def limit(*_):
        raise SoftTimeLimitExceeded()

    previous = signal.signal(signal.SIGALRM, limit)
    started = time.monotonic()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(SoftTimeLimitExceeded) as raised:
            generator.propose(context(), 2)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        release.set()
    assert time.monotonic() - started < 5
    assert "proposal(s) from the LLM endpoint http://never" in raised.value.waiting_for
