"""Selective policy, conformal threshold and search memory."""

from __future__ import annotations

import pytest

from search_engine.memory import SearchMemory
import dataclasses
import json
import math

from search_engine.policy import (Decision, PolicySettings, SelectivePolicy, conformal_threshold,
                                  expected_log_improvement, prob_above)
from search_engine.surrogates.base import Forecast
from search_engine.tree import PUCTTree
from tests.search_engine.test_tree import cand


def forecast_on(bin_, confidence):
    probabilities = [(1 - confidence) / 7] * 8
    probabilities[bin_ - 1] = confidence
    return Forecast.from_probabilities(probabilities)


def tree_with_children(forecasts, parent_speedup=1.0):
    tree = PUCTTree()
    tree.add_root(cand("root"), parent_speedup)
    ids = []
    for i, f in enumerate(forecasts):
        node = tree.add_child(0, cand(f"c{i}"))
        node.state = "forecast"
        node.forecast = f.to_dict()
        ids.append(node.id)
    return tree, ids


def test_confident_forecasts_are_accepted_and_confident_slowdowns_pruned():
    tree, ids = tree_with_children([forecast_on(6, 0.9), forecast_on(3, 0.9)])
    decisions = {d.node_id: d for d in SelectivePolicy(PolicySettings(threshold=0.7)).decide(tree, ids, 10)}
    assert decisions[ids[0]].action == "accept"
    assert 1.414 <= decisions[ids[0]].provisional_speedup < 2.0
    assert decisions[ids[1]].action == "prune"


def test_uncertain_children_that_could_beat_the_best_go_to_the_gpu_at_most_k_per_step():
    uncertain = [forecast_on(7, 0.4) for _ in range(4)]
    tree, ids = tree_with_children(uncertain)
    policy = SelectivePolicy(PolicySettings(threshold=0.7, max_gpu_per_step=2))
    decisions = policy.decide(tree, ids, budget_left=10)
    assert [d.action for d in decisions].count("measure") == 2
    assert [d.action for d in decisions].count("park") == 2
    assert [d.action for d in policy.decide(tree, ids, budget_left=1)].count("measure") == 1
    assert [d.action for d in policy.decide(tree, ids, budget_left=0)].count("measure") == 0


def test_an_uncertain_child_unlikely_to_beat_the_best_is_parked():
    tree, ids = tree_with_children([Forecast.from_probabilities([0.3, 0.55, 0.1, 0.05, 0, 0, 0, 0])])
    decisions = SelectivePolicy(PolicySettings(threshold=0.7, min_gpu_per_step=0)).decide(tree, ids, 10)
    assert decisions[0].action == "park"


def test_a_step_where_nothing_clears_the_bar_still_measures_its_most_promising_candidate():
    unlikely = [Forecast.from_probabilities([0.3, 0.55, 0.1, 0.05, 0, 0, 0, 0]),
                Forecast.from_probabilities([0.2, 0.5, 0.2, 0.1, 0, 0, 0, 0]),
                Forecast.from_probabilities([0.6, 0.3, 0.1, 0, 0, 0, 0, 0])]
    tree, ids = tree_with_children(unlikely)
    decisions = SelectivePolicy(PolicySettings(threshold=0.7, max_gpu_per_step=2)).decide(tree, ids, 10)
    measured = [d for d in decisions if d.action == "measure"]
    # One (the default floor), not two: the second slot is only for candidates that clear the bar.
    assert [d.node_id for d in measured] == [ids[1]]
    assert "every step measures at least one" in measured[0].reason
    assert [d.action for d in decisions if d.node_id != ids[1]] == ["park", "park"]
    # Never beyond the budget, and never in a measure-all run (which measures everything anyway).
    assert not [d for d in SelectivePolicy(PolicySettings(threshold=0.7)).decide(tree, ids, 0) if d.action == "measure"]
    with pytest.raises(ValueError, match="between 0 and the most per step"):
        PolicySettings(max_gpu_per_step=1, min_gpu_per_step=2)


