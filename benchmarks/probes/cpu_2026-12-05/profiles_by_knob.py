"""Issue 20 probe: what the recorded profiles say about one knob's values in a family (for example shared-memory
tiles against loads through the cache), read from the H200 records without a GPU.

  python benchmarks/probes/cpu_2026-12-05/profiles_by_knob.py [--families a,b] [--knob ALGO] [--out FILE.json]

gpu_runner.record profiles a sample of each family's variants with Nsight Compute (`--profile-sample`, 50 by
default); their counters travel in the records. For each value of --knob among the profiled variants: how many,
the median speedup, and the medians of the memory counters that say whether overlapping loads were served by the
caches (L1 and L2 hit rates, DRAM bytes read against the input's size) and of the stalls a staged tile adds (warps
waiting at a barrier, per issued instruction). The eight test families are refused.
"""
from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
PROBLEMS = ROOT / "kernellab" / "problems"
sys.path.insert(0, str(ROOT / "benchmarks" / "probes" / "cpu_2026-12-03"))
from recording_noise import TEST  # noqa: E402

COUNTERS = {
    "l1_hit_pct": "l1tex__t_sector_hit_rate.pct",
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_pct_of_peak": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "barrier_stall_per_issue": "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
    "long_scoreboard_per_issue": "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
}


def profiled(records: list[dict]) -> list[dict]:
    """The records of a family's variants that carry a profile and were measured correct."""
    return [r for r in records if r.get("knobs") and r.get("profiler") and r.get("status") == "ok"]


def by_knob(rows: list[dict], knob: str) -> dict:
    """Per value of `knob`: variants, median speedup, and the median of each counter in COUNTERS."""
    out = {}
    for value in sorted({str(r["knobs"].get(knob)) for r in rows}):
        group = [r for r in rows if str(r["knobs"].get(knob)) == value]
        cell = {"variants": len(group), "median_speedup": float(np.median([r["speedup"] for r in group]))}
        for name, counter in COUNTERS.items():
            values = [r["profiler"][counter] for r in group if isinstance(r["profiler"].get(counter), (int, float))]
            cell[name] = float(np.median(values)) if values else None
        out[value] = cell
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default="maxpool2d,depthwise_conv2d")
    parser.add_argument("--knob", default="ALGO")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    wanted = [f for f in args.families.split(",") if f]
    if TEST & set(wanted):
        print("This probe does not look at the test families: " + ", ".join(sorted(TEST & set(wanted))), file=sys.stderr)
        return 2
    results = {}
    for family in wanted:
        path = PROBLEMS / family / "records" / "h200.jsonl.gz"
        if not path.is_file():
            print(f"No recorded H200 records of {family}.", file=sys.stderr)
            return 2
        with gzip.open(path, "rt") as handle:
            rows = profiled([json.loads(line) for line in handle if line.strip()])
        table = by_knob(rows, args.knob)
        results[family] = {"profiled": len(rows), args.knob: table}
        print(f"\n{family}: {len(rows)} profiled variants, by {args.knob}")
        print(f"  {'value':8s} {'n':>3s} {'speedup':>8s} " + " ".join(f"{n:>24s}" for n in COUNTERS))
        for value, cell in table.items():
            nums = " ".join(f"{cell[n]:24.3g}" if cell[n] is not None else f"{'-':>24s}" for n in COUNTERS)
            print(f"  {value:8s} {cell['variants']:3d} {cell['median_speedup']:8.2f} {nums}")
    today = dt.date.today().isoformat()
    path = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"probe_profiles_by_knob_cpu_{today}.json"
    path.write_text(json.dumps({"probe": "profiles_by_knob", "date": today, "knob": args.knob,
                                "counters": COUNTERS, "families": results,
                                "command": "python benchmarks/probes/cpu_2026-12-05/profiles_by_knob.py "
                                           + " ".join(argv if argv is not None else sys.argv[1:])}, indent=1) + "\n")
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
