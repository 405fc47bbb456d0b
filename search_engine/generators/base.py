"""The one generator interface: a parent in, candidate kernels (or failed proposals) out."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable

from search_engine.candidates import Candidate


@dataclass
class Proposal:
    """A candidate with its rationale, or a failed proposal with the reason (candidate None)."""

    candidate: Candidate | None
    rationale: str = ""
    failure: str | None = None
    raw_excerpt: str = ""
    latency_s: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    # The generator asks the GPU to judge this one ahead of any forecast: a recipe's cure at its start
    # point, a kind of kernel no surrogate has seen (the roofline heuristic cannot tell a row read once
    # from a row read three times); the policy measures it while the budget lasts.
    measure_first: bool = False

    @property
    def failed(self) -> bool:
        return self.candidate is None or self.failure is not None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ProposalContext:
    """What a generator may look at when it expands a node."""

    node_id: int
    parent: Candidate
    reference: Candidate
    parent_speedup: float | None = None
    parent_measurement: dict | None = None  # MeasurementResult.to_dict() of the parent, if measured
    parent_expert_notes: list[dict] = field(default_factory=list)
    parent_forecast: dict | None = None
    problem: dict = field(default_factory=dict)  # name, description, sizes, tolerance, family
    hardware: dict = field(default_factory=dict)
    memory_text: str = ""
    known_hashes: set[str] = field(default_factory=set)
    rng: random.Random = field(default_factory=lambda: random.Random(0))


@runtime_checkable
class Generator(Protocol):
    name: str

    def propose(self, context: ProposalContext, n: int) -> list[Proposal]:
        """Up to n proposals; an empty list means the generator has nothing new for this parent."""
        ...
