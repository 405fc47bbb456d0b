from __future__ import annotations

import pytest

from search_engine.experts import ExpertNote, Peaks, analyse, bound_of
from search_engine.experts.analysis import EXPERTS_BY_BOUND
from search_engine.experts.roofline import BOUNDS, BUSY_PCT, LAUNCH_BOUND_S, SOL_MEMORY, SOL_SM
from tests.search_engine.experts import captured


def bound(name: str, result: dict | None = None):
    facts = captured.fixture(name)["fixture"]
    return bound_of(result or captured.measurement(name), flops=facts["flops"], bytes=facts["bytes"], hardware=None)


def test_it_calls_the_float4_reduction_memory_bound_near_its_floor():
    b = bound("reduce_sum__atomic_vec4")
    assert (b.kind, b.memory_unit) == ("memory", "DRAM")
    assert 0.8 < b.roofline_fraction < 1.0
    assert b.note.severity == "info"


def test_it_calls_the_naive_transpose_memory_bound_on_the_caches_not_dram():
    b = bound("transpose__reference")
    assert (b.kind, b.memory_unit) == ("memory", "L1/L2")
    assert b.note.severity == "critical"  # 13% of the ceiling


def test_it_calls_a_kernel_with_no_unit_above_60_percent_latency_bound():
    assert bound("vadd__smem_heavy").kind == "latency"


def test_it_calls_the_register_tiled_sgemm_compute_bound():
    b = bound("sgemm__warptile_64x32_minb2")
    assert b.kind == "compute"
    assert b.note.evidence["flop_per_byte"] == pytest.approx(682.7, rel=1e-3)


def test_it_calls_a_4096_element_add_launch_bound():
    assert bound("vadd__tiny").kind == "launch"
    assert bound("vadd__large").kind == "memory"


def test_the_60_percent_rule_is_where_latency_bound_ends():
    result = captured.measurement("reduce_sum__atomic_vec1")
    result["profiler"][SOL_SM] = 10.0
    result["profiler"][SOL_MEMORY] = BUSY_PCT - 0.1
    assert bound("reduce_sum__atomic_vec1", result).kind == "latency"
    result["profiler"][SOL_MEMORY] = BUSY_PCT
    assert bound("reduce_sum__atomic_vec1", result).kind == "memory"


def test_the_launch_threshold_is_10_microseconds():
    result = captured.measurement("vadd__tiny")
    result["candidate"]["median_ms"] = LAUNCH_BOUND_S * 1e3 * 1.01
    assert bound("vadd__tiny", result).kind != "launch"


def test_without_a_profile_it_classifies_from_the_problem_counts_and_the_time():
    streaming = captured.measurement("reduce_sum__atomic_vec4")
    streaming["profiler"] = {}
    b = bound("reduce_sum__atomic_vec4", streaming)
    assert b.kind == "memory"
    assert b.note.evidence["achieved_memory_pct_of_peak"] == pytest.approx(89, abs=2)
    arithmetic = captured.measurement("waves__full")
    arithmetic["profiler"] = {}
    assert bound("waves__full", arithmetic).kind == "compute"


def test_without_time_or_profile_nothing_is_classified():
    result = captured.measurement("vadd__large")
    result["profiler"], result["candidate"] = {}, {}
    b = bound_of(result, flops=None, bytes=None, hardware=None)
    assert b.kind == "unknown"
    assert set(EXPERTS_BY_BOUND) == set(BOUNDS)


def test_the_roofline_note_is_critical_far_from_the_floor_and_info_near_it():
    assert bound("sgemm__reference").note.severity == "critical"  # 8.8% of the FP32 ceiling
    assert bound("sgemm__warptile_64x32").note.severity == "warning"  # 50%
    assert bound("sgemm__warptile_64x32_minb2").note.severity == "info"  # 61%


def test_peaks_come_from_the_hardware_dict_and_documented_defaults_otherwise():
    hw = captured.measurement("vadd__large")["hardware"]
    peaks = Peaks.from_hardware(hw)
    assert peaks.memory_gbs == pytest.approx(4133.5)  # the copy measured in the same capture
    assert peaks.fp32_tflops == pytest.approx(132 * 128 * 2 * 1980e6 / 1e12)
    assert peaks.power_limit_w == 700.0
    theoretical_only = Peaks.from_hardware({"memory_bandwidth_gbs": 4814.3})
    assert theoretical_only.memory_gbs == pytest.approx(4814.3 * 0.86)
    defaults = Peaks.from_hardware(None)
    assert (defaults.memory_gbs, defaults.fp32_tflops, defaults.power_limit_w) == (4130.0, 66.9, None)
    assert Peaks.from_hardware({"compute_capability": "8.0", "sm_count": 108, "sm_clock_mhz": 1410}
                               ).fp32_tflops == pytest.approx(19.5, rel=0.01)  # A100: 64 FP32 lanes per SM


def test_an_explicit_hardware_dict_overrides_the_measurements():
    facts = captured.fixture("reduce_sum__atomic_vec4")["fixture"]
    slow = analyse(captured.measurement("reduce_sum__atomic_vec4"), flops=facts["flops"], bytes=facts["bytes"],
                   hardware={"measured_copy_gbs": 1000.0})
    assert slow[0].evidence["peak_memory_gbs"] == 1000.0
    assert slow[0].evidence["roofline_fraction"] > 3  # beats a 1 TB/s floor


def test_a_failed_measurement_gets_no_notes():
    result = captured.measurement("vadd__large")
    result["status"] = "failed-correctness"
    assert analyse(result, flops=1.0, bytes=1.0, hardware=None) == []


def test_the_roofline_note_comes_first_then_the_most_severe():
    notes = captured.notes_for("local__array")
    assert notes[0].expert == "roofline"
    ranks = [n.rank for n in notes[1:]]
    assert ranks == sorted(ranks, reverse=True)
    assert all(isinstance(n, ExpertNote) for n in notes)
