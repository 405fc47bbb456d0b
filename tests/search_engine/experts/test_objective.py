from __future__ import annotations

import math

import pytest

from search_engine.experts import OBJECTIVES, objective_value, pareto_front
from tests.search_engine.experts import captured


def test_the_front_keeps_only_points_no_other_beats_on_both():
    points = [(1.0, 5.0, "fast"), (2.0, 3.0, "balanced"), (3.0, 4.0, "dominated"), (4.0, 1.0, "frugal"),
              (2.0, 3.0, "tie")]
    assert pareto_front(points) == ["fast", "balanced", "tie", "frugal"]


def test_points_without_an_energy_reading_are_left_out():
    assert pareto_front([(1.0, None, "a"), (2.0, math.nan, "b"), (3.0, 1.0, "c")]) == ["c"]
    assert pareto_front([]) == []


def test_on_the_captured_sgemm_variants_one_is_both_fastest_and_cheapest():
    names = [n for n in captured.names() if n.startswith("sgemm__")]
    points = [(captured.measurement(n)["candidate"]["median_ms"], captured.measurement(n)["energy"]["j_per_call"], n)
              for n in names]
    assert pareto_front(points) == ["sgemm__warptile_64x32_minb2"]


def test_on_the_captured_transposes_the_front_runs_from_fastest_to_cheapest():
    names = [n for n in captured.names() if n.startswith("transpose__")]
    points = [(captured.measurement(n)["candidate"]["median_ms"], captured.measurement(n)["energy"]["j_per_call"], n)
              for n in names]
    front = pareto_front(points)
    assert front[0] == "transpose__smem_swizzle_vec4"
    assert "transpose__reference" not in front


def result(speedup=2.0, joules=1.0, status="ok", reference_j=None):
    energy = {"j_per_call": joules, "mean_w": 300.0}
    if reference_j is not None:
        energy["reference_j_per_call"] = reference_j
    return {"status": status, "speedup": speedup, "energy": energy}


def test_time_is_the_speedup():
    assert objective_value(result(speedup=2.5), "time") == 2.5
    timed = {"status": "ok", "reference": {"median_ms": 3.0}, "candidate": {"median_ms": 1.5}}
    assert objective_value(timed, "time") == 2.0


def test_energy_is_the_reference_joules_over_the_candidates():
    assert objective_value(result(joules=0.5), "energy", reference_j_per_call=2.0) == 4.0
    assert objective_value(result(joules=0.5, reference_j=1.0), "energy") == 2.0
    assert objective_value(result(joules=0.5), "energy") is None


def test_under_the_cap_the_speedup_counts_in_full_and_over_it_is_penalised():
    assert objective_value(result(speedup=2.0, joules=0.9), "time-energy-cap", cap_j=1.0) == 2.0
    assert objective_value(result(speedup=2.0, joules=1.0), "time-energy-cap", cap_j=1.0) == 2.0
    assert objective_value(result(speedup=2.0, joules=2.0), "time-energy-cap", cap_j=1.0) == pytest.approx(0.5)
    over = objective_value(result(speedup=2.0, joules=1.1), "time-energy-cap", cap_j=1.0)
    assert over == pytest.approx(2.0 / 1.21)
    # a slower variant inside the cap beats a 10%-faster one 20% over it
    assert objective_value(result(speedup=1.0, joules=1.0), "time-energy-cap", cap_j=1.0) > \
        objective_value(result(speedup=1.1, joules=1.2), "time-energy-cap", cap_j=1.0)


def test_the_cap_objective_needs_a_cap_and_an_energy_reading():
    with pytest.raises(ValueError, match="cap"):
        objective_value(result(), "time-energy-cap")
    no_energy = {"status": "ok", "speedup": 2.0, "energy": None}
    assert objective_value(no_energy, "time-energy-cap", cap_j=1.0) is None


def test_a_failed_candidate_has_no_value_and_an_unknown_objective_is_refused():
    for objective in OBJECTIVES:
        assert objective_value(result(status="failed-correctness"), objective, cap_j=1.0,
                               reference_j_per_call=1.0) is None
    with pytest.raises(ValueError, match="Unknown objective"):
        objective_value(result(), "speed")
