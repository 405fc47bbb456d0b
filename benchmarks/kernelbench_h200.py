"""Measure CUDA-L1's LLM-written KernelBench solutions on this GPU: the reference (eager PyTorch), its
CUDA-graph and torch.compile baselines, and each GPU's distinct solution (up to five per task).

    python benchmarks/kernelbench_h200.py CUDA_L1_DIR OUT_DIR [--levels 1 2] [--deadline-s 540] [--limit N]
        [--bundled kernellab/problems/kb_*] [--skip 1:2 1:4 ...] [--skip-recorded RECORDS_GZ]
        [--remeasure-from RECORDS_GZ] [--do-bench-again 1:4 1:50 ...] [--compile-workers 2] [--ncu-sample 4]

--skip-recorded skips the tasks whose reference a records file (kernelbench/records/h200.jsonl.gz) holds;
--remeasure-from measures again, first, that file's candidates that use an extension but were measured
before extension builds were watched (no "extension_builds" in their evidence); --do-bench-again times
those tasks' references again beside triton's do_bench (every sample, compared by median).
--compile-workers: processes that compile each task's reference with torch.compile ahead of the GPU worker
into a shared inductor cache (TORCHINDUCTOR_CACHE_DIR), so that the worker's torch.compile baseline is a
cache hit; a task whose compile has not finished when the worker reaches it gets no torch.compile
baseline, and its reference record says so ("baseline_errors").
--compile-again RECORDS_GZ: that file's references without a torch.compile baseline are timed again with one.
--compile-first SECONDS: every torch.compile of the list runs before any timing (up to SECONDS), then the compile
workers stop, so that no timing shares the GPU or the CPU with a compile.
--remeasure-timed RECORDS_GZ: that file's candidates that were timed are measured again, first.
--retime-from RECORDS_GZ [--retime-below MS]: that file's tasks whose reference median is below MS (0.1) are
timed again, reference with its baselines and each timed candidate (launch-bound tasks, whose timing the
head start before each timed call changed).
--ncu-sample: Nsight Compute metrics of one forward of that many candidates that ran correct and were timed
(verdict "ok" first, then PyTorch-level rewrites: before 2026-12-01 only "ok" ones were taken, and calls with
none profiled nothing), spread over the run, if time is left before the deadline.
--ncu-from RECORDS_GZ: only that: Nsight Compute on --ncu-sample recorded programs (ncu_sample: per level the
fastest correct candidate that needs no extension build, with its task's reference), in sequence, into
OUT_DIR/records.jsonl for the summarizer to merge; no measurement.

--bundled measures the project's own KernelBench-format problems first (each folder's reference.py and
candidates/*.py), recorded under the folder's name.

Builds all solutions first in parallel (each in a compile-sandboxed subprocess, cached by source hash),
measures task by task in a sandboxed worker child, and appends one JSON line per measurement to
OUT_DIR/records.jsonl as it goes (so a deadline leaves what was done). Needs torch and a GPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import gzip
import json
import multiprocessing
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_runner.kernelbench_verdict import _EXTENSION_CALL, judge_solution  # noqa: E402
from gpu_runner.pytorch_worker import build_dir, build_solution  # noqa: E402
from gpu_runner.sandbox import Sandbox, SandboxFault  # noqa: E402
from gpu_runner.settings import MeasureSettings  # noqa: E402

GPUS = ("h100", "a100", "l40", "3090", "h20")
SETTINGS = MeasureSettings(validation_sets=3, warmup=2, min_reps=10, max_reps=40, target_timing_ms=40.0,
                           escape_runs=3)


def read_tasks(folder: Path, levels: set[int]) -> list[dict]:
    tasks: dict[tuple, dict] = {}
    for gpu in GPUS:
        path = folder / f"{gpu}.jsonl"
        if not path.is_file():
            continue
        for line in path.open():
            row = json.loads(line)
            if row["level_id"] not in levels:
                continue
            task = tasks.setdefault((row["level_id"], row["task_id"]), {"level": row["level_id"], "task": row["task_id"],
                                                                         "reference": row["ref_code"], "solutions": {}})
            if not row.get("custom_code") or row["custom_code"].strip() == "None":
                continue   # CUDA-L1 writes the text "None" where a GPU has no solution for the task
            digest = hashlib.sha256(row["custom_code"].encode()).hexdigest()
            entry = task["solutions"].setdefault(digest, {"source": row["custom_code"], "gpus": [], "authors": {}})
            entry["gpus"].append(gpu)
            try:
                entry["authors"][gpu] = float(row["score_default"])
            except (TypeError, ValueError):
                pass
    out = [tasks[k] for k in sorted(tasks)]
    for task in out:
        task["solutions"] = dict(list(task["solutions"].items())[:5])
    return out


def bundled_task(folder: Path) -> dict:
    solutions = {}
    for path in sorted((folder / "candidates").glob("*.py")):
        source = path.read_text()
        solutions[hashlib.sha256(source.encode()).hexdigest()] = {"source": source, "gpus": [], "authors": {},
                                                                   "name": path.stem}
    return {"level": 0, "task": folder.name, "problem": folder.name, "reference": (folder / "reference.py").read_text(),
            "solutions": solutions}


def precompile(jobs: list[tuple[str, str]], marks: str) -> None:
    """torch.compile each reference once (a compile worker process): the compiled code lands in the shared
    inductor cache; a mark file <key>.ok (seconds) or <key>.err (the error) tells the GPU worker."""
    import torch

    from gpu_runner.pytorch_worker import _load_program

    for key, reference in jobs:
        started = time.perf_counter()
        try:
            module, _ = _load_program(reference, "kernelbench_reference", None)
            torch.manual_seed(0)
            model = module.Model(*module.get_init_inputs()).cuda().eval()
            inputs = [v.cuda() if isinstance(v, torch.Tensor) else v for v in module.get_inputs()]
            with torch.no_grad():
                torch.compile(model)(*inputs)
            torch.cuda.synchronize()
            Path(marks, f"{key}.ok").write_text(f"{time.perf_counter() - started:.2f}\n")
        except Exception as exc:  # noqa: BLE001 - reported to the worker through the mark
            Path(marks, f"{key}.err").write_text(f"{type(exc).__name__}: {str(exc)[:300]}\n")
        torch._dynamo.reset()


def compile_ahead(jobs: list[tuple[str, str]], marks: Path, compilers: list, limit_s: float) -> dict:
    """Wait until every job has its mark or `limit_s` has passed, then stop the compile workers, so that no
    timing runs while torch.compile runs models on the same GPU (the 2026-12-01 level-3 call timed references
    beside 6 compile workers: 29 of 64 re-timed references came out 0.28x-9.8x their earlier medians)."""
    started = time.monotonic()
    keys = [key for key, _ in jobs]
    while time.monotonic() - started < limit_s and any(p.is_alive() for p in compilers):
        if all((marks / f"{k}.ok").exists() or (marks / f"{k}.err").exists() for k in keys):
            break
        time.sleep(1.0)
    for process in compilers:
        process.terminate()
    for process in compilers:
        process.join(10)
    done = sum(1 for k in keys if (marks / f"{k}.ok").exists())
    failed = sum(1 for k in keys if (marks / f"{k}.err").exists())
    summary = {"jobs": len(keys), "compiled": done, "failed": failed, "not_finished": len(keys) - done - failed,
               "seconds": round(time.monotonic() - started, 1), "workers": len(compilers)}
    print(f"compile phase: {summary}", flush=True)
    return summary


# argv: the reference file and the solution file, or "-" to profile the reference's Model itself
NCU_CHILD = """
import os, sys, torch
from gpu_runner.pytorch_worker import _load_program
ref, _ = _load_program(open(sys.argv[1]).read(), "kernelbench_reference", None)
if sys.argv[2] == "-":
    program = ref.Model
