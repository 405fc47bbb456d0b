"""Measure CUDA-L1's LLM-written KernelBench solutions on this GPU: the reference (eager PyTorch), its
CUDA-graph and torch.compile baselines, and each GPU's distinct solution (up to five per task).

    python benchmarks/kernelbench_h200.py CUDA_L1_DIR OUT_DIR [--levels 1 2] [--deadline-s 540] [--limit N]
        [--bundled kernellab/problems/kb_*] [--skip 1:2 1:4 ...]

--bundled measures the project's own KernelBench-format problems first (each folder's reference.py and
candidates/*.py), recorded under the folder's name.

Builds all solutions first in parallel (each in a compile-sandboxed subprocess, cached by source hash),
measures task by task in a sandboxed worker child, and appends one JSON line per measurement to
OUT_DIR/records.jsonl as it goes (so a deadline leaves what was done). Needs torch and a GPU.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_runner.kernelbench_verdict import judge_solution  # noqa: E402
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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("cuda_l1")
    parser.add_argument("out")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--skip", nargs="*", default=[], help="tasks already measured, as LEVEL:TASK")
    parser.add_argument("--bundled", nargs="*", default=[], help="folders of the project's own problems")
    parser.add_argument("--compile-baseline-tasks", type=int, default=4)
    parser.add_argument("--do-bench-tasks", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    args = parser.parse_args()
    started = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = [t for t in read_tasks(Path(args.cuda_l1), set(args.levels))
             if f"{t['level']}:{t['task']}" not in set(args.skip)][: args.limit]
    tasks = [bundled_task(Path(folder)) for folder in args.bundled] + tasks
    root = Path(os.environ.get("KL_BUILD_ROOT", "/tmp/kl-kernelbench-builds"))
    pool = ThreadPoolExecutor(args.jobs)
    builds = {digest: pool.submit(build_solution, s["source"], root) for t in tasks for digest, s in t["solutions"].items()}
    records = (out / "records.jsonl").open("a")
    worker = Sandbox("gpu_runner.pytorch_worker:serve", host_memory_bytes=64 << 30)
    level1_seen = 0

    def request(job: dict, timeout_s: float) -> dict:
        if not worker.alive:
            hello = worker.start()
            write({"worker": hello})
        try:
            kind, evidence = worker.request(("measure", job), timeout_s)
            return evidence
        except SandboxFault as fault:
            return {"runtime_error": f"{fault.kind}: {fault.reason}"}

    def write(line: dict) -> None:
        records.write(json.dumps(line, separators=(",", ":"), default=str) + "\n")
        records.flush()

    for index, task in enumerate(tasks):
        if time.monotonic() - started > args.deadline_s:
            write({"deadline": True, "tasks_done": index})
            break
        baselines = ["cuda_graph"]
        if index < args.compile_baseline_tasks:
            baselines.append("torch_compile")
        if task["level"] == 1 and level1_seen < args.do_bench_tasks:
            baselines.append("do_bench")
            level1_seen += 1
        t0 = time.monotonic()
        evidence = request({"reference": task["reference"], "settings": SETTINGS, "baselines": baselines}, 240)
        write({"level": task["level"], "task": task["task"], "problem": task.get("problem"), "variant": "reference",
               "evidence": evidence, "wall_s": time.monotonic() - t0})
        for digest, solution in task["solutions"].items():
            build = builds[digest].result()
            variant = f"bundled:{solution['name']}" if task.get("problem") else f"cuda-l1:{digest[:10]}"
            base = {"level": task["level"], "task": task["task"], "problem": task.get("problem"), "variant": variant,
                    "source_hash": digest, "source": solution["source"], "solution_gpus": solution["gpus"],
                    "authors_speedup": solution["authors"], "build_s": build["seconds"]}
            if not build["ok"]:
                evidence = {"refusal": build["log"]} if build.get("refused") else {"build_error": build["log"]}
            else:
                t0 = time.monotonic()
                evidence = request({"reference": task["reference"], "solution": solution["source"], "settings": SETTINGS,
                                    "extensions": build_dir(root, solution["source"]) / "ext"}, 180)
                base["wall_s"] = time.monotonic() - t0
            verdict = judge_solution(evidence, SETTINGS)
            write({**base, "status": verdict.status, "reason": verdict.reason, "notes": verdict.notes,
                   "speedup": verdict.speedup, "evidence": evidence})
    worker.close()
    records.close()
    pool.shutdown(cancel_futures=True)
    print(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
