"""The search port turns the driver's typed events into rows: node states through one table, a
pruned node known from the event, never from the wording of its reason."""
import pytest
from search_engine.events import EventKind, StateChanged
from search_engine.node_states import NodeState as SearchNodeState

from kernellab.models import NodeState
from kernellab.services.run_context import RunContext
from kernellab.services.search_port import DB_STATE, DatabasePort

pytestmark = pytest.mark.django_db


def _state_changed(node, state, reason, *, pruned):
    return StateChanged(type=EventKind.STATE_CHANGED, node_id=node.key, state=state,
                        previous=SearchNodeState.FORECAST, reason=reason, pruned=pruned)


def test_every_state_of_the_driver_has_its_state_in_the_database():
    assert set(DB_STATE) == set(SearchNodeState)
    assert set(DB_STATE.values()) <= set(NodeState)


def test_a_node_the_driver_pruned_shows_as_pruned_whatever_its_reason_says(node):
    port = DatabasePort(RunContext(node.run))
    port.publish(_state_changed(node, SearchNodeState.ACCEPTED_BY_FORECAST,
                                "confidently slower than its parent (bin 2 at 0.91)", pruned=True))
    node.refresh_from_db()
    assert node.state == NodeState.PRUNED


def test_a_node_accepted_on_its_forecast_is_not_pruned_because_its_reason_starts_with_pruned(node):
    port = DatabasePort(RunContext(node.run))
    port.publish(_state_changed(node, SearchNodeState.ACCEPTED_BY_FORECAST,
                                "pruned branches elsewhere left this one the best", pruned=False))
    node.refresh_from_db()
    assert node.state == NodeState.ACCEPTED


def test_held_writes_reach_the_database_only_when_flushed(node):
    port = DatabasePort(RunContext(node.run))
    with port.holding_writes():
        port.publish(_state_changed(node, SearchNodeState.FAILED_COMPILE, "ptxas error", pruned=False))
    node.refresh_from_db()
    assert node.state == NodeState.FORECAST
    port.flush()
    node.refresh_from_db()
    assert node.state == NodeState.FAILED_COMPILE and node.state_reason == "ptxas error"
