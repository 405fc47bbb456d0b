"""LLM generator: a chat model rewrites the parent kernel, shown its measurements, its expert notes
(or raw metrics, or nothing) and the search memory. The caller compiles what comes back.

An answer without code, with a kernel that does not fit the launch plan, cut off at the token limit, or garbled,
becomes a failed proposal with the reason; an endpoint that does not answer too. Only an endpoint that fails
several calls in a row (LLMUnreachable: no connection, HTTP 401/403/404, or server errors, 429 and time-outs after
every retry) or a worker's time limit stops the step. Whether code is whole is the compile check's to say.

Given a code search (`code_search(query) -> text`, the CUTLASS/CuTe index where the web app has one),
the model is first offered the function `search_cutlass(query)`: if it calls it, the results are shown
to it and a second call asks for the kernel, so what it found goes into the proposal.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from search_engine.candidates import candidate_hash, make_candidate, signature_problem
from search_engine.generators.base import Proposal, ProposalContext
from search_engine.llm_client import LLMClient, never_swallow, note_waiting_for, redact_url
from search_engine.prompts import (AnswerError, code_search_messages, code_search_note, generator_messages,
                                   parse_generated)

FEEDBACK_MODES = ("notes", "raw", "none")


class LLMGenerator:
    name = "llm"

    def __init__(self, client: LLMClient, *, feedback: str = "notes", temperature: float = 0.8,
                 max_tokens: int | None = None, code_search: Callable[[str], str] | None = None) -> None:
        if feedback not in FEEDBACK_MODES:
            raise ValueError(f"Feedback must be one of {', '.join(FEEDBACK_MODES)}.")
        self.client = client
        self.feedback = feedback
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.code_search = code_search

    def propose(self, context: ProposalContext, n: int) -> list[Proposal]:
        messages = generator_messages(context, feedback=self.feedback)
        # Seeds drawn from the run's random state keep a seeded run reproducible where the server honours seeds.
        seeds = [context.rng.randrange(2**31) for _ in range(n)]
        pool = ThreadPoolExecutor(max_workers=max(1, min(n, self.client.max_concurrency)))
        try:
            proposals = list(pool.map(lambda seed: self._one(context, messages, seed), seeds))
        except BaseException as exc:
            # A time limit (or LLMUnreachable from one call) must end the step now: leaving the `with` block
            # would wait for every call still out, which against an endpoint that never answers is past the
            # worker's hard limit. The calls still out finish (or time out) in their threads, unread.
            pool.shutdown(wait=False, cancel_futures=True)
            note_waiting_for(exc, f"{n} proposal(s) from the LLM endpoint {redact_url(self.client.base_url)}")
            raise
        pool.shutdown(wait=True)
        seen = set(context.known_hashes)
        out = []
        for proposal in proposals:
            if proposal.candidate is not None:
                digest = candidate_hash(proposal.candidate)
                if digest in seen:
                    proposal = Proposal(None, proposal.rationale, "The model proposed a kernel already in the tree.",
                                        proposal.raw_excerpt, proposal.latency_s, proposal.tokens_in,
                                        proposal.tokens_out)
                else:
                    seen.add(digest)
            out.append(proposal)
        return out

    def _one(self, context: ProposalContext, messages: list[dict], seed: int) -> Proposal:
        searched = None
        if self.code_search is not None:
            messages = messages[:-1] + [{**messages[-1], "content": messages[-1]["content"] + "\n\n" + code_search_note()}]
            answer = self.client.chat(messages, tool=SEARCH_CUTLASS_TOOL, force_tool=False, max_tokens=self.max_tokens,
                                      temperature=self.temperature, seed=seed)
            query = _search_query(answer)
            if query is None or answer.error:
                searched = answer   # answered in text (or failed): that is the proposal
            else:
                messages = messages + code_search_messages(query, self.code_search(query))
        answer = searched or self.client.chat(messages, max_tokens=self.max_tokens, temperature=self.temperature,
                                              seed=seed)
        cost = {"latency_s": answer.latency_s, "tokens_in": answer.tokens_in, "tokens_out": answer.tokens_out}
        if answer.error:
            return Proposal(None, failure=answer.error, **cost)  # (the client noted it on the budget)
        content = answer.content if isinstance(answer.content, str) else ""
        try:
            proposal = self._read(context, answer, content, cost)
        except Exception as exc:  # whatever an answer holds, it becomes a failed proposal, never a crash
            if never_swallow(exc):
                raise
            proposal = Proposal(None, failure=f"The answer could not be used ({type(exc).__name__}: {str(exc)[:200]}).",
                                raw_excerpt=content[:1000], **cost)
        budget = getattr(self.client, "budget", None)
        if budget is not None:
            budget.note(None if proposal.candidate is not None else proposal.failure)
        return proposal

    def _read(self, context: ProposalContext, answer, content: str, cost: dict) -> Proposal:
        try:
            generated = parse_generated(content, max_chars=getattr(self.client, "max_answer_chars", None))
        except AnswerError as exc:
            reason = str(exc) + (" The answer hit the token limit." if answer.finish_reason == "length" else "")
            return Proposal(None, failure=reason, raw_excerpt=content[:1000], **cost)
        if answer.finish_reason == "length":
            # Its code block closed, but the answer was cut off after it or within it (what parse_generated cannot
            # tell): the launch plan or the code may be missing their end.
            return Proposal(None, generated.rationale, "The answer hit the token limit, so its kernel may be cut off.",
                            content[:1000], **cost)
        parent = context.parent
        candidate = make_candidate(
            generated.source, generated.launch if generated.launch is not None else parent.get("launch") or [],
            temps=parent.get("temps"), compile_options=parent.get("compile_options"), knobs=None,
            name=f"llm-{context.node_id}",
        )
        problem = _launch_problem(candidate) or signature_problem(candidate, parent)
        if problem:
            return Proposal(None, generated.rationale, problem, content[:1000], **cost)
        return Proposal(candidate, generated.rationale or "LLM rewrite (no rationale given)", **cost)


def _launch_problem(candidate) -> str | None:
    for step in candidate["launch"]:
        if "memset" in step:
            continue
        missing = [k for k in ("kernel", "grid", "block", "args") if k not in step]
        if missing:
            return f"A launch step lacks {', '.join(missing)}."
        if not isinstance(step["grid"], list) or not isinstance(step["block"], list) \
                or not 1 <= len(step["grid"]) <= 3 or not 1 <= len(step["block"]) <= 3:
            return "A launch step's grid and block must be lists of one to three expressions."
    return None


SEARCH_CUTLASS_TOOL = {"type": "function", "function": {
    "name": "search_cutlass",
    "description": ("Search the CUTLASS and CuTe C++ headers and examples (included as <cute/...> and "
                    "<cutlass/...>) for building blocks; returns ranked snippets with file and line."),
    "parameters": {"type": "object", "properties": {"query": {
        "type": "string", "description": "words or identifiers, e.g. 'tiled copy' or 'mma atom sm90'"}},
        "required": ["query"]}}}


def _search_query(answer) -> str | None:
    """The query of a search_cutlass call, or None when the model answered without one."""
    if answer.tool_name != "search_cutlass" or not answer.tool_arguments:
        return None
    try:
        query = json.loads(answer.tool_arguments).get("query")
    except (ValueError, AttributeError, RecursionError):
        return None
    return query.strip()[:200] if isinstance(query, str) and query.strip() else None
