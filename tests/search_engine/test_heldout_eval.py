"""Held-out scoring that cannot flatter: misses count, random is measured on the same pools, only
held-out tasks are scored, and the run's first measurement is the candidate the forecast ranks first."""
from __future__ import annotations

import gzip
import json
import math

import pytest

from search_engine.lab.heldout_eval import after_measurements, heldout_report, ranking_block, split_heldout
from search_engine.lab.program_rows import cuda_l1_rows, pools, torch_record_rows
from search_engine.surrogates.base import Forecast, ForecastRequest


def row(task: str, gpu: str, name: str, speedup: float | None) -> dict:
    request = ForecastRequest(reference={"source": "class Model: pass"}, candidate={"name": name, "source": name},
                              hardware={"name": gpu}, problem={"name": task})
    return {"request": request, "speedup": speedup, "task": task, "gpu": gpu, "origin": name}


class ByName:
    """Forecasts a fixed log speedup per candidate name; learns nothing."""

    name, version = "by-name", "1"

    def __init__(self, table: dict):
        self.table = table

    def forecast_many(self, requests):
        out = []
        for r in requests:
            mu = self.table[r.candidate["name"]]
            p = [math.exp(-((math.log(e) - mu) ** 2)) for e in (0.2, 0.4, 0.6, 0.85, 1.2, 1.7, 3.0, 6.0)]
            f = Forecast.from_probabilities(p, surrogate="by-name@1")
            f.log_mean = mu
            out.append(f)
        return out


def forecasts(table, rows):
    return ByName(table).forecast_many([r["request"] for r in rows])


POOL = [row("kb1_10_x", "h100", "fast", 3.0), row("kb1_10_x", "h100", "slow", 1.0),
        row("kb1_10_x", "h100", "broken", None)]


def test_a_miss_ranked_first_recovers_nothing_and_random_is_measured_on_the_same_pool():
    bad = ranking_block(forecasts({"fast": 0.0, "slow": 0.5, "broken": 2.0}, POOL), POOL)
    assert bad["recovered_at_1pct"] == 0.0 and bad["misses_chosen_first"] == 1
    good = ranking_block(forecasts({"fast": 2.0, "slow": 0.5, "broken": 0.0}, POOL), POOL)
    assert good["recovered_at_1pct"] == 1.0
    # Random picks each of the three once in three: (3 + 1 + 0) / 3 / 3.
    assert good["random_at_1pct"] == pytest.approx(4 / 9, abs=0.04)
    assert good["spearman_within_task"] == pytest.approx(1.0) and bad["spearman_within_task"] == pytest.approx(-1.0)


def test_a_report_scores_held_out_tasks_only():
    with pytest.raises(ValueError, match="kb1_11_y are not held-out"):
        heldout_report(ByName({"a": 0.0}), [row("kb1_11_y", "h100", "a", 1.0)])
    train, test = split_heldout([row("kb1_11_y", "h100", "a", 1.0), *POOL, row("kb2_25_z", "a100", "a", 2.0)])
    assert {r["task"] for r in train} == {"kb1_11_y"} and {r["task"] for r in test} == {"kb1_10_x", "kb2_25_z"}


class Learner(ByName):
    def __init__(self, table):
        super().__init__(table)
        self.seen = []

    def learn(self, rows):
        self.seen.append([r["request"].candidate["name"] for r in rows])


def test_the_first_measurement_is_the_candidate_forecast_fastest_a_miss_measured_and_skipped():
    rows = POOL + [row("kb1_10_x", "h100", "middle", 2.0)]
    learner = Learner({"fast": 1.0, "slow": 0.0, "broken": 2.0, "middle": 0.5})
    cold = learner.forecast_many([r["request"] for r in rows])
    scored, kept, counts = after_measurements(learner, rows, cold, measured=1)
    assert learner.seen[0] == ["fast"] and counts["misses_measured"] == 1
    assert sorted(r["origin"] for r in kept) == ["middle", "slow"]   # the rest of the pool is scored


def test_program_rows_read_cuda_l1_programs_and_torch_records_with_misses(tmp_path):
    entry = {"level_id": 1, "task_id": 10, "ref_code": "class Model: pass", "custom_code": "class ModelNew: pass",
             "cuda_graph_code": "graph", "cudnn_code": "None", "score_default": "2.0", "score_cuda_graph": "4.0",
             "score_cudnn": "1.0"}
    empty = dict(entry, task_id=12, custom_code="None")
    (tmp_path / "h100.jsonl").write_text(json.dumps(entry) + "\n" + json.dumps(empty) + "\n")
    rows = cuda_l1_rows(tmp_path)
    assert [(r["origin"], r["speedup"]) for r in rows] == [("cuda-l1", 2.0), ("cuda_graph", 0.5)]
    assert {r["gpu"] for r in rows} == {"h100"} and list(pools(rows)) == [("kb1_10", "h100")]
    records = tmp_path / "records" / "h200.jsonl.gz"
    records.parent.mkdir()
    with gzip.open(records, "wt") as handle:
        for variant, status, speedup in (("reference", "ok", 1.0), ("a", "ok", 1.5), ("b", "failed-compile", None)):
            handle.write(json.dumps({"problem": "kb_made_up", "variant": variant, "status": status, "speedup": speedup,
                                     "source": "class ModelNew: pass", "hardware_name": "NVIDIA H200",
                                     "reference": {"median_ms": 0.5}}) + "\n")
    rows = torch_record_rows(records, reference_source="class Model: pass")
    assert [(r["origin"], r["speedup"], r["gpu"]) for r in rows] == [("a", 1.5, "h200"), ("b", None, "h200")]
    assert rows[0]["request"].reference_ms == 0.5


def test_the_cold_rate_is_the_median_of_timed_passes_each_after_the_caches_are_emptied():
    cleared = []
    surrogate = ByName({"fast": 2.0, "slow": 0.5, "broken": 0.0})
    report = heldout_report(surrogate, POOL, clear=lambda: cleared.append(1), throughput_passes=3)
    assert len(cleared) == 3 and len(report["cold_forecasts_per_s_passes"]) == 3
    rates = sorted(report["cold_forecasts_per_s_passes"])
    assert report["cold_forecasts_per_s"] == pytest.approx(rates[1], rel=1e-3)
    # The scores are those of the first pass, whatever the timing passes did.
    assert report["recovered_at_1pct"] == 1.0
    # A pass that may read cached forecasts is not cold: timing again needs a way to empty the caches.
    with pytest.raises(ValueError, match="needs `clear`"):
        heldout_report(surrogate, POOL, throughput_passes=2)
