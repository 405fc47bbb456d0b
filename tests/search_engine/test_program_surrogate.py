"""The program surrogate of PyTorch problems: features read from KernelBench programs, training that
refuses held-out tasks, forecasts that move with the run's first measurements, the shipped model, and
the driver revising its forecasts with it."""
from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("lightgbm")

from search_engine.heldout import HeldOutTaskError  # noqa: E402
from search_engine.surrogates.base import ForecastRequest  # noqa: E402
from search_engine.surrogates.program import SHIPPED_MODEL, ProgramSurrogate  # noqa: E402
from search_engine.surrogates.program_features import (  # noqa: E402
    GPU_SPECS, feature_names, gpu_key, hardware_numbers, request_features)

REFERENCE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.softmax(torch.relu(x), dim=self.dim)

batch_size = 4096
dim = 8192

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return [1]
'''

MATMUL_REFERENCE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)

M = 1024
K = 2048
N = 512

def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]

def get_init_inputs():
    return []
'''


def own_kernel(threads: int = 256, vector: bool = True, shuffles: bool = True) -> str:
    load = "float4 v = reinterpret_cast<const float4*>(x)[i];" if vector else "float v = x[i];"
    reduce = "v2 = __shfl_down_sync(0xffffffff, v2, 16);" if shuffles else ""
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
__global__ void fused(const float* __restrict__ x, float* y, int n) {{
    __shared__ float tile[{threads}];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{ {load} float v2 = 1.0f; {reduce} tile[threadIdx.x] = v2; __syncthreads(); y[i] = tile[threadIdx.x]; }}
}}
torch::Tensor run(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    const int threads = {threads};
    fused<<<(x.numel() + threads - 1) / threads, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}}
