"""The driver end to end against an in-memory port with synthetic speedups."""

from __future__ import annotations

import json

import pytest

from search_engine import learning
from search_engine.driver import SearchDriver
from search_engine.node_states import NodeState
from search_engine.surrogates.base import Forecast
from tests.search_engine.fakes import FakePort, TableSurrogate, make_driver, reopen


def test_it_finds_a_near_best_kernel_within_the_budget(best_possible_speedup):
    port = FakePort()
    driver = make_driver(port=port, gpu_budget=25)
    driver.run(max_steps=200)
    best = driver.best()
    assert best.speedup >= 0.95 * best_possible_speedup
    assert len(port.requests) <= 25
    assert driver.counters["measurements_requested"] == len(port.requests)


def test_it_never_spends_more_gpu_measurements_than_the_budget():
    port = FakePort()
    driver = make_driver(port=port, gpu_budget=5, threshold=0.99)  # nothing confident: all wants the GPU
    report = driver.run(max_steps=100)
    assert len(port.requests) == 5
    assert report.status == "budget-exhausted"
    assert driver.budget_left() == 0


def test_it_measures_every_candidate_when_asked_to():
    port = FakePort()
    driver = make_driver(port=port, gpu_budget=12, measure_all=True)
    driver.run(max_steps=100)
    compiled_ok = [n for n in driver.tree.nodes.values()
                   if n.parent_id is not None and n.state != "failed-compile"]
    assert len(port.requests) == 12
    assert all(n.state in ("measured", "failed-correctness", "forecast") for n in compiled_ok)
    assert driver.counters["forecasts"] == 0


def _search_state(driver) -> dict:
    """The saved state without its wall-clock times, the one part two runs of one search never share."""
    return {k: v for k, v in driver.state_dict().items() if k != "times"}


def test_a_resumed_run_continues_exactly_where_it_stopped():
    straight_port = FakePort()
    straight = make_driver(port=straight_port, seed=7)
    straight.run(max_steps=9)

    first_port = FakePort()
    first = make_driver(port=first_port, seed=7)
    first.run(max_steps=4)
    second_port = FakePort()
    resumed = reopen(first, port=second_port)
    resumed.run(max_steps=5)

    assert _search_state(resumed) == _search_state(straight)
    assert first_port.events + second_port.events == straight_port.events


def test_the_state_is_plain_json():
    driver = make_driver()
    driver.run(max_steps=3)
    state = driver.state_dict()
    assert json.loads(json.dumps(state)) == state


def test_the_state_keeps_each_source_once_compressed_and_restores_it():
    driver = make_driver(seed=3)
    driver.run(max_steps=5)
    state = driver.state_dict()
    nodes = state["tree"]["nodes"]
    assert len(nodes) > 5
    assert all("source" not in n["candidate"] and isinstance(n["candidate"]["source_ref"], int) for n in nodes)
    assert state["sources"]["count"] == len({n.candidate["source"] for n in driver.tree.nodes.values()})
    resumed = reopen(driver)
    assert [n.candidate for n in resumed.tree.nodes.values()] == [n.candidate for n in driver.tree.nodes.values()]
    assert all(resumed.tree.by_hash[n.candidate_hash] == n.id for n in driver.tree.nodes.values())
    assert "source" not in state["tree"]["nodes"][1]["candidate"]  # loading left the saved state alone


def test_a_version_1_state_with_sources_inline_still_loads():
    driver = make_driver(seed=4)
    driver.run(max_steps=4)
    old = json.loads(json.dumps(driver.state_dict()))
    old["version"] = 1
    old.pop("sources")
    old["tree"]["nodes"] = [{**raw, "candidate": node.candidate}
                            for raw, node in zip(old["tree"]["nodes"], driver.tree.nodes.values())]
    resumed = SearchDriver.from_state(old, port=FakePort(), generator=None, surrogate=TableSurrogate())
    assert [n.candidate for n in resumed.tree.nodes.values()] == [n.candidate for n in driver.tree.nodes.values()]


@pytest.mark.parametrize("damage", ["encoding", "data", "missing", "count", "ref"])
def test_a_damaged_state_is_refused_with_a_sentence(damage):
    driver = make_driver(seed=5)
    driver.run(max_steps=3)
    state = json.loads(json.dumps(driver.state_dict()))
    if damage == "encoding":
        state["sources"]["encoding"] = "gzip"
    elif damage == "data":
        state["sources"]["data"] = state["sources"]["data"][:40]
    elif damage == "missing":
        del state["sources"]["data"]
    elif damage == "count":
        state["sources"]["count"] += 1
    else:
        state["tree"]["nodes"][1]["candidate"]["source_ref"] = 10_000
    with pytest.raises(ValueError, match="Search state"):
        SearchDriver.from_state(state, port=FakePort(), generator=None, surrogate=TableSurrogate())


