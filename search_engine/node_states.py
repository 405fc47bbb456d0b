"""The states of a node in the search tree, shared with every caller of the driver.

A node is proposed, checked by the compiler and forecast; the policy then accepts it on the forecast,
parks it, or asks for a GPU measurement (through an approver when approval is manual). Values are the
strings saved in the driver's state and published in its events, so a StrEnum compares equal to them.
"""

from __future__ import annotations

from enum import StrEnum


class NodeState(StrEnum):
    PROPOSED = "proposed"
    FORECAST = "forecast"
    ACCEPTED_BY_FORECAST = "accepted-by-forecast"
    AWAITING_APPROVAL = "awaiting-approval"
    QUEUED = "queued"
    MEASURING = "measuring"
    MEASURED = "measured"
    FAILED_COMPILE = "failed-compile"
    FAILED_CORRECTNESS = "failed-correctness"
    REJECTED = "rejected"


# A GPU measurement was asked for and has not come back.
PENDING_STATES = (NodeState.AWAITING_APPROVAL, NodeState.QUEUED, NodeState.MEASURING)
FAILED_STATES = (NodeState.FAILED_COMPILE, NodeState.FAILED_CORRECTNESS, NodeState.REJECTED)
# Nothing that happens outside can change the node any more.
SETTLED_STATES = (NodeState.MEASURED,) + FAILED_STATES

# MeasurementResult statuses (docs/contracts.md) -> node states. Runtime faults and time-outs are
# wrong results as far as the tree is concerned; the raw status stays on the node.
STATE_OF_MEASUREMENT_STATUS = {
    "ok": NodeState.MEASURED,
    "failed-compile": NodeState.FAILED_COMPILE,
    "failed-correctness": NodeState.FAILED_CORRECTNESS,
    "failed-runtime": NodeState.FAILED_CORRECTNESS,
    "failed-timeout": NodeState.FAILED_CORRECTNESS,
    "rejected-guard": NodeState.REJECTED,
}
