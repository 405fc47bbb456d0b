"""Small rows for the lab tests: synthetic comparisons, and the real H200 saxpy records rendered."""
from __future__ import annotations

from pathlib import Path

from search_engine.lab.datasets import comparison_row

ROOT = Path(__file__).resolve().parents[2]
SAXPY_DIR = ROOT / "tests" / "gpu_runner" / "problems"
SAXPY_RECORDS = SAXPY_DIR / "saxpy" / "records" / "h200.jsonl.gz"

REFERENCE = {
    "source": 'extern "C" __global__ void scale(const float* x, float* y, int n) {\n'
              "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = 2.0f * x[i];\n}\n",
    "launch": [{"kernel": "scale", "grid": ["ceil_div(N, 256)"], "block": [256], "shared": "0", "args": ["x", "y", "n"]}],
    "compile_options": [],
}


def candidate(block: int, items: int = 1) -> dict:
    source = REFERENCE["source"].replace("int i =", f"// block {block} items {items}\n    int i =")
    return {"source": source, "launch": [{"kernel": "scale", "grid": [f"ceil_div(N, {block * items})"],
                                          "block": [block], "shared": "0", "args": ["x", "y", "n"]}],
            "compile_options": [], "knobs": {"BLOCK": block, "ITEMS": items}}


def synthetic_rows(speedups: dict[str, list[float]]) -> list[dict]:
    """One comparison row per speedup, per problem; candidate i of a problem has BLOCK = 32 * 2**i."""
    rows = []
    for problem, values in speedups.items():
        for i, s in enumerate(values):
            rows.append(comparison_row(
                comparison_id=f"{problem}-{i}", pack=problem, anchor=REFERENCE, candidate=candidate(32 * 2 ** i),
                hardware={"name": "NVIDIA H200", "sm_count": 132, "memory_bandwidth_gbs": 4814.3},
                speedup=s, source="synthetic", source_id=str(i),
                problem={"sizes": {"N": 1 << 20}, "roofline": {"flops": "N", "bytes": "8*N"}},
            ))
    return rows