def test_the_same_seed_gives_the_same_search_and_another_seed_another():
    a, b, c = make_driver(seed=1), make_driver(seed=1), make_driver(seed=2)
    for d in (a, b, c):
        d.run(max_steps=6)
    assert _search_state(a) == _search_state(b)
    hashes = lambda d: [n.candidate_hash for n in d.tree.nodes.values()]
    assert hashes(a) != hashes(c)


def test_manual_approval_waits_for_the_approver():
    port = FakePort()
    driver = make_driver(port=port, approval="manual", threshold=0.99)
    report = driver.step()
    waiting = driver.awaiting_approval()
    assert waiting and sorted(report.measured_requests) == sorted(waiting)  # requested in the policy's order
    assert port.requests == []
    assert driver.step().status == "waiting"
    states = [e for e in port.events if e["type"] == "state-changed" and e["state"] == "awaiting-approval"]
    assert {e["node_id"] for e in states} == set(waiting)

    driver.approve(waiting[0])
    assert port.requests == [waiting[0]]
    assert driver.tree.nodes[waiting[0]].state in ("measured", "failed-correctness")
    budget_before = driver.budget_left()
    for nid in waiting[1:]:
        driver.reject(nid, "not worth a GPU slot")
        assert driver.tree.nodes[nid].state == "rejected"
    assert driver.budget_left() == budget_before + len(waiting) - 1
    assert driver.step().status == "expanded"


def test_asynchronous_measurements_arrive_later_and_the_driver_waits_for_them():
    port = FakePort(asynchronous=True)
    driver = make_driver(port=port, threshold=0.99)
    driver.step()
    pending = driver.pending()
    assert pending and set(port.requests) == set(pending)
    assert all(driver.tree.nodes[n].state == "queued" for n in pending)
    assert driver.step().status == "waiting"
    driver.on_measuring(pending[0])
    assert driver.tree.nodes[pending[0]].state == "measuring"
    for nid in pending:
        driver.on_measurement(nid, port.result(driver.tree.nodes[nid].candidate))
    assert driver.pending() == []
    assert not driver.on_measurement(pending[0], {"status": "ok", "speedup": 9.0})  # a repeat is ignored
    assert driver.step().status == "expanded"


def test_a_result_for_a_node_that_was_never_queued_is_refused():
    driver = make_driver()
    driver.step()
    accepted = [n.id for n in driver.tree.nodes.values() if n.state == "accepted-by-forecast"]
    assert accepted
    with pytest.raises(ValueError, match="no measurement requested"):
        driver.on_measurement(accepted[0], {"status": "ok", "speedup": 2.0})


def test_the_reported_best_is_always_measured_and_a_forecast_only_best_is_queued():
    port = FakePort()
    # Without the per-step floor, so that the forecast-only best is what verification_of_best queues.
    driver = make_driver(port=port, surrogate=TableSurrogate(confidence=0.9, accuracy=1.0), threshold=0.5,
                         min_gpu_per_step=0)
    for _ in range(30):
        driver.step()
        best_valued = driver.tree.best_valued()
        assert driver.best().state == "measured"
        # After every step a forecast-only best is either being verified or already was.
        if best_valued.value_source == "forecast":
            assert best_valued.verification_refused or driver.budget_left() == 0
    verifications = [e for e in port.events if e["type"] == "state-changed"
                     and "forecast-only" in e["reason"]]
    assert verifications


class ConfidentOnlyForVec4(TableSurrogate):
    """Sure of the true bin for VEC 4 variants, uniform (uncertain) for the rest."""

    def forecast_many(self, requests):
        out = super().forecast_many(requests)
        for i, request in enumerate(requests):
            if (request.candidate.get("knobs") or {}).get("VEC") != 4:
                out[i] = Forecast.from_probabilities([1 / 8] * 8, surrogate="table@1", reasoning="no idea")
        return out


