"""What the driver publishes through its port: one typed event per change of the tree.

Events are plain dicts (TypedDicts), so a port may store or send them as JSON as they are; `type`
says which one it is. The driver numbers each (`event`) and stamps the step it happened in (`step`)
as it publishes it. A port that mirrors the tree elsewhere needs nothing else: a node's state comes
with `pruned`, so nobody reads the reason's wording.
"""

# No `from __future__ import annotations`: TypedDict reads NotRequired from evaluated annotations.
from enum import StrEnum
from typing import Literal, NotRequired, TypedDict, Union

from search_engine.candidates import Candidate
from search_engine.node_states import NodeState


class EventKind(StrEnum):
    NODE_CREATED = "node-created"
    PROPOSAL_FAILED = "proposal-failed"
    FORECAST = "forecast"
    STATE_CHANGED = "state-changed"
    MEASURED = "measured"
    DISCOVERY = "discovery"
    BEST_CHANGED = "best-changed"
    STEP = "step"


class _Published(TypedDict):
    event: NotRequired[int]  # the driver's running number, set as it publishes
    step: NotRequired[int]  # the step the change happened in, set as it publishes


class NodeCreated(_Published):
    type: Literal[EventKind.NODE_CREATED]
    node_id: int
    parent_id: int | None
    depth: int
    rationale: str
    candidate: Candidate
    candidate_hash: str
    state: NodeState
    origin: NotRequired[str]  # "human" for a person's candidate, "replayed" for a recorded one; absent for the generator's
    author_id: NotRequired[int | None]


class ProposalFailed(_Published):
    type: Literal[EventKind.PROPOSAL_FAILED]
    node_id: int  # the parent the generator was expanding
    reason: str | None
    generator: str
    excerpt: NotRequired[str]  # the start of the unusable answer
    step: NotRequired[int]


class ForecastMade(_Published):
    type: Literal[EventKind.FORECAST]
    node_id: int
    forecast: dict  # Forecast.to_dict()
    surrogate: str
    revised: NotRequired[bool]  # forecast again after the surrogate learned from this run
    reason: NotRequired[str]


class StateChanged(_Published):
    type: Literal[EventKind.STATE_CHANGED]
    node_id: int
    state: NodeState
    previous: NodeState
    reason: str
    pruned: bool  # accepted on a forecast that it is slower than its parent: its branch is not searched


class Measured(_Published):
    type: Literal[EventKind.MEASURED]
    node_id: int
    status: str  # a MeasurementResult status
    speedup: float | None  # the objective's value; None unless the status is ok
    reason: str
    result: dict | None  # the whole MeasurementResult dict as the port gave it


class Discovery(_Published):
    type: Literal[EventKind.DISCOVERY]
    node_id: int
    parent_id: int
    ratio: float
    threshold: float
    forecast_prob: float | None
    note: str


class BestChanged(_Published):
    type: Literal[EventKind.BEST_CHANGED]
    node_id: int
    speedup: float | None
    previous_node_id: int | None
    previous_speedup: float | None


class StepDone(_Published):
    type: Literal[EventKind.STEP]
    status: str  # a StepReport status
    expanded: list[int]
    created: list[int]
    measured_requests: list[int]
    counters: dict  # SearchCounters.to_dict()
    best_node_id: int | None
    best_speedup: float | None
    threshold: float


SearchEvent = Union[NodeCreated, ProposalFailed, ForecastMade, StateChanged, Measured, Discovery, BestChanged,
                    StepDone]
