from __future__ import annotations

from search_engine.experts.memory_access import (SECTOR_USE_CRITICAL_PCT, SECTOR_USE_WARN_PCT, SUBWORD_BYTES,
                                                 WASTE_SHARE_INFO)
from tests.search_engine.experts import captured


def notes(name, **kw):
    return captured.by(captured.notes_for(name, **kw), "memory_access")


def test_the_naive_transposes_strided_stores_are_critical():
    (note,) = [n for n in notes("transpose__reference") if "wasted_share_of_global_sectors" in n.evidence]
    assert note.severity == "critical"
    used = note.evidence["smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct"]
    assert used == 12.5 < SECTOR_USE_CRITICAL_PCT
    assert note.evidence["wasted_share_of_global_sectors"] > 0.7
    assert "stores" in note.finding


def test_wmma_fragments_loaded_from_global_waste_half_of_each_sector():
    (note,) = [n for n in notes("gemm__wmma_fp16") if "wasted_share_of_global_sectors" in n.evidence]
    assert note.severity == "warning"
    assert SECTOR_USE_CRITICAL_PCT < note.evidence["smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct"] \
        < SECTOR_USE_WARN_PCT


def test_a_small_uncoalesced_epilogue_is_only_mentioned():
    # tile2d VEC=1 stores C with a stride of 8 floats, but the stores are 3% of the sectors.
    (note,) = [n for n in notes("sgemm__tile2d_vec1") if "wasted_share_of_global_sectors" in n.evidence]
    assert note.severity == "info"
    assert note.evidence["wasted_share_of_global_sectors"] >= WASTE_SHARE_INFO


def test_one_byte_loads_are_critical_and_four_byte_loads_a_warning():
    (byte,) = [n for n in notes("histogram256__reference") if "narrow_bytes" in n.evidence]
    assert byte.severity == "critical" and byte.evidence["measured_bytes_per_thread_ld"] < SUBWORD_BYTES
    (word,) = [n for n in notes("reduce_sum__atomic_vec1") if "narrow_bytes" in n.evidence]
    assert word.severity == "warning" and word.evidence["measured_bytes_per_thread_ld"] == 4.0


def test_a_vector_path_with_a_scalar_tail_counts_as_vector():
    # The swizzled transpose's SASS has scalar fallback accesses that never run at 8192 x 8192.
    assert not [n for n in notes("transpose__smem_swizzle_vec4") if "narrow_bytes" in n.evidence]


def test_broadcast_loads_are_reported_at_their_instruction_width():
    (note,) = [n for n in notes("sgemm__reference") if "narrow_bytes" in n.evidence]
    assert note.evidence["measured_bytes_per_thread_ld"] < 4  # a warp reads one A element
    assert "are 4 bytes per thread" in note.finding


def test_without_the_extra_metrics_the_width_comes_from_sass_and_coalescing_stays_silent():
    plain = notes("reduce_sum__atomic_vec1", drop_extras=True)
    (note,) = plain
    assert "narrow_bytes" in note.evidence and note.evidence["sass_bytes_per_thread_ld"] == 4.0
    assert not notes("reduce_sum__atomic_vec4", drop_extras=True)
    plain = notes("transpose__reference", drop_extras=True)
    assert not [n for n in plain if "wasted_share_of_global_sectors" in n.evidence]