def test_a_step_asked_for_more_measurements_tops_up_with_its_most_promising_parked_children():
    unlikely = [Forecast.from_probabilities([0.3, 0.55, 0.1, 0.05, 0, 0, 0, 0]),
                Forecast.from_probabilities([0.2, 0.5, 0.2, 0.1, 0, 0, 0, 0]),
                Forecast.from_probabilities([0.6, 0.3, 0.1, 0, 0, 0, 0, 0])]
    tree, ids = tree_with_children([forecast_on(7, 0.4)] + unlikely)
    policy = SelectivePolicy(PolicySettings(threshold=0.7, max_gpu_per_step=3))
    decisions = policy.decide(tree, ids, 10, minimum=3, minimum_reason="the compile checks were slow")
    measured = [d for d in decisions if d.action == "measure"]
    # the child that clears the bar first, then the two most promising of the rest
    assert [d.node_id for d in measured] == [ids[0], ids[2], ids[1]]
    assert "compile checks were slow" in measured[1].reason and "compile" not in measured[0].reason
    assert [d.action for d in decisions if d.node_id == ids[3]] == ["park"]
    # never past the most a step may measure, nor the budget
    assert len([d for d in policy.decide(tree, ids, 10, minimum=9) if d.action == "measure"]) == 3
    assert len([d for d in policy.decide(tree, ids, 2, minimum=3) if d.action == "measure"]) == 2
    # without the minimum, the child that clears the bar alone
    assert [d.node_id for d in policy.decide(tree, ids, 10) if d.action == "measure"] == [ids[0]]


def test_an_abstention_is_deferred_to_the_gpu():
    tree, ids = tree_with_children([Forecast.abstention("garbled answer")])
    decisions = SelectivePolicy(PolicySettings()).decide(tree, ids, 10)
    assert decisions[0].action == "measure" and "abstained" in decisions[0].reason


def test_a_child_its_generator_asks_the_gpu_first_is_measured_whatever_its_forecast_while_the_budget_lasts():
    # a confident slowdown (pruned otherwise), a confident gain (accepted) and an unlikely one (parked)
    tree, ids = tree_with_children([forecast_on(3, 0.9), forecast_on(6, 0.9),
                                    Forecast.from_probabilities([0.3, 0.55, 0.1, 0.05, 0, 0, 0, 0])])
    policy = SelectivePolicy(PolicySettings(threshold=0.7, max_gpu_per_step=2, min_gpu_per_step=0))
    decisions = {d.node_id: d for d in policy.decide(tree, ids, 10, measure_first={ids[0], ids[2]})}
    assert decisions[ids[0]].action == decisions[ids[2]].action == "measure"
    assert "asked the GPU first" in decisions[ids[0]].reason
    assert decisions[ids[1]].action == "accept"
    # the slots and the budget bound it like any measurement
    one = policy.decide(tree, ids, 1, measure_first={ids[0], ids[2]})
    assert [d.node_id for d in one if d.action == "measure"] == [ids[0]]
    assert {d.node_id: d.action for d in one}[ids[2]] == "park"


def test_parked_children_compete_for_later_slots():
    tree, ids = tree_with_children([forecast_on(7, 0.4) for _ in range(3)])
    policy = SelectivePolicy(PolicySettings(threshold=0.7, max_gpu_per_step=1))
    first = policy.decide(tree, ids, 10)
    measured = [d.node_id for d in first if d.action == "measure"]
    assert len(measured) == 1
    tree.nodes[measured[0]].state = "queued"
    later = policy.decide(tree, [], 10)
    assert [d.action for d in later] == ["measure"] and later[0].node_id != measured[0]


def test_a_forecast_only_best_is_verified():
    tree, ids = tree_with_children([forecast_on(7, 0.9)])
    tree.nodes[ids[0]].state = "accepted-by-forecast"
    tree.set_provisional(ids[0], 2.8)
    decision = SelectivePolicy(PolicySettings()).verification_of_best(tree)
    assert decision is not None and decision.node_id == ids[0]
    tree.nodes[ids[0]].verification_refused = True
    assert SelectivePolicy(PolicySettings()).verification_of_best(tree) is None


