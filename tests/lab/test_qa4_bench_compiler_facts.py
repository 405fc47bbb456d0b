"""benchmarks/surrogate_heldout.py's compiler facts table (QA round 4): it is the committed cache the program
surrogate's features read, so a run adds the facts of the programs it compiled and stamps only those with its nvcc;
a run that compiles nothing leaves the file as it was (before, every run without --no-compile rewrote it and stamped
today's nvcc over facts made earlier)."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from search_engine.surrogates import program_features
from search_engine.surrogates.base import ForecastRequest
from tests.scripts import loaded_script
from tests.search_engine.test_program_surrogate import REFERENCE, own_kernel

pytest.importorskip("lightgbm")

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "surrogate_heldout.py"


@pytest.fixture
def heldout(monkeypatch):
    import gpu_runner.compiler as compiler

    monkeypatch.setattr(program_features, "_compiler_table", None)   # the run empties it; the test gets it back
    monkeypatch.setattr(compiler, "nvcc_version", lambda: "99.1")
    monkeypatch.setattr(compiler, "compile_cubin", lambda unit, arch, sass: SimpleNamespace(report=SimpleNamespace(
        ok=True, diagnostics=[], facts=SimpleNamespace(registers=30, shared_bytes=1024, spill_stores=0,
                                                        spill_loads=0, kernels={"fused": {}}))))
    with loaded_script(BENCHMARK, "qa4_surrogate_heldout_facts_under_test") as module:
        yield module


def rows(*programs: str) -> list[dict]:
    return [{"request": ForecastRequest(reference={"source": REFERENCE}, candidate={"source": p}, hardware={},
                                        problem={})} for p in programs]


def digest(program: str) -> str:
    return program_features.cuda_digest(program_features.cuda_text(program))


def table(path: Path, facts: dict) -> str:
    text = json.dumps({"arch": "sm_90", "compiler": "nvcc 13.0.88", "facts": facts}, indent=0, sort_keys=True) + "\n"
    path.write_text(text)
    return text


def test_a_run_that_compiles_nothing_leaves_the_table_as_it_was(heldout, tmp_path, monkeypatch):
    import gpu_runner.compiler as compiler

    monkeypatch.setattr(compiler, "nvcc_version", lambda: pytest.fail("nvcc was asked with nothing to compile"))
    known = own_kernel(128)
    path = tmp_path / "facts.json"
    before = table(path, {digest(known): {"registers": 20, "shared_bytes": 512, "spill_stores": 0, "spill_loads": 0,
                                          "kernels": 1}})
    stamp = path.stat().st_mtime_ns
    out = heldout.fill_compiler_facts(rows(known, known), path)
    assert out == {"programs": 1, "compiled": 1, "compiled_now": 0}
    assert path.read_text() == before and path.stat().st_mtime_ns == stamp


def test_only_the_facts_this_run_made_carry_its_compiler(heldout, tmp_path, monkeypatch):
    known, new = own_kernel(128), own_kernel(256)
    old_fact = {"registers": 20, "shared_bytes": 512, "spill_stores": 0, "spill_loads": 0, "kernels": 1}
    path = tmp_path / "facts.json"
    table(path, {digest(known): old_fact})
    out = heldout.fill_compiler_facts(rows(known, new), path)
    data = json.loads(path.read_text())
    assert out["compiled_now"] == 1 and out["programs"] == 2
    assert data["compiler"] == "nvcc 13.0.88"                # what made the facts without a compiler of their own
    assert data["facts"][digest(known)] == old_fact
    assert data["facts"][digest(new)] == {"registers": 30, "shared_bytes": 1024, "spill_stores": 0, "spill_loads": 0,
                                          "kernels": 1, "compiler": "nvcc 99.1"}
    # and the features read the new fact from the table written
    monkeypatch.setattr(program_features, "COMPILER_FACTS_FILE", path)
    assert program_features.compiler_values(None, digest(new)) == [1.0, 30.0, 1024.0, 0.0, 1.0]
    # A new table names this run's compiler once, for every fact in it.
    fresh = tmp_path / "models" / "facts.json"
    heldout.fill_compiler_facts(rows(known), fresh)
    data = json.loads(fresh.read_text())
    assert data["compiler"] == "nvcc 99.1" and "compiler" not in data["facts"][digest(known)]
