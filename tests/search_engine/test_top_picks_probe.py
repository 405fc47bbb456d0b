"""The top-picks probe (benchmarks/probes/cpu_2026-12-05/top_picks.py) keeps away from the test families, reads a
held-out family's knob values, and tabulates knob values against the target and the order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.scripts import loaded_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "probes" / "cpu_2026-12-05" / "top_picks.py"


@pytest.fixture(scope="module")
def probe():
    with loaded_script(_PATH, "top_picks_probe_under_test") as module:
        yield module


def test_a_test_family_is_refused(probe, capsys):
    assert probe.main(["--families", "maxpool2d,conv2d"]) == 2
    assert "conv2d" in capsys.readouterr().err


def test_the_knob_table_counts_hits_speedups_and_ranks_per_value(probe):
    knobs = [{"A": "x", "B": i} for i in range(3)] + [{"A": "y", "B": i} for i in range(3)]
    speedups = np.array([1.0, 2.0, 3.0, 0.5, 0.5, 0.5])
    hit = speedups >= 2.0
    rank = np.array([5, 4, 3, 0, 1, 2])
    table = probe.knob_table(knobs, speedups, hit, rank, most=2)
    assert set(table) == {"A"}  # B has three values, more than `most`
    assert table["A"]["x"] == {"variants": 3, "at_target_share": 2 / 3, "median_speedup": 2.0, "mean_rank": 4.0}
    assert table["A"]["y"]["at_target_share"] == 0.0 and table["A"]["y"]["mean_rank"] == 1.0


def test_families_recorded_later_can_be_excluded_and_a_held_out_one_cannot(probe, capsys):
    found = probe.held_out_families("maxpool2d,stencil3d", refuse=probe.TEST, exclude="depthwise_conv2d,nbody")
    datasets, held = found
    assert {d.name for d in held} == {"maxpool2d", "stencil3d"}
    assert not {"depthwise_conv2d", "nbody"} & {d.name for d in datasets}
    assert probe.held_out_families("maxpool2d", exclude="maxpool2d") is None
    assert probe.held_out_families("maxpool2d", exclude="no_such_family") is None
    assert "no_such_family" in capsys.readouterr().err