def test_prob_above_spreads_a_bin_log_uniformly():
    f = Forecast.from_probabilities([0, 0, 0, 0, 1, 0, 0, 0])  # all mass in [1.0, 1.414)
    assert prob_above(f, 0.9) == 1.0
    assert prob_above(f, 1.5) == 0.0
    assert prob_above(f, 1.414 ** 0.5) == pytest.approx(0.5, abs=1e-3)


def test_the_expected_log_improvement_of_a_bin_and_of_a_normal():
    one_bin = Forecast.from_probabilities([0, 0, 0, 0, 1, 0, 0, 0])  # all mass log-uniform in [1.0, 1.414)
    top = math.log(1.414)
    assert expected_log_improvement(one_bin, 2.0) == 0.0
    assert expected_log_improvement(one_bin, 0.5) == pytest.approx(top / 2 - math.log(0.5), rel=1e-3)
    # from inside the bin: the mass above t, times its mean excess
    t = math.exp(top / 2)
    assert expected_log_improvement(one_bin, t) == pytest.approx(0.5 * top / 4, rel=1e-3)
    # a normal in log space: against a numerical integral
    normal = dataclasses.replace(one_bin, log_mean=0.3, log_sd=0.2)
    xs = [0.3 + 0.2 * (i / 1000 - 8) for i in range(16001)]
    density = [math.exp(-0.5 * ((x - 0.3) / 0.2) ** 2) / (0.2 * math.sqrt(2 * math.pi)) for x in xs]
    want = sum(max(0.0, x - 0.25) * d for x, d in zip(xs, density)) * 0.2 / 1000
    assert expected_log_improvement(normal, math.exp(0.25)) == pytest.approx(want, rel=1e-3)
    # unlike P(S > best), it does not saturate when both forecasts surely beat the best
    low, high = forecast_on(6, 0.99), forecast_on(8, 0.99)
    assert prob_above(low, 1.0) == pytest.approx(prob_above(high, 1.0), abs=0.02)
    assert expected_log_improvement(high, 1.0) > expected_log_improvement(low, 1.0) + 0.5


def test_a_mixture_forecast_is_read_from_its_components_not_from_one_normal_of_its_moments():
    one_bin = Forecast.from_probabilities([0, 0, 0, 0, 1, 0, 0, 0])
    # Two models disagree: one says 0.5x surely, the other (weight 0.25) says 2x. One normal of the same
    # moments is wide, and gives the candidate a good chance of 3x, which neither component gives it.
    parts = ((0.75, math.log(0.5), 0.1), (0.25, math.log(2.0), 0.1))
    mean = sum(w * m for w, m, _ in parts)
    sd = math.sqrt(sum(w * (s ** 2 + (m - mean) ** 2) for w, m, s in parts))
    moments = dataclasses.replace(one_bin, log_mean=mean, log_sd=sd)
    mixture = dataclasses.replace(moments, log_mixture=parts)
    assert prob_above(mixture, 1.0) == pytest.approx(0.25, abs=1e-6)
    assert prob_above(mixture, 3.0) < 1e-4 < prob_above(moments, 3.0)
    assert expected_log_improvement(mixture, 1.0) == pytest.approx(
        0.25 * expected_log_improvement(dataclasses.replace(one_bin, log_mean=math.log(2.0), log_sd=0.1), 1.0))
    assert expected_log_improvement(mixture, 3.0) < expected_log_improvement(moments, 3.0) / 10
    # it survives the tree's dict (saved searches, the websocket), and older dicts without it still load
    again = Forecast.from_dict(json.loads(json.dumps(mixture.to_dict())))
    assert again == mixture
    old = mixture.to_dict()
    del old["log_mixture"]
    assert Forecast.from_dict(old).log_mixture is None


