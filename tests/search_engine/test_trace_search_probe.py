"""The search-trace probe (benchmarks/probes/cpu_2026-12-03/trace_search.py) on a synthetic family."""

from __future__ import annotations

import dataclasses
from argparse import Namespace
from pathlib import Path

import pytest

from search_engine.surrogates.base import Forecast
from tests.scripts import loaded_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "probes" / "cpu_2026-12-03" / "trace_search.py"


@pytest.fixture(scope="module")
def probe():
    with loaded_script(_PATH, "trace_search_probe_under_test") as module:
        yield module


class ByKnobSum:
    """A stand-in model whose expected speedup grows with the sum of a variant's numeric knobs."""

    name, version = "by-knob-sum", "1"

    def forecast(self, request):
        total = sum(v for v in (request.candidate.get("knobs") or {}).values() if isinstance(v, (int, float)))
        flat = Forecast.from_probabilities([1, 1, 1, 2, 3, 2, 1, 1])
        return dataclasses.replace(flat, log_mean=0.001 * total, log_sd=0.5)

    def forecast_many(self, requests):
        return [self.forecast(r) for r in requests]


def test_a_trace_lists_what_each_step_chose_and_measured_with_the_zero_shot_ranks(probe):
    sb = probe.sb
    sb._TARGET["fraction"] = sb.TARGET_FRACTION
    dataset = sb.synthetic_datasets()[0]
    ranks = probe.zero_shot_ranks(ByKnobSum(), dataset)
    assert sorted(ranks.values()) == list(range(1, len(dataset.rows) + 1))
    best = max(dataset.rows, key=lambda r: sum(v for v in r["candidate"]["knobs"].values() if isinstance(v, (int, float))))
    assert ranks[dataset.key(best["candidate"]["knobs"])] == 1
    args = Namespace(threshold=0.5, gpu_per_step=2, children=8, root_children=32, min_gpu_per_step=1, c=1.0,
                     retrain_every=0, min_beat_prob=0.15, conformal=0.0, online_weight=10.0, max_steps=3,
                     measure_order="improvement", measure_choice="improvement")
    run = probe.trace(dataset, ByKnobSum(), ranks, seed=1, args=args)
    chosen = [e for e in run["events"] if "chosen" in e]
    measured = [e for e in run["events"] if "chosen" not in e]
    # the stand-in model learns nothing from the run, so no step has a run-local model to weigh
    assert chosen and all(e["local_weight"] is None and e["local_rows"] is None for e in chosen)
    assert chosen and measured
    assert sum(len(e["chosen"]) for e in chosen) == len(measured)  # every chosen measurement was made
    assert all(m["zero_shot_rank"] in ranks.values() for m in measured)
    assert all(m["hit"] == (m["speedup"] >= dataset.target) for m in measured)
    assert len(run["screened_best_ranks"]) == 10 and run["screened_best_ranks"] == sorted(run["screened_best_ranks"])


def test_with_gains_a_trace_lists_the_candidates_each_step_chose_from_by_expected_improvement(probe):
    from search_engine.policy import expected_log_improvement

    sb = probe.sb
    sb._TARGET["fraction"] = sb.TARGET_FRACTION
    dataset = sb.synthetic_datasets()[0]
    ranks = probe.zero_shot_ranks(ByKnobSum(), dataset)
    hits = {rank for key, rank in ranks.items() if dataset.records[key]["speedup"] >= dataset.target}
    args = Namespace(threshold=0.5, gpu_per_step=2, children=8, root_children=32, min_gpu_per_step=1, c=1.0,
                     retrain_every=0, min_beat_prob=0.15, conformal=0.0, online_weight=10.0, max_steps=4,
                     measure_order="improvement", measure_choice="improvement")
    plain = probe.trace(dataset, ByKnobSum(), ranks, seed=1, args=args)
    run = probe.trace(dataset, ByKnobSum(), ranks, seed=1, args=args, gains=2)
    standing = [e for e in run["events"] if "standings" in e]
    # watching changes nothing the run does
    assert [e for e in run["events"] if "standings" not in e] == plain["events"]
    assert [e["standings"] for e in standing] == [1, 2][:len(standing)] and standing
    first = standing[0]
    # before any measurement the best is the reference's 1x; the screened children that compiled wait
    assert first["best"] == 1.0 and 3 <= first["unmeasured"] <= 32 and len(first["top"]) == 3
    assert [row["place"] for row in first["top"]] == [1, 2, 3]
    # each gain is the stand-in's forecast's expected improvement over the best, in descending order
    knobs_of = {rank: dict(zip(dataset.knobs, key)) for key, rank in ranks.items()}
    for event in standing:
        for row in event["top"]:
            forecast = ByKnobSum().forecast(sb.ForecastRequest(candidate={"knobs": knobs_of[row["zero_shot_rank"]]},
                                                               reference={}, problem={}, hardware={}))
            assert row["gain"] == pytest.approx(expected_log_improvement(forecast, event["best"]))
            assert row["normals"] == []  # the stand-in gives one normal, no mixture
        gains = [row["gain"] for row in event["top"]]
        assert gains == sorted(gains, reverse=True)
        assert all(h["zero_shot_rank"] in hits and 1 <= h["place"] <= event["unmeasured"] for h in event["hits"])


def test_the_traced_family_cannot_be_excluded_and_an_unknown_one_is_named(probe):
    with pytest.raises(SystemExit, match="cannot be excluded"):
        probe.main(["stencil3d", "--exclude", "stencil3d,maxpool2d"])
    with pytest.raises(SystemExit, match="no_such_family"):
        probe.main(["stencil3d", "--exclude", "no_such_family"])
