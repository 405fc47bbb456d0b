from __future__ import annotations

import pytest

from search_engine.experts import shared_memory
from tests.search_engine.experts import captured


def notes(name, **kw):
    return captured.by(captured.notes_for(name, **kw), "shared_memory")


def test_reading_an_unpadded_32x32_tile_down_its_columns_is_a_32_way_conflict():
    (note,) = notes("transpose__smem_nopad")
    assert note.severity == "critical"
    assert note.evidence["average_ways"] == pytest.approx(32, rel=0.02)
    assert note.evidence["shared_stall_share"] >= shared_memory.SHARED_STALL_SHARE


def test_padding_the_tile_silences_it():
    assert not notes("transpose__smem_pad")


def test_padding_the_transposed_a_tile_of_sgemm_cuts_the_store_conflicts():
    pad0 = notes("sgemm__tile2d_vec4_pad0")[0].evidence["conflict_share_st"]
    pad4 = notes("sgemm__tile2d_vec4_pad4")[0].evidence["conflict_share_st"]
    assert pad0 == pytest.approx(0.40, abs=0.01)
    assert pad4 < shared_memory.CONFLICT_SHARE_WARN < pad0


def test_conflicts_the_kernel_does_not_wait_on_are_a_warning_not_critical():
    # 16-way conflicts in the shared-memory-heavy add, but its warps wait on global memory.
    (note,) = notes("vadd__smem_heavy")
    assert note.evidence["average_ways"] > 10
    assert note.evidence["shared_stall_share"] < shared_memory.SHARED_STALL_SHARE
    assert note.severity == "warning"


def test_a_small_conflict_share_is_only_mentioned():
    (note,) = notes("rmsnorm__reference")
    assert note.severity == "info"
    assert shared_memory.CONFLICT_SHARE_INFO <= note.evidence["conflict_share_st"] < shared_memory.CONFLICT_SHARE_WARN


def test_without_the_conflict_metrics_the_expert_is_silent():
    assert not notes("transpose__smem_nopad", drop_extras=True)