def test_the_improvement_order_measures_the_most_promising_first_and_verify_first_keeps_the_verification_first():
    # a forecast-only best confidently in 1.4-2x, an uncertain child that may well be 4x, and an abstention
    tree, ids = tree_with_children([forecast_on(6, 0.9), forecast_on(8, 0.5)])
    tree.nodes[ids[0]].state = "accepted-by-forecast"
    tree.set_provisional(ids[0], 1.7)
    late = tree.add_child(0, cand("abstained"))
    late.state, late.forecast = "forecast", Forecast.abstention("no answer").to_dict()
    verify = Decision(ids[0], "measure", "verify", priority=2.0)
    steps = [verify, Decision(ids[1], "measure", "uncertain", priority=0.9),
             Decision(late.id, "measure", "abstained", priority=0.5, ahead=True)]
    assert PolicySettings().measure_order == "improvement"  # the default since 2026-12-03
    verify_first = SelectivePolicy(PolicySettings(measure_order="verify-first")).measurement_order(tree, steps)
    assert [d.node_id for d in verify_first] == [ids[0], ids[1], late.id]
    ordered = SelectivePolicy(PolicySettings(measure_order="improvement")).measurement_order(tree, steps)
    assert [d.node_id for d in ordered] == [late.id, ids[1], ids[0]]
    with pytest.raises(ValueError, match="order"):
        PolicySettings(measure_order="random")


def test_by_expected_improvement_the_slots_go_to_the_most_promising_not_to_the_first_made():
    # At a run's start nearly every candidate beats the reference: P(S > 1) is the same for bins 5-8,
    # and the slots would go by node id; the expected improvement tells them apart.
    tree, ids = tree_with_children([forecast_on(b, 0.4) for b in (5, 6, 7, 8)])
    assert len({round(prob_above(forecast_on(b, 0.4), 1.0), 9) for b in (5, 6, 7, 8)}) == 1
    by_p = SelectivePolicy(PolicySettings(threshold=0.7, max_gpu_per_step=2, measure_choice="beat-probability"))
    assert PolicySettings().measure_choice == "improvement"  # the default since the fifteenth session
    assert [d.node_id for d in by_p.decide(tree, ids, 10) if d.action == "measure"] == [ids[0], ids[1]]
    by_gain = SelectivePolicy(PolicySettings(threshold=0.7, max_gpu_per_step=2, measure_choice="improvement"))
    chosen = [d for d in by_gain.decide(tree, ids, 10) if d.action == "measure"]
    assert [d.node_id for d in chosen] == [ids[3], ids[2]]
    assert "expected gain" in chosen[0].reason
    # the ones left are parked and compete in later steps by the same measure
    for d in chosen:
        tree.nodes[d.node_id].state = "queued"
    later = by_gain.decide(tree, [], 10)
    assert [d.node_id for d in later if d.action == "measure"] == [ids[1], ids[0]]
    assert all("parked earlier" in d.reason for d in later)
    with pytest.raises(ValueError, match="choice"):
        PolicySettings(measure_choice="random")


def test_by_expected_improvement_a_top_up_takes_the_most_promising_and_an_abstention_goes_first():
    unlikely = [Forecast.from_probabilities([0.0, 0.0, 0.0, 0.4, 0.6, 0, 0, 0]),  # likelier to beat the best, by little
                Forecast.from_probabilities([0.9, 0.0, 0.0, 0.0, 0, 0, 0.1, 0])]  # a long shot at 2-4x
    tree, ids = tree_with_children(unlikely, parent_speedup=1.0)
    settings = dict(threshold=0.95, max_gpu_per_step=1, min_beat_prob=0.7)
    p_top = SelectivePolicy(PolicySettings(**settings, measure_choice="beat-probability")).decide(tree, ids, 10)
    gain_top = SelectivePolicy(PolicySettings(**settings, measure_choice="improvement")).decide(tree, ids, 10)
    assert [d.node_id for d in p_top if d.action == "measure"] == [ids[0]]
    assert [d.node_id for d in gain_top if d.action == "measure"] == [ids[1]]
    assert "expected gain" in [d for d in gain_top if d.action == "measure"][0].reason
    assert "expected gain" not in [d for d in p_top if d.action == "measure"][0].reason
    # an abstention has no forecast to weigh: by expected improvement it takes the slot first
    tree, ids = tree_with_children([forecast_on(8, 0.4), Forecast.abstention("no answer")])
    by_gain = SelectivePolicy(PolicySettings(threshold=0.7, max_gpu_per_step=1, measure_choice="improvement"))
    chosen = [d for d in by_gain.decide(tree, ids, 10) if d.action == "measure"]
    assert [d.node_id for d in chosen] == [ids[1]] and chosen[0].ahead


