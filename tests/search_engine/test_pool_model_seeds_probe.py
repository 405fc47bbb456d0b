"""The model-seed pooling probe (benchmarks/probes/cpu_2026-12-03/pool_model_seeds.py) on made-up runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scripts import loaded_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "probes" / "cpu_2026-12-03" / "pool_model_seeds.py"


@pytest.fixture(scope="module")
def probe():
    with loaded_script(_PATH, "pool_model_seeds_probe_under_test") as module:
        yield module


def run(probe, model_seed, surrogate, missed=()):
    """A benchmark JSON of one family: the surrogate's runs, fixed baselines, and its own verdicts."""
    def summary(values, missed=()):
        return probe.sb.summarise([None if i in missed else v for i, v in enumerate(values)], budget=100)

    search = {"fam": {"puct_surrogate": summary(surrogate, missed), "puct_measure_all": summary([12, 12, 12]),
                      "random": summary([10, 10, 10]), "kt_pso": summary([5, 5, 5])}}
    verdicts = {"fam": {s: {"measure_all_over_surrogate": 12 / search["fam"]["puct_surrogate"][s],
                            "best_kt_over_surrogate": 5 / search["fam"]["puct_surrogate"][s]}
                        for s in ("median", "mean")}}
    return {"search": search, "verdicts": verdicts, "target_fraction": 0.95,
            "settings": {"model_seed": model_seed, "root_children": 0, "kt": "pso"}}


def test_the_runs_of_two_model_seeds_are_judged_together_with_a_miss_counted_as_the_budget(probe, tmp_path):
    first, second = run(probe, 0, [1, 2, 3]), run(probe, 1, [4, 0, 5], missed=(1,))
    pooled = probe.pooled_search([first, second])["fam"]["puct_surrogate"]
    assert pooled["values"] == [1, 2, 3, 4, 100, 5] and pooled["missed_runs"] == [4] and pooled["runs"] == 6
    assert pooled["median"] == 3.5
    # made-up runs keep no per-run wall time: none is pooled
    assert "estimated_wall_s_median" not in pooled
    paths = []
    for i, data in enumerate((first, second)):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps(data))
    result = probe.main(["--name", "made up", *map(str, paths)])
    # model seed 0: median 2 (6x under measure-all's 12, under the best KT's 5); model seed 1: median 5
    assert result["runs"]["run0.json"]["passes"]["median"] == ["fam"]
    assert result["runs"]["run1.json"]["passes"]["median"] == []
    # pooled: median 3.5 passes (12 / 3.5 >= 3, 3.5 < 5); the mean, with the miss counted as 100, does not
    assert result["pooled"]["passes"] == {"median": ["fam"], "mean": []}
    assert result["pooled"]["runs_per_family"] == {"fam": 6}


def test_runs_with_different_baselines_are_not_pooled(probe, tmp_path):
    first, second = run(probe, 0, [1, 2, 3]), run(probe, 1, [1, 2, 3])
    second["search"]["fam"]["kt_pso"]["values"] = [6, 6, 6]
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, data in zip(paths, (first, second)):
        path.write_text(json.dumps(data))
    with pytest.raises(SystemExit, match="different baselines"):
        probe.main(["--name", "x", *map(str, paths)])


def test_the_runs_wall_seconds_are_pooled_beside_their_measurements(probe):
    first, second = run(probe, 0, [1, 2, 3]), run(probe, 1, [4, 6, 5])
    for data, walls in ((first, [10.0, 20.0, 30.0]), (second, [40.0, 60.0, 50.0])):
        data["search"]["fam"]["puct_surrogate"] |= {"estimated_wall_s": walls, "compile_checks": [64, 96, 128]}
    pooled = probe.pooled_search([first, second])["fam"]["puct_surrogate"]
    assert pooled["estimated_wall_s"] == [10.0, 20.0, 30.0, 40.0, 60.0, 50.0]
    assert pooled["estimated_wall_s_median"] == 35.0 and pooled["compile_checks_median"] == 96
    # one file without them: the pooled runs would not be every run's, so nothing is pooled
    del second["search"]["fam"]["puct_surrogate"]["estimated_wall_s"]
    assert "estimated_wall_s_median" not in probe.pooled_search([first, second])["fam"]["puct_surrogate"]