"""
ext = load_inline(name="fused", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=cuda_source,
                  functions=["run"])

class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()

    def forward(self, x):
        return ext.run(x.contiguous())
'''


TORCH_ONLY = '''import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.graph = None

    def forward(self, x):
        if self.graph is None:
            self.graph = torch.cuda.CUDAGraph()
        return torch.softmax(torch.relu(x), dim=1)
'''


def request(candidate: str, reference: str = REFERENCE, gpu: str = "NVIDIA H100", problem: str = "kb1_23_softmax",
            reference_ms: float | None = None) -> ForecastRequest:
    return ForecastRequest(reference={"name": "reference", "source": reference},
                           candidate={"name": "c", "source": candidate}, hardware={"name": gpu},
                           problem={"name": problem}, reference_ms=reference_ms)


def features(req: ForecastRequest) -> dict:
    return dict(zip(feature_names(), request_features(req)))


def test_a_candidates_own_kernel_launch_geometry_vector_loads_and_shuffles_are_read_from_its_cuda_source():
    f = features(request(own_kernel(threads=512)))
    assert f["has_cuda"] == 1 and f["cuda_kernels"] == 1 and f["cuda_launches"] == 1
    assert f["cuda_threads_per_block"] == 512
    assert f["cuda_vector4"] >= 1 and f["cuda_shuffles"] == 1 and f["cuda_shared_decl"] == 1
    plain = features(request(own_kernel(threads=128, vector=False, shuffles=False)))
    assert plain["cuda_threads_per_block"] == 128 and plain["cuda_vector4"] == 0 and plain["cuda_shuffles"] == 0


def test_a_pytorch_rewrite_has_no_kernel_of_its_own_and_its_graph_and_torch_ops_are_counted():
    f = features(request(TORCH_ONLY))
    assert f["has_cuda"] == 0 and f["cuda_kernels"] == 0 and math.isnan(f["cuda_threads_per_block"])
    assert f["cuda_graph"] >= 1
    assert f["cand_reduction"] >= 1 and f["cand_elementwise"] >= 1
    # It keeps the reference's softmax and relu: nothing heavy replaced, the op classes differ by nothing.
    assert f["delta_reduction"] == 0 and f["delta_elementwise"] == 0


def test_the_references_ops_and_sizes_come_from_the_program_and_its_get_inputs():
    softmax = features(request(TORCH_ONLY))
    assert softmax["ref_reduction"] >= 1 and softmax["ref_matmul"] == 0
    assert softmax["log_input_elems"] == pytest.approx(math.log10(4096 * 8192))
    assert softmax["n_inputs"] == 1 and softmax["max_ndim"] == 2
    matmul = features(request(TORCH_ONLY, reference=MATMUL_REFERENCE))
    assert matmul["ref_matmul"] == 1 and matmul["n_inputs"] == 2
    assert matmul["log_est_flops"] == pytest.approx(math.log10(2 * 1024 * 2048 * 512))
    assert matmul["log_intensity"] > softmax["log_intensity"]


def test_the_hardware_is_numbers_so_that_each_gpu_differs_and_an_unknown_one_is_missing():
    assert gpu_key("NVIDIA H200") == "h200" and gpu_key({"name": "NVIDIA H20"}) == "h20"
    assert gpu_key("NVIDIA GeForce RTX 3090") == "3090" and gpu_key("NVIDIA L40S") == "l40"
    h100, a100 = features(request(TORCH_ONLY, gpu="NVIDIA H100")), features(request(TORCH_ONLY, gpu="NVIDIA A100"))
    assert h100["memory_bandwidth_gbs"] > a100["memory_bandwidth_gbs"]
    assert h100["log_t_mem_us"] < a100["log_t_mem_us"]   # the same bytes take less time on the faster memory
    assert math.isnan(hardware_numbers({"name": "Some GPU"})["sm_count"])
    assert hardware_numbers({"name": "Some GPU", "sm_count": 20})["sm_count"] == 20


def test_a_known_gpu_reads_the_numbers_its_training_rows_carry_whatever_the_run_measured():
    # The rows know a GPU by name only; a recorded result carries measured figures beside the name.
    measured = {"name": "NVIDIA H200", "sm_count": 132, "memory_bandwidth_gbs": 4814.3,
                "compute_capability": "9.0", "l2_bytes": 62914560}
    assert hardware_numbers(measured) == hardware_numbers({"name": "NVIDIA H200"})
    assert hardware_numbers(measured)["memory_bandwidth_gbs"] == GPU_SPECS["h200"]["memory_bandwidth_gbs"]
    by_name, with_numbers = request(TORCH_ONLY, gpu="NVIDIA H200"), request(TORCH_ONLY, gpu="NVIDIA H200")
    with_numbers.hardware = measured
    assert np.array_equal(request_features(by_name), request_features(with_numbers), equal_nan=True)
    # A GPU the table does not know keeps the numbers it was given.
    assert hardware_numbers({"name": "Some GPU", "memory_bandwidth_gbs": 900.0})["memory_bandwidth_gbs"] == 900.0


def test_the_references_measured_time_over_its_roofline_is_a_feature_where_it_is_known():
    assert math.isnan(features(request(TORCH_ONLY))["log_ref_over_roofline"])
    slow = features(request(TORCH_ONLY, reference_ms=10.0))["log_ref_over_roofline"]
    fast = features(request(TORCH_ONLY, reference_ms=0.1))["log_ref_over_roofline"]
    assert slow == pytest.approx(fast + 2)


TEMPLATED = '''
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <vector>
#define TILE 32
template <typename scalar_t>
__global__ void scale(const scalar_t* x, scalar_t* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * scalar_t(2);
}
torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    scale<float><<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
'''


def test_the_kernel_unit_keeps_the_device_code_alone_and_writes_a_one_type_template_for_float():
    from search_engine.surrogates.program_features import kernel_unit

    unit = kernel_unit(TEMPLATED)
    assert "#include <cuda_runtime.h>" in unit and "#define TILE 32" in unit
    assert "torch" not in unit and "<vector>" not in unit and "run(" not in unit   # host code and its headers go
    assert "__global__ void scale(const float* x, float* y, int n)" in unit and "scalar_t" not in unit
    assert kernel_unit("int main() { return 0; }") is None


def test_compiler_facts_given_with_the_request_are_features_and_a_program_without_them_is_unknown():
    req = request(own_kernel(256))
    unknown = features(req)
    assert math.isnan(unknown["comp_known"]) and math.isnan(unknown["comp_registers"])
    req.compiler_facts = {"registers": 40, "shared_bytes": 1024, "spill_stores": 8, "spill_loads": 4}
    known = features(req)
    assert known["comp_known"] == 1 and known["comp_registers"] == 40 and known["comp_spills"] == 12
    torch_only = features(request(TORCH_ONLY))
    assert math.isnan(torch_only["comp_known"])   # no CUDA of its own: nothing to compile


def synthetic_rows(tasks: range, seed: int = 0) -> list[dict]:
    """Pools of made-up tasks in which the candidate with its own vectorised kernel is fastest,
    a torch rewrite about as fast as the reference, with a per-task level."""
    rng = np.random.default_rng(seed)
    rows = []
    for t in tasks:
        level = rng.normal(0, 0.3)
        for gpu in ("NVIDIA H100", "NVIDIA A100"):
            for candidate, log_speedup in ((own_kernel(256), 1.0), (own_kernel(128, vector=False), 0.4),
                                           (TORCH_ONLY, 0.0)):
                s = math.exp(log_speedup + level + rng.normal(0, 0.05))
                name = f"kb1_{t}_made_up"
                rows.append({"request": request(candidate, problem=name, gpu=gpu), "speedup": s, "task": name,
                             "gpu": gpu})
    return rows


TRAIN_TASKS = range(1, 40, 3)  # none a multiple of 5 ... except those filtered below
TRAIN = [r for r in synthetic_rows(TRAIN_TASKS) if int(r["task"].split("_")[1]) % 5]


@pytest.fixture(scope="module")
def trained():
    return ProgramSurrogate(objective="lambdarank", n_estimators=40).fit(TRAIN)


def test_training_refuses_a_row_of_a_held_out_task():
    rows = TRAIN + synthetic_rows(range(10, 11))
    with pytest.raises(HeldOutTaskError, match="kb1_10_made_up"):
        ProgramSurrogate(n_estimators=10).fit(rows)


def test_it_ranks_the_vectorised_kernel_first_on_a_task_it_never_saw(trained):
    forecasts = trained.forecast_many([request(own_kernel(256), problem="kb1_41_new"),
                                       request(TORCH_ONLY, problem="kb1_41_new")])
    assert forecasts[0].expected_log_speedup() > forecasts[1].expected_log_speedup()
    assert all(abs(sum(f.probabilities) - 1) < 1e-9 for f in forecasts)


def test_one_measurement_of_the_run_moves_the_level_and_narrows_the_forecast(trained):
    candidates = [request(own_kernel(128, vector=False), problem="kb1_41_new"),
                  request(TORCH_ONLY, problem="kb1_41_new")]
    cold = trained.forecast_many(candidates)
    fast = trained.forecast_many([request(own_kernel(256), problem="kb1_41_new")])[0]
    # The run measures the vectorised kernel 3x faster than forecast: the task sits higher than thought.
    trained.learn([{"request": request(own_kernel(256), problem="kb1_41_new"),
                    "speedup": 3.0 * math.exp(fast.expected_log_speedup())}])
    try:
        after = trained.forecast_many(candidates)
        assert all(a.expected_log_speedup() > c.expected_log_speedup() for a, c in zip(after, cold))
        assert after[0].log_sd < cold[0].log_sd
        assert "1 of this run's measurements" in after[0].reasoning
    finally:
        trained.learn([])
    again = trained.forecast_many(candidates)
    assert [f.probabilities for f in again] == [f.probabilities for f in cold]


def test_a_program_that_guards_rejected_in_training_ranks_low_where_the_guards_apply_on_any_gpu():
    rows = []
    for t in [t for t in range(1, 60) if t % 5]:
        name = f"kb1_{t}_made_up"
        # The H200 records apply KernelLab's guards; the authors' H100 speedups count a rewrite too.
        for candidate, speedup, status in ((own_kernel(256), 2.0 + t % 3 / 10, "ok"),
                                           (own_kernel(128, vector=False), 1.3, "ok"),
                                           (TORCH_ONLY, None, "rejected-guard")):
            rows.append({"request": request(candidate, problem=name, gpu="NVIDIA H200"), "speedup": speedup,
                         "status": status, "task": name, "gpu": "h200"})
            authors = request(candidate, problem=name, gpu="NVIDIA H100")
            authors.problem["rule"] = "authors"
            rows.append({"request": authors, "speedup": speedup or 1.1, "status": "ok", "task": name, "gpu": "h100"})
    model = ProgramSurrogate(n_estimators=40).fit(rows)
    for gpu in ("NVIDIA H200", "NVIDIA H100"):   # a run in the app applies the guards on whatever GPU
        kernel, rewrite = model.forecast_many([request(own_kernel(256), gpu=gpu, problem="kb1_61_new"),
                                              request(TORCH_ONLY, gpu=gpu, problem="kb1_61_new")])
        assert rewrite.expected_log_speedup() < kernel.expected_log_speedup() - 1.0, gpu
        assert "chance it fails or is rejected" in rewrite.reasoning
        assert "chance it fails" not in kernel.reasoning


def test_the_measurement_rule_is_a_feature_guards_apply_unless_the_request_says_authors():
    assert features(request(TORCH_ONLY))["kernellab_guards"] == 1
    authors = request(TORCH_ONLY)
    authors.problem = {"name": "kb1_23_softmax", "rule": "authors"}
    assert features(authors)["kernellab_guards"] == 0


def test_a_saved_model_forecasts_as_the_trained_one_and_a_wrong_file_is_refused(trained, tmp_path):
    path = tmp_path / "model.json.gz"
    trained.save(path)
    loaded = ProgramSurrogate.load(path)
    req = [request(own_kernel(256), problem="kb1_41_new")]
    assert loaded.forecast_many(req)[0].probabilities == pytest.approx(trained.forecast_many(req)[0].probabilities)
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "something else"}')
    with pytest.raises(ValueError, match="not a saved program surrogate"):
        ProgramSurrogate.load(bad)


def test_the_shipped_model_loads_and_forecasts_a_kernelbench_candidate():
    if not SHIPPED_MODEL.exists():
        pytest.fail(f"{SHIPPED_MODEL} is missing: python benchmarks/surrogate_heldout.py --save-model")
    model = ProgramSurrogate.shipped()
    assert model.trained_tasks >= 50 and SHIPPED_MODEL.stat().st_size < 2_000_000
    forecast = model.forecast(request(own_kernel(256)))
    assert not forecast.abstained and forecast.surrogate.startswith("learned-program@")


class _ProgramPort:
    """Measures a program candidate at once: the vectorised kernel with the most threads is fastest."""

    def __init__(self):
        self.events, self.requests = [], []

    def compile(self, node_id, candidate):
        return {"status": "ok", "reason": "", "compiler": None}

    def request_measurement(self, node_id, candidate):
        self.requests.append(node_id)
        knobs = candidate.get("knobs") or {}
        speedup = 0.5 + knobs.get("THREADS", 64) / 256 + (1.0 if knobs.get("VECTOR") == "yes" else 0.0)
        return {"status": "ok", "reason": "", "speedup": speedup, "reference": {"median_ms": 1.0},
                "candidate": {"median_ms": 1.0 / speedup}}

    def publish(self, event):
        self.events.append(event)


def test_the_driver_revises_a_pytorch_runs_forecasts_with_the_level_of_its_first_measurement(trained):
    import copy

    from search_engine.candidates import make_candidate
    from search_engine.driver import SearchDriver
    from search_engine.generators.template import KnobSpace, TemplateGenerator
    from search_engine.policy import PolicySettings
    from search_engine.search_settings import SearchSettings

    def render(knobs):
        source = own_kernel(knobs["THREADS"], vector=knobs["VECTOR"] == "yes", shuffles=knobs["SHUFFLE"] == "yes")
        return make_candidate(source, [], knobs=dict(knobs), name=str(knobs))

    space = KnobSpace({"THREADS": [64, 128, 256, 512], "VECTOR": ["yes", "no"], "SHUFFLE": ["yes", "no"]}, [])
    surrogate = copy.copy(trained)
    surrogate.reset_run()
    port = _ProgramPort()
    driver = SearchDriver(port=port, generator=TemplateGenerator(space, render), surrogate=surrogate,
                          reference=make_candidate(REFERENCE, [], name="reference"), hardware={"name": "NVIDIA H200"},
                          problem={"name": "kb1_41_new"},
                          settings=SearchSettings(
                              policy=PolicySettings(gpu_budget=6, threshold=0.99, max_gpu_per_step=1),
                              children_per_expansion=4, retrain_every=5))
    driver.run(max_steps=4)
    assert port.requests, "the run measured at least one candidate"
    revised = [e for e in port.events if e["type"] == "forecast" and e.get("revised")]
    assert revised and any("revised after learning from 1 " in e["reason"] for e in revised)
    assert surrogate._measured_n >= 1 and surrogate._shift != 0


def test_the_python_features_count_their_words_as_whole_identifiers_like_a_count_of_every_identifier():
    """The alternation that finds the counted words gives the counts a Counter of every identifier
    gives, on the bundled KernelBench-format programs and on the cases a word boundary gets wrong."""
    from collections import Counter
    from pathlib import Path

    from search_engine.surrogates import program_features as pf

    root = Path(__file__).resolve().parents[2] / "kernellab" / "problems"
    programs = [p.read_text() for p in sorted(root.glob("kb_*/**/*.py"))]
    programs.append("for_each = 1\nif x: stream_ = Stream()\nsome.load(y); load_inline(z)\ntl.load(a)  # try\n"
                    "half2 = __half(1); x.half(); bfloat16x = 1; y = torch.float16\nfor i in range(2): pass\n")
    assert len(programs) > 5
    for program in programs:
        python = pf._split(program)[0]
        every = Counter(pf._IDENT.findall(python))
        counted = Counter(pf._PYTHON_WORD.findall(python))
        assert {w: counted.get(w, 0) for w in pf._PYTHON_WORDS} == {w: every.get(w, 0) for w in pf._PYTHON_WORDS}