def test_a_forecast_only_best_is_verified_before_the_steps_other_measurements():
    port = FakePort()
    driver = make_driver(port=port, surrogate=ConfidentOnlyForVec4(confidence=0.99, accuracy=1.0), threshold=0.9,
                         root_children=24, min_beat_prob=0.01, measure_order="verify-first")
    report = driver.step()
    assert len(report.measured_requests) >= 2  # the verification and the uncertain ones
    first = driver.tree.nodes[port.requests[0]]
    assert first.candidate["knobs"]["VEC"] == 4 and first.forecast["confidence"] >= 0.9
    reasons = [e["reason"] for e in port.events if e["type"] == "state-changed" and e["node_id"] == first.id]
    assert any("forecast-only" in r for r in reasons)
    assert all(driver.tree.nodes[n].candidate["knobs"]["VEC"] != 4 for n in port.requests[1:])


class ConfidentlyModestForVec4(TableSurrogate):
    """Sure that VEC 4 variants are 1.0-1.4x; the others may well be far faster, but it is not sure."""

    def forecast_many(self, requests):
        out = super().forecast_many(requests)
        for i, request in enumerate(requests):
            if (request.candidate.get("knobs") or {}).get("VEC") == 4:
                out[i] = Forecast.from_probabilities([0, 0, 0, 0, 0.96, 0.04, 0, 0], surrogate="table@1")
            else:
                out[i] = Forecast.from_probabilities([0.02, 0.02, 0.02, 0.04, 0.1, 0.1, 0.3, 0.4], surrogate="table@1")
        return out


def test_with_the_improvement_order_a_step_measures_its_most_promising_candidate_before_verifying_a_modest_best():
    orders = {}
    for order in ("verify-first", "improvement"):
        port = FakePort()
        # the verification on top of the step's slots, so that both orders make the same measurements
        driver = make_driver(port=port, surrogate=ConfidentlyModestForVec4(), threshold=0.9, root_children=24,
                             min_beat_prob=0.01, measure_order=order, verify_slot="extra")
        report = driver.step()
        assert len(report.measured_requests) >= 2
        orders[order] = [driver.tree.nodes[n].candidate["knobs"]["VEC"] for n in port.requests]
    assert orders["verify-first"][0] == 4  # the forecast-only best, verified first
    assert orders["improvement"][0] != 4 and 4 in orders["improvement"]  # still verified, after the promising ones
    assert sorted(orders["verify-first"]) == sorted(orders["improvement"])  # the same measurements, reordered


def test_with_a_shared_slot_a_modest_forecast_only_best_waits_and_a_step_measures_no_more_than_its_slots():
    counts = {}
    for slot in ("extra", "shared"):
        port = FakePort()
        driver = make_driver(port=port, surrogate=ConfidentlyModestForVec4(), threshold=0.9, root_children=24,
                             min_beat_prob=0.01, max_gpu_per_step=2, verify_slot=slot)
        report = driver.step()
        counts[slot] = [driver.tree.nodes[n].candidate["knobs"]["VEC"] for n in report.measured_requests]
    assert len(counts["extra"]) == 3 and 4 in counts["extra"]  # the verification on top of the step's two
    assert len(counts["shared"]) == 2 and 4 not in counts["shared"]  # it gave way to two more promising
    # the modest best stays forecast-only; the displaced verification changed no state
    assert any(n.state == "accepted-by-forecast" and n.candidate["knobs"]["VEC"] == 4 for n in driver.tree.nodes.values())


def test_confident_slowdowns_are_pruned_and_never_expanded():
    driver = make_driver(surrogate=TableSurrogate(confidence=0.95, accuracy=1.0), threshold=0.5)
    driver.run(max_steps=40)
    pruned = [n for n in driver.tree.nodes.values() if n.pruned]
    assert pruned
    assert all(not n.children for n in pruned)
    assert all(n.state == "accepted-by-forecast" for n in pruned)


def test_failures_are_recorded_and_do_not_stop_the_search():
    driver = make_driver(gpu_budget=60, threshold=0.99)
    driver.run(max_steps=60)
    states = {n.state for n in driver.tree.nodes.values()}
    assert "failed-compile" in states
    lessons = [l for l in driver.memory.lessons if l.kind == "failed"]
    assert lessons


def test_a_child_much_faster_than_its_parent_is_flagged_as_a_discovery():
    port = FakePort()
    driver = make_driver(port=port, threshold=0.99, gpu_budget=40)
    driver.run(max_steps=40)
    flagged = [e for e in port.events if e["type"] == "discovery"]
    assert flagged
    for event in flagged:
        child, parent = driver.tree.nodes[event["node_id"]], driver.tree.nodes[event["parent_id"]]
        assert child.discovery and child.speedup >= 2 ** 0.5 * parent.speedup
    stats = driver.discovery_stats()
    assert stats["discoveries"] == len(flagged)