def test_the_conformal_threshold_keeps_the_accepted_error_rate_under_the_target():
    pairs = [(0.9, True)] * 30 + [(0.8, True)] * 10 + [(0.8, False)] * 10 + [(0.5, False)] * 10
    t = conformal_threshold(pairs, 0.1)
    assert t == 0.9
    accepted = [ok for c, ok in pairs if c >= t]
    assert (sum(not ok for ok in accepted) + 1) / (len(accepted) + 1) <= 0.1
    assert conformal_threshold(pairs, 0.3) == 0.8
    assert conformal_threshold(pairs, 0.4) == 0.5
    assert conformal_threshold([(0.9, False)] * 5, 0.1) > 1.0


def test_the_policy_uses_the_conformal_threshold_once_enough_nodes_are_measured():
    tree = PUCTTree()
    tree.add_root(cand("root"), 1.0)
    for i in range(12):
        node = tree.add_child(0, cand(f"m{i}"))
        node.forecast = forecast_on(5, 0.95 if i < 10 else 0.5).to_dict()
        node.state = "measured"
        tree.set_measured(node.id, 1.2 if i < 10 else 3.0)  # the confident ones were right
    policy = SelectivePolicy(PolicySettings(threshold=0.3, conformal_target=0.2, conformal_min_samples=10))
    assert policy.threshold(tree) == 0.95
    few = SelectivePolicy(PolicySettings(threshold=0.3, conformal_target=0.2, conformal_min_samples=50))
    assert few.threshold(tree) == 0.3
    # With a warm-up threshold, that one stands until the conformal threshold has its samples, and not after.
    untrusting = dict(threshold=0.3, conformal_target=0.2, conformal_warmup=1.0)
    assert SelectivePolicy(PolicySettings(**untrusting, conformal_min_samples=50)).threshold(tree) == 1.0
    assert SelectivePolicy(PolicySettings(**untrusting, conformal_min_samples=10)).threshold(tree) == 0.95
    # without a conformal target there is no warm-up: the fixed threshold throughout
    assert SelectivePolicy(PolicySettings(threshold=0.3, conformal_warmup=1.0)).threshold(tree) == 0.3


def test_before_the_conformal_threshold_a_warm_up_at_one_trusts_no_forecast_and_prunes_none():
    confident = [forecast_on(7, 0.9), forecast_on(6, 0.9), forecast_on(3, 0.9)]  # two speedups, one slowdown
    tree, ids = tree_with_children(confident)
    fixed = SelectivePolicy(PolicySettings(threshold=0.5, conformal_target=0.2, max_gpu_per_step=2))
    assert sorted(d.action for d in fixed.decide(tree, ids, 10)) == ["accept", "accept", "prune"]
    untrusting = SelectivePolicy(PolicySettings(threshold=0.5, conformal_target=0.2, conformal_warmup=1.0,
                                                max_gpu_per_step=2))
    decisions = {d.node_id: d for d in untrusting.decide(tree, ids, 10)}
    # every candidate competes for the GPU by its forecast: the two most promising are measured, the slowdown parked
    assert decisions[ids[0]].action == "measure" and decisions[ids[1]].action == "measure"
    assert decisions[ids[2]].action == "park"
    with pytest.raises(ValueError):
        PolicySettings(conformal_warmup=1.5)
    # a run saved before the setting goes on with the fixed threshold
    saved = PolicySettings(threshold=0.5, conformal_target=0.2).to_dict()
    del saved["conformal_warmup"]
    assert PolicySettings.from_dict(saved).conformal_warmup is None


