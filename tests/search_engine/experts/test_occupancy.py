from __future__ import annotations

from search_engine.experts import occupancy
from search_engine.experts.profile import KernelProfile
from tests.search_engine.experts import captured


def notes(name):
    return captured.by(captured.notes_for(name), "occupancy")


def test_40_kb_of_shared_memory_per_block_is_named_as_the_limiter():
    (note,) = [n for n in notes("vadd__smem_heavy") if "low_occupancy_pct" in n.evidence]
    assert note.severity == "warning"
    assert note.evidence["sm__maximum_warps_per_active_cycle_pct"] < occupancy.LOW_OCCUPANCY_PCT
    assert "shared memory" in note.finding and "shared memory" in note.advice
    assert note.evidence["launch__occupancy_limit_shared_mem"] == 5


def test_a_155_register_sgemm_is_told_the_register_count_that_fits_a_second_block():
    (note,) = [n for n in notes("sgemm__warptile_64x32") if "low_occupancy_pct" in n.evidence]
    assert "registers" in note.finding
    assert "under 128 per thread" in note.advice and "now 155" in note.advice


def test_low_occupancy_is_not_flagged_on_compute_or_memory_bound_kernels():
    # The MINB=2 sgemm runs at 25% occupancy and is compute-bound; the warp-per-row rmsnorm at
    # 19% is memory-bound at 76% of DRAM peak.
    for name in ("sgemm__warptile_64x32_minb2", "rmsnorm__warp_cached_vec4"):
        assert not [n for n in notes(name) if "low_occupancy_pct" in n.evidence]


def test_a_grid_of_1_1_waves_gets_a_tail_note():
    (note,) = [n for n in notes("waves__tail") if "tail_idle_share" in n.evidence]
    assert note.evidence["launch__waves_per_multiprocessor"] == 1.1
    assert note.evidence["tail_idle_share"] >= occupancy.TAIL_IDLE_SHARE
    assert not notes("waves__full")


def test_the_limiter_is_the_resource_with_the_fewest_blocks():
    profile = KernelProfile.from_measurement(captured.measurement("vadd__smem_heavy"), flops=None, bytes=None,
                                             hardware=None)
    names, limits = occupancy.limiter(profile)
    assert names == ["shared memory"]
    assert limits["registers"] > limits["shared memory"]