def test_every_event_is_numbered_and_typed():
    port = FakePort()
    driver = make_driver(port=port)
    driver.run(max_steps=5)
    numbers = [e["event"] for e in port.events]
    assert numbers == list(range(1, len(numbers) + 1))
    types = {e["type"] for e in port.events}
    assert {"node-created", "forecast", "state-changed", "measured", "step"} <= types


def test_an_online_surrogate_is_retrained_from_the_runs_measurements_and_again_after_a_restart():
    surrogate = TableSurrogate(confidence=0.3)  # never confident: everything promising is measured
    driver = make_driver(surrogate=surrogate, gpu_budget=20)
    driver.run(max_steps=30)
    assert len(surrogate.learned_rows) >= 5
    assert all(row["speedup"] > 0 for row in surrogate.learned_rows)
    again = TableSurrogate()
    reopen(driver, surrogate=again)
    assert [r["speedup"] for r in again.learned_rows] == [r["speedup"] for r in surrogate.learned_rows]


def test_a_state_from_another_version_is_refused():
    driver = make_driver()
    state = driver.state_dict()
    state["version"] = 99
    with pytest.raises(ValueError, match="version"):
        SearchDriver.from_state(state, port=FakePort(), generator=None, surrogate=None)


def test_a_hand_written_child_is_compiled_forecast_and_always_measured():
    from tests.search_engine.fakes import render

    port = FakePort()
    driver = make_driver(port=port, gpu_budget=0)
    candidate = render({"BLOCK": 512, "ITEMS": 4, "VEC": 4, "ALGO": "naive"})
    child = driver.add_candidate(0, candidate, "hand-written", origin="human", author_id=7)
    node = driver.tree.nodes[child]
    assert node.forecast is not None and node.state == "measured" and node.speedup == pytest.approx(3.3)
    created = [e for e in port.events if e["type"] == "node-created" and e["node_id"] == child][0]
    assert created["origin"] == "human" and created["author_id"] == 7
    assert driver.add_candidate(0, candidate, "again") is None
    assert driver.best().id == child


def test_a_measurement_a_person_asked_for_arrives_like_any_other():
    driver = make_driver(threshold=0.3)  # everything confident: nothing goes to the GPU by itself
    driver.step()
    accepted = [n.id for n in driver.tree.nodes.values() if n.state == "accepted-by-forecast" and not n.pruned]
    assert accepted
    before = driver.counters["measurements_requested"]
    driver.measure_outside(accepted[0], "a person asked for GPU verification")
    assert driver.tree.nodes[accepted[0]].state == "queued"
    assert driver.counters["measurements_requested"] == before + 1
    driver.on_measurement(accepted[0], {"status": "ok", "speedup": 2.5})
    assert driver.tree.nodes[accepted[0]].speedup == 2.5


class _LearnsTheTruth(TableSurrogate):
    """Knows nothing until it has learned from the run (a wide forecast around 1x), then forecasts
    the true bin confidently: what a surrogate that learns online looks like to the driver."""

    def forecast_many(self, requests):
        if self.learned_rows:
            return super().forecast_many(requests)
        from search_engine.surrogates.base import Forecast

        return [Forecast.from_probabilities([0.05, 0.05, 0.1, 0.3, 0.3, 0.1, 0.05, 0.05], surrogate="table@1")
                for _ in requests]


def test_forecasts_that_stand_in_for_measurements_are_revised_when_the_surrogate_learns():
    port = FakePort()
    surrogate = _LearnsTheTruth(confidence=0.9, accuracy=1.0)
    driver = make_driver(port=port, surrogate=surrogate, gpu_budget=30, threshold=0.6)
    driver.run(max_steps=12)
    assert surrogate.learned_rows, "the run measured something and the surrogate learned from it"
    revised = [e for e in port.events if e["type"] == "forecast" and e.get("revised")]
    assert revised and driver.counters["forecast_revisions"] >= len(revised)
    assert all("revised after learning from" in e["reason"] for e in revised)
    # Every node still standing on a forecast carries the learned one (confident), not the first guess.
    standing = [n for n in driver.tree.nodes.values() if n.state in ("forecast", "accepted-by-forecast")]
    assert standing and all(n.forecast["confidence"] >= 0.9 for n in standing)


