"""The captured fixtures are what the experts assume: real ncu output in base units, one kernel each."""

from __future__ import annotations

import pytest

from tests.search_engine.experts import captured

RUNNER_SECTION_METRICS = (  # one metric from each of the runner's seven sections
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",  # SpeedOfLight
    "lts__t_sector_hit_rate.pct",  # MemoryWorkloadAnalysis
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",  # ComputeWorkloadAnalysis
    "sm__maximum_warps_per_active_cycle_pct",  # Occupancy
    "launch__waves_per_multiprocessor",  # LaunchStats
    "smsp__issue_active.avg.pct_of_peak_sustained_active",  # SchedulerStats
    "smsp__average_warp_latency_per_inst_issued.ratio",  # WarpStateStats
)


def test_there_is_a_capture_for_every_bundled_problem_reference():
    names = captured.names()
    for problem in ("sgemm", "transpose", "reduce_sum", "softmax", "rmsnorm", "histogram256"):
        assert f"{problem}__reference" in names


@pytest.mark.parametrize("name", captured.names())
def test_each_capture_is_a_real_h200_profile_in_base_units(name):
    data = captured.fixture(name)
    facts, result = data["fixture"], data["measurement"]
    assert result["hardware"]["name"] == "NVIDIA H200"
    assert facts["ncu_version"].startswith("Version 2025.3")
    assert facts["units"]["gpu__time_duration.sum"] == "ns"
    for metric in RUNNER_SECTION_METRICS:
        assert metric in result["profiler"], metric
    assert result["compiler"]["registers"] > 0 and result["compiler"]["sass"]
    # The event-timed median and ncu's duration of the same kernel agree: the units hold.
    ncu_ms = result["profiler"]["gpu__time_duration.sum"] * 1e-6
    assert 0.5 < result["candidate"]["median_ms"] / ncu_ms < 2.0
    if facts["check"] and facts["check"]["ok"] is not None:
        assert facts["check"]["ok"], "the captured kernel computed a wrong result"


def test_dropping_the_extras_leaves_what_the_runners_sections_give():
    full = captured.measurement("transpose__reference")["profiler"]
    plain = captured.measurement("transpose__reference", drop_extras=True)["profiler"]
    assert "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct" in full
    assert "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct" not in plain
    assert "smsp__thread_inst_executed_per_inst_executed.ratio" in plain  # WarpStateStats collects it
    assert len(plain) < len(full)
