"""Turn benchmarks/kernelbench_h200.py's records.jsonl into the replay records of the KernelBench
problems (kernellab/problems/kernelbench/records/h200.jsonl.gz, re-judged with the current verdict) and
benchmarks/results/kernelbench_h200_<date>.json (or --out FILE).

    python benchmarks/kernelbench_h200_summarize.py RECORDS_JSONL [RECORDS_JSONL ...] --kernelbench KERNELBENCH_DIR
        [--cuda-l1 CUDA_L1_DIR] [--base kernellab/problems/kernelbench/records/h200.jsonl.gz] [--date YYYY-MM-DD]

Several records files (device calls) are merged; a later file's measurement of the same task and variant
replaces an earlier one's, except the alternating rounds of our timer and do_bench: every call's rounds of a
reference are kept (`do_bench_rounds_by_call`) and compared pooled, since on a few-microsecond op the two
timers' levels move from one worker process to the next by more than the 3% compared, one way in one call and
the other way in the next. --base starts from already summarized records (the raw files of earlier calls
being gone): their recorded verdicts are kept, except that a solution found correct, unchanged and timed
(recorded "ok", or rejected for running no kernel of its own) is judged again by the current kernel rule
from its recorded kernels, ops and builds; a reference keeps its do_bench check, energy, baseline errors and
Nsight Compute metrics. A reference timed again by a later call keeps the earlier call's do_bench comparison,
and replaces the earlier timing only where the two agree (RETIMED_AGREEMENT; otherwise both are kept, flagged).
Nsight Compute lines (an --ncu-from pass of the recorder) attach to the record of the program they profiled.
Figures are given over all levels and per level ("by_level"), tasks and candidates counted against what
CUDA-L1 holds. Measurements of the project's own problems (a "problem" on the line) go to
kernellab/problems/<problem>/records/h200.jsonl.gz as replay records and stay out of the CUDA-L1 figures.
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_runner.candidate import source_hash  # noqa: E402
from gpu_runner.kernelbench import task_name  # noqa: E402
from gpu_runner.kernelbench_verdict import judge_solution  # noqa: E402

KEEP = ("custom_kernels", "library_kernels", "aten_ops", "timing", "baseline_errors", "do_bench_ms", "fallback_message",
        "inputs_modified", "phase_s", "extension_builds", "extension_calls", "kernel_rule", "energy", "do_bench",
        "reference_aten_ops")
# Reasons whose verdict came after every correctness and guard check passed: judged again from the record.
REJUDGE = ("No kernel of the solution's own", "Correct on ")


def _gzip_text(path: Path):
    """A gzip file for text with no time stamp in its header: the same records give the same bytes."""
    import io

    return io.TextIOWrapper(gzip.GzipFile(path, "wb", mtime=0), encoding="utf-8")


def base_rows(path: Path) -> list[dict]:
    """Summarized records turned back into rows of the raw form (see the module's docstring)."""
    rows = []
    with gzip.open(path, "rt") as handle:
        for line in handle:
            record = json.loads(line)
            hardware = {"name": (record.get("hardware") or {}).get("name"), "torch": record.get("torch")}
            kept = dict(record.get("evidence") or {})
            timing = {"reference": record.get("reference")} if record.get("reference") else {}
            if record["variant"] == "reference":
                timing.update({f"baseline:{k}": v for k, v in (record.get("baselines") or {}).items()})
                evidence = {**kept, "timing": timing}
                if not timing:
                    evidence["reference_error"] = record.get("reason") or "not timed"
                # what the summary keeps of a reference's evidence at the record's top level, put back
                for key, value in (("do_bench", record.get("do_bench")), ("timed_again", record.get("timed_again")),
                                   ("do_bench_rounds", record.get("do_bench_rounds")),
                                   ("do_bench_rounds_by_call", record.get("do_bench_rounds_by_call")),
                                   ("do_bench_reference", record.get("do_bench_reference")),
                                   ("baseline_errors", record.get("baseline_errors")),
                                   ("energy", {"reference": record["energy"]} if record.get("energy") else None),
                                   ("phase_s", {"torch_compile_ahead": record["torch_compile_ahead_s"]}
                                    if record.get("torch_compile_ahead_s") is not None else None)):
                    if value:
                        evidence[key] = value
                rows.append({"level": record["level"], "task": record["task"], "variant": "reference",
                             "evidence": evidence, "_hardware": hardware, "_ncu": record.get("ncu")})
                continue
            if record.get("candidate"):
                timing["candidate"] = record["candidate"]
            row = {key: record.get(key) for key in ("level", "task", "variant", "source", "source_hash", "solution_gpus",
                                                     "authors_speedup", "build_s")}
            row.update(_hardware=hardware, evidence={**kept, "timing": timing}, _ncu=record.get("ncu"))
            if any(record.get("reason", "").startswith(prefix) for prefix in REJUDGE) and record.get("candidate"):
                draws = int(record["reason"].split("Correct on ")[1].split(" ")[0]) if \
                    record["reason"].startswith("Correct on ") else 3
                row["evidence"].update(kernels_seen=True, draws=[{"index": i, "ok": True} for i in range(draws)],
                                       reference_ms=[record["reference"]["median_ms"]],
                                       candidate_ms=[record["candidate"]["median_ms"]], post_timing_ok=True)
            else:
                row["_recorded"] = {"status": record["status"], "reason": record["reason"],
                                    "notes": record.get("pytorch_notes") or [], "speedup": record.get("speedup")}
            rows.append(row)
    return rows


def carry_do_bench(earlier: dict | None, row: dict) -> dict:
    """A reference timed again without do_bench (a later call's torch.compile pass) keeps the earlier call's
    do_bench comparison: do_bench's samples with our reference median timed beside them in that call."""
    old = (earlier or {}).get("evidence") or {}
    evidence = row.get("evidence") or {}
    if row.get("variant") == "reference" and old.get("do_bench") and not evidence.get("do_bench"):
        beside = old.get("do_bench_reference") or (old.get("timing") or {}).get("reference")
        if beside:
            carried = {"do_bench": old["do_bench"], "do_bench_reference": beside}
            for key in ("do_bench_rounds", "do_bench_rounds_by_call"):
                if old.get(key):
                    carried[key] = old[key]
            row = {**row, "evidence": {**evidence, **carried}}
    return row


def rounds_by_call(evidence: dict) -> list[list[dict]]:
    """Every call's alternating rounds of a reference, oldest first (a record from before calls were kept
    apart holds one call's rounds as do_bench_rounds)."""
    if evidence.get("do_bench_rounds_by_call"):
        return evidence["do_bench_rounds_by_call"]
    return [evidence["do_bench_rounds"]] if evidence.get("do_bench_rounds") else []


def pool_rounds(earlier: dict | None, row: dict, merged_row: dict) -> dict:
    """The merged reference with this call's rounds added to the earlier calls' (a call summarized twice, the
    same rounds again, is not counted twice)."""
    new = (row.get("evidence") or {}).get("do_bench_rounds")
    prior = rounds_by_call((earlier or {}).get("evidence") or {})
    if row.get("variant") != "reference" or not new or not prior:
        return merged_row
    calls = prior if new in prior else [*prior, new]
    return {**merged_row, "evidence": {**merged_row["evidence"], "do_bench_rounds": new,
                                       "do_bench_rounds_by_call": calls}}


def pick_ncu(new: dict | None, earlier: dict | None) -> dict | None:
    """A later call's Nsight Compute metrics of a program, unless it failed where an earlier call's did not."""
    if new and ("kernels" in new or not (earlier and "kernels" in earlier)):
        return new
    return earlier or new


def candidate_rate(measured: int, elapsed: float | None, previous: Path) -> dict:
    """Candidates per GPU-minute of the last call that measured candidates: a call that only timed references
    (a torch.compile or do_bench pass) keeps the figure of the one before it."""
    keys = ("candidates_measured_in_the_last_call", "last_call_elapsed_s", "candidates_per_gpu_minute")
    if measured == 0 and previous.is_file():
        earlier = json.loads(previous.read_text())
        if earlier.get(keys[0]):
            return {key: earlier.get(key) for key in keys}
    return dict(zip(keys, (measured, elapsed, round(measured / (elapsed / 60), 2) if elapsed else None)))


def latest_result_value(key: str, results: Path):
    """A figure only some calls make (the bundled problems' measurements): the newest result file's that has it,
    so a later day's first summary does not drop it."""
    for path in sorted(results.glob("kernelbench_h200_*.json"), reverse=True):
        value = json.loads(path.read_text()).get(key)
        if value:
            return value
    return {}


def kept_from_last_call(key: str, new, previous: Path):
    """A per-call figure (what the last call that re-measured anything found): a call that re-measured nothing
    keeps the one before it."""
    if not new and previous.is_file():
        return json.loads(previous.read_text()).get(key, new)
    return new


def rounds_comparison(calls: list[list[dict]]) -> dict:
    """Our timer against do_bench over alternating rounds of both, every call's rounds pooled: the median of each
    timer's round medians, their difference, how far each timer's own rounds spread (max/min - 1), and each
    call's own signed difference (ours over do_bench - 1) beside them."""
    rounds = [r for call in calls for r in call]
    ours = [r["ours_median_ms"] for r in rounds]
    theirs = [r["do_bench_median_ms"] for r in rounds]
    ours_ms, theirs_ms = statistics.median(ours), statistics.median(theirs)
    per_call = [statistics.median(r["ours_median_ms"] for r in call)
                / statistics.median(r["do_bench_median_ms"] for r in call) - 1 for call in calls]
    return {"rounds": len(rounds), "calls": len(calls), "rounds_ours_median_ms": ours_ms,
            "rounds_do_bench_median_ms": theirs_ms, "rounds_rel_diff": abs(ours_ms - theirs_ms) / theirs_ms,
            "per_call_signed_rel_diff": per_call,
            "ours_round_spread": max(ours) / min(ours) - 1, "do_bench_round_spread": max(theirs) / min(theirs) - 1}


def cuda_l1_tasks(cuda_l1: Path) -> dict[tuple[int, int], set[str]]:
    """(level, task) of every task CUDA-L1 holds, with the source hashes of the solutions the recorder measures
    for it (its own reading: distinct code over the GPUs' files, at most five)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from kernelbench_h200 import read_tasks

    return {(t["level"], t["task"]): set(t["solutions"]) for t in read_tasks(cuda_l1, {1, 2, 3})}


def figures(lines: list[dict], imported: int, in_cuda_l1: dict[tuple[int, int], set[str]],
            do_bench_diffs: list[dict]) -> dict:
    """The result's headline figures over summarized records (all levels or one): tasks, candidates by
    verdict, failures by reason, builds, rank agreement with the authors' H100 speedups, do_bench check."""
    measured_tasks = {(r["level"], r["task"]) for r in lines if r["variant"] == "reference" and r.get("reference")}
    candidates = [r for r in lines if r["variant"] != "reference"]
    failed = Counter()
    for r in candidates:
        if r["status"] != "ok":
            reason = r["reason"].split(":")[0] if r["status"] == "rejected-guard" else r["status"]
            failed[f"{r['status']}: {reason[:60]}"] += 1
    builds = sorted(r["build_s"] for r in candidates if r.get("build_s"))
    pairs = [(r["speedup"], r["authors_speedup"]["h100"]) for r in candidates
             if r.get("speedup") and (r.get("authors_speedup") or {}).get("h100")]
    ok_pairs = [(r["speedup"], r["authors_speedup"]["h100"]) for r in candidates
                if r["status"] == "ok" and r.get("speedup") and (r.get("authors_speedup") or {}).get("h100")]
    timed = [r["speedup"] for r in candidates if r.get("speedup")]
    references = [r for r in lines if r["variant"] == "reference"]
    again = [r["timed_again"] for r in references if r.get("timed_again")]
    return {
        "tasks_imported": imported, "tasks_in_cuda_l1": len(in_cuda_l1), "tasks_measured": len(measured_tasks),
        "tasks_not_reached": len(set(in_cuda_l1) - measured_tasks),
        "candidates_in_cuda_l1": sum(len(v) for v in in_cuda_l1.values()),
        "candidates_not_measured": len({(t[0], t[1], h) for t, hashes in in_cuda_l1.items() for h in hashes}
                                       - {(r["level"], r["task"], r.get("source_hash")) for r in candidates}),
        "candidates": len(candidates), "candidates_correct": sum(1 for r in candidates if r["status"] == "ok"),
        "candidates_by_status": dict(Counter(r["status"] for r in candidates)),
        "candidates_failed": dict(failed.most_common()),
        "build_s_median": statistics.median(builds) if builds else None,
        "build_s_p90": builds[int(0.9 * (len(builds) - 1))] if builds else None,
        "measured_speedups": len(timed), "slower_than_eager": sum(1 for x in timed if x < 1.0),
        "spearman_h200_vs_authors_h100": spearman([a for a, _ in pairs], [b for _, b in pairs]),
        "spearman_pairs": len(pairs),
        "spearman_h200_vs_authors_h100_ok_only": spearman([a for a, _ in ok_pairs], [b for _, b in ok_pairs]),
        "torch_compile_baseline_tasks": sum(1 for r in references if "torch_compile" in (r.get("baselines") or {})),
        "references_timed_again": len(again),
        "references_timed_again_within_10pct": sum(1 for a in again if abs(a["ratio"] - 1) <= RETIMED_AGREEMENT),
        "references_timed_again_ratio_range": [min(a["ratio"] for a in again), max(a["ratio"] for a in again)]
        if again else None,
        "reference_vs_do_bench_tasks": len(do_bench_diffs),
        # over alternating rounds, every call's pooled, where calls ran them (every compared task since the
        # second 2026-12-01 session), else one do_bench call against our one timing
        "reference_vs_do_bench_max_rel_diff": max((d.get("rounds_rel_diff", d["rel_diff"]) for d in do_bench_diffs),
                                                  default=None),
        # the worst one call's rounds gave, for the calls pooled above
        "reference_vs_do_bench_max_rel_diff_worst_call": max((abs(x) for d in do_bench_diffs
                                                              for x in d.get("per_call_signed_rel_diff", [])),
                                                             default=None),
        "reference_vs_do_bench_max_rel_diff_single_call": max((d["rel_diff"] for d in do_bench_diffs), default=None),
        "do_bench_max_round_spread": max((d["do_bench_round_spread"] for d in do_bench_diffs
                                          if "do_bench_round_spread" in d), default=None),
        "ours_max_round_spread": max((d["ours_round_spread"] for d in do_bench_diffs if "ours_round_spread" in d),
                                     default=None),
        "ncu_recorded": sum(1 for r in lines if r.get("ncu") and "kernels" in r["ncu"]),
    }


# A reference timed again (a later call's torch.compile pass) replaces the earlier timing only when its eager
# median agrees within this; otherwise the earlier one stays and the new one is kept beside it, flagged. The
# 2026-12-01 level-3 call timed references while 6 compile workers ran models on the same GPU: 64 level-1/2
# references re-timed there came out 0.28x to 9.8x their earlier medians.
RETIMED_AGREEMENT = 0.10


def timed_again(earlier: dict | None, row: dict) -> dict:
    """The reference row to keep when `row` times again a reference `earlier` timed (see RETIMED_AGREEMENT)."""
    old = ((earlier or {}).get("evidence") or {}).get("timing", {}).get("reference")
    new = ((row.get("evidence") or {}).get("timing") or {}).get("reference")
    if row.get("variant") != "reference" or not old or not new:
        return row
    ratio = new["median_ms"] / old["median_ms"]
    again = {"ratio": ratio, "timing": row["evidence"]["timing"], "kept": "this" if abs(ratio - 1) <= RETIMED_AGREEMENT
             else "the earlier timing"}
    if row.get("clean_timing"):
        # timed with no compile beside it and PyTorch's default settings: it replaces the earlier timing, which
        # is kept beside it (the first calls timed beside compile workers, after solutions that switched TF32 on)
        earlier_timing = (earlier.get("evidence") or {}).get("timing") or {}
        again = {"ratio": ratio, "earlier_timing": earlier_timing, "kept": "this",
                 "why": "timed with no compile running and PyTorch's default settings"}
        # a baseline this call did not time (a do_bench pass times no torch.compile) stays from the earlier one
        carried = {k: v for k, v in earlier_timing.items() if k.startswith("baseline:") and k not in row["evidence"]["timing"]}
        if carried:
            again["baselines_from_the_earlier_timing"] = sorted(k.split(":", 1)[1] for k in carried)
        timing = {**row["evidence"]["timing"], **carried}
        return {**row, "evidence": {**row["evidence"], "timing": timing, "timed_again": again}}
    if again["kept"] == "this":
        return {**row, "evidence": {**row["evidence"], "timed_again": again}}
    kept = {**earlier["evidence"], "timed_again": again}
    if row["evidence"].get("do_bench"):
        # a do_bench comparison is made within one call: the new call's pair goes with the kept row
        kept.update(do_bench=row["evidence"]["do_bench"], do_bench_reference=new)
        if row["evidence"].get("do_bench_rounds"):
            kept["do_bench_rounds"] = row["evidence"]["do_bench_rounds"]
    return {**earlier, "evidence": kept}


def verdict_of(row: dict):
    from gpu_runner.kernelbench_verdict import SolutionVerdict

    if row.get("_recorded"):
        kept = row["_recorded"]
        return SolutionVerdict(kept["status"], kept["reason"], kept["notes"], kept["speedup"])
    return judge_solution(row.get("evidence") or {}, source=row.get("source"))


def spearman(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3:
        return None

    def ranks(values):
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    var = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return cov / var if var else None


# The calls that made the records, in order (the raw records of the earlier ones are gone: their summaries are
# the --base). R is kernellab/problems/kernelbench/records/h200.jsonl.gz as committed before the call.
CALLS = (
    "two device calls of python benchmarks/kernelbench_h200.py (level-1 tasks 2-76, the bundled problems), "
    "summarized into R",
    "python3 benchmarks/kernelbench_h200.py .kb-data/cuda-l1 OUT --levels 1 2 --skip-recorded R --remeasure-from R "
    "--do-bench-again 1:4 1:50 1:64 1:20 1:10 --compile-workers 3 --ncu-sample 3 --deadline-s 465 --jobs 12 "
    "(464 s; level-1/2 tasks complete)",
    "python3 benchmarks/kernelbench_h200.py .kb-data/cuda-l1 OUT --levels 3 --skip-recorded R --remeasure-from R "
    "--compile-again R --compile-workers 6 --ncu-sample 4 --do-bench-tasks 0 --deadline-s 300 --jobs 10 "
    "(297 s, deadline reached, 113 of 146 work items: the level-3 tasks, re-measures, torch.compile baselines "
    "of recorded references)",
    "TORCHINDUCTOR_COMPILE_THREADS=1 python3 benchmarks/kernelbench_h200.py .kb-data/cuda-l1 OUT --levels 1 2 3 "
    "--skip-recorded R --compile-again R --do-bench-again 1:4 1:10 1:20 1:50 1:64 1:78 1:80 1:82 1:84 1:86 "
    "--compile-workers 14 --compile-first 270 --ncu-sample 0 --deadline-s 570 (392 s; every reference without a "
    "torch.compile baseline compiled first, 97 in 153 s, then timed with no compile running; the do_bench tasks "
    "in alternating rounds)",
    "python3 benchmarks/kernelbench_h200.py .kb-data/cuda-l1 OUT --levels 1 2 3 --skip-recorded R --remeasure-timed R "
    "--compile-workers 0 --ncu-sample 0 --do-bench-tasks 0 --deadline-s 420 --jobs 14 (365 s; the 145 timed "
    "candidates measured again by the worker that restores PyTorch's default settings between programs)",
    "python3 benchmarks/kernelbench_h200.py .kb-data/cuda-l1 OUT --levels 1 --skip-recorded R --do-bench-again 1:4 "
    "1:10 1:20 1:50 1:64 1:78 1:80 1:82 1:84 1:86 --compile-workers 0 --ncu-sample 0 --deadline-s 70 (27 s; the "
    "do_bench tasks timed again with the ~100 us head start before each timed call)",
    "TORCHINDUCTOR_COMPILE_THREADS=1 python3 benchmarks/kernelbench_h200.py .kb-data/cuda-l1 OUT --levels 1 2 3 "
    "--skip-recorded R --retime-from R --do-bench-again 1:4 1:10 1:20 1:50 1:64 1:78 1:80 1:82 1:84 1:86 "
    "--compile-workers 14 --compile-first 150 --ncu-sample 3 --deadline-s 500 --jobs 12 (2026-12-02, 244 s; the 45 "
    "tasks whose reference ran below 0.1 ms timed again with the head start, reference, baselines (49 torch.compile "
    "first, in 22 s) and their 40 timed candidates; the do_bench tasks again; 3 programs under Nsight Compute)",
    "python3 benchmarks/kernelbench_h200.py .kb-data/cuda-l1 OUT --levels 1 --skip-recorded R --do-bench-again 1:4 "
    "1:10 1:20 1:50 1:64 1:78 1:80 1:82 1:84 1:86 --compile-workers 0 --ncu-sample 0 --max-reps 400 --deadline-s 120 "
    "(2026-12-02, 36 s; the do_bench tasks timed again with up to 400 timed runs a side instead of 40)",
    "python3 benchmarks/kernelbench_h200.py .kb-data/cuda-l1 OUT --levels 1 --skip-recorded R --do-bench-again 1:4 "
    "1:10 1:20 1:50 1:64 1:78 1:80 1:82 1:84 1:86 --compile-workers 0 --ncu-sample 0 --max-reps 400 --deadline-s 120 "
    "(2026-12-02, 37 s; the same, with the head start moved before the L2 flush)",
    "python3 benchmarks/kernelbench_h200.py .kb-data/cuda-l1 OUT --levels 1 --skip-recorded R --do-bench-again 1:4 "
    "1:10 1:20 1:50 1:64 1:78 1:80 1:82 1:84 1:86 --compile-workers 0 --ncu-sample 0 --max-reps 400 --deadline-s 200 "
    "(2026-12-02; the same, with up to 25 rounds of both timers where either one's rounds spread by more than 3%)",
    "python3 benchmarks/kernelbench_h200.py .kb-data/cuda-l1 OUT --levels 1 --skip-recorded R --do-bench-again 1:4 "
    "1:10 1:20 1:50 1:64 1:78 1:80 1:82 1:84 1:86 --compile-workers 0 --ncu-sample 0 --max-reps 400 --deadline-s 200, "
    "twice in one device call with benchmarks/probes/h200_2026-12-02/do_bench_gap.py between them (2026-12-02, 53 s "
    "and 58 s; from these on, every call's rounds are pooled with the earlier calls')",
)
# Why an extension did not build, by the compiler's message (the verdict's reason holds it).
BUILD_FAILURES = (
    ("load_inline was given functions= and a PYBIND11_MODULE of its own (redefinition)", r"redefinition of .*(PyInit|pybind11)"),
    ("its C++ declares no prototype of the CUDA function it binds (not declared)", r"was not declared in this scope"),
    ("an API older torch had (x.type() in AT_DISPATCH, at::cuda::getCurrentCUDAStream)",
     r"DeprecatedTypeProperties|getCurrentCUDAStream"),
    ("a build_directory under $HOME that did not exist (the build's fresh HOME; fixed since)", r"FileNotFoundError"),
    ("a wrong call of torch.utils.cpp_extension", r"unexpected keyword argument"),
    ("no compiler error line kept in the log (logs kept only their tail then)", r"no compiler error line"),
)


def _model_dump(source: str) -> str | None:
    """The reference's Model class without docstrings, as an AST dump (None if it does not parse)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            for item in ast.walk(node):
                if isinstance(item, (ast.FunctionDef, ast.ClassDef)) and item.body and \
                        isinstance(item.body[0], ast.Expr) and isinstance(item.body[0].value, ast.Constant):
                    item.body = item.body[1:] or [ast.Pass()]
            return ast.dump(node)
    return None


def reference_agreement(cuda_l1: Path, kernelbench: Path) -> dict[tuple[int, int], str]:
    """How CUDA-L1's copy of each task's reference (the one measured) compares with the KernelBench file the
    problem is named after: "same", "same model, other sizes or inputs", or "another model"."""
    files = {}
    for level_dir in kernelbench.glob("level*"):
        for file in level_dir.glob("*.py"):
            files[(int(level_dir.name[5:]), int(file.name.split("_", 1)[0]))] = file.read_text()
    out = {}
    path = cuda_l1 / "h100.jsonl"
    if not path.is_file():
        return out
    for line in path.open():
        row = json.loads(line)
        key = (row["level_id"], row["task_id"])
        theirs = files.get(key)
        if theirs is None:
            continue
        if theirs.strip() == row["ref_code"].strip():
            out[key] = "same"
        elif _model_dump(theirs) == _model_dump(row["ref_code"]):
            out[key] = "same model, other sizes or inputs"
        else:
            out[key] = "another model"
    return out


def build_failure_class(reason: str) -> str:
    import re

    return next((label for label, pattern in BUILD_FAILURES if re.search(pattern, reason)), "another compiler error")


def write_bundled_records(rows: list[dict]) -> dict:
    """Replay records of the project's own problems: MeasurementResult fields keyed by source hash."""
    from gpu_runner.spec import load_problem

    by_problem: dict[str, list[dict]] = {}
    summary: dict[str, dict] = {}
    for row in rows:
        by_problem.setdefault(row["problem"], []).append(row)
    for problem, problem_rows in by_problem.items():
        folder = ROOT / "kernellab" / "problems" / problem
        reference_source = load_problem(folder).reference.source
        lines = []
        for row in sorted(problem_rows, key=lambda r: (r["variant"] != "reference", r["variant"])):
            evidence = row.get("evidence") or {}
            timing = evidence.get("timing") or {}
            base = {"problem": problem, "variant": row["variant"], "backend": "torch", "size_case": "default",
                    "hardware_name": row["_hardware"].get("name"), "torch": row["_hardware"].get("torch"),
                    "reference": timing.get("reference"),
                    "baselines": {k.split(":", 1)[1]: v for k, v in timing.items() if k.startswith("baseline:")}}
            if row["variant"] == "reference":
                lines.append({**base, "status": "ok" if timing else "unavailable", "source": reference_source,
                              "source_hash": source_hash(reference_source), "candidate_name": "reference",
                              "candidate": timing.get("reference"), "speedup": 1.0 if timing else None,
                              "reason": "The reference program, timed as eager PyTorch." if timing else
                              (evidence.get("reference_error") or "")[-300:]})
                continue
            verdict = judge_solution(evidence, source=row.get("source"))
            lines.append({**base, "status": verdict.status, "reason": verdict.reason, "speedup": verdict.speedup,
                          "candidate": timing.get("candidate"), "source": row["source"],
                          "source_hash": row["source_hash"], "candidate_name": row["variant"].split(":", 1)[1],
                          "pytorch_notes": verdict.notes, "build_s": row.get("build_s"),
                          "evidence": {k: evidence[k] for k in KEEP + ("extension_builds",) if k in evidence}})
        summary[problem] = {
            "reference_ms": (lines[0].get("reference") or {}).get("median_ms") if lines else None,
            "baselines_ms": {k: v.get("median_ms") for k, v in (lines[0].get("baselines") or {}).items()} if lines else {},
            "candidates": {line["candidate_name"]: {"status": line["status"], "speedup": line["speedup"]}
                           for line in lines[1:]}}
        target = folder / "records" / "h200.jsonl.gz"
        target.parent.mkdir(parents=True, exist_ok=True)
        with _gzip_text(target) as handle:
            for line in lines:
                handle.write(json.dumps(line, separators=(",", ":"), default=str) + "\n")
    return summary


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("records", nargs="+")
    parser.add_argument("--kernelbench", required=True)
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    parser.add_argument("--cuda-l1", default=str(ROOT.parent / "shared" / "datasets" / "cuda-l1"),
                        help="CUDA-L1's folder: its copy of each reference is compared with KernelBench's")
    parser.add_argument("--base", help="summarized records to start from (kernelbench/records/h200.jsonl.gz)")
    parser.add_argument("--ncu-base", nargs="*", default=[],
                        help="earlier summarized records whose Nsight Compute readings are kept for programs that "
                             "have none (a summary before the carry above lost them)")
    parser.add_argument("--out", type=Path,
                        help="the JSON to write (default benchmarks/results/kernelbench_h200_<date>.json, which is also "
                             "read for what an earlier summary of that date kept)")
    args = parser.parse_args()
    if args.out is not None and args.out.is_dir():
        parser.error(f"--out {args.out} is a folder; give a file name (.json)")
    names = {}
    for level_dir in Path(args.kernelbench).glob("level*"):
        level = int(level_dir.name[5:])
        for file in level_dir.glob("*.py"):
            names[(level, int(file.name.split("_", 1)[0]))] = task_name(file.name, level)[0]
    agreement = reference_agreement(Path(args.cuda_l1), Path(args.kernelbench))
    merged: dict[tuple, dict] = {}
    hardware: dict = {}
    ncu: dict[tuple, dict] = {}
    ncu_calls: list[str] = []
    events = Counter()
    previous = ROOT / "benchmarks" / "results" / f"kernelbench_h200_{args.date}.json"
    earlier_do_bench = json.loads(previous.read_text()).get("reference_vs_do_bench", []) if previous.is_file() else []
    if args.base:
        for row in base_rows(Path(args.base)):
            merged[(row["level"], row["task"], row["variant"])] = row
            hardware = row["_hardware"]
    for path in args.records:
        clean = False
        for line in open(path):
            row = json.loads(line) if line.strip() else {}
            if "compile_phase" in row:
                # every torch.compile of this call ran before its timings (its rows predate "clean_timing")
                clean = True
            if clean and row.get("variant") == "reference":
                row["clean_timing"] = True
            if "worker" in row:
                hardware = {"name": row["worker"][1].get("gpu"), "torch": row["worker"][1].get("torch")}
            elif "ncu_pass" in row:
                ncu_calls.append(row["ncu_pass"])
            elif "ncu" in row:
                ncu[(row["level"], row["task"], row["variant"])] = row["ncu"]
            elif "variant" in row:
                key = (row["level"], row["task"], row["variant"])
                earlier = merged.get(key)
                merged[key] = pool_rounds(earlier, row,
                                          timed_again(earlier, carry_do_bench(earlier, {**row, "_hardware": hardware})))
                if earlier and earlier.get("_ncu") and not merged[key].get("_ncu"):
                    # a program measured again keeps the Nsight Compute reading of an earlier call (a later
                    # call's own reading of it, merged below, wins); the 2026-12-01 re-timings dropped all three
                    merged[key]["_ncu"] = earlier["_ncu"]
            else:
                events.update(k for k in row if k in ("build_not_finished", "deferred_not_measured"))
    for path in args.ncu_base:
        for row in base_rows(Path(path)):
            key = (row["level"], row["task"], row["variant"])
            if row.get("_ncu") and key in merged and not merged[key].get("_ncu"):
                merged[key]["_ncu"] = row["_ncu"]
    # the last call that measured candidates, with its own elapsed time (a later call that only timed
    # references, a do_bench pass, must not lend its short run to another call's candidates)
    last_call, elapsed = 0, None
    for path in args.records:
        measured_here, elapsed_here = 0, None
        for line in open(path):
            row = json.loads(line) if line.strip() else {}
            if "elapsed_s" in row:
                elapsed_here = row["elapsed_s"]
            elif row.get("variant") not in (None, "reference") and "wall_s" in row:
                measured_here += 1
        if measured_here:
            last_call, elapsed = measured_here, elapsed_here
    rows = [row for row in merged.values() if (row.get("source") or "").strip() != "None"]
    no_code = len(merged) - len(rows)   # CUDA-L1's "None" solutions, measured by the first calls before they were skipped
    bundled = [row for row in rows if row.get("problem")]
    rows = [row for row in rows if not row.get("problem")]
    bundled_summary = write_bundled_records(bundled)
    tasks, out_lines = set(), []
    do_bench_diffs, wall = [], 0.0
    unwatched = Counter()
    not_compiled, remeasured, build_failures = Counter(), Counter(), Counter()
    for row in rows:
        hardware = row["_hardware"]
        evidence = row.get("evidence") or {}
        problem = names.get((row["level"], row["task"]), f"kb{row['level']}_{row['task']}")
        wall += row.get("wall_s") or 0.0
        record = {"problem": problem, "level": row["level"], "task": row["task"], "variant": row["variant"],
                  "hardware": {"name": hardware.get("name")}, "torch": hardware.get("torch"), "backend": "torch",
                  "reference_vs_kernelbench": agreement.get((row["level"], row["task"]))}
        if row["variant"] == "reference":
            timing = evidence.get("timing") or {}
            if timing.get("reference"):
                tasks.add((row["level"], row["task"]))
            record.update(status="ok" if timing else "unavailable", reference=timing.get("reference"),
                          baselines={k.split(":", 1)[1]: v for k, v in timing.items() if k.startswith("baseline:")},
                          reason=(evidence.get("reference_error") or "")[-300:])
            record.update(energy=(evidence.get("energy") or {}).get("reference"),
                          baseline_errors=evidence.get("baseline_errors") or {},
                          torch_compile_ahead_s=(evidence.get("phase_s") or {}).get("torch_compile_ahead"))
            if "baseline:torch_compile" not in timing and "torch_compile" in record["baseline_errors"]:
                not_compiled[record["baseline_errors"]["torch_compile"][:70]] += 1
            beside = evidence.get("do_bench_reference") or timing.get("reference")
            if evidence.get("do_bench") and beside:
                # the same statistic on both sides: our median against the median of do_bench's samples, both
                # from the call that ran do_bench (a later re-timing of the reference keeps that pair)
                ours, theirs = beside["median_ms"], evidence["do_bench"]["median_ms"]
                do_bench_diffs.append({"problem": problem, "level": row["level"], "ours_median_ms": ours,
                                       "do_bench_median_ms": theirs, "rel_diff": abs(ours - theirs) / theirs,
                                       "ours_cv": beside.get("cv"),
                                       "reference_timed_again_since": bool(evidence.get("do_bench_reference")),
                                       "do_bench_mean_ms": evidence["do_bench"]["mean_ms"], "do_bench_n": evidence["do_bench"]["n"],
                                       "mean_vs_our_median_rel_diff": abs(ours - evidence["do_bench"]["mean_ms"])
                                       / evidence["do_bench"]["mean_ms"]})
            rounds = evidence.get("do_bench_rounds")
            calls = rounds_by_call(evidence)
            if evidence.get("do_bench") and beside and calls:
                do_bench_diffs[-1].update(rounds_comparison(calls))
            record["do_bench"] = evidence.get("do_bench")
            if rounds:
                record["do_bench_rounds"] = rounds
            if len(calls) > 1:
                record["do_bench_rounds_by_call"] = calls
            if evidence.get("do_bench_reference"):
                record["do_bench_reference"] = evidence["do_bench_reference"]
            if evidence.get("timed_again"):
                record["timed_again"] = evidence["timed_again"]
            record["ncu"] = pick_ncu(ncu.get((row["level"], row["task"], row["variant"])), row.get("_ncu"))
            out_lines.append(record)
            continue
        verdict = verdict_of(row)
        if verdict.status == "failed-compile":
            build_failures[build_failure_class(verdict.reason)] += 1
        if verdict.reason.startswith("No kernel of the solution's own") and "extension_builds" not in evidence:
            # measured before builds were watched: a caught build failure and a kernel never called look alike
            unwatched["with_load_inline" if "load_inline" in row["source"] else "without_load_inline"] += 1
        timing = evidence.get("timing") or {}
        record.update(source_hash=row["source_hash"], source=row["source"], solution_gpus=row["solution_gpus"],
                      authors_speedup=row["authors_speedup"], build_s=row.get("build_s"), status=verdict.status,
                      reason=verdict.reason, pytorch_notes=verdict.notes, speedup=verdict.speedup,
                      reference=timing.get("reference"), candidate=timing.get("candidate"),
                      evidence={k: evidence[k] for k in KEEP if k in evidence},
                      energy=evidence.get("energy"),
                      ncu=pick_ncu(ncu.get((row["level"], row["task"], row["variant"])), row.get("_ncu")))
        if row.get("remeasure"):
            remeasured[f"{verdict.status}: {verdict.reason.split(':')[0][:60]}"] += 1
        out_lines.append(record)
    target = ROOT / "kernellab" / "problems" / "kernelbench" / "records" / "h200.jsonl.gz"
    target.parent.mkdir(parents=True, exist_ok=True)
    with _gzip_text(target) as handle:
        for record in out_lines:
            handle.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
    measured = [r for r in out_lines if r["variant"] != "reference" and r.get("speedup")]
    cuda_l1 = cuda_l1_tasks(Path(args.cuda_l1))
    levels = sorted({level for level, _ in names} | {level for level, _ in cuda_l1})
    by_level = {str(level): figures([r for r in out_lines if r["level"] == level],
                                    sum(1 for lv, _ in names if lv == level), {t: v for t, v in cuda_l1.items() if t[0] == level},
                                    [d for d in do_bench_diffs if d["level"] == level]) for level in levels}
    summary_command = "python benchmarks/kernelbench_h200_summarize.py " + " ".join(sys.argv[1:])
    result = {
        "date": args.date, "gpu": hardware.get("name"), "torch": hardware.get("torch"),
        "command": [*CALLS, *(f"ncu pass: {call}" for call in ncu_calls), summary_command],
        **figures(out_lines, len(names), cuda_l1, do_bench_diffs),
        "by_level": by_level,
        "dataset_entries_without_code_dropped": no_code,
        "failed_compile_by_cause": dict(build_failures),
        "cuda_l1_reference_vs_kernelbench": dict(Counter(agreement[t] for t in tasks if t in agreement)),
        "no_own_kernel_measured_before_builds_were_watched": dict(unwatched),
        **candidate_rate(last_call, elapsed, previous),
        "remeasured_early_verdicts": kept_from_last_call("remeasured_early_verdicts", dict(remeasured), previous),
        "build_not_finished_or_deferred": dict(events),
        "torch_compile_baseline_missing": dict(not_compiled),
        "energy_recorded": sum(1 for r in out_lines if r["variant"] != "reference" and (r.get("energy") or {}).get("candidate", {}).get("j_per_call")),
        "speedup_quartiles": statistics.quantiles([r["speedup"] for r in measured], n=4) if len(measured) >= 4 else None,
        "reference_vs_do_bench": do_bench_diffs,
        "reference_vs_do_bench_rule": "our reference median against the median of do_bench(warmup=25, rep=200, "
                                      "return_mode='all'); where the call ran alternating rounds of both timers "
                                      "(gpu_runner.pytorch_worker: at least DO_BENCH_ROUNDS, up to DO_BENCH_MAX_ROUNDS while either "
                                      "timer's own rounds spread by more than DO_BENCH_SPREAD), the median of each "
                                      "timer's round medians over every call's rounds pooled (rounds_rel_diff; each "
                                      "call's own in per_call_signed_rel_diff, the worst in "
                                      "reference_vs_do_bench_max_rel_diff_worst_call), since one do_bench call's median on a "
                                      "few-us op moves by more than 3% from call to call (do_bench_round_spread); the first "
                                      "figure compared our median with do_bench's default mean (kept as "
                                      "reference_vs_do_bench_mean_earlier)",
        "reference_vs_do_bench_mean_earlier": [d for d in earlier_do_bench if "do_bench_ms" in d] or
                                              json.loads(previous.read_text()).get("reference_vs_do_bench_mean_earlier", [])
                                              if previous.is_file() else [],
        "bundled_problems": bundled_summary or latest_result_value("bundled_problems", previous.parent),
    }
    results = args.out or ROOT / "benchmarks" / "results" / f"kernelbench_h200_{args.date}.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "reference_vs_do_bench"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
