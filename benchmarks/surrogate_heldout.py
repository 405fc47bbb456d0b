"""The program surrogate on the frozen held-out tasks (issue 20): trained on every other task, split by
task, scored only on tasks of search_engine/heldout.py.

  .venv/bin/python benchmarks/surrogate_heldout.py [--save-model] [--skip-learned-v1]

Data (read in place, re-read on every run so that new records count): CUDA-L1's programs with the
authors' speedups on five GPUs (../shared/datasets/cuda-l1), the H200 records of the torch backend
(kernellab/problems/*/records/h200.jsonl.gz: KernelBench tasks and the bundled KernelBench-format
problems), the KernelBench references (../shared/datasets/kernelbench).

Which objective ships (LightGBM regression of log speedup, or lambdarank within pools) is chosen by
task-grouped cross-validation on the training tasks alone; the held-out figures of both, of today's
learned surrogate (search_engine/surrogates/learned.py) trained on the same rows, of the roofline
heuristic and of a uniform forecast stand beside it. Prints a table and writes
benchmarks/results/surrogate_heldout_<date>.json; --save-model writes the shipped model
(search_engine/surrogates/models/program_lgbm.json.gz), trained on the same training tasks.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from search_engine.lab.heldout_eval import HEADLINE, heldout_report, ranking_block, split_heldout  # noqa: E402
from search_engine.lab.program_rows import check_cuda_l1, kernelbench_tasks, program_rows  # noqa: E402
from search_engine.surrogates import program_features  # noqa: E402
from search_engine.surrogates.program import SHIPPED_MODEL, ProgramSurrogate  # noqa: E402
from search_engine.surrogates.roofline import RooflineSurrogate  # noqa: E402

OBJECTIVES = ("regression", "lambdarank")
GOALS = {"spearman_within_task": (">=", 0.5), "recovered_at_1pct": (">=", 0.90),
         "ece_after_first_measurement": ("<=", 0.05), "cold_forecasts_per_s": (">=", 1000.0)}


def cpu_model() -> str:
    """The processor's model name and clock as the kernel reports them (the one-core forecast rate
    depends on it: 1,486/s on the 2026-12-01 machine, 724-842/s on an Intel Xeon at 2.1 GHz on
    2026-12-02 with the same code), else the architecture."""
    try:
        info = open("/proc/cpuinfo").read()
    except OSError:
        return platform.processor() or platform.machine()
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    name = fields.get("model name") or platform.machine()
    return f"{name}, {fields['cpu MHz']} MHz" if "cpu MHz" in fields else name


def load_rows(args) -> list[dict]:
    records = sorted((ROOT / "kernellab" / "problems").glob("*/records/h200.jsonl.gz"))
    records = [p for p in records
               if (p.parent.parent / "reference.py").exists() or p.parent.parent.name == "kernelbench"]
    return program_rows(cuda_l1_dir=args.cuda_l1, kernelbench_dir=args.kernelbench, records=records)


def fill_compiler_facts(rows: list[dict], path: Path) -> dict:
    """Compile the kernel unit of every program with CUDA that the table does not hold yet (nvcc in the
    compile sandbox, sm_90, -Xptxas -v), and add their facts to the table the features read. The table
    (program_features.COMPILER_FACTS_FILE) ships with the model, committed, so that a forecast reads the facts
    of a program compiled before without compiling it. It is written only when this run made facts: its
    "compiler" names the nvcc that made every fact without a "compiler" of its own, and a fact made by
    another nvcc carries that one's."""
    from gpu_runner.compiler import ToolMissing, compile_cubin, nvcc_version

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {"arch": "sm_90", "facts": {}}
    table = data["facts"]
    programs = {}
    for row in rows:
        cuda = program_features.cuda_text(row["request"].candidate.get("source", ""))
        if "__global__" in cuda:
            programs.setdefault(program_features.cuda_digest(cuda), cuda)
    todo = {d: c for d, c in programs.items() if d not in table}
    if not todo:
        compiled = sum(1 for d in programs if not table[d].get("failed"))
        print(f"compiler facts: {compiled} of {len(programs)} programs with CUDA compiled alone (every one in "
              f"the table already; nothing compiled and the table left as it was)", flush=True)
        return {"programs": len(programs), "compiled": compiled, "compiled_now": 0}
    started = time.perf_counter()
    try:
        compiler = f"nvcc {nvcc_version()}"
    except ToolMissing as exc:
        print(f"no compiler facts for {len(todo)} programs: {exc}")
        return {"programs": len(programs), "compiled_now": 0, "missing": len(todo)}
    if "compiler" not in data and not table:  # a new table: its facts are all this run's
        data["compiler"] = compiler
    stamp = {} if data.get("compiler") == compiler else {"compiler": compiler}
    for digest, cuda in sorted(todo.items()):
        unit = program_features.kernel_unit(cuda)
        if unit is None:
            table[digest] = {"failed": "no kernel unit could be read", **stamp}
            continue
        # nvcc, as the table says and as its existing facts were made (NVRTC's registers differ for
        # some shared-memory kernels: gpu_runner/README.md, "Compile engines").
        previous = os.environ.get("KERNELLAB_COMPILE_ENGINE")
        os.environ["KERNELLAB_COMPILE_ENGINE"] = "nvcc"
        try:
            report = compile_cubin(unit, arch="sm_90", sass=False).report
        finally:
            if previous is None:
                os.environ.pop("KERNELLAB_COMPILE_ENGINE", None)
            else:
                os.environ["KERNELLAB_COMPILE_ENGINE"] = previous
        if report.ok and report.facts is not None and report.facts.registers is not None:
            f = report.facts
            table[digest] = {"registers": f.registers, "shared_bytes": f.shared_bytes, "spill_stores": f.spill_stores,
                             "spill_loads": f.spill_loads, "kernels": len(f.kernels or {}), **stamp}
        else:
            first = report.diagnostics[0].message if report.diagnostics else "no ptxas report"
            table[digest] = {"failed": first[:160], **stamp}
    data["facts"] = dict(sorted(table.items()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=0, sort_keys=True) + "\n")
    program_features._compiler_table = None
    compiled = sum(1 for d in programs if not table[d].get("failed"))
    print(f"compiler facts: {compiled} of {len(programs)} programs with CUDA compiled alone "
          f"({len(todo)} compiled now in {time.perf_counter() - started:.0f} s)", flush=True)
    return {"programs": len(programs), "compiled": compiled, "compiled_now": len(todo)}


