"""Replayed: recorded solutions of the task (LLM-written ones from a dataset, or a problem's own
candidates) proposed as children, in the dataset's order, so a whole run over them needs no LLM.

Every child it makes is labelled: its name starts with "replayed", its rationale names where it came
from, and the driver gives its nodes the origin "replayed".
"""
from __future__ import annotations

from dataclasses import dataclass

from search_engine.candidates import candidate_hash, make_candidate
from search_engine.generators.base import Proposal, ProposalContext

REPLAYED_NAME_PREFIX = "replayed "


@dataclass(frozen=True)
class RecordedSolution:
    source: str
    label: str          # e.g. "CUDA-L1 h100 (authors: 1.42x)" or "bundled candidate warp_online"
    launch: tuple = ()  # a CUDA kernel's launch plan; empty for a KernelBench solution (ModelNew)
    temps: tuple = ()
    compile_options: tuple = ()


class ReplayedGenerator:
    name = "replayed"
    origin = "replayed"

    def __init__(self, solutions: list[RecordedSolution], dataset: str):
        self.solutions = list(solutions)
        self.dataset = dataset

    def propose(self, context: ProposalContext, n: int) -> list[Proposal]:
        proposals = []
        seen = set(context.known_hashes)
        for solution in self.solutions:
            if len(proposals) >= n:
                break
            candidate = make_candidate(solution.source, [dict(step) for step in solution.launch],
                                       temps=[dict(t) for t in solution.temps],
                                       compile_options=list(solution.compile_options),
                                       name=f"{REPLAYED_NAME_PREFIX}{solution.label}")
            digest = candidate_hash(candidate)
            if digest in seen:
                continue
            seen.add(digest)
            proposals.append(Proposal(candidate=candidate, rationale=f"Replayed from {self.dataset}: {solution.label}. "
                                                                     "Written before this run, not by its generator."))
        return proposals
