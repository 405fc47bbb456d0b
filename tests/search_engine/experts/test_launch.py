from __future__ import annotations

from search_engine.experts.launch import LAUNCH_CRITICAL_S
from tests.search_engine.experts import captured


def test_a_4096_element_add_is_critical_launch_overhead():
    (note,) = captured.by(captured.notes_for("vadd__tiny"), "launch")
    assert note.severity == "critical"
    assert note.evidence["duration_s"] < LAUNCH_CRITICAL_S
    assert "16 blocks" in note.finding and "CUDA graph" in note.advice


def test_a_kernel_between_5_and_10_microseconds_is_a_warning():
    result = captured.measurement("vadd__tiny")
    result["candidate"]["median_ms"] = 0.007
    (note,) = captured.by(captured.notes_for("vadd__tiny", result=result), "launch")
    assert note.severity == "warning"


def test_long_kernels_get_no_launch_note():
    for name in ("vadd__large", "histogram256__warp_vec16"):  # 240 and 35 µs
        assert not captured.by(captured.notes_for(name), "launch")