def fit_model(name: str, rows: list[dict], seed: int):
    """A model trained on rows: a LightGBM objective of the program surrogate, or today's learned
    surrogate (bin classifier over features.py) as "learned_v1"."""
    if name != "learned_v1":
        return ProgramSurrogate(objective=name, seed=seed).fit(rows)
    from search_engine.surrogates.learned import LearnedSurrogate

    measured = [r for r in rows if r.get("speedup")]
    return LearnedSurrogate(seed=seed).fit([{"request": r["request"], "speedup": r["speedup"]} for r in measured],
                                           groups=[r["task"] for r in measured])


def clear_v1() -> None:
    from search_engine.surrogates import features

    for name in dir(features):
        function = getattr(features, name)
        if callable(function) and hasattr(function, "cache_clear"):
            function.cache_clear()


def cross_validated(name: str, train: list[dict], folds: int, seed: int) -> dict:
    """Ranking figures of a model on the training tasks alone, by task-grouped folds."""
    tasks = sorted({r["task"] for r in train})
    order = np.random.default_rng(seed).permutation(len(tasks))
    fold_of = {tasks[i]: k % folds for k, i in enumerate(order)}
    forecasts = [None] * len(train)
    for k in range(folds):
        fit = [r for r in train if fold_of[r["task"]] != k]
        test = [i for i, r in enumerate(train) if fold_of[r["task"]] == k]
        model = fit_model(name, fit, seed)
        for i, f in zip(test, model.forecast_many([train[i]["request"] for i in test])):
            forecasts[i] = f
    return ranking_block(forecasts, train, seed=seed)