def test_memory_deduplicates_caps_and_renders():
    memory = SearchMemory(cap=3)
    assert memory.add("improved", "BLOCK 128 -> 256", "measured 1.3x", "measured")
    assert not memory.add("improved", "BLOCK 256 -> 512", "measured 1.1x", "measured")  # same lesson, other numbers
    assert memory.lessons[0].count == 2 and memory.lessons[0].effect == "measured 1.1x"
    memory.add("failed", "shared tile without padding", "failed-correctness: outputs differ", "failure")
    memory.add("forecast", "unroll 8", "forecast bin 5", "forecast")
    memory.add("regressed", "VEC 4 -> 1", "measured 0.6x", "measured")
    assert len(memory.lessons) == 3
    assert all(l.kind != "forecast" for l in memory.lessons)  # the least important went first
    text = memory.render()
    assert text.splitlines()[0].startswith("- [improved, measured] BLOCK")
    assert "(seen 2x)" in text
    again = SearchMemory.from_dict(memory.to_dict())
    assert again.render() == text
    assert SearchMemory().render() == "No lessons yet."


def test_a_stalled_search_measures_its_most_promising_parked_children():
    unlikely = [Forecast.from_probabilities([0.3, 0.55, 0.1, 0.05, 0, 0, 0, 0]),
                Forecast.from_probabilities([0.1, 0.3, 0.3, 0.2, 0.1, 0, 0, 0])]
    tree, ids = tree_with_children(unlikely)
    policy = SelectivePolicy(PolicySettings(threshold=0.7, max_gpu_per_step=1, min_gpu_per_step=0))
    assert [d.action for d in policy.decide(tree, ids, 10)] == ["park", "park"]
    assert policy.decide(tree, [], 10) == []
    stalled = policy.decide(tree, [], 10, stalled=True)
    assert [(d.node_id, d.action) for d in stalled] == [(ids[1], "measure")]
    assert policy.decide(tree, [], 0, stalled=True) == []


def test_a_shared_verification_slot_displaces_the_steps_weakest_measurement_or_gives_way():
    # a forecast-only best confidently at 1.4-2x, and uncertain children that may well be 4x (bin 8) or 3x (bin 7)
    tree, ids = tree_with_children([forecast_on(6, 0.9), forecast_on(8, 0.5), forecast_on(7, 0.5)])
    tree.nodes[ids[0]].state = "accepted-by-forecast"
    tree.set_provisional(ids[0], 1.7)
    verify = Decision(ids[0], "measure", "verify", priority=2.0)
    steps = [verify, Decision(ids[1], "measure", "uncertain", priority=0.9),
             Decision(ids[2], "measure", "uncertain", priority=0.8)]
    extra = SelectivePolicy(PolicySettings(max_gpu_per_step=2, verify_slot="extra"))
    assert PolicySettings().verify_slot == "shared"  # the default since the eighteenth session
    # a run saved before the setting goes on as it began; one saved with it keeps it
    assert PolicySettings.from_dict({"threshold": 0.7}).verify_slot == "extra"
    assert PolicySettings.from_dict({"verify_slot": "shared"}).verify_slot == "shared"
    assert PolicySettings.from_dict(None).verify_slot == "shared"
    assert extra.displaced_by_verification(tree, steps, verify) is None  # on top of the step's two
    shared = SelectivePolicy(PolicySettings(max_gpu_per_step=2, verify_slot="shared"))
    # the modest best promises less than either uncertain child: it gives way
    assert shared.displaced_by_verification(tree, steps, verify) is verify
    # a slot to spare: the verification is made as well
    assert shared.displaced_by_verification(tree, steps[:2], verify) is None
    assert SelectivePolicy(PolicySettings(max_gpu_per_step=3, verify_slot="shared")).displaced_by_verification(
        tree, steps, verify) is None
    # a best forecast at 4x or more, against a child of 1.4-2x: the child waits
    tree.nodes[ids[0]].forecast = forecast_on(8, 0.9).to_dict()
    tree.nodes[ids[2]].forecast = forecast_on(6, 0.5).to_dict()
    assert shared.displaced_by_verification(tree, steps, verify).node_id == ids[2]
    # a measurement made ahead whatever the order is never displaced: the verification gives way to it
    ahead = [verify, Decision(ids[1], "measure", "first", ahead=True), Decision(ids[2], "measure", "first", ahead=True)]
    assert shared.displaced_by_verification(tree, ahead, verify) is verify
    assert shared.displaced_by_verification(tree, steps, None) is None
    with pytest.raises(ValueError, match="slot"):
        PolicySettings(verify_slot="sometimes")


