"""Each expert fires on the captured variant that has its problem and stays silent on the variant
that fixed it (silent: no warning or critical from that expert)."""

from __future__ import annotations

import pytest

from tests.search_engine.experts import captured


def coalescing(note):
    return any(k.startswith("smsp__sass_average_data_bytes_per_sector") for k in note.evidence)


def width(note):
    return "narrow_bytes" in note.evidence


def low_occupancy(note):
    return "low_occupancy_pct" in note.evidence


def tail(note):
    return "tail_idle_share" in note.evidence


def divergence(note):
    return "divergent_threads" in note.evidence


def anything(note):
    return True


PAIRS = [
    # expert, which of its notes, has the problem, fixed it
    ("memory_access", coalescing, "transpose__reference", "transpose__smem_pad"),
    ("memory_access", width, "reduce_sum__atomic_vec1", "reduce_sum__atomic_vec4"),
    ("memory_access", width, "histogram256__reference", "histogram256__warp_vec16"),
    ("caches", anything, "sgemm__reference", "sgemm__warptile_64x32_minb2"),
    ("occupancy", low_occupancy, "vadd__smem_heavy", "vadd__large"),
    ("occupancy", tail, "waves__tail", "waves__full"),
    ("spills", anything, "sgemm__warptile_64x32_minb2", "sgemm__warptile_64x32"),
    ("spills", anything, "local__array", "vadd__large"),
    ("shared_memory", anything, "transpose__smem_nopad", "transpose__smem_pad"),
    ("warps", divergence, "branches__by_lane", "branches__by_warp"),
    ("tensor_cores", anything, "sgemm__warptile_64x32_minb2", "gemm__wmma_fp16"),
    ("launch", anything, "vadd__tiny", "vadd__large"),
]


@pytest.mark.parametrize("expert,kind,broken,fixed", PAIRS, ids=[f"{p[0]}:{p[2]}" for p in PAIRS])
def test_it_fires_on_the_problem_and_stays_silent_on_the_fix(expert, kind, broken, fixed):
    fired = [n for n in captured.serious(captured.notes_for(broken), expert) if kind(n)]
    assert fired, f"{expert} said nothing about {broken}"
    assert all(n.finding and n.advice and n.evidence for n in fired)
    quiet = [n for n in captured.serious(captured.notes_for(fixed), expert) if kind(n)]
    assert not quiet, f"{expert} still complains about {fixed}: {quiet[0].finding}"


def test_stage_one_keeps_memory_experts_off_a_launch_bound_kernel():
    # The tiny add's 4-byte loads would get a width note if it were not launch-bound.
    notes = captured.notes_for("vadd__tiny")
    assert not captured.by(notes, "memory_access")
    assert captured.serious(captured.notes_for("vadd__large"), "memory_access")


@pytest.mark.parametrize("name", captured.names())
def test_every_capture_analyses_with_and_without_the_extra_metrics(name):
    for drop in (False, True):
        notes = captured.notes_for(name, drop_extras=drop)
        assert notes[0].expert == "roofline"
        for note in notes:
            assert note.to_dict()["finding"].endswith(".")
            assert note.advice.endswith(".")