def top_features(model: ProgramSurrogate, n: int = 12) -> dict:
    """The features that carry most of each booster's gain (a check that no stand-in dominates)."""
    from search_engine.surrogates.program import _ok_columns

    names = program_features.feature_names()
    out = {}
    for label, booster, columns in (("speedup", model._booster, list(range(len(names)))),
                                    ("works", model._ok_booster, _ok_columns())):
        if booster is None:
            continue
        gain = booster.feature_importance("gain")
        total = float(gain.sum()) or 1.0
        ranked = sorted(zip(gain, (names[i] for i in columns)), reverse=True)[:n]
        out[label] = {name: round(float(g) / total, 3) for g, name in ranked}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuda-l1", type=Path, default=ROOT.parent / "shared" / "datasets" / "cuda-l1")
    parser.add_argument("--kernelbench", type=Path, default=ROOT.parent / "shared" / "datasets" / "kernelbench")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-model", action="store_true", help=f"write the shipped model ({SHIPPED_MODEL.name})")
    parser.add_argument("--no-compile", action="store_true",
                        help="use the compiler facts table as it is (no nvcc for programs it lacks)")
    parser.add_argument("--skip-learned-v1", action="store_true", help="leave out today's learned surrogate")
    parser.add_argument("--throughput-passes", type=int, default=5,
                        help="time the cold pass this many times (caches emptied each time) and report the median")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "benchmarks" / "results" / f"surrogate_heldout_{dt.date.today():%Y-%m-%d}.json")
    args = parser.parse_args(argv)
    if not args.cuda_l1.is_dir():
        parser.error(f"--cuda-l1 {args.cuda_l1} is not a folder (CUDA-L1's <gpu>.jsonl files).")
    try:  # without the references, every H200 record of a KernelBench task would be left out without a word
        kernelbench_tasks(args.kernelbench)
        check_cuda_l1(args.cuda_l1)
    except ValueError as exc:
        parser.error(str(exc))
    started = time.perf_counter()
    rows = load_rows(args)
    compiler = {"skipped": True} if args.no_compile else fill_compiler_facts(rows, program_features.COMPILER_FACTS_FILE)
    train, test = split_heldout(rows)
    print(f"{len(rows)} rows: {len(train)} of {len({r['task'] for r in train})} training tasks, "
          f"{len(test)} of {len({r['task'] for r in test})} held-out tasks", flush=True)

    candidates = OBJECTIVES + (() if args.skip_learned_v1 else ("learned_v1",))
    selection = {}
    for name in candidates:
        selection[name] = cross_validated(name, train, args.folds, args.seed)
        print(f"cross-validated on training tasks, {name}: spearman "
              f"{selection[name]['spearman_within_task']:.3f}, recovered@1% "
              f"{selection[name]['recovered_at_1pct']:.3f}", flush=True)
    # Only the program surrogate's objectives can ship: today's learned surrogate forecasts new
    # candidates an order of magnitude under the 1,000/s a search needs (its figures stand beside).
    chosen = max(OBJECTIVES, key=lambda o: (selection[o]["spearman_within_task"], selection[o]["recovered_at_1pct"]))

    reports, models = {}, {}
    roofline = RooflineSurrogate()
    for name in candidates:
        models[name] = fit_model(name, train, args.seed)
        program = name != "learned_v1"
        reports[name] = heldout_report(
            models[name], test, roofline=roofline,
            clear=program_features.clear_caches if program else clear_v1,
            clear_pool=program_features.clear_candidates if program else clear_v1, seed=args.seed,
            throughput_passes=args.throughput_passes)
    headline = reports[chosen]
    result = {
        "name": "surrogate_heldout", "date": f"{dt.date.today():%Y-%m-%d}", "machine": "cpu",
        "cpu": cpu_model(), "python": platform.python_version(),
        "command": "python benchmarks/surrogate_heldout.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        **{key: headline.get(key) for key in HEADLINE},
        "cold_forecasts_per_s_wall": headline.get("cold_forecasts_per_s_wall"),
        "load_average": headline.get("load_average"),
        "cold_forecasts_per_s_passes": headline.get("cold_forecasts_per_s_passes"),
        "throughput_note": "cold_forecasts_per_s is per second of the process's CPU time on one thread (one "
                           "core's rate), the median of the timed cold passes (cold_forecasts_per_s_passes, "
                           "caches emptied before each); the wall-clock rate on this shared 2-core machine, at "
                           "the load average given, is cold_forecasts_per_s_wall",
        "surrogate": models[chosen].id, "objective": chosen,
        "selection": {"rule": "of the LightGBM objectives, the higher Spearman within task (then recovered@1%) "
                              f"in {args.folds}-fold task-grouped cross-validation on the training tasks; "
                              "held-out figures were not looked at. Today's learned surrogate (learned_v1) "
                              "is cross-validated and reported beside, not shipped: its cold forecasts/s "
                              "are far under the 1,000 goal",
                      "cross_validation": selection, "chosen": chosen},
        "compiler_facts": compiler,
        "training": {"rows": len(train), "rows_with_speedup": sum(1 for r in train if r.get("speedup")),
                     "tasks": len({r["task"] for r in train})},
        "heldout_rule": "KernelBench tasks whose number is a multiple of 5 (search_engine/heldout.py); "
                        "CUDA-L1 holds even task numbers only, so multiples of 10 there",
        "pools": "one task on one GPU: CUDA-L1's solution, its CUDA-graph and cuDNN programs (authors' speedups), "
                 "H200 records' candidates (misses: rows without a speedup, worth 0 when chosen)",
        "goals": {k: {"goal": f"{op} {v}", "met": (headline.get(k) is not None and
                                                   (headline[k] >= v if op == ">=" else headline[k] <= v))}
                  for k, (op, v) in GOALS.items()},
        "report": headline, "models": reports,
        "seconds": time.perf_counter() - started,
    }
    result["goals"]["recovered_at_1pct_vs_random"] = {
        "goal": ">= random + 0.10",
        "met": headline["recovered_at_1pct"] is not None and
        headline["recovered_at_1pct"] >= headline["random_at_1pct"] + 0.10}
    for key in ("brier", "crps"):
        result["goals"][f"{key}_below_uniform_and_roofline"] = {
            "goal": "below uniform and roofline",
            "met": headline[key] < headline[f"{key}_uniform"]
            and headline[key] < (headline.get(f"{key}_roofline") or 0)}
    result["top_features"] = top_features(models[chosen])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=float) + "\n")
    if args.save_model:
        models[chosen].save(SHIPPED_MODEL)
        print(f"saved {SHIPPED_MODEL.relative_to(ROOT)} ({SHIPPED_MODEL.stat().st_size / 1024:.0f} KiB)")
    columns = {f"{o}{' (chosen)' if o == chosen else ''}": reports[o] for o in candidates}
    print_table(columns)
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out} "
          f"in {result['seconds']:.0f} s")
    return 0


