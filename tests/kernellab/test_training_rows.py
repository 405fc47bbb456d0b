"""The app's learned surrogate learns from the rows the search benchmark learns from, and forecasts a run's candidates
from the same features: the benchmark's figures describe the app's search (docs/search.md, "Where it stands")."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kernellab.datasets import BUNDLED_DIR, recorded_rows, recording_reference_ms
from search_engine.surrogates.features import features_matrix
from search_engine.surrogates.learned import _row_request
from tests.scripts import loaded_script

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "search_bench.py"
FAMILIES = ("hgemm", "histogram256")  # small bundled families: a tensor-core one and a CUDA-core one


@pytest.fixture(scope="module")
def bench_datasets():
    if not all((BUNDLED_DIR / name / "records" / "h200.jsonl.gz").exists() for name in FAMILIES):
        pytest.skip("the bundled h200 records of hgemm and histogram256 are not here")
    with loaded_script(BENCH, "search_bench_rows") as bench:
        yield {d.name: d for d in bench.recorded_datasets() if d.name in FAMILIES}


def _features(rows) -> np.ndarray:
    return np.nan_to_num(np.asarray(features_matrix([_row_request(r) for r in rows]), dtype=float), nan=-1e9)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_apps_rows_of_a_recording_have_the_benchmarks_features_row_for_row(bench_datasets, family):
    app = recorded_rows(BUNDLED_DIR / family)
    bench = bench_datasets[family].rows
    assert [r["knobs"] for r in app] == [r["candidate"]["knobs"] for r in bench] and len(app) > 20
    assert [r["speedup"] for r in app] == [r["speedup"] for r in bench]
    np.testing.assert_array_equal(_features(app), _features(bench))


def test_every_row_of_a_recording_carries_the_reference_time_a_search_forecasts_with():
    records = [{"variant": "vendor:x"}, {"reference": {"median_ms": 0.87}}, {"reference": {"median_ms": 0.86}}]
    assert recording_reference_ms(records) == 0.87
    assert recording_reference_ms([{"reference": {}}]) is None
    if not (BUNDLED_DIR / "hgemm" / "records" / "h200.jsonl.gz").exists():
        pytest.skip("the bundled hgemm records are not here")
    rows = recorded_rows(BUNDLED_DIR / "hgemm")
    timed = {round(r["record"]["reference"]["median_ms"], 6) for r in rows if r["record"].get("reference")}
    assert len(timed) > 1  # the reference was timed beside every variant, a little differently each time
    assert {r["reference_ms"] for r in rows} == {rows[0]["reference_ms"]}
