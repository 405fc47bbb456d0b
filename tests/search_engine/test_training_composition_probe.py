"""The training-composition probe (benchmarks/probes/cpu_2026-12-05/training_composition.py) keeps away from the
test families, refuses a family it does not know, and counts first picks as a search's first step makes them (with the
pair-diversity probe's top-two rule)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.scripts import loaded_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "probes" / "cpu_2026-12-05" / "training_composition.py"


@pytest.fixture(scope="module")
def probe():
    with loaded_script(_PATH, "training_composition_probe_under_test") as module:
        yield module


def test_the_default_families_are_the_nine_validation_families_and_a_test_family_is_refused(probe, capsys):
    assert len(probe.NINE.split(",")) == 9 and not set(probe.NINE.split(",")) & probe.TEST
    assert probe.main(["--families", "dot,conv2d"]) == 2
    assert "conv2d" in capsys.readouterr().err


def test_a_group_of_unknown_families_is_refused_by_name(probe, capsys):
    assert probe.main(["--families", "dot", "--without", "nbody+no_such_family"]) == 2
    assert "no_such_family" in capsys.readouterr().err


def test_first_picks_are_the_screens_top_one_and_top_two_as_the_probe_asks_for_them(probe):
    # the whole family fits in one screen: the top by gain is variant 0 (a miss), the second variant 2 (a hit)
    gain = np.array([3.0, 1.0, 2.0, 0.5])
    hit = np.array([False, True, True, False])
    no_knobs = np.zeros((4, 0), dtype=int)
    rates = probe.pair_rates(gain, hit, no_knobs, 0, draws=7)
    assert (rates["first_hit"], rates["pair_hit"]) == (0.0, 1.0)
    rates = probe.pair_rates(gain, ~hit, no_knobs, 0, draws=7)
    assert (rates["first_hit"], rates["pair_hit"]) == (1.0, 1.0)
    rates = probe.pair_rates(np.array([3.0, 2.0, 1.0, 0.5]), np.array([False, False, True, True]), no_knobs, 0, draws=3)
    assert (rates["first_hit"], rates["pair_hit"]) == (0.0, 0.0)
