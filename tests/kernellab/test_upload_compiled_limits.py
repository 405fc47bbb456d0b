"""What an upload learns only from the compiled kernels (QA's p34, p35, p53) and a family.cu without a
[family] (p57): refused with a sentence, nothing saved; one saved before that no longer locks the Knobs page."""
from pathlib import Path

import pytest

from kernellab.models import Problem
from kernellab.selectors.problem_knobs import problem_knobs
from kernellab.services.problems import ProblemRejected, problem_create
from tests.kernellab.test_spec_upload import (VADD_FAMILY, VADD_REFERENCE, VADD_SPEC, line_of, needs_nvcc, refusal,
                                              upload)

pytestmark = pytest.mark.django_db

OWN = Path(__file__).resolve().parents[1] / "gpu_runner" / "own_kernels"

# 128 registers a thread (QA's p35), so blocks of 1,024 threads need 131,072 registers.
HUNGRY_REFERENCE = """extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc[96];
#pragma unroll
    for (int j = 0; j < 96; ++j) acc[j] = a[(i + j * 4099) % n];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int j = 0; j < 96; ++j) acc[j] = acc[j] * b[j] + acc[(j + 1) % 96];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 96; ++j) s += acc[j];
    if (i < n) c[i] = s;
}
"""
# 40 KiB of static shared memory (QA's p34), to which the launch adds its dynamic shared memory.
STATIC_SHARED_REFERENCE = """extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
    __shared__ float fixed[10240];
    extern __shared__ float dyn[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    fixed[threadIdx.x] = i < n ? a[i] : 0.f;
    dyn[threadIdx.x] = i < n ? b[i] : 0.f;
    __syncthreads();
    if (i < n) c[i] = fixed[threadIdx.x] + dyn[threadIdx.x];
}
"""


@needs_nvcc
def test_a_reference_block_that_needs_more_than_65536_registers_is_refused_with_its_launch_line(client, members,
                                                                                               workspace):
    spec = VADD_SPEC.replace("block = [256]", "block = [1024]").replace("ceil_div(N, 256)", "ceil_div(N, 1024)")
    body = refusal(upload(client, members["engineer"], spec_toml=spec, reference_source=HUNGRY_REFERENCE))
    assert ("The problem spec is not valid: launch[0].block: gives 1024 threads per block for size case 'default', "
            "and kernel 'vadd' uses ") in body
    assert "registers are allocated per warp in units of 256" in body
    assert "the limit is 65536 registers per block on the H100 and H200" in body
    line = line_of(spec, "block = [1024]")
    assert f'href="#spec-{line}">line {line}</a>' in body
    # in blocks of 256 the same kernel fits
    assert upload(client, members["engineer"], spec_toml=VADD_SPEC,
                  reference_source=HUNGRY_REFERENCE).status_code == 302


@needs_nvcc
def test_static_and_dynamic_shared_memory_over_227_kib_together_are_refused_with_the_shared_line(client, members,
                                                                                                workspace):
    spec = VADD_SPEC.replace('shared = "0"', 'shared = "200000"')
    body = refusal(upload(client, members["engineer"], spec_toml=spec, reference_source=STATIC_SHARED_REFERENCE))
    assert ("The problem spec is not valid: launch[0].shared: asks for 200000 bytes (195 KiB) of dynamic shared "
            "memory for size case 'default', and kernel 'vadd' has 40960 bytes (40 KiB) of static shared memory "
            "(ptxas): 240960 bytes (235 KiB) per block in all; the limit is 232448 bytes (227 KiB) of shared memory "
            "per block, static and dynamic together, on the H100 and H200") in body
    line = line_of(spec, 'shared = "200000"')
    assert f'href="#spec-{line}">line {line}</a>' in body
    # exactly 227 KiB in all is taken (the 1 KiB CUDA reserves per block is outside the 227)
    assert upload(client, members["engineer"], spec_toml=VADD_SPEC.replace('shared = "0"', 'shared = "191488"'),
                  reference_source=STATIC_SHARED_REFERENCE).status_code == 302