def test_the_surrogate_learns_from_the_first_measurements_then_every_few():
    sizes = []

    class Recording(TableSurrogate):
        def learn(self, rows):
            sizes.append(len(rows))
            super().learn(rows)

    driver = make_driver(surrogate=Recording(confidence=0.3), gpu_budget=30)
    driver.run(max_steps=40)
    assert sizes[0] <= 2 and sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
    gaps = [b - a for a, b in zip(sizes, sizes[1:])]
    assert max(gaps) <= driver.settings.retrain_every + driver.settings.policy.max_gpu_per_step


def test_a_pruned_child_returns_when_its_revised_forecast_no_longer_says_slower():
    from search_engine.surrogates.base import Forecast

    driver = make_driver(surrogate=TableSurrogate(confidence=0.95, accuracy=1.0), threshold=0.5)
    driver.run(max_steps=15)
    pruned = [n for n in driver.tree.nodes.values() if n.pruned]
    assert pruned

    class NowOptimistic(TableSurrogate):
        def forecast_many(self, requests):
            return [Forecast.from_probabilities([0, 0, 0, 0, 0, 0, 0.1, 0.9], surrogate="table@1") for _ in requests]

    port = FakePort()
    driver.port, driver.surrogate = port, NowOptimistic()
    learning.revise_forecasts(driver, rows=5)
    assert all(not n.pruned for n in pruned)
    back = {e["node_id"] for e in port.events if e["type"] == "state-changed"
            and e["reason"].startswith("no longer pruned")}
    assert back == {n.id for n in pruned}
    assert driver.counters["unpruned"] == len(pruned)


def test_small_revisions_that_add_up_are_shown_once_they_move_the_shown_forecast_enough():
    from search_engine.surrogates.base import Forecast

    driver = make_driver(surrogate=TableSurrogate(confidence=0.3), gpu_budget=4)
    driver.run(max_steps=3)
    standing = [n for n in driver.tree.nodes.values() if n.state in (NodeState.FORECAST, NodeState.ACCEPTED_BY_FORECAST)
                and n.forecast and not Forecast.from_dict(n.forecast).abstained]
    assert standing
    start = {n.id: list(n.forecast["probabilities"]) for n in driver.tree.nodes.values() if n.forecast}

    class Drifting(TableSurrogate):
        """Moves 0.03 of every standing forecast's top bin's probability to its neighbour per revision."""
        shift = 0.0

        def forecast_many(self, requests):
            out = []
            # revise_forecasts asks for the standing nodes in the tree's order
            order = [n.id for n in driver.tree.nodes.values()
                     if n.state in (NodeState.FORECAST, NodeState.ACCEPTED_BY_FORECAST) and n.forecast]
            for nid in order:
                probabilities = list(start[nid])
                top = max(range(8), key=probabilities.__getitem__)
                moved = min(self.shift, probabilities[top])
                probabilities[top] -= moved
                probabilities[top - 1 if top else 1] += moved
                out.append(Forecast.from_probabilities(probabilities, surrogate="table@1"))
            return out

    port = FakePort()
    driver.port, driver.surrogate = port, Drifting()
    shown = []
    for shift in (0.03, 0.06):  # each revision moves 0.03 from the last; the second 0.06 from what was shown
        driver.surrogate.shift = shift
        learning.revise_forecasts(driver, rows=5)
        shown.append({e["node_id"] for e in port.events if e["type"] == "forecast" and e.get("revised")})
        port.events.clear()
    ids = {n.id for n in standing if max(start[n.id]) >= 0.06}
    assert ids and not shown[0] & ids and ids <= shown[1]
    assert all(driver.tree.nodes[i].shown_forecast == driver.tree.nodes[i].forecast for i in ids)


def test_a_step_moves_on_when_the_selected_parent_has_nothing_new():
    driver = make_driver(surrogate=TableSurrogate(confidence=0.95, accuracy=1.0), threshold=0.5, gpu_budget=500)
    reports = []
    for _ in range(400):
        report = driver.step()
        if report.status != "expanded":
            break
        reports.append(report)
    assert report.status == "exhausted"
    # Every step created children or measured something: none was spent on an exhausted parent.
    assert all(r.created or r.measured_requests for r in reports)
    assert any(len(r.expanded) > 1 for r in reports), "some step went on past an exhausted parent"
    assert reports[-1].step == len(reports) == driver.step_count


class PessimistSurrogate(TableSurrogate):
    """Uncertain, and sure of one thing: nothing beats the reference (so the bar is never cleared)."""

    def forecast_many(self, requests):
        self.calls += len(requests)
        return [Forecast.from_probabilities([0.45, 0.4, 0.1, 0.05, 0, 0, 0, 0], surrogate="table@1") for _ in requests]