else:
    program = _load_program(open(sys.argv[2]).read(), "kernelbench_solution", os.environ["KL_EXTENSIONS"])[0].ModelNew
torch.manual_seed(0)
model = program(*ref.get_init_inputs()).cuda().eval()
inputs = [v.cuda() if isinstance(v, torch.Tensor) else v for v in ref.get_inputs()]
with torch.no_grad():
    model(*inputs)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    model(*inputs)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
"""
NCU_METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
               "sm__throughput.avg.pct_of_peak_sustained_elapsed",
               "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
               "sm__warps_active.avg.pct_of_peak_sustained_active", "launch__registers_per_thread",
               "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum")


def ncu_metrics(reference: str, solution: str | None, extensions: Path | None, timeout_s: float,
                folder: Path) -> dict:
    """Nsight Compute (clocks left as they are) on one forward of ModelNew (of the reference's Model when
    `solution` is None): {"kernels": [{name, metric: value}]}, or {"error": why}."""
    from gpu_runner.compiler import ToolMissing, find_tool
    from gpu_runner.observers.ncu import parse_raw_csv

    try:
        ncu = find_tool("ncu")
    except ToolMissing as exc:
        return {"error": str(exc)}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ncu_reference.py").write_text(reference)
    if solution is not None:
        (folder / "ncu_solution.py").write_text(solution)
    env = dict(os.environ, KL_EXTENSIONS=str(extensions or folder / "ext"), TORCH_CUDA_ARCH_LIST="9.0",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]))
    command = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "raw",
               "--print-units", "base", "--metrics", ",".join(NCU_METRICS), "--launch-count", "20",
               sys.executable, "-c", NCU_CHILD, str(folder / "ncu_reference.py"),
               str(folder / "ncu_solution.py") if solution is not None else "-"]
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"ncu did not finish within {timeout_s:.0f} s"}
    kernels = parse_raw_csv(run.stdout)
    if not kernels:
        return {"error": f"ncu exited with {run.returncode} and no rows: {(run.stderr or run.stdout)[-300:]}"}
    return {"kernels": [{"name": name[:200], **metrics} for name, metrics in kernels]}


def ncu_sample(rows: list[dict], count: int, reference_ms_below: float = 5.0) -> list[dict]:
    """Recorded programs for an Nsight Compute pass: level by level (round robin), the fastest candidate that ran
    correct and was timed and needs no extension build (no load_inline and the like: nothing to build on a
    fresh machine), its reference beside it, tasks whose reference takes under `reference_ms_below` only."""
    references = {(r["level"], r["task"]): r for r in rows if r.get("variant") == "reference" and r.get("reference")}
    by_level: dict[int, list[dict]] = {}
    for row in rows:
        reference = references.get((row.get("level"), row.get("task")))
        if row.get("variant") == "reference" or not row.get("speedup") or not row.get("source") or reference is None \
                or _EXTENSION_CALL.search(row["source"]) or reference["reference"]["median_ms"] >= reference_ms_below:
            continue
        by_level.setdefault(row["level"], []).append(row)
    for candidates in by_level.values():
        candidates.sort(key=lambda r: (r["status"] != "ok", -r["speedup"], r["variant"]))
    out: list[dict] = []
    while len(out) < count and any(by_level.values()):
        for level in sorted(by_level):
            if by_level[level] and len(out) < count:
                row = by_level[level].pop(0)
                out.append(row)
                if len(out) < count:
                    out.append(references[(row["level"], row["task"])])
    return out


def ncu_pass(rows: list[dict], out: Path, deadline_s: float, started: float, command: str) -> None:
    """Nsight Compute on the ncu_sample programs, one after another, each line written as it comes."""
    root = Path(os.environ.get("KL_BUILD_ROOT", "/tmp/kl-kernelbench-builds")) / "ncu"
    with (out / "records.jsonl").open("a") as records:
        for index, row in enumerate(rows):
            left = deadline_s - (time.monotonic() - started)
            if left < 20:
                records.write(json.dumps({"ncu_not_reached": f"{row['level']}:{row['task']}:{row['variant']}"}) + "\n")
                continue
            candidate = row["variant"] != "reference"
            metrics = ncu_metrics(row["reference_source"], row["source"] if candidate else None, None,
                                  min(60.0, left - 10), root / str(index))
            records.write(json.dumps({"ncu": metrics, "level": row["level"], "task": row["task"],
                                      "variant": row["variant"]}, separators=(",", ":")) + "\n")
            records.flush()
        records.write(json.dumps({"ncu_pass": command}) + "\n")


def recorded(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with gzip.open(path, "rt") as handle:
        return [json.loads(line) for line in handle if line.strip()]


# Recorded failed builds worth building again: the log kept no compiler error line (logs kept only their tail
# before 2026-12-01's fix), or the build failed for the build's own fresh HOME (fixed since).
AGAIN_BUILDS = ("no compiler error line was kept", "FileNotFoundError(")


def to_remeasure(rows: list[dict], tasks: dict[tuple[int, int], dict] | None = None) -> set[tuple[int, int, str]]:
    """(level, task, source hash) of recorded candidates to measure again: those that use an extension but were
    measured before extension builds were watched (their "no kernel of its own" could be a caught build
    failure), failed builds of AGAIN_BUILDS, and, given the dataset's `tasks`, the solutions of a recorded task
    that have no record (deferred or cut by a deadline)."""
    out = {(r["level"], r["task"], r["source_hash"]) for r in rows
           if r.get("variant") != "reference" and r.get("source") and
           ("extension_builds" not in (r.get("evidence") or {}) and _EXTENSION_CALL.search(r["source"])
            and r.get("status") in ("rejected-guard", "ok")
            or r.get("status") == "failed-compile" and any(a in r.get("reason", "") for a in AGAIN_BUILDS))}
    if tasks:
        have = {(r["level"], r["task"], r.get("source_hash")) for r in rows}
        for level, task in {(r["level"], r["task"]) for r in rows if r.get("variant") == "reference"}:
            for digest in (tasks.get((level, task)) or {}).get("solutions", {}):
                if (level, task, digest) not in have:
                    out.add((level, task, digest))
    return out


def timed_candidates(rows: list[dict]) -> set[tuple[int, int, str]]:
    """(level, task, source hash) of recorded candidates that were timed: measured again by --remeasure-timed,
    with the worker that restores PyTorch's default settings between programs (before 2026-12-01 a solution's
    "allow_tf32 = True" stayed on for every later program of the worker) and no compile running beside it."""
    return {(r["level"], r["task"], r["source_hash"]) for r in rows
            if r.get("variant") != "reference" and r.get("source") and r.get("candidate")}


def launch_bound(rows: list[dict], below_ms: float) -> list[tuple[int, int]]:
    """Recorded tasks whose reference's median is below `below_ms`: the ones whose timing the head start
    (the ~100 us of GPU work queued before each timed call, gpu_runner.pytorch_worker) changes, since
    without it the host's launch time of a few-us op is timed too."""
    return sorted((r["level"], r["task"]) for r in rows if r.get("variant") == "reference" and r.get("reference")
                  and r["reference"]["median_ms"] < below_ms)


