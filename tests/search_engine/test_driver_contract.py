"""What the driver promises its callers: typed events, node states from one enum, and a saved state
that can be read without loading a driver."""

from __future__ import annotations

import json
import typing

from search_engine import learning
from search_engine.events import EventKind, SearchEvent
from search_engine.generators.base import Proposal
from search_engine.generators.template import TemplateGenerator
from search_engine.node_states import NodeState
from search_engine.saved_state import SavedSearch
from search_engine.surrogates.base import Forecast
from tests.search_engine.fakes import FakePort, TableSurrogate, make_driver, render, space

EVENT_TYPES = {typing.get_type_hints(cls)["type"].__args__[0]: cls for cls in typing.get_args(SearchEvent)}


def test_every_event_the_driver_publishes_is_one_of_its_typed_kinds_with_every_field():
    port = FakePort(asynchronous=True)
    driver = make_driver(port=port, surrogate=TableSurrogate(confidence=0.95, accuracy=1.0), threshold=0.5)
    for _ in range(6):
        driver.step()
        for node_id in list(driver.pending()):
            driver.on_measurement(node_id, port.result(driver.tree.nodes[node_id].candidate))
    assert set(EVENT_TYPES) == set(EventKind)
    for event in port.events:
        shape = EVENT_TYPES[EventKind(event["type"])]
        assert shape.__required_keys__ <= set(event), (event["type"], shape.__required_keys__ - set(event))
        assert set(event) <= shape.__required_keys__ | shape.__optional_keys__, event["type"]
    assert {e["type"] for e in port.events} >= {"node-created", "forecast", "state-changed", "measured", "step",
                                                 "best-changed"}


def test_a_pruned_node_is_said_pruned_in_its_event_and_freed_when_its_forecast_is_revised():
    port = FakePort()
    driver = make_driver(port=port, surrogate=TableSurrogate(confidence=0.95, accuracy=1.0), threshold=0.5)
    driver.run(max_steps=15)
    pruned = {n.id for n in driver.tree.nodes.values() if n.pruned}
    accepted = {n.id for n in driver.tree.nodes.values() if n.state == NodeState.ACCEPTED_BY_FORECAST and not n.pruned}
    assert pruned and accepted
    last = {e["node_id"]: e for e in port.events if e["type"] == EventKind.STATE_CHANGED}
    assert all(last[nid]["pruned"] and last[nid]["state"] == NodeState.ACCEPTED_BY_FORECAST for nid in pruned)
    assert not any(last[nid]["pruned"] for nid in accepted)

    class NowOptimistic(TableSurrogate):
        def forecast_many(self, requests):
            return [Forecast.from_probabilities([0, 0, 0, 0, 0, 0, 0.1, 0.9], surrogate="table@1") for _ in requests]

    driver.port, driver.surrogate = FakePort(), NowOptimistic()
    learning.revise_forecasts(driver, rows=5)
    freed = {e["node_id"]: e for e in driver.port.events if e["type"] == EventKind.STATE_CHANGED}
    assert set(freed) == pruned and not any(e["pruned"] for e in freed.values())


class _FailsAtTheRoot(TemplateGenerator):
    """Every expansion of the reference also yields one unreadable answer."""

    def propose(self, context, n):
        proposals = super().propose(context, n)
        if context.node_id == 0:
            proposals.append(Proposal(candidate=None, failure="the answer held no kernel", raw_excerpt="```\n```"))
        return proposals


def test_a_saved_state_tells_each_nodes_state_and_failed_proposals_as_the_driver_does():
    from search_engine.driver import SearchDriver
    from tests.search_engine.fakes import REFERENCE

    driver = SearchDriver(port=FakePort(), generator=_FailsAtTheRoot(space(), render), surrogate=TableSurrogate(),
                          reference=REFERENCE, settings=make_driver().settings)
    driver.run(max_steps=6)
    saved = SavedSearch(json.loads(json.dumps(driver.state_dict())))
    assert saved.node_states() == driver.node_states()
    assert all(isinstance(state, NodeState) for state in saved.node_states().values())
    assert saved.failed_proposals(0) == driver.tree.nodes[0].failed_proposals
    assert saved.failed_proposals(0)[0]["reason"] == "the answer held no kernel"
    assert saved.failed_proposals(1) == [] and saved.failed_proposals(10_000) == []
    assert saved.step == driver.step_count


def test_a_saved_state_of_no_run_yet_holds_no_nodes():
    assert SavedSearch(None).node_states() == {} and SavedSearch({}).failed_proposals(0) == []