def test_a_run_whose_forecasts_say_nothing_helps_still_measures_and_learns_every_step():
    floor = make_driver(surrogate=PessimistSurrogate(), threshold=0.6)
    for _ in range(3):
        assert len(floor.step().measured_requests) == 1  # one, not max_gpu_per_step: the bar was not cleared
    assert len(floor.surrogate.learned_rows) == 2  # retrained after 1 and 2 measured rows (then 4, 8 ...)
    silent = make_driver(surrogate=PessimistSurrogate(), threshold=0.6, min_gpu_per_step=0)
    assert [silent.step().measured_requests for _ in range(3)] == [[], [], []]
    assert silent.surrogate.learned_rows == []


def test_the_root_is_screened_wider_than_other_parents():
    driver = make_driver(root_children=10)
    first = driver.step()
    assert first.expanded == [0] and len(first.created) == 10
    for _ in range(6):
        report = driver.step()
        for parent in report.expanded:
            if parent != 0:
                assert sum(1 for n in driver.tree.nodes.values() if n.parent_id == parent) <= 4 * driver.tree.nodes[parent].expansions
    assert reopen(driver).settings.root_children == 10


class BatchPort(FakePort):
    """A port that checks a step's children together (as the web app's does, nvcc on every core)."""

    def __init__(self):
        super().__init__()
        self.batches: list[list[int]] = []

    def compile_many(self, items):
        self.batches.append([node_id for node_id, _ in items])
        return [self.compile(node_id, candidate) for node_id, candidate in reversed(items)][::-1]


def test_a_port_that_checks_many_at_once_gets_each_steps_children_together_and_the_same_search_follows():
    batched, single = BatchPort(), FakePort()
    a = make_driver(port=batched, seed=4)
    b = make_driver(port=single, seed=4)
    for _ in range(6):
        a.step()
        b.step()
    assert batched.batches and all(len(batch) > 1 for batch in batched.batches)
    assert sorted(batched.compiled) == sorted(single.compiled)
    assert a.node_states() == b.node_states()                 # answers land on their own nodes
    assert batched.requests == single.requests


def test_the_children_of_every_parent_of_a_step_are_checked_in_one_batch():
    port = BatchPort()
    driver = make_driver(port=port, seed=2, parents_per_step=3)
    wide = 0
    for _ in range(8):
        before = len(port.batches)
        report = driver.step()
        if report.status != "expanded" or not report.created:
            continue
        assert len(port.batches) == before + 1                  # one batch, whatever the number of parents
        assert sorted(port.batches[-1]) == sorted(report.created)
        wide += len(report.expanded) > 1
    assert wide                                                   # some steps did expand several parents


def test_a_step_expands_more_parents_until_it_has_the_children_it_wants_and_checks_them_in_one_batch():
    port = BatchPort()
    driver = make_driver(port=port, seed=3, min_children_per_step=9)
    filled = 0
    for _ in range(10):
        before = len(port.batches)
        report = driver.step()
        if report.status != "expanded" or not report.created:
            continue
        assert len(port.batches) == before + 1
        assert sorted(port.batches[-1]) == sorted(report.created)
        assert len(set(report.expanded)) == len(report.expanded)          # no parent twice in a step
        giving = [p for p in report.expanded if not driver.tree.nodes[p].exhausted]
        for i, a in enumerate(giving):                                    # nor two on one ancestor line
            assert not any(driver.tree.on_one_line(a, b) for b in giving[i + 1:])
        assert len(report.created) <= 9        # the parents that fill up get only the room left (4 + 4 + 1)
        if len(report.created) < 9:                                       # short only when no parent was left
            assert not driver.tree.select(1, taken=giving)
        filled += len(report.expanded) > 1
    assert filled
    # without the setting a step expands one parent (4 children per expansion here)
    plain = make_driver(seed=3)
    plain.step()
    assert all(len(plain.step().expanded) == 1 for _ in range(5))


class PreparingPort(FakePort):
    """A port whose measurements have a slow CPU part it would rather do for a whole step at once."""

    def __init__(self):
        super().__init__()
        self.prepared: list[list[int]] = []
        self.log: list[tuple] = []

    def prepare_measurements(self, items):
        self.prepared.append([nid for nid, _ in items])
        self.log.append(("prepare", tuple(nid for nid, _ in items)))

    def request_measurement(self, node_id, candidate):
        self.log.append(("measure", node_id))
        return super().request_measurement(node_id, candidate)


