"""benchmarks/kernelbench_h200.py's Nsight Compute sample and benchmarks/kernelbench_h200_summarize.py's merge
of device calls into the KernelBench H200 records, on CPU (a stand-in ncu where the real one would run)."""
import gzip
import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _module(name):
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REFERENCE_TIMING = {"median_ms": 1.0, "cv": 0.01}
DO_BENCH = {"median_ms": 1.02, "mean_ms": 1.05, "n": 200}
NCU = {"kernels": [{"name": "gemm", "gpu__time_duration.sum": 900.0}]}


def _summarized(tmp_path):
    """Records as the summarizer writes them: a reference checked against do_bench, a candidate with ncu."""
    lines = [
        {"problem": "kb1_4_x", "level": 1, "task": 4, "variant": "reference", "hardware": {"name": "NVIDIA H200"},
         "torch": "2.11", "status": "ok", "reference": REFERENCE_TIMING, "baselines": {"cuda_graph": {"median_ms": 0.9}},
         "reason": "", "energy": {"j_per_call": 0.01}, "baseline_errors": {"torch_compile": "not compiled"},
         "torch_compile_ahead_s": None, "do_bench": DO_BENCH, "ncu": NCU},
        {"problem": "kb1_4_x", "level": 1, "task": 4, "variant": "cuda-l1:abc", "hardware": {"name": "NVIDIA H200"},
         "torch": "2.11", "source": "class ModelNew: pass", "source_hash": "abc", "solution_gpus": ["h100"],
         "authors_speedup": {"h100": 1.5}, "build_s": 3.0, "status": "failed-compile",
         "reason": "The solution does not build: x", "pytorch_notes": [], "speedup": None,
         "reference": REFERENCE_TIMING, "candidate": None, "evidence": {}, "ncu": NCU},
    ]
    path = tmp_path / "h200.jsonl.gz"
    with gzip.open(path, "wt") as handle:
        for line in lines:
            handle.write(json.dumps(line) + "\n")
    return path


def test_summarized_references_keep_their_do_bench_energy_and_ncu_when_used_as_the_base(tmp_path):
    summarize = _module("kernelbench_h200_summarize")
    reference, candidate = summarize.base_rows(_summarized(tmp_path))
    assert reference["evidence"]["do_bench"] == DO_BENCH
    assert reference["evidence"]["energy"] == {"reference": {"j_per_call": 0.01}}
    assert reference["evidence"]["baseline_errors"] == {"torch_compile": "not compiled"}
    assert reference["_ncu"] == NCU and candidate["_ncu"] == NCU


def test_a_reference_timed_again_without_do_bench_keeps_the_earlier_comparison_and_its_own_median(tmp_path):
    summarize = _module("kernelbench_h200_summarize")
    earlier = summarize.base_rows(_summarized(tmp_path))[0]
    again = {"level": 1, "task": 4, "variant": "reference",
             "evidence": {"timing": {"reference": {"median_ms": 1.05}, "baseline:torch_compile": {"median_ms": 0.5}}}}
    kept = summarize.carry_do_bench(earlier, again)
    assert kept["evidence"]["do_bench"] == DO_BENCH
    assert kept["evidence"]["do_bench_reference"] == REFERENCE_TIMING   # the median timed beside do_bench
    with_rounds = {**earlier, "evidence": {**earlier["evidence"], "do_bench_rounds": [{"ours_median_ms": 1.0}]}}
    assert summarize.carry_do_bench(with_rounds, again)["evidence"]["do_bench_rounds"] == [{"ours_median_ms": 1.0}]
    assert summarize.carry_do_bench(earlier, {**again, "evidence": {**again["evidence"], "do_bench": {"median_ms": 2}}}) \
        ["evidence"]["do_bench"] == {"median_ms": 2}


def test_a_reference_timed_again_replaces_the_earlier_only_when_the_two_agree(tmp_path):
    summarize = _module("kernelbench_h200_summarize")
    earlier = summarize.base_rows(_summarized(tmp_path))[0]
    close = {"level": 1, "task": 4, "variant": "reference", "evidence": {"timing": {"reference": {"median_ms": 1.05}}}}
    far = {"level": 1, "task": 4, "variant": "reference", "evidence": {"timing": {"reference": {"median_ms": 3.0}}}}
    assert summarize.timed_again(earlier, close)["evidence"]["timing"]["reference"]["median_ms"] == 1.05
    kept = summarize.timed_again(earlier, far)
    assert kept["evidence"]["timing"]["reference"] == REFERENCE_TIMING
    assert kept["evidence"]["timed_again"]["ratio"] == pytest.approx(3.0)
    assert kept["evidence"]["timed_again"]["kept"] == "the earlier timing"
    assert summarize.timed_again(None, far) is far