def test_a_spread_step_measures_kernels_that_differ_in_enough_knob_values():
    # bins 8, 8, 7: the two most promising share every knob but one; under step_spread 2 the second slot goes
    # to the next that differs from the first in two knobs, and the near twin waits, parked
    tree, ids = tree_with_children([forecast_on(b, 0.4) for b in (8, 8, 7)])
    for nid, knobs in zip(ids, ({"bx": 128, "unroll": 4, "vec": 2}, {"bx": 128, "unroll": 8, "vec": 2},
                                {"bx": 256, "unroll": 4, "vec": 4})):
        tree.nodes[nid].candidate["knobs"] = knobs
    assert PolicySettings().step_spread == 0  # off unless chosen
    plain = SelectivePolicy(PolicySettings(threshold=0.7, max_gpu_per_step=2))
    assert [d.node_id for d in plain.decide(tree, ids, 10) if d.action == "measure"] == [ids[0], ids[1]]
    spread = SelectivePolicy(PolicySettings(threshold=0.7, max_gpu_per_step=2, step_spread=2))
    decisions = {d.node_id: d for d in spread.decide(tree, ids, 10)}
    assert [n for n, d in decisions.items() if d.action == "measure"] == [ids[0], ids[2]]
    assert decisions[ids[1]].action == "park" and "waiting for a GPU slot" in decisions[ids[1]].reason
    # when nothing else differs enough, the near twin still fills the slot
    tree.nodes[ids[2]].candidate["knobs"] = {"bx": 128, "unroll": 2, "vec": 2}
    assert [d.node_id for d in spread.decide(tree, ids, 10) if d.action == "measure"] == [ids[0], ids[1]]
    # candidates without knob values (an LLM's) are never too close
    for nid in ids:
        tree.nodes[nid].candidate["knobs"] = None
    assert [d.node_id for d in spread.decide(tree, ids, 10) if d.action == "measure"] == [ids[0], ids[1]]
    # a run saved before the setting goes on without it
    assert PolicySettings.from_dict({"threshold": 0.7}).step_spread == 0
    assert PolicySettings.from_dict({"step_spread": 2}).step_spread == 2
    with pytest.raises(ValueError, match="knob values"):
        PolicySettings(step_spread=-1)


def _normal(mean, sd, confidence=0.3):
    return dataclasses.replace(forecast_on(5, confidence), log_mean=mean, log_sd=sd)


def _measured_once(forecasts, seed=0, **settings):
    """A tree whose run has measured one candidate (at 1x) beside the reference, its other children forecast."""
    tree, ids = tree_with_children([_normal(0.0, 0.1)] + forecasts)
    tree.nodes[ids[0]].state = "measured"
    tree.nodes[ids[0]].speedup = 1.0
    settings = {"threshold": 0.7, "max_gpu_per_step": 1, "min_beat_prob": 0.0} | settings
    policy = SelectivePolicy(PolicySettings(measure_choice="thompson", **settings), seed=seed)
    return tree, ids[1:], policy