def print_table(columns: dict) -> None:
    labels = [("tasks", "tasks"), ("rows", "rows"), ("misses", "misses (no speedup)"),
              ("spearman_within_task", "Spearman within task"), ("recovered_at_1pct", "recovered @1%"),
              ("random_at_1pct", "  random @1%"), ("brier", "Brier (cold)"), ("brier_uniform", "  uniform"),
              ("brier_roofline", "  roofline"), ("crps", "CRPS (cold)"), ("crps_uniform", "  uniform"),
              ("crps_roofline", "  roofline"), ("ece_after_first_measurement", "ECE after 1st measurement"),
              ("cold_forecasts_per_s", "cold forecasts/CPU-s"), ("cold_forecasts_per_s_wall", "  per wall s")]
    width = 28
    print("".ljust(width) + "".join(name.rjust(24) for name in columns))
    for key, label in labels:
        cells = []
        for report in columns.values():
            value = report.get(key)
            shown = "—" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)
            cells.append(shown.rjust(24))
        print(label.ljust(width) + "".join(cells))
    for name, report in columns.items():
        cold, after = report["cold"], report["after_1_measured"]
        print(f"{name}: ECE cold {cold.get('ece', float('nan')):.3f}, after 1 {after.get('ece', float('nan')):.3f} "
              f"({after.get('rows', 0)} rows of {after.get('pools', 0)} pools), after 2 "
              f"{report['after_2_measured'].get('ece', float('nan')):.3f}; Brier after 1 "
              f"{after.get('brier', float('nan')):.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
