from __future__ import annotations

from search_engine.experts.spills import LOCAL_SHARE_CRITICAL
from tests.search_engine.experts import captured


def notes(name, **kw):
    return captured.by(captured.notes_for(name, **kw), "spills")


def test_the_register_capped_sgemm_spills_with_a_warning_that_weighs_occupancy():
    (note,) = notes("sgemm__warptile_64x32_minb2")
    assert note.severity == "warning"
    assert (note.evidence["spill_stores"], note.evidence["spill_loads"]) == (40, 52)
    assert note.evidence["local_share_of_l1_sectors"] < LOCAL_SHARE_CRITICAL
    assert "measured faster" in note.advice  # the capped variant is the fastest sgemm captured


def test_a_dynamically_indexed_array_is_critical_local_memory():
    (note,) = notes("local__array")
    assert note.severity == "critical"
    assert note.evidence["stack_bytes"] == 256
    assert note.evidence["local_share_of_l1_sectors"] >= LOCAL_SHARE_CRITICAL


def test_without_the_extra_metrics_spills_are_still_seen_from_ptxas():
    (note,) = notes("sgemm__warptile_64x32_minb2", drop_extras=True)
    assert note.severity == "warning" and "local_sectors" not in note.evidence
    assert note.evidence["sass__inst_executed_register_spilling"] > 0


def test_kernels_without_spills_or_local_arrays_are_silent():
    for name in ("sgemm__warptile_64x32", "vadd__large", "softmax__warp_cached_vec4"):
        assert not notes(name)
