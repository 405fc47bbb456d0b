"""The committee probe (benchmarks/probes/cpu_2026-12-04/committee_order.py) keeps away from the test families."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.scripts import loaded_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "probes" / "cpu_2026-12-04" / "committee_order.py"


@pytest.fixture(scope="module")
def probe():
    with loaded_script(_PATH, "committee_order_probe_under_test") as module:
        yield module


def test_the_default_families_are_the_validation_families_and_a_test_family_is_refused(probe, capsys):
    assert not set(probe.VALIDATION.split(",")) & probe.TEST
    assert probe.main(["--families", "gelu,conv2d"]) == 2
    assert "conv2d" in capsys.readouterr().err


def test_the_scores_read_the_forecasts_order(probe):
    class Fixed:
        def __init__(self, logs):
            self.logs = logs

        def forecast_many(self, requests):
            from search_engine.surrogates.base import Forecast

            out = []
            for value in self.logs:
                f = Forecast.from_probabilities(np.full(8, 1 / 8), surrogate="fixed")
                f.log_mean, f.log_sd = float(value), 0.2
                out.append(f)
            return out

    speedups = np.linspace(1.0, 3.0, 300)
    hit = speedups >= 0.95 * speedups.max()
    good = probe.scores(Fixed(np.log(speedups)), [None] * 300, speedups, hit, draws=20)
    assert good["first_hit_rank"] == 1 and good["spearman"] == pytest.approx(1.0)
    bad = probe.scores(Fixed(-np.log(speedups)), [None] * 300, speedups, hit, draws=20)
    assert bad["screen_top_pick_hit_rate"] == 0.0 and bad["spearman"] == pytest.approx(-1.0)
