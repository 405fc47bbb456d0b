"""A tiny problem (y = 2x) shared by the unit and browser tests."""

SIMPLE_SPEC = """
[problem]
name = "vector_scale"
title = "Vector scale"
description = "y = 2x over N floats"

[sizes]
default = { N = 1048576 }

[[args]]
name = "x"
role = "input"
dtype = "float32"
shape = ["N"]

[[args]]
name = "y"
role = "output"
dtype = "float32"
shape = ["N"]

[[args]]
name = "n"
role = "scalar"
dtype = "int32"
value = "N"

[[launch]]
kernel = "scale"
grid = ["ceil_div(N, 256)"]
block = [256]
shared = "0"
args = ["x", "y", "n"]

[tolerance]
float32 = { rtol = 1e-5, atol = 1e-6 }

[roofline]
flops = "N"
bytes = "8*N"
"""

SIMPLE_REFERENCE = """extern "C" __global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
"""


def problem_with_reference_profile(source, problems_root, profile: dict) -> list[dict]:
    """Copy a problem folder (with its records/h200.jsonl.gz) under problems_root, its reference's record carrying
    `profile` as its Nsight Compute counters; returns the records as written."""
    import gzip
    import json
    import shutil
    from pathlib import Path

    target = Path(problems_root) / Path(source).name
    shutil.copytree(source, target)
    path = target / "records" / "h200.jsonl.gz"
    with gzip.open(path, "rt") as handle:
        records = [json.loads(line) for line in handle]
    records = [{**r, "profiler": profile} if r.get("variant") == "reference" else r for r in records]
    with gzip.open(path, "wt") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in records))
    return records
