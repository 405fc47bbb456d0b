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