def test_a_port_gets_each_steps_measurements_at_once_before_they_are_requested_and_never_past_the_budget():
    port = PreparingPort()
    driver = make_driver(port=port, gpu_budget=7, threshold=0.99)  # nothing confident: all wants the GPU
    driver.run(max_steps=50)
    assert len(port.requests) == 7 and port.prepared
    for i, entry in enumerate(port.log):
        if entry[0] == "prepare":
            measured_next = [e[1] for e in port.log[i + 1:i + 1 + len(entry[1])] if e[0] == "measure"]
            assert measured_next == list(entry[1])            # prepared, then measured in that order
    assert all(len(batch) > 1 for batch in port.prepared)    # a single measurement needs no batch
    assert sum(len(b) for b in port.prepared) <= 7


class ClockedPort(BatchPort):
    """A port whose compile batches and measurements take set times on a fake clock (the driver's)."""

    def __init__(self, clock, batch_s, measure_s, asynchronous=False):
        super().__init__()
        self.clock, self.batch_s, self.measure_s = clock, batch_s, measure_s
        self.asynchronous = asynchronous
        self.pending: list[tuple[int, dict]] = []

    def compile_many(self, items):
        self.clock[0] += self.batch_s
        return super().compile_many(items)

    def request_measurement(self, node_id, candidate):
        self.clock[0] += self.measure_s
        outcome = super().request_measurement(node_id, candidate)
        if outcome is not None:
            return outcome
        # the web app's way: the result arrives later, with the worker's own time in it
        self.pending.append((node_id, {**self.result(candidate), "phase_s": {"total": self.measure_s}}))
        return None