def test_a_do_bench_call_timed_again_keeps_its_own_pair_and_rounds_even_when_the_earlier_timing_stays(tmp_path):
    summarize = _module("kernelbench_h200_summarize")
    earlier = summarize.base_rows(_summarized(tmp_path))[0]
    rounds = [{"ours_median_ms": 3.0, "do_bench_median_ms": 3.1}]
    far = {"level": 1, "task": 4, "variant": "reference",
           "evidence": {"timing": {"reference": {"median_ms": 3.0}}, "do_bench": {"median_ms": 3.1, "mean_ms": 3.2,
                                                                                  "n": 9},
                        "do_bench_rounds": rounds}}
    kept = summarize.timed_again(earlier, far)
    assert kept["evidence"]["timing"]["reference"] == REFERENCE_TIMING      # the earlier timing stays
    assert kept["evidence"]["do_bench"]["median_ms"] == 3.1                 # the comparison is the new call's
    assert kept["evidence"]["do_bench_reference"] == {"median_ms": 3.0}
    assert kept["evidence"]["do_bench_rounds"] == rounds


def test_a_clean_timing_replaces_the_earlier_one_however_far_apart_and_keeps_it_beside(tmp_path):
    summarize = _module("kernelbench_h200_summarize")
    earlier = summarize.base_rows(_summarized(tmp_path))[0]
    clean = {"level": 1, "task": 4, "variant": "reference", "clean_timing": True,
             "evidence": {"timing": {"reference": {"median_ms": 7.8}, "baseline:torch_compile": {"median_ms": 7.0}}}}
    kept = summarize.timed_again(earlier, clean)
    assert kept["evidence"]["timing"]["reference"]["median_ms"] == 7.8
    assert kept["evidence"]["timed_again"]["ratio"] == pytest.approx(7.8)
    assert kept["evidence"]["timed_again"]["earlier_timing"]["reference"] == REFERENCE_TIMING
    # a baseline the clean call did not time stays from the earlier timing, and says so
    earlier["evidence"]["timing"]["baseline:torch_compile"] = {"median_ms": 0.8}
    only_eager = {**clean, "evidence": {"timing": {"reference": {"median_ms": 7.8}}}}
    kept = summarize.timed_again(earlier, only_eager)
    assert kept["evidence"]["timing"]["baseline:torch_compile"] == {"median_ms": 0.8}
    assert kept["evidence"]["timed_again"]["baselines_from_the_earlier_timing"] == ["cuda_graph", "torch_compile"]


def test_rounds_compare_the_median_of_each_timers_rounds_and_report_each_timers_own_spread():
    summarize = _module("kernelbench_h200_summarize")
    rounds = [{"ours_median_ms": o, "do_bench_median_ms": d}
              for o, d in ((5.09, 5.02), (5.12, 5.65), (5.15, 5.02), (5.10, 5.04), (5.11, 5.03))]
    out = summarize.rounds_comparison([rounds])
    assert out["rounds"] == 5 and out["calls"] == 1
    assert out["rounds_ours_median_ms"] == pytest.approx(5.11) and out["rounds_do_bench_median_ms"] == pytest.approx(5.03)
    assert out["rounds_rel_diff"] == pytest.approx(0.08 / 5.03)
    assert out["per_call_signed_rel_diff"] == [pytest.approx(5.11 / 5.03 - 1)]
    assert out["do_bench_round_spread"] == pytest.approx(5.65 / 5.02 - 1)
    assert out["ours_round_spread"] == pytest.approx(5.15 / 5.09 - 1)


def _rounds(ours, theirs):
    return [{"ours_median_ms": ours, "do_bench_median_ms": theirs}] * 3