# QA's p53: pass2 lacks extern "C", and only the two-pass variants (the last ones) launch it.
SUM_SPEC = """[problem]
name = "qa_export"

[sizes]
default = { N = 1048576 }

[[args]]
name = "x"
role = "input"
dtype = "float32"
shape = ["N"]
[[args]]
name = "out"
role = "output"
dtype = "float32"
shape = [1]
[[args]]
name = "n"
role = "scalar"
dtype = "int32"
value = "N"

[[launch]]
memset = "out"
value = 0
[[launch]]
kernel = "sum_atomic"
grid = ["ceil_div(N, 256)"]
block = [256]
args = ["x", "out", "n"]

[tolerance]
float32 = { rtol = 1e-3, atol = 1e-2 }

[family]
source = "family.cu"
knobs = { ALGO = ["atomic", "twopass"], BLOCK = [128, 256] }

[[family.temps]]
name = "partials"
dtype = "float32"
shape = ["ceil_div(N, BLOCK)"]

[[family.launch]]
memset = "out"
value = 0
when = "ALGO == 'atomic'"
[[family.launch]]
kernel = "sum_atomic"
grid = ["ceil_div(N, BLOCK)"]
block = ["BLOCK"]
args = ["x", "out", "n"]
when = "ALGO == 'atomic'"
[[family.launch]]
kernel = "pass1"
grid = ["ceil_div(N, BLOCK)"]
block = ["BLOCK"]
args = ["x", "partials", "n"]
when = "ALGO == 'twopass'"
[[family.launch]]
kernel = "pass2"
grid = [1]
block = [32]
args = ["partials", "out", "n"]
when = "ALGO == 'twopass'"
"""
SUM_REFERENCE = """extern "C" __global__ void sum_atomic(const float* __restrict__ x, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.f;
    for (int o = 16; o; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}
"""
SUM_FAMILY = """#if defined(ALGO_atomic)
extern "C" __global__ void sum_atomic(const float* __restrict__ x, float* __restrict__ out, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    float v = i < n ? x[i] : 0.f;
    for (int o = 16; o; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}
#else
extern "C" __global__ void pass1(const float* __restrict__ x, float* __restrict__ partials, int n) {
    __shared__ float sm[BLOCK / 32];
    int i = blockIdx.x * BLOCK + threadIdx.x;
    float v = i < n ? x[i] : 0.f;
    for (int o = 16; o; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) sm[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) { float s = 0; for (int w = 0; w < BLOCK / 32; ++w) s += sm[w]; partials[blockIdx.x] = s; }
}
__global__ void pass2(const float* __restrict__ partials, float* __restrict__ out, int n) {
    int nparts = (n + BLOCK - 1) / BLOCK;
    float s = 0; for (int i = threadIdx.x; i < nparts; i += 32) s += partials[i];
    for (int o = 16; o; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) out[0] = s;
}
#endif
"""


@needs_nvcc
def test_a_family_whose_last_variant_does_not_export_a_kernel_is_refused(client, members, workspace):
    body = refusal(upload(client, members["engineer"], spec_toml=SUM_SPEC, reference_source=SUM_REFERENCE,
                          family_source=SUM_FAMILY))
    assert ("family.cu (the variant ALGO=twopass,BLOCK=256): The kernel 'pass2' is not in the compiled module; "
            "declare it extern \"C\" __global__.") in body
    fixed = SUM_FAMILY.replace("__global__ void pass2", 'extern "C" __global__ void pass2')
    assert upload(client, members["engineer"], spec_toml=SUM_SPEC, reference_source=SUM_REFERENCE,
                  family_source=fixed).status_code == 302


def test_a_family_cu_without_a_family_table_is_refused(client, members, workspace):
    body = refusal(upload(client, members["engineer"], spec_toml=VADD_SPEC, reference_source=VADD_REFERENCE,
                          family_source=VADD_FAMILY))
    assert "family.cu was given but problem.toml has no [family] table: add one, or leave family.cu out." in body
    with pytest.raises(ProblemRejected, match=r"has no \[family\] table"):
        problem_create(workspace=workspace, user=members["engineer"], spec_toml=VADD_SPEC,
                       reference_source=VADD_REFERENCE, family_source=VADD_FAMILY, compile=False)
    assert not Problem.objects.exists()
    # a blank family.cu is no family.cu
    saved = problem_create(workspace=workspace, user=members["engineer"], spec_toml=VADD_SPEC,
                           reference_source=VADD_REFERENCE, family_source="\n  \n", compile=False)
    assert saved.family_source == ""


def test_a_problem_saved_with_a_family_cu_but_no_family_table_offers_its_knobs(client, members, workspace):
    folder = OWN / "row_rmsnorm"
    problem = problem_create(workspace=workspace, user=members["engineer"],
                             spec_toml=(folder / "problem.toml").read_text(),
                             reference_source=(folder / "reference.cu").read_text(), compile=False)
    # as an upload stored it before family.cu without a [family] was refused
    Problem.objects.filter(pk=problem.pk).update(family_source=VADD_FAMILY)
    problem.refresh_from_db()
    knobs = problem_knobs(problem=problem)
    assert knobs.unavailable == "" and knobs.rows
    client.force_login(members["engineer"])
    page = client.get(f"/problems/{problem.pk}/knobs").content.decode()
    assert "this problem has its own [family]" not in page
    assert 'name="values-UNROLL"' in page


def test_the_migration_forgets_a_family_cu_saved_without_a_family_table_so_knobs_can_be_saved(members, workspace):
    import importlib

    from django.apps import apps

    from kernellab.services.problem_knobs import problem_knobs_save

    folder = OWN / "row_rmsnorm"
    problem = problem_create(workspace=workspace, user=members["engineer"],
                             spec_toml=(folder / "problem.toml").read_text(),
                             reference_source=(folder / "reference.cu").read_text(), compile=False)
    Problem.objects.filter(pk=problem.pk).update(family_source=VADD_FAMILY)  # as an older upload stored it
    importlib.import_module("kernellab.migrations.0015_forget_family_sources_without_a_family").forget(apps, None)
    problem.refresh_from_db()
    assert problem.family_source == ""
    knobs = problem_knobs(problem=problem)
    problem_knobs_save(problem=problem, user=members["engineer"], knobs={row.name: row.values[:1] for row in knobs.rows[:1]})
    assert Problem.objects.get(pk=problem.pk).family_source  # saved: no longer refused as "has its own [family]"