def without_compile_baseline(rows: list[dict]) -> list[tuple[int, int]]:
    """Recorded tasks whose reference has no torch.compile baseline."""
    return sorted((r["level"], r["task"]) for r in rows
                  if r.get("variant") == "reference" and r.get("reference") and
                  "torch_compile" not in (r.get("baselines") or {}))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("cuda_l1")
    parser.add_argument("out")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--skip", nargs="*", default=[], help="tasks already measured, as LEVEL:TASK")
    parser.add_argument("--skip-recorded", help="a records file whose tasks are skipped")
    parser.add_argument("--remeasure-from", help="a records file whose unwatched extension candidates go first")
    parser.add_argument("--remeasure-timed", help="a records file whose timed candidates are measured again first")
    parser.add_argument("--do-bench-again", nargs="*", default=[], help="recorded tasks (LEVEL:TASK) to time again "
                                                                        "beside do_bench")
    parser.add_argument("--bundled", nargs="*", default=[], help="folders of the project's own problems")
    parser.add_argument("--compile-again", help="a records file whose references without a torch.compile baseline "
                                                "are timed again with one")
    parser.add_argument("--retime-from", help="a records file: its tasks whose reference was timed below --retime-below "
                                              "ms are timed again (reference, baselines, timed candidates)")
    parser.add_argument("--retime-below", type=float, default=0.1, metavar="MS")
    parser.add_argument("--compile-workers", type=int, default=2)
    parser.add_argument("--compile-first", type=float, default=0.0, metavar="SECONDS",
                        help="compile every reference with torch.compile before any timing, for up to SECONDS, then "
                             "stop the compile workers: no timing overlaps a compile (0: compile alongside, as before)")
    parser.add_argument("--do-bench-tasks", type=int, default=10, help="level-1 tasks timed beside do_bench, "
                                                                       "--do-bench-again ones included")
    parser.add_argument("--ncu-sample", type=int, default=4)
    parser.add_argument("--ncu-from", help="a records file: only profile --ncu-sample of its programs with ncu")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 3))
    parser.add_argument("--max-reps", type=int, default=SETTINGS.max_reps,
                        help="timed runs per side at most (the protocol's 40 ms of timing reaches it for any side "
                             "faster than 1 ms: a few-us op's median over 40 runs moves by ~10%% between rounds)")
    args = parser.parse_args()
    settings = dataclasses.replace(SETTINGS, max_reps=args.max_reps)
    started = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    everything = read_tasks(Path(args.cuda_l1), set(args.levels) | {1, 2})
    by_key = {(t["level"], t["task"]): t for t in everything}
    if args.ncu_from:
        sample = [{**row, "reference_source": by_key[(row["level"], row["task"])]["reference"]}
                  for row in ncu_sample(recorded(Path(args.ncu_from)), args.ncu_sample)
                  if (row["level"], row["task"]) in by_key]
        print("ncu sample:", ", ".join(f"{r['level']}:{r['task']}:{r['variant']}" for r in sample), flush=True)
        ncu_pass(sample, out, args.deadline_s, started, "python3 " + " ".join(sys.argv))
        print(f"done in {time.monotonic() - started:.0f} s; {len(sample)} programs profiled")
        return 0
    skip = set(args.skip) | {f"{r['level']}:{r['task']}" for r in recorded(Path(args.skip_recorded or "-"))
                             if r.get("variant") == "reference"}
    again = [tuple(map(int, k.split(":"))) for k in args.do_bench_again]
    retime = set(launch_bound(recorded(Path(args.retime_from or "-")), args.retime_below))
    remeasure = sorted(to_remeasure(recorded(Path(args.remeasure_from or "-")), by_key)
                       | timed_candidates(recorded(Path(args.remeasure_timed or "-")))
                       | {c for c in timed_candidates(recorded(Path(args.retime_from or "-"))) if c[:2] in retime})
    # The work list, in the order measured: re-measures, do_bench again, then the new tasks.
    work: list[dict] = []
    for level, task, digest in remeasure:
        source_task = by_key.get((level, task))
        if source_task and digest in source_task["solutions"]:
            work.append({**source_task, "solutions": {digest: source_task["solutions"][digest]}, "candidates_only": True,
                         "remeasure": True})
    for key in again:
        if key in by_key:
            work.append({**by_key[key], "solutions": {}, "do_bench": True, "again": True})
    new = [t for t in everything if t["level"] in set(args.levels) and f"{t['level']}:{t['task']}" not in skip]
    new = [bundled_task(Path(folder)) for folder in args.bundled] + new[: args.limit]
    if args.compile_again:
        # references of recorded tasks timed again with their torch.compile baseline (last: the compile workers
        # start from the far end of the list, so these are compiled first)
        new += [{**by_key[key], "solutions": {}} for key in without_compile_baseline(recorded(Path(args.compile_again)))
                if key in by_key]
    # references timed again (with their torch.compile baseline); a do_bench-again task is timed there already
    new += [{**by_key[key], "solutions": {}} for key in sorted(retime) if key in by_key and key not in again]
    level1_left = max(0, args.do_bench_tasks - len(again))
    for task in new:
        if task["level"] == 1 and level1_left:
            task["do_bench"] = True
            level1_left -= 1
        work.append(task)
    root = Path(os.environ.get("KL_BUILD_ROOT", "/tmp/kl-kernelbench-builds"))
    marks = Path(os.environ.setdefault("KL_COMPILE_MARKS", "/tmp/kl-compile-marks"))
    marks.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", "/tmp/kl-inductor-cache")
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "2")
    # From the far end of the list: a compile takes ~5x as long as the worker's measurement of a task (all 67
    # references of the 2026-12-01 call were reached before any compile in list order had finished), so the
    # compile workers meet the GPU worker instead of trailing it; the late pass below times the rest.
    compile_jobs = [(f"{t['level']}_{t['task']}", t["reference"]) for t in work if not t.get("candidates_only")][::-1]
    context = multiprocessing.get_context("spawn")
    compilers = [context.Process(target=precompile, args=(compile_jobs[i::args.compile_workers], str(marks)), daemon=True)
                 for i in range(args.compile_workers)]
    for process in compilers:
        process.start()
    compile_phase = compile_ahead(compile_jobs, marks, compilers, args.compile_first) if args.compile_first else None
    pool = ThreadPoolExecutor(args.jobs)
    builds = {digest: pool.submit(build_solution, s["source"], root) for t in work for digest, s in t["solutions"].items()}
    records = (out / "records.jsonl").open("a")
    if compile_phase:
        records.write(json.dumps({"compile_phase": compile_phase}) + "\n")
    worker = Sandbox("gpu_runner.pytorch_worker:serve", host_memory_bytes=64 << 30)
    correct: list[dict] = []   # candidates that ran correct and were timed: what the ncu sample profiles

    def request(job: dict, timeout_s: float) -> dict:
        try:
            if not worker.alive:
                write({"worker": worker.start()})
            kind, evidence = worker.request(("measure", job), timeout_s)
            return evidence
        except SandboxFault as fault:
            return {"runtime_error": f"{fault.kind}: {fault.reason}"}

    def write(line: dict) -> None:
        records.write(json.dumps(line, separators=(",", ":"), default=str) + "\n")
        records.flush()

    def left() -> float:
        return args.deadline_s - (time.monotonic() - started)

    def measure_candidate(task: dict, digest: str, solution: dict, build: dict) -> None:
        variant = f"bundled:{solution['name']}" if task.get("problem") else f"cuda-l1:{digest[:10]}"
        base = {"level": task["level"], "task": task["task"], "problem": task.get("problem"), "variant": variant,
                "source_hash": digest, "source": solution["source"], "solution_gpus": solution["gpus"],
                "authors_speedup": solution["authors"], "build_s": build["seconds"], "build_cached": build.get("cached"),
                "extensions_built": build.get("extensions_built"), "remeasure": bool(task.get("remeasure"))}
        if not build["ok"]:
            evidence = {"refusal": build["log"]} if build.get("refused") else {"build_error": build["log"]}
        else:
            t0 = time.monotonic()
            evidence = request({"reference": task["reference"], "solution": solution["source"], "settings": settings,
                                "extensions": build_dir(root, solution["source"]) / "ext"},
                               max(20.0, min(180.0, left())))
            base["wall_s"] = time.monotonic() - t0
        verdict = judge_solution(evidence, settings, source=solution["source"])
        if verdict.speedup is not None:
            correct.append({"task": task, "digest": digest, "solution": solution, "ok": verdict.status == "ok"})
        write({**base, "status": verdict.status, "reason": verdict.reason, "notes": verdict.notes,
               "speedup": verdict.speedup, "evidence": evidence})
        # every measurement is a point where a due profile runs: the 464 s call of 2026-12-01 drained its slow
        # builds in one batch and measured its two correct candidates there and in the deferred pass, where no
        # profile was due-checked, and its deadline left no time for the final sample loop: no ncu line at all
        profile_due()

    deferred: list[tuple] = []   # built, but its extension builds in forward (in the worker): measured last
    pending: list[tuple] = []    # its build has not finished yet: measured once it has, the GPU goes on meanwhile

    def candidate_ready(task: dict, digest: str, solution: dict) -> None:
        build = builds[digest].result()
        if build["ok"] and build.get("extensions_built") == 0 and _EXTENSION_CALL.search(solution["source"]):
            deferred.append((task, digest, solution, build))
        else:
            measure_candidate(task, digest, solution, build)

    def drain(wait: bool) -> None:
        while pending and left() > 15:
            profile_due()
            ready = [item for item in pending if builds[item[1]].done()]
            if not ready and not wait:
                return
            if not ready:
                time.sleep(0.5)
                continue
            for item in ready:
                pending.remove(item)
                if left() > 15:
                    candidate_ready(*item)

    profiled: list[dict] = []

    def profile_one() -> None:
        """Nsight Compute on the latest correct candidate not profiled yet, "ok" ones first (the GPU worker is
        idle meanwhile)."""
        waiting = [c for c in correct if c not in profiled]
        item = next((c for c in reversed(waiting) if c["ok"]), waiting[-1] if waiting else None)
        if item is None or left() < 40:
            return
        profiled.append(item)
        extensions = build_dir(root, item["solution"]["source"]) / "ext"
        metrics = ncu_metrics(item["task"]["reference"], item["solution"]["source"], extensions,
                              min(90.0, left() - 20), extensions.parent)
        write({"ncu": metrics, "level": item["task"]["level"], "task": item["task"]["task"],
               "variant": f"cuda-l1:{item['digest'][:10]}"})

    def profile_due() -> None:
        """The ncu sample is spread over the run: the k-th profile once k/(sample+1) of the time has passed."""
        if len(profiled) < args.ncu_sample and \
                time.monotonic() - started >= args.deadline_s * (len(profiled) + 1) / (args.ncu_sample + 1):
            profile_one()

    def time_reference(task: dict, late: bool = False) -> bool:
        """The reference and its baselines; False when torch.compile's was left out (not compiled yet)."""
        key = f"{task['level']}_{task['task']}"
        baselines = ["cuda_graph", "energy"]
        if (marks / f"{key}.ok").exists():
            baselines.append("torch_compile")
        if task.get("do_bench"):
            baselines.append("do_bench")
        t0 = time.monotonic()
        evidence = request({"reference": task["reference"], "settings": settings, "baselines": baselines},
                           max(20.0, min(240.0, left())))
        if "torch_compile" not in baselines:
            error = (marks / f"{key}.err").read_text().strip() if (marks / f"{key}.err").exists() else \
                "not compiled by the compile workers when the GPU worker reached this task"
            evidence.setdefault("baseline_errors", {})["torch_compile"] = error
        else:
            evidence.setdefault("phase_s", {})["torch_compile_ahead"] = float((marks / f"{key}.ok").read_text())
        write({"level": task["level"], "task": task["task"], "problem": task.get("problem"), "variant": "reference",
               "evidence": evidence, "wall_s": time.monotonic() - t0, "do_bench_again": bool(task.get("again")),
               "late_torch_compile": late,
               # no torch.compile ran beside this timing (they all ran before it, or none were started)
               "clean_timing": bool(compile_phase) or not any(p.is_alive() for p in compilers)})
        return "torch_compile" in baselines or (marks / f"{key}.err").exists()

    uncompiled: list[dict] = []
    done = 0
    for task in work:
        if left() < 15:
            break
        drain(wait=False)
        profile_due()
        if not task.get("candidates_only") and not time_reference(task):
            uncompiled.append(task)
        for digest, solution in task["solutions"].items():
            if left() < 15:
                break
            if builds[digest].done():
                candidate_ready(task, digest, solution)
            else:
                pending.append((task, digest, solution))
        done += 1
    drain(wait=True)
    for task, digest, solution in pending:
        write({"build_not_finished": f"{task['level']}:{task['task']}:{digest[:10]}"})
    for task, digest, solution, build in deferred:
        if left() < 60:
            write({"deferred_not_measured": f"{task['level']}:{task['task']}:{digest[:10]}"})
            continue
        measure_candidate(task, digest, solution, build)
    # Late pass: references whose torch.compile finished after the worker had passed them, timed again whole.
    for task in uncompiled:
        if left() < 30:
            break
        profile_due()
        if (marks / f"{task['level']}_{task['task']}.ok").exists():
            time_reference(task, late=True)
    write({"deadline": left() < 15, "work_items_done": done, "work_items": len(work), "elapsed_s": time.monotonic() - started})
    worker.close()
    for process in compilers:
        if process.is_alive():
            process.terminate()
    while len(profiled) < args.ncu_sample and left() > 40 and any(c not in profiled for c in correct):
        profile_one()
    records.close()
    pool.shutdown(wait=False, cancel_futures=True)
    print(f"done in {time.monotonic() - started:.0f} s; {done} of {len(work)} work items")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