def test_thompson_draws_measure_a_candidate_as_often_as_it_is_the_best_under_the_forecasts():
    ahead, behind = _normal(0.2, 0.3), _normal(0.0, 0.3)
    firsts = []
    for seed in range(400):
        tree, ids, policy = _measured_once([ahead, behind], seed=seed)
        chosen = [d for d in policy.decide(tree, ids, 10) if d.action == "measure"]
        assert len(chosen) == 1 and "a draw from its forecast" in chosen[0].reason
        firsts.append(chosen[0].node_id == ids[0])
    # P(ahead's log speedup > behind's) = Phi(0.2 / (0.3 sqrt 2)) = 0.68; 400 runs put the share within +-0.07
    assert 0.61 <= sum(firsts) / len(firsts) <= 0.75
    # by expected improvement the one ahead is always measured
    tree, ids, _ = _measured_once([ahead, behind])
    by_gain = SelectivePolicy(PolicySettings(threshold=0.7, max_gpu_per_step=1, min_beat_prob=0.0))
    assert [d.node_id for d in by_gain.decide(tree, ids, 10) if d.action == "measure"] == [ids[0]]
    with pytest.raises(ValueError, match="choice"):
        PolicySettings(measure_choice="thomson")


def test_thompson_draws_are_reproducible_within_a_step_and_fresh_after_a_measurement():
    forecasts = [_normal(0.1 * i, 0.4) for i in range(6)]
    tree, ids, policy = _measured_once(forecasts, seed=7, max_gpu_per_step=2)
    first = [d.node_id for d in policy.decide(tree, ids, 10) if d.action == "measure"]
    assert first == [d.node_id for d in policy.decide(tree, ids, 10) if d.action == "measure"]
    # the step's measurements go to the GPU in the order of the same draws
    steps = [Decision(nid, "measure", "") for nid in reversed(first)]
    assert [d.node_id for d in policy.measurement_order(tree, steps)] == first
    # another run's seed, or one more measurement, draws afresh
    picks = set()
    for seed in range(30):
        tree, ids, policy = _measured_once(forecasts, seed=seed, max_gpu_per_step=2)
        picks.add(tuple(d.node_id for d in policy.decide(tree, ids, 10) if d.action == "measure"))
    assert len(picks) > 5


def test_thompson_keeps_expected_improvement_until_the_run_has_measured_a_candidate():
    forecasts = [_normal(0.1 * i, 0.4) for i in range(6)]
    tree, ids = tree_with_children(forecasts)
    settings = dict(threshold=0.7, max_gpu_per_step=2, min_beat_prob=0.0)
    thompson = SelectivePolicy(PolicySettings(**settings, measure_choice="thompson"), seed=3)
    by_gain = SelectivePolicy(PolicySettings(**settings, measure_choice="improvement"))
    assert not thompson.drawing(tree)
    picked = [(d.node_id, d.reason) for d in thompson.decide(tree, ids, 10) if d.action == "measure"]
    assert picked == [(d.node_id, d.reason) for d in by_gain.decide(tree, ids, 10) if d.action == "measure"]
    assert picked[0][0] == ids[-1] and "expected gain" in picked[0][1]
    # a failed measurement calibrates nothing: still by expected improvement
    tree.nodes[ids[0]].state = "failed"
    assert not thompson.drawing(tree)


def test_a_draw_reads_the_forecast_as_prob_above_does():
    import random as _random

    from search_engine.bins import DEFAULT_BINS
    from search_engine.policy import sample_log_speedup
    rng = _random.Random(0)
    # bins only: each bin's mass spread over the bin, so every draw lies inside a bin with mass
    only_bin_6 = Forecast.from_probabilities([0, 0, 0, 0, 0, 1.0, 0, 0])
    draws = [sample_log_speedup(only_bin_6, rng) for _ in range(200)]
    assert all(math.log(DEFAULT_BINS.lower(6)) <= x <= math.log(DEFAULT_BINS.upper(6)) for x in draws)
    # a mixture: its components by their weights
    mixture = dataclasses.replace(only_bin_6, log_mixture=((0.25, -3.0, 0.01), (0.75, 3.0, 0.01)))
    draws = [sample_log_speedup(mixture, rng) for _ in range(2000)]
    assert abs(sum(x > 0 for x in draws) / len(draws) - 0.75) < 0.04
    # their share above a speedup is prob_above's
    wide = _normal(0.3, 0.5)
    draws = [sample_log_speedup(wide, rng) for _ in range(4000)]
    assert abs(sum(x > math.log(1.5) for x in draws) / len(draws) - prob_above(wide, 1.5)) < 0.03