def test_every_calls_rounds_are_pooled_so_calls_that_differ_either_way_are_compared_together(tmp_path):
    summarize = _module("kernelbench_h200_summarize")
    earlier = summarize.base_rows(_summarized(tmp_path))[0]
    first, second, third = _rounds(1.03, 1.00), _rounds(0.97, 1.00), _rounds(1.00, 1.01)
    earlier["evidence"]["do_bench_rounds"] = first                  # a base record of one call
    row = {"level": 1, "task": 4, "variant": "reference",
           "evidence": {"timing": {"reference": {"median_ms": 1.0}}, "do_bench": DO_BENCH, "do_bench_rounds": second}}
    merged = summarize.pool_rounds(earlier, row, summarize.timed_again(earlier, summarize.carry_do_bench(earlier, row)))
    assert merged["evidence"]["do_bench_rounds_by_call"] == [first, second]
    assert merged["evidence"]["do_bench_rounds"] == second
    # the same call summarized again is not counted twice; a third call is added
    assert summarize.pool_rounds(merged, row, merged)["evidence"]["do_bench_rounds_by_call"] == [first, second]
    third_row = {**row, "evidence": {**row["evidence"], "do_bench_rounds": third}}
    calls = summarize.pool_rounds(merged, third_row, merged)["evidence"]["do_bench_rounds_by_call"]
    assert calls == [first, second, third]
    out = summarize.rounds_comparison(calls)
    assert (out["rounds"], out["calls"]) == (9, 3)
    assert out["rounds_rel_diff"] == pytest.approx(0.0)             # medians of 0.97/1.00/1.03 and 1.00/1.00/1.01
    assert out["per_call_signed_rel_diff"] == [pytest.approx(0.03), pytest.approx(-0.03), pytest.approx(1 / 1.01 - 1)]
    figures = summarize.figures([], 1, {}, [{"level": 1, "rel_diff": 0.05, **out}])
    assert figures["reference_vs_do_bench_max_rel_diff"] == pytest.approx(0.0)
    assert figures["reference_vs_do_bench_max_rel_diff_worst_call"] == pytest.approx(0.03)
    # a candidate's rows and a reference without rounds are left as they are
    assert summarize.pool_rounds(earlier, {**row, "variant": "cuda-l1:a"}, row) is row
    assert summarize.pool_rounds(None, row, row) is row


def test_a_reference_timed_again_without_do_bench_keeps_every_calls_rounds(tmp_path):
    summarize = _module("kernelbench_h200_summarize")
    earlier = summarize.base_rows(_summarized(tmp_path))[0]
    calls = [_rounds(1.03, 1.00), _rounds(0.97, 1.00)]
    earlier["evidence"].update(do_bench_rounds=calls[1], do_bench_rounds_by_call=calls)
    again = {"level": 1, "task": 4, "variant": "reference", "evidence": {"timing": {"reference": {"median_ms": 1.0}}}}
    kept = summarize.carry_do_bench(earlier, again)
    assert summarize.rounds_by_call(kept["evidence"]) == calls


def test_figures_per_level_count_tasks_not_reached_against_cuda_l1_not_against_a_fixed_number():
    summarize = _module("kernelbench_h200_summarize")
    lines = [{"level": 3, "task": 1, "variant": "reference", "reference": REFERENCE_TIMING},
             {"level": 3, "task": 1, "variant": "cuda-l1:a", "source_hash": "a", "status": "ok", "reason": "Correct",
              "speedup": 2.0, "build_s": 4.0, "authors_speedup": {"h100": 1.0}},
             {"level": 3, "task": 1, "variant": "cuda-l1:b", "source_hash": "b", "status": "failed-compile",
              "reason": "The solution does not build", "speedup": None, "build_s": 8.0, "authors_speedup": {}}]
    in_cuda_l1 = {(3, 1): {"a", "b", "c"}, (3, 2): {"d"}}
    out = summarize.figures(lines, 50, in_cuda_l1, [])
    assert (out["tasks_imported"], out["tasks_in_cuda_l1"], out["tasks_measured"], out["tasks_not_reached"]) == \
        (50, 2, 1, 1)
    assert (out["candidates"], out["candidates_correct"], out["candidates_not_measured"]) == (2, 1, 2)
    assert out["candidates_failed"] == {"failed-compile: failed-compile": 1}
    assert out["build_s_median"] == 6.0 and out["reference_vs_do_bench_max_rel_diff"] is None


