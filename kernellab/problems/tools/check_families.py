# Over 400 lines on purpose: a standalone GPU tool, its worker and the driver that restarts it in one script.
"""Check every variant of the bundled families on a GPU, and time the fastest (cupy only).

    python kernellab/problems/tools/check_families.py --out DIR [--cubins DIR] [--problems a,b]
                                                      [--nvrtc-sample N] [--top K]

For each problem: inputs drawn as the spec says, the expected output computed in float64 with
cupy (or exactly, for integer problems), the reference launch plan checked against it, then each
variant run on every size case with its outputs and temporaries poisoned first, and compared with
the spec's tolerance. Variants come from precompiled cubins (compile_variants.py, matched by source
hash) or are compiled here with NVRTC. A quick timing of every variant on the default size picks
the fastest few, which are timed again with L2 flushed between runs beside the vendor baseline and
a device-to-device copy.

Each problem runs in its own worker process, so an illegal address or a hang fails only the
variant that caused it; the driver restarts the worker after it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import variants  # noqa: E402

NUMPY_DTYPES = {"float32": "float32", "float16": "float16", "float64": "float64", "int32": "int32", "int64": "int64",
                "uint32": "uint32", "uint8": "uint8"}


# --- expected outputs (float64 or exact), one function per problem -----------------------------

def expected_outputs(cp, name: str, inputs: dict, sizes: dict) -> dict:
    if name in ("sgemm", "hgemm", "hgemm_mma"):
        return {"C": cp.matmul(inputs["A"].astype(cp.float64), inputs["B"].astype(cp.float64))}
    if name == "reduce_sum":
        return {"out": inputs["x"].astype(cp.float64).sum().reshape(1)}
    if name == "softmax":
        x = inputs["x"].astype(cp.float64)
        e = cp.exp(x - x.max(axis=1, keepdims=True))
        return {"y": e / e.sum(axis=1, keepdims=True)}
    if name == "rmsnorm":
        x = inputs["x"].astype(cp.float64)
        scale = 1.0 / cp.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6)
        return {"y": x * scale * inputs["w"].astype(cp.float64)[None, :]}
    if name == "transpose":
        return {"out": cp.ascontiguousarray(inputs["inp"].T)}
    if name == "gemv":
        return {"y": inputs["A"].astype(cp.float64) @ inputs["x"].astype(cp.float64)}
    if name == "conv2d":
        x = cp.pad(inputs["inp"].astype(cp.float64), 2)
        w = inputs["w"].astype(cp.float64)
        H, W = inputs["inp"].shape
        out = cp.zeros((H, W), dtype=cp.float64)
        for a in range(5):
            for b in range(5):
                out += w[a, b] * x[a:a + H, b:b + W]
        return {"out": out}
    if name == "layernorm":
        x = inputs["x"].astype(cp.float64)
        mean = x.mean(axis=1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
        return {"y": (x - mean) / cp.sqrt(var + 1e-5) * inputs["w"].astype(cp.float64)[None, :]
                + inputs["b"].astype(cp.float64)[None, :]}
    if name == "column_sum":
        return {"out": inputs["x"].astype(cp.float64).sum(axis=0)}
    if name == "gelu":
        x = inputs["x"].astype(cp.float64)
        return {"y": 0.5 * x * (1.0 + cp.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))}
    if name == "histogram256":
        return {"hist": cp.bincount(inputs["data"].astype(cp.int32), minlength=256).astype(cp.uint32)}
    if name == "dot":
        return {"out": (inputs["x"].astype(cp.float64) * inputs["y"].astype(cp.float64)).sum().reshape(1)}
    if name == "bincount":
        keys = inputs["keys"]
        keys = keys[(keys >= 0) & (keys < 2048)]  # keys outside the 2048 bins are not counted
        return {"hist": cp.bincount(keys, minlength=2048).astype(cp.uint32)}
    if name == "spmv_ell":
        gathered = inputs["x"].astype(cp.float64)[inputs["col"]]  # [R, K]: x[col[r, k]]
        return {"y": (inputs["val"].astype(cp.float64) * gathered).sum(axis=1)}
    if name == "nbody":
        pos = inputs["pos"].astype(cp.float64)
        acc = cp.empty((pos.shape[0], 3), dtype=cp.float64)
        for start in range(0, pos.shape[0], 256):  # 256 bodies i at a time: [256, N, 3] in float64
            d = pos[None, :, :3] - pos[start:start + 256, None, :3]
            r2 = (d * d).sum(axis=2) + 0.01
            acc[start:start + 256] = (d * (pos[None, :, 3] / (r2 * cp.sqrt(r2)))[:, :, None]).sum(axis=1)
        return {"acc": acc}
    if name == "stencil3d":
        x = cp.pad(inputs["inp"].astype(cp.float64), 1)  # zeros outside the grid
        c = x[1:-1, 1:-1, 1:-1]
        return {"out": -2.5 * c + 0.75 * (x[1:-1, 1:-1, :-2] + x[1:-1, 1:-1, 2:])
                + 0.5 * (x[1:-1, :-2, 1:-1] + x[1:-1, 2:, 1:-1]) + 0.25 * (x[:-2, 1:-1, 1:-1] + x[2:, 1:-1, 1:-1])}
    if name == "depthwise_conv2d":
        x = cp.pad(inputs["inp"].astype(cp.float64), ((0, 0), (1, 1), (1, 1)))  # zeros outside each image
        w = inputs["w"].astype(cp.float64)
        C, H, W = inputs["inp"].shape
        out = cp.zeros((C, H, W), dtype=cp.float64)
        for a in range(3):
            for b in range(3):
                out += w[:, a, b][:, None, None] * x[:, a:a + H, b:b + W]
        return {"out": out}
    if name == "maxpool2d":
        C, H, W = inputs["inp"].shape
        OH, OW = (H + 1) // 2, (W + 1) // 2
        # taps outside the image left out: padded with -inf, one row and column before and after
        x = cp.pad(inputs["inp"], ((0, 0), (1, 1), (1, 1)), constant_values=-cp.inf)
        out = cp.full((C, OH, OW), -cp.inf, dtype=cp.float32)
        for a in range(3):
            for b in range(3):
                out = cp.maximum(out, x[:, a:a + 2 * OH - 1:2, b:b + 2 * OW - 1:2])
        return {"out": out}
    raise KeyError(name)


def vendor_call(cp, kind: str, inputs: dict, outputs: dict):
    if kind in ("cublas_sgemm", "cublas_hgemm"):
        return lambda: cp.matmul(inputs["A"], inputs["B"], out=outputs["C"])
    if kind == "cublas_sgemv":
        return lambda: cp.matmul(inputs["A"], inputs["x"], out=outputs["y"])
    if kind == "cupy_sum":
        return lambda: cp.sum(inputs["x"], out=outputs["out"].reshape(()))
    if kind == "cupy_dot":  # cuBLAS sdot (cupy.dot of two vectors is cupy's own reduction)
        from cupy import cublas
        return lambda: cublas.dot(inputs["x"], inputs["y"], out=outputs["out"].reshape(()))
    if kind == "cupy_transpose":
        return lambda: cp.copyto(outputs["out"], inputs["inp"].T)
    if kind == "cupy_softmax":
        def softmax():
            x = inputs["x"]
            e = cp.exp(x - x.max(axis=1, keepdims=True))
            cp.divide(e, e.sum(axis=1, keepdims=True), out=outputs["y"])
        return softmax
    return None


# --- worker: one problem -----------------------------------------------------------------------

class Case:
    """Device buffers for one size case: inputs, expected outputs, output buffers."""

    def __init__(self, cp, problem: variants.Problem, case_name: str, seed: int):
        self.name = case_name
        self.sizes = problem.sizes[case_name]
        rng = cp.random.default_rng(seed)
        self.inputs, self.outputs, self.scalars, self.temps = {}, {}, {}, {}
        for arg in problem.spec["args"]:
            role, dtype = arg["role"], arg["dtype"]
            if role == "scalar":
                self.scalars[arg["name"]] = int(variants.evaluate(arg["value"], self.sizes))
                continue
            shape = variants.shape_of(arg["shape"], self.sizes)
            if role == "input":
                init = arg.get("init", "normal")
                if init == "normal":
                    value = rng.standard_normal(shape, dtype=cp.float32)
                elif init.startswith("uniform:"):
                    _, lo, hi = init.split(":")
                    value = rng.uniform(float(lo), float(hi), size=shape, dtype=cp.float32)
                elif init.startswith("randint:"):
                    _, lo, hi = init.split(":")
                    value = rng.integers(int(lo), int(hi) + 1, size=shape, dtype=cp.int64)
                else:
                    raise ValueError(f"init {init} is not handled by the check")
                self.inputs[arg["name"]] = value.astype(NUMPY_DTYPES[dtype])
            elif role == "output":
                self.outputs[arg["name"]] = cp.empty(shape, dtype=NUMPY_DTYPES[dtype])
            elif role == "temp":
                self.temps[arg["name"]] = cp.empty(shape, dtype=NUMPY_DTYPES[dtype])
        self.expected = expected_outputs(cp, problem.name, self.inputs, self.sizes)


def build_plan(cp, module, launch: list, case: Case, temps: dict):
    """A closure that enqueues the launch plan: functions, grids and arguments resolved up front,
    so that timing measures the GPU and not the Python between launches."""
    import numpy as np

    buffers = {**case.inputs, **case.outputs, **case.temps, **temps}
    calls = []
    for step in launch:
        if "memset" in step:
            target, value = buffers[step["memset"]], step.get("value", 0)
            calls.append(lambda target=target, value=value: target.fill(value))
            continue
        fn = module.get_function(step["kernel"])
        grid = tuple(int(variants.evaluate(g, case.sizes)) for g in step["grid"])
        block = tuple(int(variants.evaluate(b, case.sizes)) for b in step["block"])
        shared = int(variants.evaluate(step.get("shared", "0"), case.sizes))
        args = tuple(buffers[a] if a in buffers else np.int32(case.scalars[a]) for a in step["args"])
        calls.append(lambda fn=fn, grid=grid, block=block, args=args, shared=shared:
                     fn(grid, block, args, shared_mem=shared))

    def run() -> None:
        for call in calls:
            call()
    return run


def run_plan(cp, module, launch: list, case: Case, temps: dict) -> None:
    build_plan(cp, module, launch, case, temps)()


def compare(cp, problem: variants.Problem, case: Case) -> str | None:
    """None if every output is within tolerance of the expected one, else a sentence."""
    for name, out in case.outputs.items():
        tol = problem.spec["tolerance"][str(out.dtype)]
        want = case.expected[name]
        got = out.astype(cp.float64)
        want64 = want.astype(cp.float64)
        bad = cp.abs(got - want64) > tol["atol"] + tol["rtol"] * cp.abs(want64)
        bad |= cp.isnan(got)
        nbad = int(bad.sum())
        if nbad:
            i = int(cp.argmax(bad.ravel()))
            return (f"{name}: {nbad} of {out.size} elements wrong in case {case.name}, first at {i}: "
                    f"got {float(got.ravel()[i])!r}, want {float(want64.ravel()[i])!r}")
    return None


def poison(cp, case: Case, temps: dict) -> None:
    for buf in list(case.outputs.values()) + list(case.temps.values()) + list(temps.values()):
        buf.view(cp.uint8).fill(0xFF)


_SCRATCH = []


def l2_flush(cp) -> None:
    """Writes 512 MiB (about 0.13 ms): evicts L2 and keeps the GPU busy while the timed work is
    enqueued behind it, so no launch gap lands inside the timed region."""
    if not _SCRATCH:
        _SCRATCH.append(cp.empty(512 * 1024 * 1024 // 4, dtype=cp.float32))
    _SCRATCH[0].fill(1.0)


def time_call(cp, call, runs: int, flush=True) -> list[float]:
    times = []
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(runs):
        if flush:
            l2_flush(cp)
        start.record()
        call()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return times


def worker(args) -> int:
    import cupy as cp
    import numpy as np

    problem = variants.load(variants.PROBLEMS_DIR / args.worker)
    all_variants = problem.variants()
    index = {}
    if args.cubins:
        index_path = Path(args.cubins) / problem.name / "index.json"
        if index_path.is_file():
            index = json.loads(index_path.read_text())
    results = open(Path(args.out) / f"check_{problem.name}.jsonl", "a")
    progress = Path(args.out) / f"progress_{problem.name}"

    cases = {name: Case(cp, problem, name, seed=1234 + k) for k, name in enumerate(problem.sizes)}
    default = next(iter(cases.values()))

    # the reference launch plan against the float64 expectation
    if args.start == 0:
        ref_module = cp.RawModule(code=problem.reference_source(), options=("--std=c++17",))
        for case in cases.values():
            poison(cp, case, {})
            run_plan(cp, ref_module, problem.spec["launch"], case, {})
            cp.cuda.runtime.deviceSynchronize()
            error = compare(cp, problem, case)
            results.write(json.dumps({"variant": "reference", "case": case.name, "error": error}) + "\n")
        ref_time = float(np.median(time_call(cp, build_plan(cp, ref_module, problem.spec["launch"], default, {}), 5)))
        results.write(json.dumps({"variant": "reference", "quick_ms": ref_time}) + "\n")
        results.flush()

    nvrtc_every = max(1, len(all_variants) // args.nvrtc_sample) if args.nvrtc_sample else 0
    stop = len(all_variants) if not args.limit else min(len(all_variants), args.limit)
    for i in range(args.start, stop):
        variant = all_variants[i]
        progress.write_text(str(i))
        entry = index.get(str(i))
        record = {"variant": i, "knobs": variant.knobs, "source_hash": variant.source_hash}
        try:
            if entry and entry["source_hash"] == variant.source_hash and "error" not in entry:
                module = cp.RawModule(path=str(Path(args.cubins) / problem.name / f"{i}.cubin"))
                record["compiled"] = "nvcc"
                record["kernels"] = entry.get("kernels")
            else:
                module = cp.RawModule(code=variant.source, options=("--std=c++17",))
                record["compiled"] = "nvrtc"
            modules = [module]
            # NVRTC here targets the device's own architecture; sm_90a families are checked from nvcc's cubins.
            arch_specific = any(o.startswith("-arch=") for o in problem.family.get("compile_options", []))
            if nvrtc_every and i % nvrtc_every == 0 and record["compiled"] == "nvcc" and not arch_specific:
                modules.append(cp.RawModule(code=variant.source, options=("--std=c++17",)))
                record["nvrtc_too"] = True
            errors = []
            for m in modules:
                for case in cases.values():
                    temps = {t["name"]: cp.empty(variants.shape_of(t["shape"], case.sizes),
                                                 dtype=NUMPY_DTYPES[t["dtype"]]) for t in variant.temps}
                    poison(cp, case, temps)
                    run_plan(cp, m, variant.launch, case, temps)
                    cp.cuda.runtime.deviceSynchronize()
                    error = compare(cp, problem, case)
                    if error:
                        errors.append(error)
            record["error"] = "; ".join(errors) or None
            temps = {t["name"]: cp.empty(variants.shape_of(t["shape"], default.sizes),
                                         dtype=NUMPY_DTYPES[t["dtype"]]) for t in variant.temps}
            record["quick_ms"] = float(np.median(time_call(
                cp, build_plan(cp, module, variant.launch, default, temps), args.quick_runs)))
        except Exception as exc:  # a compile or launch error of this variant
            record["error"] = f"{type(exc).__name__}: {exc}"[:500]
            if "cudaErrorLaunch" in str(exc) or "ILLEGAL" in str(exc) or "MISALIGNED" in str(exc) \
                    or "illegal" in str(exc) or "misaligned" in str(exc):
                results.write(json.dumps(record) + "\n")
                results.flush()
                os._exit(3)   # the context is lost; the driver restarts after this variant
        results.write(json.dumps(record) + "\n")
        results.flush()
    progress.write_text("done")

    # the fastest few again, with L2 flushed, beside the vendor baseline and a copy
    rows = [json.loads(l) for l in open(Path(args.out) / f"check_{problem.name}.jsonl")]
    ok = [r for r in rows if isinstance(r.get("variant"), int) and not r.get("error") and "quick_ms" in r]
    ok.sort(key=lambda r: r["quick_ms"])
    summary = {"problem": problem.name, "variants": len(all_variants),
               "failed": [r for r in rows if isinstance(r.get("variant"), int) and r.get("error")],
               "reference": [r for r in rows if r.get("variant") == "reference"], "top": []}
    for r in ok[:args.top]:
        variant = all_variants[r["variant"]]
        path = Path(args.cubins or "/nonexistent") / problem.name / f"{r['variant']}.cubin"
        module = cp.RawModule(path=str(path)) if r["compiled"] == "nvcc" else cp.RawModule(code=variant.source, options=("--std=c++17",))
        temps = {t["name"]: cp.empty(variants.shape_of(t["shape"], default.sizes), dtype=NUMPY_DTYPES[t["dtype"]])
                 for t in variant.temps}
        call = build_plan(cp, module, variant.launch, default, temps)
        time_call(cp, call, 3)
        times = time_call(cp, call, args.runs)
        summary["top"].append({"variant": r["variant"], "knobs": r["knobs"], "ms": float(np.median(times)),
                               "min_ms": float(np.min(times)), "max_ms": float(np.max(times)),
                               "kernels": r.get("kernels")})
    ref_module = cp.RawModule(code=problem.reference_source(), options=("--std=c++17",))
    ref_call = build_plan(cp, ref_module, problem.spec["launch"], default, {})
    time_call(cp, ref_call, 2)
    summary["reference_ms"] = float(np.median(time_call(cp, ref_call, args.runs)))
    kind = problem.spec.get("vendor", {}).get("kind", "none")
    call = vendor_call(cp, kind, default.inputs, default.outputs)
    if call is not None:
        time_call(cp, call, 3)
        summary["vendor"] = {"kind": kind, "ms": float(np.median(time_call(cp, call, args.runs)))}
    roof = problem.spec.get("roofline", {})
    summary["flops"] = int(variants.evaluate(roof.get("flops", "0"), default.sizes))
    summary["bytes"] = int(variants.evaluate(roof.get("bytes", "0"), default.sizes))
    (Path(args.out) / f"summary_{problem.name}.json").write_text(json.dumps(summary, indent=1))
    return 0


# --- driver ------------------------------------------------------------------------------------

def copy_bandwidth() -> float:
    import cupy as cp
    import numpy as np

    src = cp.ones(1 << 28, dtype=cp.float32)
    dst = cp.empty_like(src)
    call = lambda: cp.copyto(dst, src)  # noqa: E731
    time_call(cp, call, 3, flush=False)
    ms = float(np.median(time_call(cp, call, 20, flush=False)))
    gbs = 2 * src.nbytes / ms / 1e6   # GB/s, read + write
    del src, dst, call
    if hasattr(cp, "get_default_memory_pool"):
        cp.get_default_memory_pool().free_all_blocks()
    return gbs


def driver(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = [p.name for p in variants.bundled()]
    if args.problems:
        names = [n for n in names if n in args.problems.split(",")]
    copy_gbs = copy_bandwidth()
    print(f"device-to-device copy: {copy_gbs:.0f} GB/s", flush=True)
    for name in names:
        started = time.time()
        start = 0
        crashed = []
        while True:
            cmd = [sys.executable, __file__, "--worker", name, "--start", str(start), "--out", str(out),
                   "--top", str(args.top), "--runs", str(args.runs), "--quick-runs", str(args.quick_runs),
                   "--nvrtc-sample", str(args.nvrtc_sample), "--limit", str(args.limit),
                   "--hang-s", str(args.hang_s)]
            if args.cubins:
                cmd += ["--cubins", args.cubins]
            proc = subprocess.Popen(cmd)
            progress = out / f"progress_{name}"
            last, last_change = None, time.time()
            while proc.poll() is None:
                time.sleep(0.5)
                now = progress.read_text() if progress.exists() else None
                if now != last:
                    last, last_change = now, time.time()
                elif time.time() - last_change > (args.hang_s if now != "done" else 5 * args.hang_s):
                    proc.kill()
                    proc.wait()
                    break
            status = progress.read_text() if progress.exists() else "0"
            if proc.returncode == 0 and status == "done":
                break
            if status == "done":
                print(f"{name}: the worker failed after checking every variant (exit {proc.returncode})", flush=True)
                break
            bad = int(status)
            crashed.append(bad)
            lines = (out / f"check_{name}.jsonl").read_text().splitlines()
            if not lines or json.loads(lines[-1]).get("variant") != bad:
                with open(out / f"check_{name}.jsonl", "a") as handle:
                    handle.write(json.dumps({"variant": bad, "error": f"worker died (exit {proc.returncode}) or hung"}) + "\n")
            start = bad + 1
        if not (out / f"summary_{name}.json").is_file():
            print(f"{name}: no summary", flush=True)
            continue
        summary = json.loads((out / f"summary_{name}.json").read_text())
        summary["copy_gbs"] = copy_gbs
        (out / f"summary_{name}.json").write_text(json.dumps(summary, indent=1))
        print_summary(summary, time.time() - started)
    return 0


def print_summary(s: dict, seconds: float) -> None:
    print(f"\n== {s['problem']}: {s['variants']} variants, {len(s['failed'])} failed ({seconds:.0f}s)")
    for r in s["reference"]:
        if r.get("error"):
            print(f"  REFERENCE WRONG: {r['error']}")
    for r in s["failed"][:8]:
        print(f"  FAIL {r['variant']} {r.get('knobs')}: {r['error'][:300]}")
    line = f"  reference {s['reference_ms']:.4f} ms"
    if "vendor" in s:
        line += f", vendor {s['vendor']['kind']} {s['vendor']['ms']:.4f} ms"
    print(line)
    for t in s["top"]:
        ms = t["ms"]
        extra = f"{s['bytes'] / ms / 1e6:.0f} GB/s ({100 * s['bytes'] / ms / 1e6 / s['copy_gbs']:.0f}% of copy)"
        if s["flops"] and s["problem"] == "sgemm":
            extra = f"{s['flops'] / ms / 1e9:.1f} TFLOP/s"
            if "vendor" in s:
                extra += f" ({100 * s['vendor']['ms'] / ms:.0f}% of cuBLAS)"
        print(f"  {ms:.4f} ms  {extra}  speedup {s['reference_ms'] / ms:.2f}  {t['knobs']}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--cubins", default="")
    parser.add_argument("--problems", default="")
    parser.add_argument("--worker", default="")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--quick-runs", type=int, default=3)
    parser.add_argument("--nvrtc-sample", type=int, default=0)
    parser.add_argument("--hang-s", type=float, default=60.0)
    parser.add_argument("--limit", type=int, default=0, help="only the first N variants (a smoke test)")
    args = parser.parse_args()
    return worker(args) if args.worker else driver(args)


if __name__ == "__main__":
    sys.exit(main())
