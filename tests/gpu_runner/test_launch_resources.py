"""Per-block resources from ptxas against the launch (gpu_runner.resources): registers (allocated per
warp in units of 256) and static plus dynamic shared memory, checked before a candidate is measured."""
import pytest

from gpu_runner import Runner, parse_problem
from gpu_runner.compiler import ToolMissing, find_tool
from gpu_runner.resources import per_block_limit, plan_broken_limit, registers_per_block
from gpu_runner.result import CompilerFacts
from tests.gpu_runner.helpers import candidate, launch, saxpy_problem

try:
    find_tool("nvcc")
    HAVE_NVCC = True
except ToolMissing:
    HAVE_NVCC = False
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="the check reads ptxas's facts; nvcc is not installed here")


@pytest.mark.parametrize("registers, threads, needed", [
    (64, 1024, 65536),     # fits exactly
    (65, 1024, 73728),     # 65 * 32 = 2,080 rounds up to 2,304 a warp
    (65, 992, 71424),      # 64,480 without the rounding: it would seem to fit
    (65, 896, 64512),      # the most threads a 65-register kernel launches (measured on an H100)
    (65, 897, 66816),      # 29 warps: a partial warp holds a whole warp's registers
    (128, 1024, 131072),
])
def test_registers_are_counted_per_warp_in_units_of_256(registers, threads, needed):
    assert registers_per_block(registers, threads) == needed
    broken = per_block_limit(registers=registers, static_shared=0, threads=threads, dynamic_shared=0)
    assert (broken is not None) == (needed > 65536)
    if broken is not None:
        assert broken.part == "block"
        assert f"{needed} per block; the limit is 65536 registers per block on the H100 and H200" in broken.sentence
        assert "allocated per warp in units of 256" in broken.sentence


def test_static_and_dynamic_shared_memory_count_together_up_to_227_kib():
    assert per_block_limit(registers=32, static_shared=40960, threads=256, dynamic_shared=232448 - 40960) is None
    broken = per_block_limit(registers=32, static_shared=40960, threads=256, dynamic_shared=200000,
                             kernel="scale", case="default")
    assert broken.part == "shared"
    assert broken.sentence == (
        "asks for 200000 bytes (195 KiB) of dynamic shared memory for size case 'default', and kernel 'scale' has "
        "40960 bytes (40 KiB) of static shared memory (ptxas): 240960 bytes (235 KiB) per block in all; the limit "
        "is 232448 bytes (227 KiB) of shared memory per block, static and dynamic together, on the H100 and H200")


def test_the_plan_is_judged_per_kernel_and_per_size_case():
    problem = saxpy_problem(n=4096, odd=1001)
    facts = CompilerFacts(registers=128, kernels={"big": {"registers": 128, "shared_bytes": 0},
                                                  "small": {"registers": 16, "shared_bytes": 0}})
    plan = (launch("small", block="1024"), launch("big", block="ceil_div(N, 8)"))
    # big: 512 threads in 'default' (65,536 registers, fits), 126 in 'odd' (fits); small: 1,024 of 16 fits
    assert plan_broken_limit(facts, plan, problem.sizes) is None
    plan = (launch("small", block="1024"), launch("big", block="min(1024, N // 4)"))
    index, broken = plan_broken_limit(facts, plan, problem.sizes)
    assert index == 1 and "for size case 'default'" in broken.sentence and "kernel 'big'" in broken.sentence
    # a kernel the facts do not hold (not compiled, or its name mangled beyond recognition) is not judged
    assert plan_broken_limit(CompilerFacts(), plan, problem.sizes) is None


