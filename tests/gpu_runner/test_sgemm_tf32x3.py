"""sgemm's tf32x3 variants: fp32 GEMM on tensor cores (3xTF32 split, mma.sync, cp.async stages).

The compile test needs nvcc; the measurement needs the GPU (`-m gpu`) and checks the variant the
2026-12-02 recording found fastest against the reference at the problem's fp32 tolerance."""
from pathlib import Path

import pytest

from gpu_runner import MeasureSettings, Runner, load_problem, render_variant
from gpu_runner.compiler import ToolMissing, compile_cubin, find_tool
from gpu_runner.family import valid_variants

SGEMM = Path(__file__).resolve().parents[2] / "kernellab" / "problems" / "sgemm"
FASTEST = {"ALGO": "tf32x3", "BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 16, "WM": 64, "WN": 64, "VEC": 4,
           "BUF": 2, "PAD": 4, "MINB": 1}

try:
    find_tool("nvcc")
    HAVE_NVCC = True
except ToolMissing:
    HAVE_NVCC = False
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="nvcc is not installed here")


@pytest.fixture(scope="module")
def problem():
    return load_problem(SGEMM)


def test_the_tf32x3_variants_are_in_the_family_with_their_own_shape_rules(problem):
    tf32 = [k for k in valid_variants(problem) if k["ALGO"] == "tf32x3"]
    assert FASTEST in tf32 and len(tf32) == 162
    for knobs in tf32:
        # one warp per WM x WN tile, each thread holding a quarter of 16 x 8 MMA tiles' worth of C
        assert knobs["TM"] * knobs["TN"] * 32 == knobs["WM"] * knobs["WN"]
        warps = (knobs["BM"] // knobs["WM"]) * (knobs["BN"] // knobs["WN"])
        assert warps * 32 == knobs["BM"] * knobs["BN"] // (knobs["TM"] * knobs["TN"])
        shared = 4 * knobs["BUF"] * (knobs["BM"] * (knobs["BK"] + 4) + knobs["BK"] * (knobs["BN"] + 8))
        assert shared <= 48 * 1024


@needs_nvcc
@pytest.mark.parametrize("knobs", [FASTEST, {**FASTEST, "BM": 64, "BN": 64, "BK": 8, "TN": 4, "WM": 32, "WN": 32,
                                             "BUF": 1}])
def test_a_tf32x3_variant_builds_with_tensor_core_mma_and_async_copies(problem, knobs):
    candidate = render_variant(problem, knobs)
    output = compile_cubin(candidate.source, candidate.compile_options, use_cache=False)
    assert output.report.ok, output.report.log[-2000:]
    facts = output.report.facts
    assert facts.spill_stores == 0 and facts.stack_bytes == 0
    if not facts.sass:
        pytest.skip("cuobjdump is not installed: no SASS to read")
    ops = set(facts.sass)
    assert any(op.startswith("HMMA.1684.F32.TF32") or op.startswith("HMMA.1688.F32.TF32") for op in ops), sorted(ops)
    assert any(op.startswith("LDGSTS") for op in ops), sorted(ops)   # cp.async
    assert not {"LDL", "STL"} & {op.split(".")[0] for op in ops}


@pytest.mark.gpu
def test_the_fastest_tf32x3_variant_is_correct_and_faster_than_the_reference(problem):
    settings = MeasureSettings(validation_sets=2, min_reps=5, max_reps=20, target_timing_ms=50.0, kernel_timeout_s=10.0)
    with Runner("cupy", settings=settings) as runner:
        result = runner.measure(problem, render_variant(problem, FASTEST))
    assert result.status == "ok", result.reason
    assert result.speedup > 5.0, result.reason   # recorded: 10.5x over the naive reference at 4096^3
