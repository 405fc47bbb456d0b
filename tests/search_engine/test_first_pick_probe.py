"""The first-pick probe's arithmetic (benchmarks/probes/cpu_2026-12-02/first_pick_objectives.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.scripts import loaded_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "probes" / "cpu_2026-12-02" / "first_pick_objectives.py"


@pytest.fixture(scope="module")
def probe():
    with loaded_script(_PATH, "first_pick_probe_under_test") as module:
        yield module


def test_equal_speedups_get_the_same_relevance_whatever_their_order(probe):
    speedups = np.array([1.0, 2.0, 2.0, 3.0, 2.0, 0.5])
    labels = probe.relevance(speedups, levels=30)
    assert labels[1] == labels[2] == labels[4]
    assert labels[5] == 0 and labels[3] == 29 and labels[0] < labels[1] < labels[3]
    shuffled = np.array([2.0, 0.5, 2.0, 1.0, 3.0, 2.0])
    assert sorted(probe.relevance(shuffled, levels=30)) == sorted(labels)


def test_first_pick_counts_a_screen_whose_top_pick_misses(probe):
    rng = np.random.default_rng(1)
    speedups = rng.uniform(1.0, 2.0, 600)
    target = np.quantile(speedups, 0.9)
    perfect = probe.first_pick(speedups, speedups, target, draws=50)
    assert perfect["first_hit_rank"] == 1 and perfect["screen_top_pick_hit_rate"] == 1.0
    assert perfect["top8_over_best"][0] == 1.0
    worst = probe.first_pick(-speedups, speedups, target, draws=50)
    assert worst["screen_top_pick_hit_rate"] == 0.0
    assert worst["first_hit_rank"] == int(np.sum(speedups < target)) + 1
    none = probe.first_pick(speedups, speedups, 10.0, draws=5)
    assert none["first_hit_rank"] is None and none["screen_top_pick_hit_rate"] == 0.0
