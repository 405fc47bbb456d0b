"""Turn benchmarks/kernelbench_h200.py's records.jsonl into the replay records of the KernelBench
problems (kernellab/problems/kernelbench/records/h200.jsonl.gz, re-judged with the current verdict) and
benchmarks/results/kernelbench_h200_<date>.json.

    python benchmarks/kernelbench_h200_summarize.py RECORDS_JSONL KERNELBENCH_DIR [--date YYYY-MM-DD]
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

from gpu_runner.kernelbench import task_name  # noqa: E402
from gpu_runner.kernelbench_verdict import judge_solution  # noqa: E402

KEEP = ("custom_kernels", "library_kernels", "aten_ops", "timing", "baseline_errors", "do_bench_ms", "fallback_message",
        "inputs_modified", "phase_s")


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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("records")
    parser.add_argument("kernelbench")
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    args = parser.parse_args()
    names = {}
    for level_dir in Path(args.kernelbench).glob("level*"):
        level = int(level_dir.name[5:])
        for file in level_dir.glob("*.py"):
            names[(level, int(file.name.split("_", 1)[0]))] = task_name(file.name, level)[0]
    rows = [json.loads(line) for line in open(args.records) if line.strip()]
    hardware, tasks, out_lines = {}, set(), []
    candidates, failed, builds, notes_count = Counter(), Counter(), [], Counter()
    pairs, ok_pairs, do_bench_diffs, wall = [], [], [], 0.0
    for row in rows:
        if "variant" not in row:
            if "worker" in row:
                hardware = {"name": row["worker"][1].get("gpu"), "torch": row["worker"][1].get("torch")}
            continue
        evidence = row.get("evidence") or {}
        problem = names.get((row["level"], row["task"]), f"kb{row['level']}_{row['task']}")
        wall += row.get("wall_s") or 0.0
        record = {"problem": problem, "level": row["level"], "task": row["task"], "variant": row["variant"],
                  "hardware": {"name": hardware.get("name")}, "torch": hardware.get("torch"), "backend": "torch"}
        if row["variant"] == "reference":
            tasks.add((row["level"], row["task"]))
            timing = evidence.get("timing") or {}
            record.update(status="ok" if timing else "unavailable", reference=timing.get("reference"),
                          baselines={k.split(":", 1)[1]: v for k, v in timing.items() if k.startswith("baseline:")},
                          reason=(evidence.get("reference_error") or "")[-300:])
            if evidence.get("do_bench_ms") and timing.get("reference"):
                ours = timing["reference"]["median_ms"]
                do_bench_diffs.append({"problem": problem, "ours_ms": ours, "do_bench_ms": evidence["do_bench_ms"],
                                       "rel_diff": abs(ours - evidence["do_bench_ms"]) / evidence["do_bench_ms"]})
            out_lines.append(record)
            continue
        verdict = judge_solution(evidence)
        candidates[verdict.status] += 1
        if verdict.status != "ok":
            reason = verdict.reason.split(":")[0] if verdict.status == "rejected-guard" else verdict.status
            failed[f"{verdict.status}: {reason[:60]}"] += 1
        if row.get("build_s"):
            builds.append(row["build_s"])
        timing = evidence.get("timing") or {}
        record.update(source_hash=row["source_hash"], source=row["source"], solution_gpus=row["solution_gpus"],
                      authors_speedup=row["authors_speedup"], build_s=row.get("build_s"), status=verdict.status,
                      reason=verdict.reason, pytorch_notes=verdict.notes, speedup=verdict.speedup,
                      reference=timing.get("reference"), candidate=timing.get("candidate"),
                      evidence={k: evidence[k] for k in KEEP if k in evidence})
        out_lines.append(record)
        h100 = row["authors_speedup"].get("h100")
        if verdict.speedup and h100:
            pairs.append((verdict.speedup, h100))
            if verdict.status == "ok":
                ok_pairs.append((verdict.speedup, h100))
    target = ROOT / "kernellab" / "problems" / "kernelbench" / "records" / "h200.jsonl.gz"
    target.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(target, "wt") as handle:
        for record in out_lines:
            handle.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
    measured = [r for r in out_lines if r["variant"] != "reference" and r.get("speedup")]
    builds.sort()
    result = {
        "date": args.date, "gpu": hardware.get("name"), "torch": hardware.get("torch"),
        "command": "python benchmarks/kernelbench_h200.py CUDA_L1_DIR OUT --levels 1 2 --deadline-s 520 --jobs 14 "
                   "(one 10-minute device call), then benchmarks/kernelbench_h200_summarize.py",
        "tasks_imported": len(names), "tasks_in_cuda_l1_levels_1_2": 100, "tasks_measured": len(tasks),
        "candidates": sum(candidates.values()), "candidates_correct": candidates["ok"],
        "candidates_by_status": dict(candidates), "candidates_failed": dict(failed),
        "build_s_median": statistics.median(builds) if builds else None,
        "build_s_p90": builds[int(0.9 * (len(builds) - 1))] if builds else None,
        "candidates_per_gpu_minute": round(sum(candidates.values()) / (wall / 60), 2) if wall else None,
        "measured_speedups": len(measured),
        "slower_than_eager": sum(1 for r in measured if r["speedup"] < 1.0),
        "speedup_quartiles": statistics.quantiles([r["speedup"] for r in measured], n=4) if len(measured) >= 4 else None,
        "spearman_h200_vs_authors_h100": spearman([a for a, _ in pairs], [b for _, b in pairs]),
        "spearman_pairs": len(pairs),
        "spearman_h200_vs_authors_h100_ok_only": spearman([a for a, _ in ok_pairs], [b for _, b in ok_pairs]),
        "reference_vs_do_bench_max_rel_diff": max((d["rel_diff"] for d in do_bench_diffs), default=None),
        "reference_vs_do_bench": do_bench_diffs,
    }
    results = ROOT / "benchmarks" / "results" / f"kernelbench_h200_{args.date}.json"
    results.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "reference_vs_do_bench"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
