"""The per-problem memory cap on PyTorch (KernelBench) problems: the bytes a reference's get_inputs() and
Model need, found on the meta device before anything is made on the GPU, refused over the cap with a sentence
the user reads. The arithmetic, the worker's glue (with a stand-in for torch) and the verdict are tested
without torch; the worker itself on a GPU (skipped with a reason where torch or a GPU is missing)."""
import contextlib
import types

import pytest

from gpu_runner.kernelbench_verdict import judge_solution
from gpu_runner.pytorch_worker import _memory_precheck, memory_need, memory_refusal, tensor_bytes
from gpu_runner.settings import MeasureSettings

GIB = 1024**3


class FakeTensor:
    """What the arithmetic reads of a tensor: shape, numel() and element_size()."""

    def __init__(self, *shape, element_size=4):
        self.shape, self._element_size = shape, element_size

    def numel(self):
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    def element_size(self):
        return self._element_size


def test_tensor_bytes_reads_triples_named_pairs_and_bare_tensors():
    sizes = tensor_bytes([("x", (1024, 1024), 4), ("w", FakeTensor(10, 2, element_size=2)), FakeTensor(3)])
    assert sizes == [("x", (1024, 1024), 4 << 20), ("w", (10, 2), 40), ("#2", (3,), 12)]


def test_a_shape_of_billions_is_counted_exactly_without_allocating():
    assert tensor_bytes([("x", (10**6, 50_000), 4)]) == [("x", (10**6, 50_000), 200 * 10**9)]


def test_memory_need_multiplies_inputs_by_the_copies_kept_and_parameters_by_the_models():
    need = memory_need([("get_inputs()[0]", (1024, 1024), 4), ("get_inputs()[1]", (1024,), 4)],
                       [("Model.weight", (512, 512), 2), ("Model.running_mean", (512,), 4)],
                       input_copies=4, model_copies=2)
    one_draw, one_model = (1024 * 1024 + 1024) * 4, 512 * 512 * 2 + 512 * 4
    assert (need.inputs, need.parameters) == (one_draw, one_model)
    assert need.total == 4 * one_draw + 2 * one_model
    assert (need.largest, need.largest_shape, need.largest_bytes) == ("get_inputs()[0]", (1024, 1024), 4 << 20)


def test_memory_need_of_nothing_is_zero():
    need = memory_need([], [])
    assert need.total == 0 and need.largest == "none"


def test_the_refusal_names_the_bytes_the_largest_tensor_the_cap_and_its_variable():
    need = memory_need([("get_inputs()[0]", (50_000, 10**6), 4)], [], input_copies=4, model_copies=1)
    assert memory_refusal(need, 64 * GIB) == (
        "The problem needs 800000000000 bytes (745 GiB) of GPU memory before any output is made: get_inputs() "
        "gives 200000000000 bytes (186 GiB), kept 4 times (the validation draws and a working copy), and the "
        "parameters and buffers of Model take 0 bytes; the largest tensor is get_inputs()[0] of shape "
        "[50000, 1000000] (200000000000 bytes (186 GiB)). That is more than the per-problem memory cap of "
        "68719476736 bytes (64 GiB) (KERNELLAB_MAX_PROBLEM_BYTES), so nothing was measured.")


def test_a_problem_at_the_cap_is_not_refused():
    need = memory_need([("x", (GIB,), 1)], [("Model.w", (GIB,), 1)], input_copies=3, model_copies=1)
    assert memory_refusal(need, 4 * GIB) is None
    assert "of Model and ModelNew take" in memory_refusal(memory_need([], [("Model.w", (GIB,), 4)],
                                                                      model_copies=2), GIB)


def fake_torch():
    """The parts of torch the precheck touches: the meta device context, seeding and the Tensor type."""
    seeds = []
    devices = []

    @contextlib.contextmanager
    def device(name):
        devices.append(name)
        yield

    return types.SimpleNamespace(device=device, manual_seed=seeds.append, Tensor=FakeTensor, seeds=seeds,
                                 devices=devices)


