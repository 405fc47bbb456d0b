"""The pair-diversity probe (benchmarks/probes/cpu_2026-12-04/pair_diversity.py) keeps away from the test
families and picks its second variant by the rule it names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.scripts import loaded_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "probes" / "cpu_2026-12-04" / "pair_diversity.py"


@pytest.fixture(scope="module")
def probe():
    with loaded_script(_PATH, "pair_diversity_probe_under_test") as module:
        yield module


def test_the_default_families_are_the_validation_families_and_a_test_family_is_refused(probe, capsys):
    assert not set(probe.VALIDATION.split(",")) & probe.TEST
    assert probe.main(["--families", "dot,histogram256"]) == 2
    assert "histogram256" in capsys.readouterr().err


def test_a_far_second_pick_skips_the_first_picks_near_twins(probe):
    # variant 0 is ranked first and misses; 1 is its twin (one knob apart) and misses; 2 differs in two and hits
    rows = [{"candidate": {"knobs": k}} for k in ({"a": 1, "b": 1, "c": 1}, {"a": 1, "b": 2, "c": 1},
                                                   {"a": 2, "b": 2, "c": 1})]
    knobs = probe.knob_matrix(rows, ["a", "b", "c"])
    assert knobs.shape == (3, 3) and (knobs[0] != knobs[2]).sum() == 2
    gain = np.array([3.0, 2.0, 1.0])
    hit = np.array([False, False, True])
    top2 = probe.pair_rates(gain, hit, knobs, 0, draws=5)
    far = probe.pair_rates(gain, hit, knobs, 2, draws=5)
    assert top2["first_hit"] == 0.0 and top2["pair_hit"] == 0.0 and top2["second_hit_after_miss"] == 0.0
    assert far["pair_hit"] == 1.0 and far["second_hit_after_miss"] == 1.0
    assert far["random_second_after_miss"] == pytest.approx(0.5)
    # no variant far enough: the next by gain is taken, and counted
    assert probe.pair_rates(gain, hit, knobs, 3, draws=5)["no_far_second"] == 5
