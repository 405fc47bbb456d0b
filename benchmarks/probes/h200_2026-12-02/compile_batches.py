"""Hand probe (2026-12-02, not part of the project): why a search step's batch of compile checks runs
slower on the H200 host than one compile alone suggests.

On 2026-12-02 the own-kernels searches on the H200 host spent ~0.57 s on a step's batch of ~16 NVRTC
checks and ~1.5 s on a batch of ~16 nvcc checks, against ~0.05 s and ~0.3 s for one compile alone on
the 2-core development machine. This probe times, on the machine it runs on, with an empty cache:
one compile alone (each engine), nvcc's phases (`nvcc --time`), batches of distinct sources on 1..N
threads through `compile_cubin` (the one compile path), the same nvcc batch with its scratch folders
on /dev/shm and without the compile sandbox, and cuobjdump alone and in a batch. Prints a table and
writes compile_batches.json under $OUT (or the folder given).

    PYTHONPATH=<repo> python3 benchmarks/probes/h200_2026-12-02/compile_batches.py [OUT_DIR] [--nvrtc-warm]

--nvrtc-warm: only NVRTC, with every server started before timing (the first run's NVRTC batches of 8
and 16 threads included starting new servers), batches of 32 through compile_cubin and straight to the
server pool, and the servers' CPU seconds per batch.
"""
from __future__ import annotations

import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from gpu_runner import compiler  # noqa: E402
from gpu_runner.compile_sandbox import sandbox_status  # noqa: E402
from gpu_runner.nvrtc import choose_engine, close_servers, server_pool  # noqa: E402

RESULT = ROOT / "benchmarks" / "results" / "own_kernels_h200_2026-12-02_one-parent-a-step.json"
KERNELS = {k["name"]: k["best_source"] for k in json.loads(RESULT.read_text())["kernels"]}
SOURCES = {"nvcc": KERNELS["column_sum"], "nvrtc": KERNELS["row_rmsnorm"]}
BATCH = 16
WORKERS = [1, 2, 4, 8, 16]
salt = iter(range(10**6))


def salted(source: str) -> str:
    """A source no compile has seen (an unused macro changes the text, not the code)."""
    return f"#define KL_PROBE_SALT_{next(salt)} 1\n{source}"


def compile_one(source: str) -> float:
    started = time.perf_counter()
    out = compiler.compile_cubin(source, (), "sm_90", sass=False, use_cache=False)
    if not out.report.ok:
        raise RuntimeError(out.report.log[:2000])
    return time.perf_counter() - started


def batch(source: str, workers: int, n: int = BATCH) -> dict:
    sources = [salted(source) for _ in range(n)]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        each = list(pool.map(compile_one, sources))
    wall = time.perf_counter() - started
    return {"workers": workers, "n": n, "wall_s": round(wall, 4), "per_compile_wall_s": round(wall / n, 4),
            "mean_compile_s": round(statistics.mean(each), 4), "max_compile_s": round(max(each), 4)}


def nvcc_phases(source: str, repeats: int = 3) -> dict:
    """nvcc's own per-phase times (ms), median over `repeats` compiles, unsandboxed, as the runner's flags."""
    flags, _ = compiler._flags_and_entry(source, (), "sm_90")
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        table = os.path.join(tmp, "time.csv")
        for _ in range(repeats):
            src = os.path.join(tmp, "k.cu")
            Path(src).write_text(salted(source))
            subprocess.run([compiler.find_tool("nvcc"), *flags, *compiler.include_flags(), "--time", table,
                            "-o", os.path.join(tmp, "k.cubin"), src], check=True, capture_output=True)
        with open(table) as f:
            for row in csv.reader(f, skipinitialspace=True):
                cells = [c.strip() for c in row]
                if len(cells) >= 8 and cells[7] == "ms":   # name, phase, inputs, output, arch, tool, metric, unit
                    rows.setdefault(cells[1], []).append(float(cells[6]))
        raw = Path(table).read_text()
    return {"median_ms": {k: round(statistics.median(v), 2) for k, v in rows.items()}, "raw_head": raw[:1500]}


def cuobjdump_batch(workers: int, n: int = BATCH) -> dict:
    out = compiler.compile_cubin(salted(SOURCES["nvcc"]), (), "sm_90", sass=False, use_cache=False)
    cubin = out.cubin

    def one(_):
        started = time.perf_counter()
        compiler.sass_counts(cubin)
        return time.perf_counter() - started

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        each = list(pool.map(one, range(n)))
    return {"workers": workers, "n": n, "wall_s": round(time.perf_counter() - started, 4),
            "mean_s": round(statistics.mean(each), 4)}


