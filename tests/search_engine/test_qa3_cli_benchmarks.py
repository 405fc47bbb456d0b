"""The benchmark scripts check their names and values before any work (QA round 3, command line), and write only
where they are told: search_bench's partial results go beside --out, and the scripts that had a fixed output in
benchmarks/results/ take --out."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.scripts import loaded_script
from tests.search_engine.test_search_bench import small_family

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


@pytest.fixture
def search_bench(monkeypatch, tmp_path):
    """search_bench with one small family and no training: its ROOT is a scratch folder, so that nothing it would
    write under benchmarks/results/ lands in the working tree."""
    with loaded_script(BENCHMARKS / "search_bench.py", "qa3_search_bench_under_test") as bench:
        fake_root = tmp_path / "root"
        (fake_root / "benchmarks" / "results").mkdir(parents=True)
        monkeypatch.setattr(bench, "ROOT", fake_root)
        monkeypatch.setattr(bench, "recorded_datasets", lambda gpu="h200", records_dir=None: [small_family(bench)])
        monkeypatch.setattr(bench, "lopo_surrogates",
                            lambda datasets, args, only=None: pytest.fail("trained before the arguments were checked"))
        yield bench


@pytest.mark.parametrize("families", ["sgem", "small,sgem"])
def test_search_bench_refuses_an_unknown_family_before_training(search_bench, families):
    with pytest.raises(SystemExit, match=r"^--families names no recorded family: sgem\.$"):
        search_bench.main(["--families", families, "--skip-baselines", "--seeds", "1", "--out", "/dev/null"])


def test_search_bench_refuses_no_seeds_before_training(search_bench, capsys):
    with pytest.raises(SystemExit) as raised:
        search_bench.main(["--seeds", "0", "--out", "/dev/null"])
    assert raised.value.code == 2 and "--seeds must be at least 1, not 0" in capsys.readouterr().err


def test_search_bench_keeps_its_partial_results_beside_out_not_in_benchmarks_results(search_bench, monkeypatch,
                                                                                  tmp_path):
    bench = search_bench
    out = tmp_path / "elsewhere" / "sb.json"
    partial = tmp_path / "elsewhere" / "sb.partial.json"
    seen = []
    monkeypatch.setattr(bench, "lopo_surrogates", lambda datasets, args, only=None: ({"small": None}, {}))
    monkeypatch.setattr(bench, "measured_compile_seconds", lambda dataset, samples: None)
    monkeypatch.setattr(bench, "run_puct", lambda *a, **k: {"measurements": 3, "spent": 3, "forecasts": 5,
                                                            "compile_checks": 4, "gpu_wall_s": 1.0, "cpu_s": 0.01})

    def kt_cache(dataset, folder):
        (folder / "cache.json").write_text(json.dumps({"cache": {}}))
        return folder / "cache.json"

    monkeypatch.setattr(bench, "kt_cache", kt_cache)
    monkeypatch.setattr(bench, "report_verdicts", lambda search, args, strategies: ({}, {}))
    monkeypatch.setattr(bench, "_print_results",
                        lambda results: seen.append(json.loads(partial.read_text()) if partial.exists() else None))
    bench.main(["--families", "small", "--seeds", "1", "--kt", "", "--root-children", "0", "--out", str(out)])
    assert seen and seen[0] is not None and "small" in seen[0]["search"]   # written beside --out after the family
    assert not list((tmp_path / "root" / "benchmarks" / "results").iterdir())
    assert json.loads(out.read_text())["search"]["small"]["random"]["runs"] == 1
    assert not partial.exists()  # the whole result is written: the partial one is gone


@pytest.fixture
def throughput(monkeypatch):
    with loaded_script(BENCHMARKS / "surrogate_throughput.py", "qa3_surrogate_throughput_under_test") as module:
        monkeypatch.setattr(os, "sched_setaffinity", lambda *a: None, raising=False)  # the test process keeps its CPUs
        bench = sys.modules["benchmarks.search_bench"]  # what the script imports its helpers from
        monkeypatch.setattr(module, "recorded_datasets", lambda: [small_family(bench)])
        monkeypatch.setattr(module, "LearnedSurrogate",
                            lambda **kw: pytest.fail("the model was fitted before the arguments were checked"))
        yield module


def test_surrogate_throughput_refuses_an_unknown_family_before_fitting(throughput):
    with pytest.raises(SystemExit, match=r"^--families names no recorded family: histogra\.$"):
        throughput.main(["--families", "histogra", "--repeats", "1", "--out", "/dev/null"])


@pytest.mark.parametrize("flag", ["--repeats", "--batch"])
@pytest.mark.parametrize("value", ["0", "-1"])
def test_surrogate_throughput_refuses_a_count_below_one_before_fitting(throughput, capsys, flag, value):
    with pytest.raises(SystemExit) as raised:
        throughput.main([flag, value, "--out", "/dev/null"])
    assert raised.value.code == 2 and f"{flag} must be at least 1, not {value}" in capsys.readouterr().err


@pytest.fixture
def compile_bench(monkeypatch):
    with loaded_script(BENCHMARKS / "compile_bench.py", "qa3_compile_bench_under_test") as module:
        monkeypatch.setenv("KERNELLAB_COMPILE_ENGINE", "auto")  # run_engine sets both; the test gets them back
        monkeypatch.setenv("KERNELLAB_CACHE", "unused")
        yield module


def test_compile_bench_with_no_sass_compiles_skips_that_figure(compile_bench, monkeypatch):
    calls = []

    def compile_cubin(source, options, sass=False, use_cache=True):
        calls.append(sass)
        return SimpleNamespace(report=SimpleNamespace(ok=True, compiler="nvcc 13", log="", facts=SimpleNamespace(sass={})))

    class Runner:
        def __init__(self, backend):
            pass

        def check_many(self, problem, candidates, sass=False):
            return [SimpleNamespace(ok=True, compile_s=0.1, log="") for _ in candidates]

    monkeypatch.setattr(compile_bench.compiler, "compile_cubin", compile_cubin)
    monkeypatch.setattr(compile_bench, "Runner", Runner)
    items = [(SimpleNamespace(name="p"), SimpleNamespace(source=f"// {i}", compile_options=[])) for i in range(3)]
    result = compile_bench.run_engine("nvcc", items, 0)
    assert result["serial_with_sass"] is None and result["serial"]["n"] == 3 and calls == [False] * 3
    assert compile_bench._seconds(result["serial_with_sass"], 13).strip() == "-"
    assert compile_bench._seconds(result["serial"], 13).strip().endswith("s")


@pytest.mark.parametrize("args, message", [(["--n", "0"], "--n must be at least 1, not 0"),
                                           (["--sass-n", "-1"], "--sass-n must be at least 0, not -1"),
                                           (["--parity", "-2"], "--parity must be at least 0, not -2")])
def test_compile_bench_refuses_counts_out_of_range_before_compiling(compile_bench, monkeypatch, capsys, args, message):
    monkeypatch.setattr(compile_bench, "candidates", lambda *a: pytest.fail("compiled before the check"))
    with pytest.raises(SystemExit) as raised:
        compile_bench.main(args)
    assert raised.value.code == 2 and message in capsys.readouterr().err


# ---- 11. every script that wrote only into benchmarks/results/ takes --out -------------------------------
def test_problems_table_writes_where_out_says(monkeypatch, tmp_path, capsys):
    with loaded_script(BENCHMARKS / "problems_table.py", "qa3_problems_table_under_test") as module:
        monkeypatch.setattr(module, "ROOT", tmp_path / "root")  # the default would be under it
        out = tmp_path / "tables" / "problems.json"
        assert module.main(["--out", str(out)]) == 0
    rows = json.loads(out.read_text())["problems"]
    assert "reduce_sum" in {r["problem"] for r in rows}
    assert not (tmp_path / "root").exists() and f"wrote {out}" in capsys.readouterr().out


@pytest.mark.parametrize("script, args", [("explorer_bench.py", []), ("explorer_renderer.py", []),
                                          ("load_bench.py", []), ("problems_table.py", []),
                                          ("kernelbench_h200_summarize.py", ["records.jsonl.gz", "--kernelbench", "kb"])])
def test_a_script_with_a_fixed_output_takes_out_and_refuses_a_folder_first(tmp_path, script, args):
    ran = subprocess.run([sys.executable, str(BENCHMARKS / script), *args, "--out", str(tmp_path)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert f"--out {tmp_path} is a folder; give a file name (.json)" in ran.stderr
    assert not list(tmp_path.iterdir())
