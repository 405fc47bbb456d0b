"""The recording-noise probe's arithmetic (benchmarks/probes/cpu_2026-12-03/recording_noise.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.scripts import loaded_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "probes" / "cpu_2026-12-03" / "recording_noise.py"


@pytest.fixture(scope="module")
def probe():
    with loaded_script(_PATH, "recording_noise_probe_under_test") as module:
        yield module


def test_a_first_pick_by_a_perfect_order_always_hits_and_by_a_reversed_one_never(probe):
    speedups = np.linspace(1.0, 2.0, 600)
    hits = speedups >= 0.95 * speedups.max()
    assert probe.screened_first_pick(speedups, hits, draws=50) == 1.0
    assert probe.screened_first_pick(-speedups, hits, draws=50) == 0.0
    assert probe.first_hit_in_order(speedups, hits) == 1
    assert probe.first_hit_in_order(-speedups, hits) == int((~hits).sum()) + 1
    assert probe.first_hit_in_order(speedups, np.zeros(600, dtype=bool)) is None


def test_a_screen_samples_the_family_so_a_rare_hit_is_found_about_as_often_as_it_is_screened(probe):
    scores = np.arange(1000, dtype=float)
    hits = np.zeros(1000, dtype=bool)
    hits[-1] = True  # the top variant is the only hit: a screen of 256 holds it with probability 0.256
    rate = probe.screened_first_pick(scores, hits, draws=2000)
    assert 0.22 < rate < 0.29


class _Family:
    def __init__(self, speedups, target, source):
        self.records = {(i,): {"status": "ok", "speedup": s, "source_hash": str(i)} for i, s in enumerate(speedups)}
        self.target, self.source = target, source
        self.best = max(speedups)
        self.reference_ms, self.vendor = 1.0, None


def test_two_recordings_are_compared_variant_by_variant(probe):
    first = _Family([1.0, 2.0, 3.0, 4.0], target=3.8, source="a")
    second = _Family([1.1, 2.2, 3.3, 3.9], target=3.705, source="b")  # the best fell 2.5%, the rest rose 10%
    out = probe.compare(first, second, draws=20)
    assert out["variants_compared"] == 4 and out["same_source"] == 4 and out["only_in_one"] == 0
    assert out["log_ratio_median"] == pytest.approx(np.log(1.1))
    assert out["at_target"] == [1, 1] and out["at_target_in_both"] == 1 and out["at_target_jaccard"] == 1.0
    assert out["first_best_in_second"] == {"over_second_target": pytest.approx(3.9 / 3.705), "rank_in_second": 1}
    assert out["random_first_pick_hit_rate"] == 0.25
    assert out["first_recording_screened_pick_hit_rate"] == 1.0 and out["first_recording_order_first_hit"] == 1


def test_a_probes_json_holds_the_common_header_its_own_fields_and_the_command(probe, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "p.json"
    path = probe.write_probe("demo", "benchmarks/probes/demo.py", ["--draws", "5"], str(out), {"draws": 5, "families": {}})
    data = json.loads(path.read_text())
    assert path == out and data["probe"] == "demo" and data["screen"] == probe.SCREEN and data["draws"] == 5
    assert data["command"] == "OMP_NUM_THREADS=1 python benchmarks/probes/demo.py --draws 5"
    assert data["omp_threads"] == "1" and data["families"] == {}


def test_first_step_gains_score_every_held_out_variant_as_the_first_step_does(probe):
    from search_engine.policy import expected_log_improvement
    from search_engine.surrogates.learned import LearnedSurrogate
    from search_engine.surrogates.ranker import APP_WEIGHT

    datasets = {d.name: d for d in probe.sb.recorded_datasets() if d.name in ("gelu", "dot", "column_sum")}
    held = datasets["column_sum"]
    train = datasets["gelu"].rows[::8] + datasets["dot"].rows[::8]
    gains = probe.first_step_gains(train, held, max_iter=10)
    assert gains.shape == (len(held.rows),) and np.isfinite(gains).all()
    # the same model built by hand orders the family the same way
    model = LearnedSurrogate(seed=0, ranker_weight=APP_WEIGHT, max_iter=10).fit(
        train, groups=[r["problem_name"] for r in train])
    by_hand = [expected_log_improvement(f, 1.0) for f in model.forecast_many(probe.sb._requests(held.rows))]
    assert np.allclose(gains, by_hand)
    # a model option reaches the model: a different classifier, different gains
    assert not np.allclose(gains, probe.first_step_gains(train, held, max_iter=3))