def machine() -> dict:
    facts = {"platform": platform.platform(), "cpu_count": os.cpu_count(),
             "affinity": len(os.sched_getaffinity(0)), "loadavg": os.getloadavg()}
    for path in ("/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
        try:
            facts[path] = Path(path).read_text().strip()
        except OSError:
            pass
    try:
        models = [l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                  if l.startswith("model name")]
        facts["cpu_model"] = models[0] if models else None
        facts["threads_per_core"] = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        pass
    mounts = {}
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        if parts[1] in ("/", "/tmp", "/dev/shm"):
            mounts[parts[1]] = parts[2]
    facts["mounts"] = mounts
    facts["tmpdir"] = tempfile.gettempdir()
    facts["sandbox"] = sandbox_status().mode
    facts["engines"] = {k: choose_engine(v).name for k, v in SOURCES.items()}
    return facts


def _servers_cpu_s() -> float:
    """User + system CPU seconds of this process's idle NVRTC servers (from /proc)."""
    from gpu_runner import nvrtc

    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for server in list(nvrtc.server_pool()._idle):
        try:
            fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return total


def nvrtc_warm(out_dir: Path) -> None:
    """NVRTC with every server already started: batches of 32 on 1..16 threads through compile_cubin and
    straight to the server pool, with the servers' CPU seconds, so spawning is not in the figures."""
    from gpu_runner import nvrtc

    result: dict = {"probe": "compile_batches --nvrtc-warm", "machine": machine()}
    for name in ("row_rmsnorm", "row_softmax"):
        source = KERNELS[name]
        batch(source, 16, n=48)  # starts all 16 servers
        rows = []
        for workers in WORKERS:
            cpu = _servers_cpu_s()
            row = batch(source, workers, n=32)
            row["servers_cpu_s"] = round(_servers_cpu_s() - cpu, 3)
            flags = nvrtc.nvrtc_flags((), "sm_90")
            sources = [salted(source) for _ in range(32)]

            def direct(text):
                started = time.perf_counter()
                nvrtc.server_pool().compile(text, "kernel.cu", flags, False, 120.0)
                return time.perf_counter() - started

            started = time.perf_counter()
            with ThreadPoolExecutor(max_workers=workers) as pool:
                each = list(pool.map(direct, sources))
            row["direct_wall_s"] = round(time.perf_counter() - started, 4)
            row["direct_mean_s"] = round(statistics.mean(each), 4)
            rows.append(row)
            print(f"{name} {workers:>2}w: compile_cubin {row['wall_s']:.3f} s (mean {row['mean_compile_s']:.3f}, "
                  f"servers' CPU {row['servers_cpu_s']:.2f} s), straight to the pool {row['direct_wall_s']:.3f} s",
                  flush=True)
        result[name] = rows
    close_servers()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "compile_batches_nvrtc_warm.json").write_text(json.dumps(result, indent=1))


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    out_dir = Path(args[0] if args else os.environ.get("OUT", "."))
    if "--nvrtc-warm" in sys.argv:
        return nvrtc_warm(out_dir)
    result: dict = {"probe": "compile_batches", "machine": machine(), "batch": BATCH}
    server_pool()  # the NVRTC servers start before any timing
    for engine, source in SOURCES.items():
        compile_one(salted(source))  # warm: the toolkit's files in the page cache
        alone = [compile_one(salted(source)) for _ in range(5)]
        result[engine] = {"alone_median_s": round(statistics.median(alone), 4),
                          "batches": [batch(source, w) for w in WORKERS if w <= max(WORKERS)]}
        print(f"{engine}: alone {statistics.median(alone):.3f} s; " + ", ".join(
            f"{b['workers']}w {b['wall_s']:.2f} s" for b in result[engine]["batches"]), flush=True)
    result["nvcc_phases"] = nvcc_phases(SOURCES["nvcc"])
    print("nvcc phases (ms):", result["nvcc_phases"]["median_ms"], flush=True)
    # nvcc with its scratch on /dev/shm, and without the sandbox
    variants = {}
    if os.path.isdir("/dev/shm"):
        old = tempfile.tempdir
        tempfile.tempdir = tempfile.mkdtemp(dir="/dev/shm")
        variants["scratch_on_dev_shm"] = batch(SOURCES["nvcc"], 16)
        tempfile.tempdir = old
    old_mode = os.environ.get("KERNELLAB_COMPILE_SANDBOX")
    os.environ["KERNELLAB_COMPILE_SANDBOX"] = "none"
    variants["no_sandbox"] = batch(SOURCES["nvcc"], 16)
    close_servers()
    server_pool()
    variants["no_sandbox_nvrtc"] = batch(SOURCES["nvrtc"], 16)
    if old_mode is None:
        del os.environ["KERNELLAB_COMPILE_SANDBOX"]
    else:
        os.environ["KERNELLAB_COMPILE_SANDBOX"] = old_mode
    result["nvcc_variants"] = variants
    print("variants:", {k: v["wall_s"] for k, v in variants.items()}, flush=True)
    result["cuobjdump"] = [cuobjdump_batch(w) for w in (1, 16)]
    print("cuobjdump:", result["cuobjdump"], flush=True)
    close_servers()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "compile_batches.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
