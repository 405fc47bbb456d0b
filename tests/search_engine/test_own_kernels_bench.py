"""benchmarks/own_kernels_h200.py on CPU: the real driver, generators, surrogate and compile checks
(nvcc), with the dry run's stand-in for measurements; what the result file says about a search."""
import importlib.util
from pathlib import Path

import pytest

from gpu_runner import Runner
from gpu_runner.compiler import ToolMissing, find_tool

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "own_kernels_h200.py"

try:
    find_tool("nvcc")
    HAVE_NVCC = True
except ToolMissing:
    HAVE_NVCC = False


def _bench():
    spec = importlib.util.spec_from_file_location("own_kernels_h200", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not HAVE_NVCC, reason="nvcc is not installed here")
def test_a_dry_run_search_spends_its_budget_and_reports_roofline_fractions_compile_share_and_the_winner():
    bench = _bench()
    import time

    runner = Runner("static", settings=bench.SETTINGS)
    result = bench.search_kernel("gelu", runner, bench.fake_measure, 4232.0, 3, time.perf_counter() + 300, 0,
                                 children=2, root_children=4, per_step=2)
    assert result["measurements"] == 3 and len(result["measured"]) == 3
    assert result["compile_checks"] >= 4 and 0 < result["compile_share_of_wall"] <= 1
    floor = 8 * 16777216 / 4232e9 * 1e3                     # bytes of the [roofline] over the bandwidth
    assert result["roofline_floor_ms"] == pytest.approx(floor)
    assert result["best_fraction_of_roofline"] == pytest.approx(floor / result["best_ms"], rel=1e-3)
    assert result["best_ms"] == min([m["candidate_ms"] for m in result["measured"]] + [result["reference_ms"]])
    assert any("warp-per-row recipe" in reason for reason in result["recipes_that_cannot_apply"])
    assert result["automatic_knobs"] == ["BLOCK (block, dimension x of the block of gelu)"]


def test_a_search_past_its_deadline_stops_cleanly_with_what_it_has():
    bench = _bench()
    runner = Runner("static", settings=bench.SETTINGS)
    result = bench.search_kernel("gelu", runner, bench.fake_measure, 4232.0, 150, 0.0, 0)
    assert result["stopped_by"] == "deadline" and result["measurements"] == 0
    assert result["best_fraction_of_roofline"] == result["reference_fraction_of_roofline"]
