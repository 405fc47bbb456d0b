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
    assert result["protocol_floor"] is None and result["best_fraction_of_protocol_floor"] is None  # no GPU, no floor


@pytest.mark.skipif(not HAVE_NVCC, reason="nvcc is not installed here")
def test_with_overlap_the_next_steps_compile_checks_run_while_a_thread_measures_and_only_the_rest_counts():
    bench = _bench()
    import time

    def slow_measure(spec, candidate):      # long enough that a step's compile batch runs beside it
        time.sleep(0.6)
        return bench.fake_measure(spec, candidate)

    runner = Runner("static", settings=bench.SETTINGS)
    result = bench.search_kernel("gelu", runner, slow_measure, 4232.0, 8, time.perf_counter() + 300, 0,
                                 children=4, root_children=8, per_step=2, overlap=True)
    assert result["overlap"] and result["measurements"] == 8 and len(result["measured"]) == 8
    assert result["driver_times"]["prefetched_batches"] >= 1
    beside = [b for b in result["compile_batches"] if b["beside_measuring"]]
    assert beside and len(beside) == result["driver_times"]["prefetched_batches"]
    # the waited-for compile time is the batches' time less what ran beside measuring
    assert 0 <= result["compile_exposed_s"] < result["compile_s"]
    assert result["compile_share_of_wall"] < result["compile_batches_share_of_wall"]
    # every measurement's result reached the driver, the deadline's last batch included
    assert result["measured_ok"] == 8


@pytest.mark.skipif(not HAVE_NVCC, reason="nvcc is not installed here")
def test_with_overlap_a_measurement_that_raises_is_a_failed_result_and_the_search_goes_on():
    bench = _bench()
    import time

    calls = []

    def flaky_measure(spec, candidate):
        calls.append(candidate.name)
        if len(calls) == 3:
            raise RuntimeError("the worker went away")
        return bench.fake_measure(spec, candidate)

    runner = Runner("static", settings=bench.SETTINGS)
    result = bench.search_kernel("gelu", runner, flaky_measure, 4232.0, 6, time.perf_counter() + 300, 0,
                                 children=4, root_children=8, per_step=2, overlap=True)
    assert result["stopped_by"] == "budget-exhausted" and result["measurements"] == 6
    assert result["measured_ok"] == 5


def test_without_overlap_all_compile_time_is_waited_for():
    bench = _bench()
    port = bench.RunnerPort(None, None, None)
    port._compiling = [(0.0, 1.0), (2.0, 2.5)]
    port.measuring = [(0.5, 2.2)]
    assert port.exposed_compile_s() == pytest.approx(0.5 + 0.3)
    port.measuring = []
    assert port.exposed_compile_s() == pytest.approx(1.5)


def test_a_search_past_its_deadline_stops_cleanly_with_what_it_has():
    bench = _bench()
    runner = Runner("static", settings=bench.SETTINGS)
    result = bench.search_kernel("gelu", runner, bench.fake_measure, 4232.0, 150, 0.0, 0)
    assert result["stopped_by"] == "deadline" and result["measurements"] == 0
    assert result["best_fraction_of_roofline"] == result["reference_fraction_of_roofline"]


def test_the_protocol_floor_moves_each_input_once_and_each_output_once_and_sits_beside_the_roofline():
    bench = _bench()
    from gpu_runner import load_problem

    # the column sum reads the 4096 x 4096 matrix and writes one float a column
    assert bench.moved_bytes(load_problem(bench.OWN / "column_sum")) == (4 * 4096 * 4096, 4 * 4096)
    assert bench.moved_bytes(load_problem(bench.OWN / "gelu")) == (4 * 16777216, 4 * 16777216)
    # a floor of 25.5 us against a roofline floor of 16 us: no kernel shows more than 62.7% under the protocol;
    # a best of 25.8 us is 98.8% of the floor
    figures = bench.floor_figures({"ms": 0.0255}, 0.016, 0.0258)
    assert figures["protocol_ceiling_fraction_of_roofline"] == pytest.approx(0.016 / 0.0255, abs=1e-4)
    assert figures["best_fraction_of_protocol_floor"] == pytest.approx(0.0255 / 0.0258, abs=1e-4)
    # the dry run times nothing: no floor, and it says so rather than inventing one
    assert bench.floor_figures(None, 0.016, 0.02) == {"protocol_floor": None, "protocol_ceiling_fraction_of_roofline": None,
                                                       "best_fraction_of_protocol_floor": None}


@pytest.mark.skipif(not HAVE_NVCC, reason="nvcc is not installed here")
def test_the_floor_kernel_compiles_without_spills():
    bench = _bench()
    from gpu_runner.compiler import compile_cubin

    report = compile_cubin(bench.FLOOR_SOURCE, [], "sm_90", sass=False).report
    assert report.ok, report.summary()
    assert report.facts.spill_stores == 0 and report.facts.spill_loads == 0