# QA's p35: 128 registers a thread (96 live accumulators) in blocks of 1,024 threads.
HUNGRY = """extern "C" __global__ void hungry(const float* x, const float* y, float* out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc[96];
#pragma unroll
    for (int j = 0; j < 96; ++j) acc[j] = x[(i + j * 4099) % n];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int j = 0; j < 96; ++j) acc[j] = acc[j] * a + acc[(j + 1) % 96];
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 96; ++j) s += acc[j];
    if (i < n) out[i] = s + y[i];
}
"""
# QA's p34: 40 KiB of static shared memory, and 200,000 bytes of dynamic asked for by the launch.
STATIC_SHARED = """extern "C" __global__ void staged(const float* x, const float* y, float* out, float a, int n) {
    __shared__ float fixed[10240];
    extern __shared__ float dyn[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    fixed[threadIdx.x] = i < n ? x[i] : 0.f;
    dyn[threadIdx.x] = a;
    __syncthreads();
    if (i < n) out[i] = dyn[threadIdx.x] * fixed[threadIdx.x] + y[i];
}
"""


@needs_nvcc
def test_a_candidate_whose_block_needs_too_many_registers_fails_before_the_gpu():
    problem = saxpy_problem(n=4096, odd=1001)
    hungry = candidate(HUNGRY, "hungry", grid="ceil_div(N, 1024)", block="1024")
    result = Runner("static").measure(problem, hungry)
    assert result.status == "failed-compile"
    assert result.reason.startswith("The candidate compiles, but its launch cannot run: launch[0].block gives 1024 "
                                    "threads per block for size case 'default', and kernel 'hungry' uses ")
    assert "the limit is 65536 registers per block on the H100 and H200" in result.reason
    assert result.compiler.kernels["hungry"]["registers"] > 64
    # the same kernel in blocks of 256 threads fits, and goes on to the backend
    fits = Runner("static").measure(problem, candidate(HUNGRY, "hungry", block="256"))
    assert fits.status == "unavailable" and "cannot run or time it" in fits.reason


@needs_nvcc
def test_static_and_dynamic_shared_memory_over_227_kib_fail_before_the_gpu():
    problem = saxpy_problem(n=4096, odd=1001)
    result = Runner("static").measure(problem, candidate(STATIC_SHARED, "staged", shared="200000"))
    assert result.status == "failed-compile"
    assert ("launch[0].shared asks for 200000 bytes (195 KiB) of dynamic shared memory for size case 'default', and "
            "kernel 'staged' has 40960 bytes (40 KiB) of static shared memory (ptxas): 240960 bytes (235 KiB) per "
            "block in all; the limit is 232448 bytes (227 KiB)") in result.reason
    exactly = Runner("static").measure(problem, candidate(STATIC_SHARED, "staged", shared="191488"))
    assert exactly.status == "unavailable"    # 232,448 bytes in all: the 1 KiB reserved per block is outside it


@needs_nvcc
def test_a_batch_answers_every_candidate_in_order_with_the_refused_ones_in_place():
    problem = saxpy_problem(n=4096, odd=1001)
    batch = [candidate(HUNGRY, "hungry", name="small", block="256"),
             candidate(HUNGRY, "hungry", name="large", grid="ceil_div(N, 1024)", block="1024"),
             candidate(STATIC_SHARED, "staged", name="fits", shared="1024"),
             candidate(STATIC_SHARED, "staged", name="over", shared="200000")]
    seen = []
    energies = []
    results = Runner("static").measure_many(problem, batch, on_result=lambda i, r: seen.append((i, r.candidate_name)),
                                            energy=lambda i: energies.append(i) or False)
    assert [(r.candidate_name, r.status) for r in results] == [
        ("small", "unavailable"), ("large", "failed-compile"), ("fits", "unavailable"), ("over", "failed-compile")]
    assert seen == [(0, "small"), (1, "large"), (2, "fits"), (3, "over")]
    assert sorted(energies) == [0, 2]      # asked with each measured candidate's own index


def test_a_pytorch_or_replayed_problem_is_not_compiled_for_the_check(monkeypatch):
    problem = saxpy_problem(n=4096, odd=1001)
    runner = Runner("replay")
    assert runner._launch_compiler(problem, runner.backend_for(problem)) is None
    spec = parse_problem('[problem]\nname = "k"\nkind = "pytorch"\nreference = "reference.py"\n\n[tolerance]\n'
                         'float32 = { rtol = 1e-2, atol = 1e-2 }\n',
                         "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
                         "def get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n")
    static = Runner("static")
    assert static._launch_compiler(spec, static.backend_for(spec)) is None