class FakeModel:
    def __init__(self, features):
        self.weight, self.scale = FakeTensor(features, features), FakeTensor(features)

    def named_parameters(self):
        return [("weight", self.weight)]

    def named_buffers(self):
        return [("scale", self.scale)]


def reference(inputs):
    return types.SimpleNamespace(Model=FakeModel, get_init_inputs=lambda: [256], get_inputs=lambda: inputs)


def test_the_precheck_counts_nested_inputs_parameters_and_buffers_on_the_meta_device():
    torch = fake_torch()
    inputs = [FakeTensor(64, 64), [FakeTensor(8), (FakeTensor(2, 2), 3)], {"mask": FakeTensor(4, element_size=1)}, 7]
    evidence = _memory_precheck(reference(inputs), 0, MeasureSettings(validation_sets=3), True, 1 << 30, torch)
    precheck = evidence["memory_precheck"]
    assert torch.devices == ["meta"] and len(torch.seeds) == 2
    assert precheck["inputs"] == (64 * 64 + 8 + 4) * 4 + 4
    assert precheck["parameters"] == (256 * 256 + 256) * 4
    assert (precheck["input_copies"], precheck["model_copies"], precheck["cap"]) == (4, 2, 1 << 30)
    assert precheck["largest"] == "Model.weight" and "memory_refusal" not in evidence


def test_the_precheck_names_a_nested_input_as_the_largest_when_over_the_cap():
    inputs = [FakeTensor(4), [FakeTensor(1 << 20, 1 << 10)]]
    evidence = _memory_precheck(reference(inputs), 0, MeasureSettings(validation_sets=2), False, 1 << 30, fake_torch())
    assert "the largest tensor is get_inputs()[1][0] of shape [1048576, 1024]" in evidence["memory_refusal"]
    assert evidence["memory_precheck"]["total"] == 3 * ((1 << 32) + 16) + (256 * 256 + 256) * 4


def test_a_reference_that_cannot_run_on_meta_skips_the_precheck_and_says_so():
    def get_inputs():
        raise RuntimeError("Tensor.item() cannot be called on meta tensors")

    program = types.SimpleNamespace(Model=FakeModel, get_init_inputs=lambda: [4], get_inputs=get_inputs)
    evidence = _memory_precheck(program, 0, MeasureSettings(), False, 1, fake_torch())
    assert evidence == {"memory_precheck": {"skipped": "RuntimeError: Tensor.item() cannot be called on meta tensors"}}


def test_the_refusal_reaches_the_user_as_an_unavailable_verdict_with_its_sentence():
    sentence = "The problem needs 800000000000 bytes (745 GiB) of GPU memory ... so nothing was measured."
    verdict = judge_solution({"tolerance": 0.01, "draws": [], "phase_s": {}, "memory_refusal": sentence,
                              "memory_precheck": {"total": 800 * 10**9}})
    assert (verdict.status, verdict.reason, verdict.speedup) == ("unavailable", sentence, None)


def test_the_refusal_of_the_reference_measured_alone_is_unavailable_with_its_sentence_not_ok():
    from gpu_runner.backends.torch import TorchBackend

    sentence = "The problem needs 800000000000 bytes (745 GiB) of GPU memory ... so nothing was measured."
    backend = TorchBackend.__new__(TorchBackend)  # (no sandbox: only the evidence is read)
    result = backend._reference_result({"memory_refusal": sentence, "memory_precheck": {"total": 800 * 10**9}}, {},
                                       0.0)
    assert (result.status, result.reason, result.speedup) == ("unavailable", sentence, None)


