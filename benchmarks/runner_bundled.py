"""Record a sample of every bundled problem's family on the GPU, and one energy + ncu reading.

    python benchmarks/runner_bundled.py [--limit 30] [--out-dir benchmarks/results]

Writes <out-dir>/runner_<gpu>_bundled_<date>.json (status counts, wall time per variant, the
vendor and reference lines) and the sample datasets <out-dir>/runner_<gpu>_<problem>.jsonl.gz.
"""
from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_runner import RECORD_SETTINGS, Runner, load_problem, render_variant  # noqa: E402
from gpu_runner.recorder import record_family  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=30)
    parser.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "problems": {}}
    with Runner("cupy", settings=RECORD_SETTINGS) as runner:
        saxpy = load_problem(ROOT / "tests" / "gpu_runner" / "problems" / "saxpy")
        hardware = runner.hardware(saxpy)
        gpu = hardware.slug if hardware else "gpu"
        report["hardware"] = hardware.__dict__ if hardware else None
        variant = render_variant(saxpy, {"BLOCK": 256, "ITEMS": 2, "VEC": 4})
        with Runner("cupy") as full:
            result = full.measure(saxpy, variant, seed=3, energy=True, profile=True)
        report["energy_and_profile"] = {"status": result.status, "energy": result.energy and result.energy.__dict__,
                                        "ncu_metrics": len(result.profiler), "observer_errors": result.observer_errors,
                                        "dram_pct": result.profiler.get(
                                            "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
                                        "candidate_ms": result.candidate and result.candidate.median_ms}
        print("energy/profile:", json.dumps(report["energy_and_profile"]), flush=True)
        for folder in sorted(p.parent for p in (ROOT / "kernellab" / "problems").glob("*/problem.toml")):
            started = time.perf_counter()
            try:
                problem = load_problem(folder)
                path = out_dir / f"runner_{gpu}_{problem.name}.jsonl.gz"
                summary = record_family(problem, path, limit=args.limit, runner=runner, log=None,
                                        profile_sample=0)
                with gzip.open(path, "rt") as handle:
                    lines = [json.loads(line) for line in handle]
                wall = time.perf_counter() - started
                baselines = {r["variant"]: {"status": r["status"], "speedup": r["speedup"], "reason": r["reason"][:200]}
                             for r in lines if r["variant"] in ("reference",) or r["variant"].startswith("vendor:")}
                failures = [{"variant": r["variant"], "status": r["status"], "reason": r["reason"][:300]}
                            for r in lines if r["status"] != "ok"][:6]
                speedups = sorted(r["speedup"] for r in lines if r["status"] == "ok" and r["speedup"])
                report["problems"][problem.name] = {
                    "written": summary["written"], "statuses": summary["statuses"], "wall_s": wall,
                    "per_line_s": wall / max(1, summary["written"]), "baselines": baselines, "failures": failures,
                    "best_speedup": speedups[-1] if speedups else None}
            except Exception as exc:  # noqa: BLE001 - report and go on to the next problem
                report["problems"][folder.name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(folder.name, json.dumps(report["problems"][folder.name])[:600], flush=True)
    path = out_dir / f"runner_{gpu}_bundled_{dt.date.today().isoformat()}.json"
    path.write_text(json.dumps(report, indent=1, default=str))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
