"""Verdicts on KernelBench solutions from synthetic evidence (torch-free), the extension allow-list, and
the torch-executing worker on a GPU (skipped with a reason where torch or a GPU is missing)."""
import pytest

from gpu_runner.kernelbench_verdict import extension_refusal, judge_solution

TIMED = {"reference_ms": [1.0] * 5, "candidate_ms": [0.5] * 5, "kernels_seen": True,
         "draws": [{"index": i, "ok": True} for i in range(3)], "post_timing_ok": True,
         "escape": {"event_ms": 0.5, "wall_ms": 0.55, "noop_event_ms": 0.001, "noop_wall_ms": 0.02}}


def test_a_solution_whose_own_kernel_does_the_work_is_ok_with_its_speedup():
    verdict = judge_solution({**TIMED, "custom_kernels": {"fused_relu": 1}})
    assert verdict.status == "ok" and verdict.speedup == pytest.approx(2.0)
    assert "2.000x eager PyTorch" in verdict.reason


def test_a_solution_that_runs_only_pytorch_ops_is_rejected_naming_the_ops_and_keeps_its_timing():
    verdict = judge_solution({**TIMED, "custom_kernels": {}, "library_kernels": {"sm90_xmma_gemm": 1},
                              "aten_ops": {"mm": 1, "view": 2}, "reference_aten_ops": {"mm": 1}})
    assert verdict.status == "rejected-guard"
    assert verdict.reason == ("No kernel of the solution's own ran in ModelNew.forward: PyTorch did the work with "
                              "mm x1 (the reference's own ops).")
    assert verdict.speedup == pytest.approx(2.0)


def test_a_printed_fallback_message_rejects_even_a_correct_solution():
    verdict = judge_solution({**TIMED, "custom_kernels": {"k": 1},
                              "fallback_message": "Custom kernel failed, falling back to PyTorch implementation"})
    assert verdict.status == "rejected-guard"
    assert "falling back to PyTorch" in verdict.reason


def test_a_result_reused_from_an_earlier_draw_is_called_memoised():
    draws = [{"index": 0, "ok": True}, {"index": 1, "ok": False, "memoised_from": 0, "bad": 10, "numel": 10}]
    verdict = judge_solution({**TIMED, "draws": draws})
    assert verdict.status == "rejected-guard" and "returned the result of draw 0" in verdict.reason


def test_poison_left_in_the_output_is_unwritten_elements_not_a_numeric_error():
    draws = [{"index": 0, "ok": False, "poison": 7, "bad": 7, "numel": 100, "max_abs": 0.0}]
    verdict = judge_solution({**TIMED, "draws": draws})
    assert verdict.status == "rejected-guard" and "7 output element(s) still hold the poison" in verdict.reason


def test_modified_inputs_state_kept_and_work_escaping_the_timer_are_guards():
    assert "inputs are read-only" in judge_solution({**TIMED, "inputs_modified": ["#0"]}).reason
    assert "state kept" in judge_solution({**TIMED, "custom_kernels": {"k": 1}, "post_timing_ok": False}).reason
    escaping = {**TIMED, "custom_kernels": {"k": 1},
                "escape": {"event_ms": 0.01, "wall_ms": 30.0, "noop_event_ms": 0.001, "noop_wall_ms": 0.02}}
    assert judge_solution(escaping).reason.startswith("Work escapes the timer")


def test_a_wrong_answer_is_failed_correctness_with_the_kernelbench_tolerance():
    draws = [{"index": 0, "ok": False, "bad": 3, "numel": 100, "max_abs": 0.5, "poison": 0}]
    verdict = judge_solution({**TIMED, "tolerance": 0.01, "draws": draws})
    assert verdict.status == "failed-correctness"
    assert verdict.reason == "Wrong on input draw 0: 3 of 100 elements outside atol=rtol=0.01 (max abs error 0.5)."


def test_extension_sources_may_include_torch_headers_but_not_server_files():
    good = 'src = """#include <torch/extension.h>\n#include <vector>\n__global__ void k() {}"""\n'
    assert extension_refusal(good) is None
    bad = 'src = """#include "/etc/passwd"\n__global__ void k() {}"""\n'
    assert "An extension source in the program" in extension_refusal(bad)