def test_the_ncu_sample_takes_correct_programs_that_need_no_build_with_their_references_level_by_level():
    bench = _module("kernelbench_h200")
    rows = [{"level": 1, "task": 1, "variant": "reference", "reference": {"median_ms": 0.1}},
            {"level": 1, "task": 1, "variant": "cuda-l1:fast", "status": "rejected-guard", "speedup": 3.0,
             "source": "import torch\nclass ModelNew: pass"},
            {"level": 1, "task": 1, "variant": "cuda-l1:ext", "status": "ok", "speedup": 9.0,
             "source": "from torch.utils.cpp_extension import load_inline\nm = load_inline(name='x')"},
            {"level": 1, "task": 1, "variant": "cuda-l1:wrong", "status": "failed-correctness", "speedup": None,
             "source": "class ModelNew: pass"},
            {"level": 2, "task": 7, "variant": "reference", "reference": {"median_ms": 0.2}},
            {"level": 2, "task": 7, "variant": "cuda-l1:ok", "status": "ok", "speedup": 1.1, "source": "class ModelNew: pass"},
            {"level": 2, "task": 8, "variant": "reference", "reference": {"median_ms": 50.0}},
            {"level": 2, "task": 8, "variant": "cuda-l1:slowref", "status": "ok", "speedup": 5.0, "source": "x = 1"}]
    picked = [(r["level"], r["task"], r["variant"]) for r in bench.ncu_sample(rows, 4)]
    assert picked == [(1, 1, "cuda-l1:fast"), (1, 1, "reference"), (2, 7, "cuda-l1:ok"), (2, 7, "reference")]


def test_ncu_runs_with_clocks_left_alone_and_profiles_a_reference_or_a_solution(tmp_path, monkeypatch):
    bench = _module("kernelbench_h200")
    seen = tmp_path / "argv"
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\n"
                    f'printf "%s\\n" "$@" > {seen}\n'
                    "echo '==PROF== Disconnected'\n"
                    "echo '\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\",\"dram__bytes_read.sum\"'\n"
                    "echo '\"\",\"\",\"ns\",\"byte\"'\n"
                    "echo '\"0\",\"void gemm<128>()\",\"1,500\",\"4096\"'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("KERNELLAB_NCU", str(fake))
    out = bench.ncu_metrics("class Model: pass", None, None, 30.0, tmp_path / "ref")
    assert out == {"kernels": [{"name": "void gemm<128>()", "gpu__time_duration.sum": 1500.0,
                                "dram__bytes_read.sum": 4096.0}]}
    argv = seen.read_text().splitlines()
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert argv[-1] == "-" and (tmp_path / "ref" / "ncu_reference.py").read_text() == "class Model: pass"
    bench.ncu_metrics("class Model: pass", "class ModelNew: pass", tmp_path / "b" / "ext", 30.0, tmp_path / "b")
    assert seen.read_text().splitlines()[-1] == str(tmp_path / "b" / "ncu_solution.py")
    fake.write_text("#!/bin/sh\necho '==ERROR== ERR_NVGPUCTRPERM' >&2\nexit 1\n")
    failed = bench.ncu_metrics("class Model: pass", None, None, 30.0, tmp_path / "c")
    assert "ERR_NVGPUCTRPERM" in failed["error"] and "exited with 1" in failed["error"]


def test_a_call_that_remeasured_nothing_keeps_the_last_calls_remeasured_verdicts(tmp_path):
    summarize = _module("kernelbench_h200_summarize")
    previous = tmp_path / "kernelbench_h200_2026-12-02.json"
    earlier = {"rejected-guard: A PyTorch-level rewrite": 37}
    previous.write_text(json.dumps({"remeasured_early_verdicts": earlier}))
    # a do_bench-only call re-measures nothing: the figure of the call that did stays
    assert summarize.kept_from_last_call("remeasured_early_verdicts", {}, previous) == earlier
    # a call that re-measured something reports its own
    assert summarize.kept_from_last_call("remeasured_early_verdicts", {"ok: x": 2}, previous) == {"ok: x": 2}
    # no earlier result: what this call found, even if empty
    assert summarize.kept_from_last_call("remeasured_early_verdicts", {}, tmp_path / "none.json") == {}


def test_the_bundled_problems_figures_come_from_the_newest_result_that_has_them(tmp_path):
    summarize = _module("kernelbench_h200_summarize")
    (tmp_path / "kernelbench_h200_2026-11-30.json").write_text(json.dumps({"bundled_problems": {"kb_a": 1}}))
    (tmp_path / "kernelbench_h200_2026-12-01.json").write_text(json.dumps({"bundled_problems": {"kb_b": 2}}))
    (tmp_path / "kernelbench_h200_2026-12-02.json").write_text(json.dumps({"bundled_problems": {}}))
    assert summarize.latest_result_value("bundled_problems", tmp_path) == {"kb_b": 2}
    assert summarize.latest_result_value("missing", tmp_path) == {}
