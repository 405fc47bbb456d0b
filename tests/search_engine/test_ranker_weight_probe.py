"""The ranker-weight probe's arithmetic (benchmarks/probes/cpu_2026-12-03/ranker_weight.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.scripts import loaded_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "probes" / "cpu_2026-12-03" / "ranker_weight.py"


@pytest.fixture(scope="module")
def probe():
    with loaded_script(_PATH, "ranker_weight_probe_under_test") as module:
        yield module


def test_a_screen_counts_as_a_hit_only_when_its_top_pick_is_at_target(probe):
    rng = np.random.default_rng(3)
    speedups = rng.uniform(1.0, 2.0, 700)
    hit = speedups >= np.quantile(speedups, 0.95)
    assert probe.screened_hits(speedups, hit, draws=40) == {"screen_top_pick_hit_rate": 1.0, "first_hit_rank": 1}
    worst = probe.screened_hits(-speedups, hit, draws=40)
    assert worst["screen_top_pick_hit_rate"] == 0.0 and worst["first_hit_rank"] == int((~hit).sum()) + 1
    # screens are random: a score that puts one variant at target first hits about as often as a
    # screen holds that variant (256 of 700)
    one = np.where(hit, 0.0, speedups)
    one[np.flatnonzero(hit)[0]] = 10.0
    assert probe.screened_hits(one, hit, draws=400)["screen_top_pick_hit_rate"] == pytest.approx(256 / 700, abs=0.06)
    assert probe.screened_hits(speedups, np.zeros(700, bool), draws=5)["first_hit_rank"] is None


def test_the_default_families_are_the_ones_the_search_benchmark_does_not_search(probe):
    searched = {"conv2d", "gemv", "histogram256", "reduce_sum", "rmsnorm", "sgemm", "softmax", "transpose"}
    assert not set(probe.VALIDATION.split(",")) & searched
    assert 0.0 in probe.WEIGHTS and 1.0 in probe.WEIGHTS
