from __future__ import annotations

import pytest

from search_engine.experts import caches
from search_engine.experts.profile import KernelProfile
from tests.search_engine.experts import captured


def test_the_naive_sgemm_rereads_its_inputs_from_dram_70_times():
    (note,) = captured.by(captured.notes_for("sgemm__reference"), "caches")
    assert note.severity == "critical"
    assert note.evidence["dram_over_ideal"] == pytest.approx(70.9, rel=0.01)
    assert note.evidence["dram_over_ideal"] >= caches.EXCESS_ALWAYS


def test_a_local_array_shows_as_dram_traffic_with_local_memory_advice():
    (note,) = captured.by(captured.notes_for("local__array"), "caches")
    assert note.severity == "critical"
    assert "local memory" in note.advice


def test_dram_traffic_of_a_compute_bound_tiled_gemm_is_not_flagged():
    # 3.4x the ideal bytes, but DRAM is 3% busy: the L2 serves the re-reads.
    for name in ("sgemm__warptile_64x32", "sgemm__tile2d_vec4_pad4"):
        assert not captured.by(captured.notes_for(name), "caches")


def test_a_kernel_that_moves_the_ideal_bytes_is_silent():
    assert not captured.by(captured.notes_for("transpose__smem_pad"), "caches")


@pytest.mark.parametrize("name", ["sgemm__reference", "transpose__reference", "vadd__large", "local__array"])
def test_dram_bytes_from_the_sections_alone_agree_with_the_counted_bytes(name):
    facts = captured.fixture(name)["fixture"]
    full = KernelProfile.from_measurement(captured.measurement(name), flops=None, bytes=facts["bytes"], hardware=None)
    plain = KernelProfile.from_measurement(captured.measurement(name, drop_extras=True), flops=None,
                                           bytes=facts["bytes"], hardware=None)
    assert caches.dram_bytes(plain) == pytest.approx(caches.dram_bytes(full), rel=0.05)