def test_a_skipped_precheck_is_for_the_record_only():
    timed = {"reference_ms": [1.0] * 5, "candidate_ms": [0.5] * 5, "kernels_seen": True, "custom_kernels": {"k": 1},
             "draws": [{"index": 0, "ok": True}], "post_timing_ok": True,
             "escape": {"event_ms": 0.5, "wall_ms": 0.55, "noop_event_ms": 0.001, "noop_wall_ms": 0.02},
             "memory_precheck": {"skipped": "RuntimeError: meta"}}
    assert judge_solution(timed).status == "ok"


# On a GPU with torch: the real worker path (pytorch_worker.measure_solution, in this process).

REFERENCE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(features))

    def forward(self, x):
        return x * self.scale

batch_size = {rows}
features = 256

def get_inputs():
    return [torch.randn(batch_size, features)]

def get_init_inputs():
    return [features]
'''
SETTINGS = MeasureSettings(validation_sets=2, warmup=1, min_reps=5, max_reps=10, target_timing_ms=5.0)


@pytest.fixture
def torch_on_gpu():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[gpu-torch]')")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU for torch")
    return torch


@pytest.mark.gpu
def test_the_worker_refuses_a_reference_over_the_cap_before_the_gpu_sees_it(torch_on_gpu, monkeypatch, tmp_path):
    from gpu_runner.pytorch_worker import measure_solution

    monkeypatch.setenv("KERNELLAB_MAX_PROBLEM_BYTES", "1MiB")
    torch_on_gpu.cuda.synchronize()
    before = torch_on_gpu.cuda.memory_allocated()
    evidence = measure_solution(REFERENCE.format(rows=4096), None, extensions=None, settings=SETTINGS)
    assert torch_on_gpu.cuda.memory_allocated() == before
    assert "timing" not in evidence and "reference_ms" not in evidence
    refusal = evidence["memory_refusal"]
    assert refusal.startswith("The problem needs 12583936 bytes (12 MiB) of GPU memory")   # 3 x 4 MiB + 1 KiB
    assert "the largest tensor is get_inputs()[0] of shape [4096, 256]" in refusal
    assert "memory cap of 1048576 bytes (1 MiB) (KERNELLAB_MAX_PROBLEM_BYTES)" in refusal
    solution = REFERENCE.format(rows=4096).replace("class Model(", "class ModelNew(")
    verdict = judge_solution(measure_solution(REFERENCE.format(rows=4096), solution, extensions=tmp_path,
                                              settings=SETTINGS), SETTINGS)
    assert verdict.status == "unavailable" and "so nothing was measured" in verdict.reason


@pytest.mark.gpu
def test_the_worker_measures_a_reference_under_the_cap_as_before(torch_on_gpu, monkeypatch):
    from gpu_runner.pytorch_worker import measure_solution

    monkeypatch.setenv("KERNELLAB_MAX_PROBLEM_BYTES", "1MiB")
    evidence = measure_solution(REFERENCE.format(rows=16), None, extensions=None, settings=SETTINGS)
    assert "memory_refusal" not in evidence and "reference_error" not in evidence
    assert evidence["memory_precheck"]["total"] == 3 * 16 * 256 * 4 + 256 * 4
    assert evidence["timing"]["reference"]["median_ms"] > 0


@pytest.mark.gpu
def test_a_reference_that_cannot_run_on_meta_is_measured_without_the_precheck(torch_on_gpu, monkeypatch):
    from gpu_runner.pytorch_worker import measure_solution

    monkeypatch.setenv("KERNELLAB_MAX_PROBLEM_BYTES", "1MiB")
    item = REFERENCE.format(rows=16).replace("return [torch.randn(batch_size, features)]",
                                             "rows = int(torch.randint(8, 9, (1,)).item())\n"
                                             "    return [torch.randn(rows, features)]")
    evidence = measure_solution(item, None, extensions=None, settings=SETTINGS)
    assert "skipped" in evidence["memory_precheck"] and "memory_refusal" not in evidence
    assert evidence["timing"]["reference"]["median_ms"] > 0