@pytest.mark.gpu
def test_the_worker_measures_a_relu_solution_against_its_reference(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[gpu-torch]')")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU for torch")
    from gpu_runner.pytorch_worker import measure_solution
    from gpu_runner.settings import MeasureSettings
    from tests.kernelbench.test_program_parsing import RELU

    settings = MeasureSettings(validation_sets=2, warmup=1, min_reps=5, max_reps=10, target_timing_ms=5.0)
    own_ops = RELU.replace("class Model(", "class ModelNew(")
    evidence = measure_solution(RELU, own_ops, extensions=tmp_path, settings=settings)
    verdict = judge_solution(evidence, settings)
    assert verdict.status == "rejected-guard" and "PyTorch did the work with relu" in verdict.reason
    cheat = own_ops.replace("return torch.relu(x)", "x.relu_()\n        return x")
    assert "inputs are read-only" in judge_solution(measure_solution(RELU, cheat, extensions=tmp_path,
                                                                      settings=settings), settings).reason


def test_a_solution_whose_extension_failed_to_build_and_fell_back_to_pytorch_is_a_failed_compile_naming_the_error():
    builds = [{"name": "matmul_cuda", "ok": False, "seconds": 30.0,
               "error": "main.cpp:37:27: error: 'getCurrentCUDAStream' is not a member of 'at::cuda'"}]
    verdict = judge_solution({**TIMED, "custom_kernels": {}, "aten_ops": {"mm": 1}, "reference_aten_ops": {"mm": 1},
                              "extension_builds": builds})
    assert verdict.status == "failed-compile"
    assert verdict.reason.startswith("Its extension 'matmul_cuda' did not build (main.cpp:37:27: error: "
                                     "'getCurrentCUDAStream'")
    assert "PyTorch did the work with mm x1" in verdict.reason


def test_a_build_log_with_a_caught_extension_failure_names_that_extension_not_the_last_line():
    log = ("Warning: falling back\nKL-EXTENSION-BUILD-FAILED diag_cuda error: no instance of overloaded function\n"
           "done\n")
    verdict = judge_solution({"build_error": log})
    assert verdict.status == "failed-compile"
    assert verdict.reason == ("The solution does not build: its extension diag_cuda error: no instance of "
                              "overloaded function")


# The kernel rule: a kernel is the solution's own when its sources or its built extension define it.
OWN_SOURCE = '''import torch
from torch.utils.cpp_extension import load_inline
cuda = """
#include <torch/extension.h>
namespace fast {
template <typename T> __global__ void __launch_bounds__(256) reduce_kernel(const T* x, T* y) {}
}
extern "C" __global__ void hardsigmoid_kernel(float* x, int n) {}
"""
ext = load_inline(name="fast_ext", cpp_sources="", cuda_sources=cuda, functions=["run"])
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.run(x)
'''
REWRITE = '''import torch
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''


def test_own_kernels_are_found_by_their_names_in_the_sources_and_not_in_pytorchs_namespaces():
    from gpu_runner.kernelbench_verdict import own_kernel_names, split_kernels

    assert own_kernel_names(OWN_SOURCE) == ({"reduce_kernel", "hardsigmoid_kernel"}, {"fast"})
    seen = {"void fast::reduce_kernel<float>(float const*, float*)": 2,
            "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float> >(int)": 1,
            "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::hardsigmoid_kernel"
            "(at::TensorIteratorBase&)::{lambda()#1}>(int)": 1,
            "hardsigmoid_kernel": 3, "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32": 1,
            "void cutlass::Kernel2<Gemm>(Gemm::Params)": 1}
    own, other = split_kernels(seen, OWN_SOURCE, ["void cutlass::Kernel2<Gemm>(Gemm::Params)"])
    assert own == {"void fast::reduce_kernel<float>(float const*, float*)": 2, "hardsigmoid_kernel": 3,
                   "void cutlass::Kernel2<Gemm>(Gemm::Params)": 1}
    assert set(other) == set(seen) - set(own)


def test_a_solution_without_any_kernel_of_its_own_is_called_a_pytorch_level_rewrite():
    verdict = judge_solution({**TIMED, "custom_kernels": {}, "library_kernels": {"at::relu_kernel": 1},
                              "aten_ops": {"relu": 1}, "reference_aten_ops": {"relu": 1}}, source=REWRITE)
    assert verdict.status == "rejected-guard" and verdict.speedup == pytest.approx(2.0)
    assert verdict.reason.startswith("A PyTorch-level rewrite: the solution holds no kernel of its own")
    assert "relu x1 (the reference's own ops)" in verdict.reason
    constant = judge_solution({**TIMED, "custom_kernels": {}, "aten_ops": {"ones": 1}}, source=REWRITE)
    assert "no computing op at all (its output is a constant or a tensor made before the call)" in constant.reason


def test_an_extension_that_built_but_was_never_called_is_a_kernel_that_never_ran():
    verdict = judge_solution({**TIMED, "custom_kernels": {}, "aten_ops": {"gelu": 1}, "extension_calls": {},
                              "extension_builds": [{"name": "fast_ext", "ok": True}]}, source=OWN_SOURCE)
    assert verdict.status == "rejected-guard"
    assert verdict.reason.startswith("Its kernel never ran: ModelNew.forward called no function of its extension, "
                                     "which built,")


def test_an_extension_that_hands_the_work_to_pytorch_ops_or_to_a_library_is_told_apart():
    called = {**TIMED, "custom_kernels": {}, "extension_calls": {"fast_ext.run": 1},
              "extension_builds": [{"name": "fast_ext", "ok": True}],
              "library_kernels": {"sm90_xmma_gemm_f32f32": 1}}
    torch_ops = judge_solution({**called, "aten_ops": {"mm": 1}}, source=OWN_SOURCE)
    assert torch_ops.status == "rejected-guard"
    assert torch_ops.reason.startswith("Its extension launched no kernel of its own: it was called (fast_ext.run) "
                                       "but PyTorch ops did the work (mm x1)")
    library = judge_solution({**called, "aten_ops": {}}, source=OWN_SOURCE)
    assert library.status == "ok" and library.speedup == pytest.approx(2.0)
    assert any(n.startswith("No kernel of its own: its extension called library kernels directly "
                            "(sm90_xmma_gemm_f32f32)") for n in library.notes)


def test_evidence_split_by_the_old_name_rule_is_split_again_from_the_source():
    """The 2026-12-01 records counted PyTorch's jiterator kernel 'reduction_prod_kernel' as the solution's own,
    although its extension had not built and torch.prod ran."""
    source = OWN_SOURCE.replace("reduce_kernel", "product_reduction_kernel")
    old = {**TIMED, "custom_kernels": {"reduction_prod_kernel": 1}, "library_kernels": {}, "aten_ops": {"prod": 1},
           "extension_builds": [{"name": "product_cuda", "ok": False,
                                 "error": "main.cpp:11:1: error: redefinition of 'PyObject* PyInit_product_cuda()'"}]}
    assert judge_solution(old).status == "ok"
    verdict = judge_solution(old, source=source)
    assert verdict.status == "failed-compile"
    assert verdict.reason.startswith("Its extension 'product_cuda' did not build (main.cpp:11:1: error: redefinition")


def test_a_failed_build_is_named_by_the_compilers_error_line_not_the_build_command():
    log = ("[1/3] /usr/bin/g++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=gelu_cuda -c main.cpp\n"
           "/tmp/kl-kernelbench-builds/a7e6/ext/gelu_cuda/main.cpp:4:55: error: 'fast_gelu' was not declared in "
           "this scope\nninja: build stopped: subcommand failed.\n"
           "KL-EXTENSION-BUILD-FAILED gelu_cuda Error building extension 'gelu_cuda': [1/3] /usr/bin/g++ -MMD\n")
    assert judge_solution({"build_error": log}).reason == (
        "The solution does not build: its extension gelu_cuda main.cpp:4:55: error: 'fast_gelu' was not declared "
        "in this scope")
    bare = "KL-EXTENSION-BUILD-FAILED conv_cuda Error building extension 'conv_cuda': [1/3] nvcc -c x.cu\n"
    assert judge_solution({"build_error": bare}).reason.endswith("no compiler error line was kept in the log")


def test_calls_of_an_extensions_functions_are_counted_however_the_program_holds_them():
    import math
    import types

    from gpu_runner.pytorch_worker import EXTENSION_CALLS, _count_calls

    module = types.ModuleType("fast_ext")
    module.hypot, module._hidden, module.constant = math.hypot, math.sqrt, 3
    _count_calls(module, "fast_ext")
    EXTENSION_CALLS.clear()
    held = module.hypot
    assert module.hypot(3, 4) == 5.0 and held(6, 8) == 10.0 and module._hidden(4) == 2.0
    assert dict(EXTENSION_CALLS) == {"fast_ext.hypot": 2}


def test_the_kernels_compiled_into_an_extension_library_are_read_from_its_symbols(tmp_path):
    import shutil
    import subprocess

    from gpu_runner.pytorch_worker import extension_symbols

    if not (shutil.which("g++") and shutil.which("nm")):
        pytest.skip("g++ and nm are needed to build and read a shared library")
    (tmp_path / "k.cpp").write_text("namespace fast { template <typename T> void scale_kernel(T* x) { *x *= 2; }\n"
                                    "template void scale_kernel<float>(float*); }\nextern \"C\" void plain(int) {}\n")
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(tmp_path / "k.so"), str(tmp_path / "k.cpp")], check=True)
    symbols = extension_symbols([str(tmp_path / "k.so"), str(tmp_path / "missing.so")])
    assert "void fast::scale_kernel<float>(float*)" in symbols and "plain" in symbols


def test_a_build_in_modelnews_constructor_happens_in_the_build_and_its_failure_is_marked(tmp_path):
    pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[dev]')")
    pytest.importorskip("ninja", reason="ninja is not installed (pip install -e '.[dev]')")
    from gpu_runner.pytorch_worker import build_solution

    source = ('import torch\nfrom torch.utils.cpp_extension import load_inline\n'
              'class ModelNew(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n'
              '        try:\n            self.ext = load_inline(name="kl_broken", cpp_sources="int f() { return 1; }",'
              ' build_directory="/kl-nowhere/torch_extensions")\n'
              '        except Exception:\n            self.ext = None   # falls back to PyTorch\n'
              '    def forward(self, x):\n        return x\n'
              'def get_init_inputs():\n    return []\n')
    build = build_solution(source, tmp_path, timeout_s=300)
    assert build["ok"] is False and not build["cached"]
    assert "KL-EXTENSION-BUILD-FAILED kl_broken" in build["log"]
    # a build_directory that does not exist fails before any compiler runs (two CUDA-L1 solutions name one)
    assert judge_solution({"build_error": build["log"]}).reason.startswith(
        "The solution does not build: its extension kl_broken FileNotFoundError(")


def test_a_solution_that_switches_process_wide_settings_is_told_in_the_verdict():
    verdict = judge_solution({**TIMED, "custom_kernels": {"k": 1},
                              "global_settings_changed": {"cuda.matmul.allow_tf32": [False, True]}})
    assert verdict.status == "ok"
    assert any("cuda.matmul.allow_tf32 False -> True" in note and "reference's with PyTorch's defaults" in note
               for note in verdict.notes)


def test_settings_a_solution_switches_apply_to_its_calls_only_and_never_outlive_the_request():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[gpu-torch]')")
    from gpu_runner.pytorch_worker import _SettingsGuard, _apply_settings, _default_settings, _global_settings

    defaults = _default_settings(torch)
    assert defaults["cuda.matmul.allow_tf32"] is False and defaults["cudnn.benchmark"] is False
    guard = _SettingsGuard(torch, defaults)
    torch.backends.cuda.matmul.allow_tf32 = True          # what a solution's module does at import
    guard.take()
    assert _global_settings(torch) == defaults           # back to the defaults for the reference

    seen = []

    def forward():
        seen.append(_global_settings(torch)["cuda.matmul.allow_tf32"])
        torch.backends.cudnn.benchmark = True             # switched inside a call, too
        return 1

    run = guard.solution(forward)
    assert run() == 1 and run() == 1
    assert seen == [True, True]                           # the solution's calls run with what it switched
    assert _global_settings(torch) == defaults           # and the reference's never do
    # allow_tf32 moves the float32 matmul precision with it ("highest" -> "high"), and that is reported too
    assert guard.changed["cuda.matmul.allow_tf32"] == [False, True] and guard.changed["cudnn.benchmark"] == [False, True]
    assert set(guard.changed) <= {"cuda.matmul.allow_tf32", "cudnn.benchmark", "float32_matmul_precision"}
    _apply_settings(torch, defaults)


@pytest.mark.gpu
def test_the_worker_times_the_reference_with_pytorchs_defaults_after_a_solution_that_switches_tf32_on(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[gpu-torch]')")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU for torch")
    from gpu_runner.pytorch_worker import _global_settings, measure_solution
    from gpu_runner.settings import MeasureSettings

    reference = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, a, b):\n"
                 "        return a @ b\n"
                 "def get_inputs():\n    return [0.1 * torch.randn(4096, 256), 0.1 * torch.randn(256, 4096)]\n"
                 "def get_init_inputs():\n    return []\n")
    solution = ("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n"
                + reference.replace("class Model(", "class ModelNew("))
    settings = MeasureSettings(validation_sets=1, warmup=1, min_reps=5, max_reps=10, target_timing_ms=5.0)
    evidence = measure_solution(reference, solution, extensions=tmp_path, settings=settings)
    # K = 256 and small values: TF32's error stays inside KernelBench's 1e-2, so the solution is timed
    assert evidence["global_settings_changed"]["cuda.matmul.allow_tf32"] == [False, True]
    assert all(draw["ok"] for draw in evidence["draws"]), evidence["draws"]
    assert _global_settings(torch)["cuda.matmul.allow_tf32"] is False   # nothing outlives the request
    # The reference, timed with FP32 matmuls, is slower than the TF32 solution; before the guard both ran TF32.
    alone = measure_solution(reference, None, extensions=tmp_path, settings=settings)
    ref_ms = sorted(evidence["reference_ms"])[len(evidence["reference_ms"]) // 2]
    alone_ms = sorted(alone["reference_ms"])[len(alone["reference_ms"]) // 2]
    assert abs(ref_ms / alone_ms - 1) < 0.25
    cand_ms = sorted(evidence["candidate_ms"])[len(evidence["candidate_ms"]) // 2]
    assert cand_ms < 0.7 * ref_ms
