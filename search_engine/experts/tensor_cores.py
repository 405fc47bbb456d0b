"""Tensor cores: whether a matrix-multiply-shaped kernel uses them (HMMA / HGMMA in the SASS)."""

from __future__ import annotations

from . import wording
from .note import ExpertNote
from .profile import KernelProfile
from .roofline import Bound

NAME = "tensor_cores"

# Matrix instructions in SASS: warp-level mma.sync (HMMA, IMMA, DMMA, BMMA) and Hopper's
# warpgroup wgmma (HGMMA, IGMMA, QGMMA, BGMMA).
WARP_MMA = ("HMMA", "IMMA", "DMMA", "BMMA")
WARPGROUP_MMA = ("HGMMA", "IGMMA", "QGMMA", "BGMMA")


# A contraction streams operands from memory into its multiply-adds: even a 16 x 16 register tile
# issues one 16-byte shared load per 32 FFMA (0.03 loads per FFMA), while a recurrence or a
# polynomial keeps its operands in registers (the fixtures' waves and branches kernels: under 0.005).
OPERAND_LOADS_PER_FFMA = 0.01


def matmul_shaped(profile: KernelProfile, bound: Bound) -> bool:
    """The problem's arithmetic intensity is above the FP32 ridge (it can be compute-bound) and the
    kernel's multiply-adds consume operands loaded from global or shared memory. Without FLOP and
    byte counts: compute-bound on FFMA."""
    if not (profile.flops and profile.bytes):
        return bound.kind == "compute" and profile.sass_count("FFMA") > 0
    if profile.flops / profile.bytes < profile.peaks.ridge_flop_per_byte:
        return False
    ffma = profile.metric("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum")
    loads = [profile.metric("smsp__sass_inst_executed_op_global_ld.sum", "sass__inst_executed_global_loads"),
             profile.metric("smsp__sass_inst_executed_op_shared_ld.sum", "sass__inst_executed_shared_loads")]
    if not ffma or any(v is None for v in loads):
        return True
    return sum(loads) * 32 / ffma >= OPERAND_LOADS_PER_FFMA


def examine(profile: KernelProfile, bound: Bound) -> list[ExpertNote]:
    if not matmul_shaped(profile, bound):
        return []
    warp = profile.sass_count(*WARP_MMA)
    group = profile.sass_count(*WARPGROUP_MMA)
    ffma = profile.sass_count("FFMA")
    pipe = profile.metric("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active")
    peaks = profile.peaks
    evidence = {"sass_warp_mma": warp, "sass_warpgroup_mma": group, "sass_ffma": ffma,
                "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": pipe,
                "peak_fp32_tflops": wording.rounded(peaks.fp32_tflops)}
    if profile.flops and profile.bytes:
        evidence["flop_per_byte"] = wording.rounded(profile.flops / profile.bytes)
        evidence["ridge_flop_per_byte"] = wording.rounded(peaks.ridge_flop_per_byte)
    tensor = peaks.tensor_tflops
    if tensor:
        evidence["peak_tensor_tflops"] = tensor
    if not warp and not group:
        thread_ffma = profile.metric("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum")
        if thread_ffma is not None:
            evidence["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"] = thread_ffma
        rates = (f" (the FP32 pipe peaks at {peaks.fp32_tflops:.3g} TFLOP/s, dense TF32 tensor cores at about "
                 f"{tensor['tf32']:.0f})" if tensor else "")
        finding = ("The kernel has a matrix-multiply shape but no tensor-core instruction in its SASS: all its "
                   f"multiply-adds run as FP32 FFMA{rates}.")
        advice = ("Run the inner product on tensor cores with TF32 mma.sync / wgmma where the tolerance allows about "
                  "1e-3 relative error, or split each FP32 operand into two TF32 parts (3xTF32) to keep FP32 "
                  "accuracy at a third of the tensor rate.")
        return [ExpertNote(NAME, "warning", finding, evidence, advice)]
    if warp and not group and (peaks.compute_capability or "").startswith("9."):
        finding = (f"Tensor cores run through warp-level mma.sync ({warp} HMMA-class instructions, no wgmma); on "
                   "Hopper that path reaches only part of the dense tensor rate.")
        advice = ("Move the main loop to warpgroup wgmma (HGMMA) on shared-memory operands fed by TMA bulk copies, "
                  "as CUTLASS 3 kernels for sm_90a do.")
        return [ExpertNote(NAME, "info", finding, evidence, advice)]
    return []
