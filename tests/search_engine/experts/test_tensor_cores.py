from __future__ import annotations

from search_engine.experts import tensor_cores
from tests.search_engine.experts import captured


def notes(name):
    return captured.by(captured.notes_for(name), "tensor_cores")


def test_an_fp32_ffma_gemm_is_told_about_tensor_cores():
    for name in ("sgemm__reference", "sgemm__warptile_64x32_minb2"):
        (note,) = notes(name)
        assert note.severity == "warning"
        assert note.evidence["sass_warp_mma"] == 0 and note.evidence["sass_ffma"] > 0
        assert "TF32" in note.advice


def test_a_wmma_gemm_gets_only_the_wgmma_hint():
    (note,) = notes("gemm__wmma_fp16")
    assert note.severity == "info"
    assert note.evidence["sass_warp_mma"] > 0 and note.evidence["sass_warpgroup_mma"] == 0


def test_arithmetic_that_loads_no_operands_is_not_a_matrix_product():
    # waves and branches: FLOP/byte far above the ridge, but FFMA chains on registers.
    for name in ("waves__full", "waves__tail", "branches__by_warp"):
        assert not notes(name)


def test_low_intensity_problems_are_not_considered():
    for name in ("softmax__reference", "rmsnorm__reference", "transpose__reference"):
        assert not notes(name)


def test_operand_loads_per_ffma_separate_gemm_from_recurrences():
    def ratio(name):
        p = captured.measurement(name)["profiler"]
        return ((p["sass__inst_executed_global_loads"] + p["sass__inst_executed_shared_loads"]) * 32
                / p["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"])
    assert ratio("sgemm__warptile_64x32") > 3 * tensor_cores.OPERAND_LOADS_PER_FFMA
    assert ratio("branches__by_lane") < tensor_cores.OPERAND_LOADS_PER_FFMA / 2
