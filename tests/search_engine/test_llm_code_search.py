"""The LLM generator's search_cutlass tool: a call is answered with the search's results, which the
next request carries, and the kernel of that next answer becomes the proposal."""
from __future__ import annotations

import json
import random

from search_engine.generators.base import ProposalContext
from search_engine.generators.llm import LLMGenerator
from search_engine.llm_client import LLMClient
from tests.llm_stub import Answer, StubServer
from tests.search_engine.fakes import REFERENCE


def completion(message):
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5}}


KERNEL_ANSWER = ("Rationale: doubled with a CuTe tensor.\n```cuda\n" + REFERENCE["source"] + "\n```\n```json\n"
                 + json.dumps(REFERENCE["launch"]) + "\n```")


class SearchThenKernel:
    """Requests that offer search_cutlass are answered with a call of it; the others with a kernel."""

    def code_search(self):
        call = {"role": "assistant", "content": None, "tool_calls": [{"id": "s1", "type": "function", "function": {
            "name": "search_cutlass", "arguments": json.dumps({"query": "tiled copy"})}}]}
        return Answer("search", "use", body=completion(call))

    def generator(self):
        return Answer("kernel", "use", body=completion({"role": "assistant", "content": KERNEL_ANSWER}))


def test_a_search_call_puts_its_results_into_the_request_that_yields_the_proposal():
    searched, requests = [], []

    def code_search(query: str) -> str:
        searched.append(query)
        return "include/cute/atom/copy_atom.hpp:567\nstruct TiledCopy : Copy_Atom"

    with StubServer(SearchThenKernel()) as server:
        client = LLMClient(base_url=server.base_url, api_key="x", model="m", timeout_s=5, max_retries=0)
        chat = client.chat
        client.chat = lambda messages, **kw: requests.append((messages, kw)) or chat(messages, **kw)
        context = ProposalContext(node_id=3, parent={**REFERENCE, "source": REFERENCE["source"] + "// parent\n"},
                                  reference=REFERENCE, rng=random.Random(0))
        proposal = LLMGenerator(client, code_search=code_search).propose(context, 1)[0]

    assert searched == ["tiled copy"]
    assert [s.kind for s in server.served] == ["search", "kernel"]
    assert requests[0][1]["tool"]["function"]["name"] == "search_cutlass" and requests[0][1]["force_tool"] is False
    assert "<cute/tensor.hpp>" in requests[0][0][-1]["content"]
    assert "struct TiledCopy : Copy_Atom" in requests[1][0][-1]["content"]
    assert not proposal.failed and proposal.candidate["source"].strip() == REFERENCE["source"].strip()


def test_a_model_that_answers_without_searching_gives_its_kernel_in_one_call():
    searched = []
    with StubServer(KernelOnly()) as server:
        client = LLMClient(base_url=server.base_url, api_key="x", model="m", timeout_s=5, max_retries=0)
        context = ProposalContext(node_id=3, parent={**REFERENCE, "source": REFERENCE["source"] + "// p\n"},
                                  reference=REFERENCE, rng=random.Random(0))
        proposal = LLMGenerator(client, code_search=searched.append).propose(context, 1)[0]
    assert searched == [] and [s.path for s in server.served] == ["generator"]
    assert not proposal.failed


class KernelOnly:
    def generator(self):
        return Answer("kernel", "use", body=completion({"role": "assistant", "content": KERNEL_ANSWER}))

    surrogate = generator


def test_without_a_code_search_no_tool_is_offered():
    with StubServer(SearchThenKernel()) as server:
        client = LLMClient(base_url=server.base_url, api_key="x", model="m", timeout_s=5, max_retries=0)
        context = ProposalContext(node_id=3, parent={**REFERENCE, "source": REFERENCE["source"] + "// p\n"},
                                  reference=REFERENCE, rng=random.Random(0))
        LLMGenerator(client).propose(context, 1)
    assert [s.kind for s in server.served] == ["kernel"]
