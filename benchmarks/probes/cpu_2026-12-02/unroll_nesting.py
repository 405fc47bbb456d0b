"""Probe (2026-12-02, CPU, not part of the project): what the unroll recipe's no-nesting rule saves in
compile time. The grid-stride cure of the own softmax and column sum with the unroll modifier on top, at
UNROLL=8 and 16, rendered by the recipe before the rule (the module as of commit c4ec786^, read with
`git show`) and after it, each compiled once through `compile_cubin` with an empty cache. Prints a table
and writes JSON.

    .venv/bin/python benchmarks/probes/cpu_2026-12-02/unroll_nesting.py [OUT.json]
"""
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from gpu_runner import compiler  # noqa: E402
from gpu_runner.candidate import Candidate  # noqa: E402
from gpu_runner.nvrtc import choose_engine  # noqa: E402
from gpu_runner.spec import load_problem  # noqa: E402
from gpu_runner import reference_candidate  # noqa: E402
from search_engine.generators import recipes as new  # noqa: E402

BEFORE = "c4ec786^"
OWN = ROOT / "tests" / "gpu_runner" / "own_kernels"


def old_recipes():
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{BEFORE}:search_engine/generators/recipes.py"],
                          check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "recipes_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("recipes_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["recipes_before"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def main() -> None:
    old = old_recipes()
    rows = []
    for kernel, block in (("row_softmax", 128), ("column_sum", 256)):
        spec = load_problem(OWN / kernel)
        reference = reference_candidate(spec).to_dict()
        strided = {**reference, **new.grid_stride_family(reference).render({"ITEMS": 4, "BLOCK": block})}
        for unroll in (8, 16):
            for rule, module in (("before", old), ("after", new)):
                candidate = Candidate.from_dict({**strided, **module.unroll_family(strided).render({"UNROLL": unroll})},
                                                spec)
                started = time.perf_counter()
                out = compiler.compile_cubin(candidate.source, candidate.compile_options, "sm_90", sass=False,
                                             use_cache=False)
                rows.append({"kernel": kernel, "unroll": unroll, "rule": rule,
                             "engine": choose_engine(candidate.source).name, "ok": out.report.ok,
                             "compile_s": round(time.perf_counter() - started, 3),
                             "loops_given_the_pragma": candidate.source.count("#pragma unroll kl_unroll"),
                             "registers": out.report.facts.registers if out.report.facts else None})
    print(f"{'kernel':12} {'UNROLL':>6} {'rule':7} {'engine':6} {'pragmas':>7} {'regs':>5} {'compile s':>9}")
    for r in rows:
        print(f"{r['kernel']:12} {r['unroll']:>6} {r['rule']:7} {r['engine']:6} {r['loops_given_the_pragma']:>7} "
              f"{r['registers'] or '-':>5} {r['compile_s']:>9.3f}")
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else \
        ROOT / "benchmarks" / "results" / "probe_unroll_nesting_cpu-2core_2026-12-02.json"
    out.write_text(json.dumps({"probe": "unroll_nesting", "machine": "cpu-2core (the development machine)",
                               "before": BEFORE, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
