"""The bundled problems on their recorded H200 data: one row per problem (issue 4's table).

    python benchmarks/problems_table.py [--gpu h200]

Prints the table and writes benchmarks/results/problems_<gpu>_<date>.json (or --out FILE). The roofline bound
uses the H200's measured device copy bandwidth and its FP32 peak (shared/H200-REFERENCE.md)."""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COPY_GBS = 4232.0  # device-to-device copy, 1 GiB, read + write (measured on the H200)
FP32_TFLOPS = 66.9  # 132 SMs x 128 lanes x 2 x 1.98 GHz
FP16_TENSOR_TFLOPS = 989.4  # dense FP16/BF16 tensor-core peak of the H100/H200 SXM (NVIDIA's data sheet)


def main(argv=None) -> int:
    from gpu_runner import load_problem
    from gpu_runner.backends.replay import read_records
    from kernellab.datasets import bundled_problem_dirs, problem_numbers

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--out", type=Path, help="the JSON to write (default benchmarks/results/problems_<gpu>_<date>.json)")
    args = parser.parse_args(argv)
    if args.out is not None and args.out.is_dir():
        parser.error(f"--out {args.out} is a folder; give a file name (.json)")
    rows = []
    for folder in bundled_problem_dirs():
        path = folder / "records" / f"{args.gpu}.jsonl.gz"
        if not path.exists():
            continue
        numbers = problem_numbers(load_problem(folder))
        records = list(read_records(path))
        variants = [r for r in records if r.get("knobs")]
        ok = [r for r in variants if r["status"] == "ok" and r.get("speedup")]
        vendor = next((r for r in records if str(r.get("variant", "")).startswith("vendor") and r.get("speedup")), None)
        best = max(ok, key=lambda r: r["speedup"])
        best_ms = best["candidate"]["median_ms"]
        spec = load_problem(folder)
        # 16-bit float inputs can run on tensor cores: their FLOP bound is the tensor-core peak.
        peak = FP16_TENSOR_TFLOPS if any(a.dtype in ("float16", "bfloat16") for a in spec.args if a.role == "input") \
            else FP32_TFLOPS
        bound_ms = max((numbers["bytes"] or 0) / (COPY_GBS * 1e9), (numbers["flops"] or 0) / (peak * 1e12)) * 1e3
        rows.append({
            "problem": folder.name,
            "variants": len(variants),
            "correct": len(ok),
            "speedup_min": min(r["speedup"] for r in ok),
            "speedup_max": best["speedup"],
            "best_variant": best["variant"],
            "best_ms": best_ms,
            "reference_ms": best["reference"]["median_ms"],
            "vendor_speedup": vendor["speedup"] if vendor else None,
            "best_over_vendor": best["speedup"] / vendor["speedup"] if vendor else None,
            "roofline_bound_ms": bound_ms,
            "fraction_of_roofline": bound_ms / best_ms if best_ms else None,
            "achieved_gbs": (numbers["bytes"] or 0) / (best_ms * 1e-3) / 1e9,
            "achieved_tflops": (numbers["flops"] or 0) / (best_ms * 1e-3) / 1e12,
            "profiled": sum(1 for r in records if r.get("profiler")),
            "with_energy": sum(1 for r in records if r.get("energy")),
            "recording_s": sum(r.get("wall_s") or 0 for r in records),
        })
    header = f"{'problem':13} {'variants':>8} {'ok':>5} {'speedup range':>15} {'best':>7} {'÷vendor':>8} {'÷roofline':>9} {'GB/s':>6} {'TFLOP/s':>7} {'rec s':>6}  best variant"
    print(header)
    for r in rows:
        vendor = f"{r['best_over_vendor']:.2f}" if r["best_over_vendor"] else "—"
        print(f"{r['problem']:13} {r['variants']:8d} {r['correct']:5d} {r['speedup_min']:6.2f}–{r['speedup_max']:<7.2f} "
              f"{r['speedup_max']:6.2f}× {vendor:>8} {r['fraction_of_roofline']:9.2f} {r['achieved_gbs']:6.0f} "
              f"{r['achieved_tflops']:7.2f} {r['recording_s']:6.0f}  {r['best_variant']}")
    print(f"total: {sum(r['variants'] for r in rows)} variants, {sum(r['correct'] for r in rows)} correct, "
          f"{sum(r['profiled'] for r in rows)} with profiler metrics, {sum(r['with_energy'] for r in rows)} with energy")
    out = args.out or ROOT / "benchmarks" / "results" / f"problems_{args.gpu}_{datetime.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"gpu": args.gpu, "copy_gbs": COPY_GBS, "fp32_tflops": FP32_TFLOPS, "problems": rows}, indent=1))
    print(f"wrote {out.resolve().relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
