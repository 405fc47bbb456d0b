"""Benchmark of gpu_runner on a GPU: overhead, throughput, repeatability, bandwidth, agreement.

    python benchmarks/runner_bench.py [--out-dir benchmarks/results] [--quick]

Prints a table and writes benchmarks/results/runner_<gpu>_<date>.json. Figures:
- overhead: wall time of Runner.measure per small candidate (NVRTC compile + validation on every
  size case and input set + timing + guards, in the isolated worker), median and p90;
- throughput: Runner.measure_many (nvcc cubins compiled in a thread pool on all cores, timed one
  by one in the worker) with the recorder's settings, candidates per minute of wall time;
- repeatability: the speedup of one pair measured 10 times, each time in a fresh worker process;
- bandwidth: a float4 saxpy measured by the runner against a device-to-device copy measured here;
- do_bench: the runner's median of that kernel against triton.testing.do_bench's median;
- backends: cupy against pycuda on the same pair.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_runner import (RECORD_SETTINGS, MeasureSettings, Runner, parse_problem, reference_candidate,  # noqa: E402
                        render_variant)
from gpu_runner.candidate import Candidate  # noqa: E402

SAXPY = ROOT / "tests" / "gpu_runner" / "problems" / "saxpy"
FLOAT4 = {"BLOCK": 256, "ITEMS": 1, "VEC": 4}


def saxpy(n: int):
    text = (SAXPY / "problem.toml").read_text().replace("default = { N = 16777216 }", f"default = {{ N = {n} }}")
    return parse_problem(text, (SAXPY / "reference.cu").read_text(), (SAXPY / "family.cu").read_text())


def salted(candidate: Candidate, salt: str) -> Candidate:
    """The same kernel with a distinct source (so no compiler cache can answer)."""
    return Candidate(source=f"// {salt}\n" + candidate.source, launch=candidate.launch, temps=candidate.temps,
                     compile_options=candidate.compile_options, knobs=candidate.knobs, name=f"{candidate.name}#{salt}")


def pct(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def copy_bandwidth_gbs() -> dict:
    import cupy as cp

    n = 1 << 28
    src = cp.random.standard_normal(n, dtype=cp.float32)
    dst = cp.empty_like(src)
    flush = cp.empty(512 << 20, dtype=cp.uint8)
    times = []
    for i in range(35):
        flush.fill(i & 0xFF)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        dst[...] = src
        end.record()
        end.synchronize()
        if i >= 5:
            times.append(cp.cuda.get_elapsed_time(start, end))
    median = statistics.median(times)
    return {"bytes": 2 * 4 * n, "median_ms": median, "gbs": 2 * 4 * n / (median * 1e-3) / 1e9}


def do_bench_median(problem, candidate) -> dict:
    import cupy as cp
    import numpy as np
    import torch
    import triton

    n = problem.default_case.sizes["N"]
    x = torch.randn(n, device="cuda")
    y = torch.rand(n, device="cuda")
    out = torch.empty(n, device="cuda")
    module = cp.RawModule(code=candidate.source, options=("--std=c++17",))
    kernel = module.get_function("saxpy_family")
    grid, block, shared = candidate.launch[0].resolve(problem.default_case.sizes)
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    args = (np.uint64(x.data_ptr()), np.uint64(y.data_ptr()), np.uint64(out.data_ptr()), np.float32(2.5), np.int32(n))

    def run():
        with stream:
            kernel(grid, block, args, shared_mem=shared)

    run()
    torch.cuda.synchronize()
    expected = 2.5 * x + y
    assert torch.allclose(out, expected, rtol=1e-5, atol=1e-6)
    median = triton.testing.do_bench(run, warmup=25, rep=200, return_mode="median")
    return {"median_ms": float(median), "triton": triton.__version__}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip", default="", help="comma list of sections to skip")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    report: dict = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "sections": {}}
    rows: list[tuple[str, str, str]] = []

    def section(name, function):
        if name in skip:
            return
        started = time.perf_counter()
        try:
            report["sections"][name] = function()
        except Exception as exc:  # noqa: BLE001 - a broken section must not hide the others
            import traceback
            report["sections"][name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
            rows.append((name, "ERROR", f"{type(exc).__name__}: {exc}"[:90]))
        report["sections"][name]["section_s"] = round(time.perf_counter() - started, 1)
        print(f"[{name}] done in {time.perf_counter() - started:.1f} s", flush=True)

    small = saxpy(1 << 20)
    big = saxpy(1 << 26)
    float4 = render_variant(big, FLOAT4)

    def overhead():
        count = 8 if args.quick else 20
        with Runner("cupy") as runner:
            hardware = runner.hardware(small)
            report["hardware"] = hardware.__dict__ if hardware else None
            runner.measure(small, reference_candidate(small))    # start the worker, compile the reference
            walls, statuses, phases = [], [], []
            for i in range(count):
                variant = salted(render_variant(small, {"BLOCK": 256, "ITEMS": 1 + i % 2, "VEC": 4}), f"o{i}-{time.time()}")
                result = runner.measure(small, variant, seed=i)
                walls.append(result.wall_s)
                statuses.append(result.status)
                phases.append(result.phase_s)
        keys = sorted({k for p in phases for k in p})
        out = {"n": count, "median_s": statistics.median(walls), "p90_s": pct(walls, 0.9), "walls_s": walls,
               "statuses": statuses, "phase_medians_s": {k: statistics.median(p.get(k, 0.0) for p in phases)
                                                         for k in keys},
               "goal": "median < 1 s"}
        rows.append(("overhead per small candidate (measure, NVRTC)", f"median {out['median_s']:.3f} s, "
                     f"p90 {out['p90_s']:.3f} s", out["goal"]))
        return out

    def throughput():
        count = 64 if args.quick else 128
        variants = [salted(render_variant(small, k), f"t{i}-{time.time()}")
                    for i, k in zip(range(count), __import__("itertools").cycle(
                        [v for v in __import__("gpu_runner").enumerate_variants(small)]))]
        with Runner("cupy", settings=RECORD_SETTINGS) as runner:
            runner.measure(small, reference_candidate(small))
            started = time.perf_counter()
            results = runner.measure_many(small, variants, seed=1)
            wall = time.perf_counter() - started
        statuses = {}
        for r in results:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        out = {"n": count, "wall_s": wall, "per_candidate_s": wall / count, "per_minute": 60 * count / wall,
               "statuses": statuses, "cpu_cores": os.cpu_count(), "goal": ">= 60 per GPU-minute; recorder < 0.2 s"}
        rows.append(("throughput measure_many (record settings)", f"{out['per_minute']:.0f}/min, "
                     f"{out['per_candidate_s']:.3f} s each", out["goal"]))
        return out

    def repeatability():
        count = 5 if args.quick else 10
        speedups, medians = [], []
        for i in range(count):
            with Runner("cupy") as runner:     # a fresh worker process each time
                result = runner.measure(big, float4, seed=100 + i)
            if result.status != "ok":
                raise RuntimeError(f"run {i}: {result.status}: {result.reason}")
            speedups.append(result.speedup)
            medians.append(result.candidate.median_ms)
        cv = statistics.pstdev(speedups) / statistics.fmean(speedups)
        out = {"n": count, "speedups": speedups, "cv": cv, "candidate_medians_ms": medians, "goal": "CV < 1%"}
        rows.append(("repeatability of one speedup (fresh workers)", f"CV {100 * cv:.2f}% over {count} "
                     f"(speedup {statistics.fmean(speedups):.3f})", out["goal"]))
        return out

    def bandwidth():
        copy = copy_bandwidth_gbs()
        with Runner("cupy") as runner:
            result = runner.measure(big, float4, seed=7)
            reference = result.reference.median_ms if result.reference else None
        if result.status != "ok":
            raise RuntimeError(f"{result.status}: {result.reason}")
        moved = 12 * big.default_case.sizes["N"]
        achieved = moved / (result.candidate.median_ms * 1e-3) / 1e9
        out = {"copy": copy, "float4_saxpy_median_ms": result.candidate.median_ms, "float4_saxpy_gbs": achieved,
               "scalar_reference_median_ms": reference, "fraction_of_copy": achieved / copy["gbs"],
               "hardware_bandwidth_gbs": result.hardware.memory_bandwidth_gbs, "goal": ">= 85% of copy"}
        rows.append(("float4 saxpy vs device copy", f"{achieved:.0f} / {copy['gbs']:.0f} GB/s = "
                     f"{100 * out['fraction_of_copy']:.1f}%", out["goal"]))
        report["_float4_median"] = result.candidate.median_ms
        return out

    def triton_agreement():
        ours = report.get("_float4_median")
        if ours is None:
            with Runner("cupy") as runner:
                ours = runner.measure(big, float4, seed=7).candidate.median_ms
        theirs = do_bench_median(big, float4)
        diff = ours / theirs["median_ms"] - 1
        out = {"ours_ms": ours, "do_bench_ms": theirs["median_ms"], "difference": diff, "triton": theirs["triton"],
               "goal": "within 3%"}
        rows.append(("runner median vs triton do_bench", f"{ours:.4f} vs {theirs['median_ms']:.4f} ms "
                     f"({100 * diff:+.2f}%)", out["goal"]))
        return out

    def backends():
        with Runner("cupy") as a:
            ra = a.measure(big, float4, seed=9)
        with Runner("pycuda") as b:
            rb = b.measure(big, float4, seed=9)
        if ra.status != "ok" or rb.status != "ok":
            raise RuntimeError(f"cupy {ra.status} {ra.reason} / pycuda {rb.status} {rb.reason}")
        out = {"cupy_ms": ra.candidate.median_ms, "pycuda_ms": rb.candidate.median_ms,
               "cupy_speedup": ra.speedup, "pycuda_speedup": rb.speedup,
               "median_difference": ra.candidate.median_ms / rb.candidate.median_ms - 1,
               "speedup_difference": ra.speedup / rb.speedup - 1, "same_max_error": ra.max_abs_error == rb.max_abs_error,
               "goal": "within 2%"}
        rows.append(("cupy vs pycuda (same pair)", f"median {100 * out['median_difference']:+.2f}%, speedup "
                     f"{100 * out['speedup_difference']:+.2f}%", out["goal"]))
        return out

    section("overhead", overhead)
    section("throughput", throughput)
    section("bandwidth", bandwidth)
    section("triton", triton_agreement)
    section("backends", backends)
    section("repeatability", repeatability)
    report.pop("_float4_median", None)

    gpu = "gpu"
    if report.get("hardware"):
        gpu = "-".join(w for w in report["hardware"]["name"].lower().replace("nvidia", "").split()) or "gpu"
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"runner_{gpu}_{dt.date.today().isoformat()}.json"
    path.write_text(json.dumps(report, indent=1, default=str))
    width = max(len(r[0]) for r in rows) if rows else 10
    print(f"\n{'what':<{width}}  {'measured':<48}  goal")
    for what, measured, goal in rows:
        print(f"{what:<{width}}  {measured:<48}  {goal}")
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