@pytest.fixture
def clock(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("search_engine.driver.time.perf_counter", lambda: now[0])
    return now


def _measured_per_step(driver, port, steps, deliver=False):
    counts = []
    for _ in range(steps):
        report = driver.step()
        if deliver:
            for node_id, result in port.pending:
                driver.on_measurement(node_id, result)
            port.pending.clear()
        if report.status == "expanded" and report.created:
            counts.append(len(report.measured_requests))
    return counts


def test_a_step_whose_compile_checks_cost_much_measures_more_of_what_it_compiled(clock):
    # compile batches of 1 s against 0.1 s a measurement: under a 25% target a step wants 30 measurements,
    # and takes the most a step may (6)
    port = ClockedPort(clock, batch_s=1.0, measure_s=0.1)
    driver = make_driver(port=port, seed=5, gpu_budget=200, threshold=0.99, max_gpu_per_step=6,
                         compile_share_target=0.25, min_children_per_step=8)
    counts = _measured_per_step(driver, port, 6)
    assert counts[0] < 6                      # the first step knows no measurement's time yet
    assert counts[1:] and all(c == 6 for c in counts[1:])
    queued = [e["reason"] for e in port.events if e["type"] == "state-changed" and e["state"] == "queued"]
    topped = [r for r in queued if "compile checks took 1.00 s against 0.10 s a measurement" in r]
    assert topped and "measures 6" in topped[0]
    assert driver.times.compile_batches == len(counts)
    assert driver.times.compile_s == pytest.approx(1.0 * len(counts))
    assert driver.times.measure_s == pytest.approx(0.1 * driver.times.measurements_timed)
    # the same run without the target measures what the policy alone asks
    plain_port = ClockedPort(clock, batch_s=1.0, measure_s=0.1)
    plain = make_driver(port=plain_port, seed=5, gpu_budget=200, threshold=0.99, max_gpu_per_step=6,
                        min_children_per_step=8)
    plain_counts = _measured_per_step(plain, plain_port, 6)
    assert sum(plain_counts[1:]) < sum(counts[1:])


def test_cheap_compile_checks_leave_the_policy_alone_and_a_queued_measurement_is_timed_by_its_worker(clock):
    # 0.1 s batches against 0.1 s measurements: 3 wanted under 25%; a 0.01 s batch: none beyond the policy's
    cheap = ClockedPort(clock, batch_s=0.01, measure_s=0.1, asynchronous=True)
    driver = make_driver(port=cheap, seed=5, gpu_budget=200, threshold=0.99, max_gpu_per_step=6,
                         compile_share_target=0.25, min_children_per_step=8)
    _measured_per_step(driver, cheap, 5, deliver=True)
    assert driver.times.measurements_timed == driver.counters.measurements_done > 0
    assert driver.times.measure_s == pytest.approx(0.1 * driver.counters.measurements_done)
    assert not [e for e in cheap.events if "compile checks took" in e.get("reason", "")]
    # the counters survive a restart
    again = reopen(driver, port=cheap)
    assert again.times == driver.times


def test_the_compile_share_target_is_checked():
    from search_engine.search_settings import SearchSettings

    with pytest.raises(ValueError, match="compile share target"):
        SearchSettings(compile_share_target=1.0)
    assert SearchSettings.from_dict(SearchSettings(compile_share_target=0.25).to_dict()).compile_share_target == 0.25


def _deliver(driver, port):
    for nid in driver.pending():
        driver.on_measurement(nid, port.result(driver.tree.nodes[nid].candidate))


def _run_async(driver, port, steps):
    """A harness whose measurements arrive after each step asks for them: step, (prefetch,) deliver."""
    statuses = []
    for _ in range(steps):
        report = driver.step()
        statuses.append(report.status)
        if report.status in ("prefetched", "waiting"):
            _deliver(driver, port)
        elif report.status != "expanded":
            break
    return statuses


def test_while_the_gpu_measures_the_next_steps_children_are_expanded_and_compiled_from_measured_parents():
    port = FakePort(asynchronous=True)
    driver = make_driver(port=port, seed=3, gpu_budget=40, threshold=0.99, prefetch_while_measuring=True)
    assert driver.step().status == "expanded"
    in_flight = set(driver.pending())
    assert in_flight
    compiled_before = len(port.compiled)
    report = driver.step()
    assert report.status == "prefetched" and report.created
    # the parents were measured ones (the root here), never a node still on the GPU
    assert not set(report.expanded) & in_flight
    assert all(driver.tree.nodes[p].state == "measured" for p in report.expanded)
    # compiled now, forecast and decided later: nothing new is queued and nothing forecast
    assert len(port.compiled) == compiled_before + len(report.created)
    assert set(driver.pending()) == in_flight
    assert all(driver.tree.nodes[n].forecast is None for n in report.created)
    waiting = [e for e in port.events if e["type"] == "state-changed" and e["node_id"] in report.created]
    assert waiting and all("forecast once its results are in" in e["reason"] for e in waiting)
    assert driver.times.prefetched_batches == 1
    # once: a second call while the same measurements are out only waits
    assert driver.step().status == "waiting"
    _deliver(driver, port)
    compiled_now = len(port.compiled)
    step = driver.step()
    assert step.status == "expanded" and step.created == report.created and step.expanded == report.expanded
    assert len(port.compiled) == compiled_now          # the prefetched children are not compiled again
    assert all(driver.tree.nodes[n].forecast is not None for n in report.created
               if driver.tree.nodes[n].state != "failed-compile")
    assert driver.prefetched is None


def test_a_prefetched_step_survives_a_restart_and_a_run_with_it_stays_within_its_budget():
    port = FakePort(asynchronous=True)
    driver = make_driver(port=port, seed=4, gpu_budget=12, threshold=0.99, prefetch_while_measuring=True)
    driver.step()
    report = driver.step()
    assert report.status == "prefetched"
    again = reopen(driver, port=port)
    assert again.prefetched == driver.prefetched
    _deliver(again, port)
    assert again.step().created == report.created
    statuses = _run_async(again, port, 200)
    assert "prefetched" in statuses and statuses[-1] == "budget-exhausted"
    assert len(port.requests) == 12 and again.budget_left() == 0
    assert again.times.prefetched_batches >= 2


def test_no_prefetch_when_it_is_off_when_the_budget_is_spoken_for_or_when_approval_is_manual():
    for kwargs in ({"prefetch_while_measuring": False}, {"prefetch_while_measuring": True, "approval": "manual"}):
        port = FakePort(asynchronous=True)
        driver = make_driver(port=port, seed=3, gpu_budget=40, threshold=0.99, **kwargs)
        driver.step()
        assert driver.pending()
        assert driver.step().status == "waiting" and driver.prefetched is None
    port = FakePort(asynchronous=True)
    driver = make_driver(port=port, seed=3, gpu_budget=2, threshold=0.99, prefetch_while_measuring=True)
    driver.step()
    assert driver.budget_left() == 0 and driver.pending()
    assert driver.step().status == "waiting" and driver.prefetched is None


def test_with_measurements_that_arrive_at_once_prefetch_changes_nothing():
    plain, prefetching = FakePort(), FakePort()
    a = make_driver(port=plain, seed=6, gpu_budget=20)
    b = make_driver(port=prefetching, seed=6, gpu_budget=20, prefetch_while_measuring=True)
    a.run(max_steps=100)
    b.run(max_steps=100)
    assert plain.requests == prefetching.requests and b.times.prefetched_batches == 0
