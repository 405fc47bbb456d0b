"""Nsight Compute: profile one run of the candidate's launch plan in a small child script.

`ncu --clock-control none --csv --page raw` with the sections below, filtered to the candidate's
kernels; the CSV becomes {metric name: number}. With several kernels, the metrics of the longest
one keep their plain names and every kernel's also appear as "<i>:<kernel>:<metric>".
"""
from __future__ import annotations

import csv
import io
import os
import pickle
import subprocess
import sys
import tempfile

from ..compiler import ToolMissing, find_tool
from . import ObserverUnavailable

SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis", "Occupancy", "LaunchStats",
            "SchedulerStats", "WarpStateStats")
_DURATION = "gpu__time_duration.sum"

# Metrics the sections above leave out (Nsight Compute 2025.3) that the experts read: sector use
# per request (coalescing), shared-memory bank conflicts, access width, local traffic, DRAM bytes,
# FFMA counts, divergent branches, global atomics. tests/search_engine/experts checks this list
# covers search_engine.experts.ncu_metrics.EXTRA.
METRICS = (
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "smsp__sass_inst_executed_op_global_ld.sum",
    "smsp__sass_inst_executed_op_global_st.sum",
    "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "smsp__sass_branch_targets.sum",
    "smsp__sass_branch_targets_threads_divergent.sum",
    "smsp__sass_inst_executed_op_global_red.sum",
    "smsp__sass_inst_executed_op_global_atom.sum",
)


def parse_raw_csv(text: str) -> list[tuple[str, dict[str, float]]]:
    """Rows of `ncu --csv --page raw` as (kernel name, {metric: number}); non-numbers are dropped."""
    lines = [line for line in text.splitlines() if not line.startswith("==")]
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    kernels = []
    for row in rows[1:]:
        if not row or len(row) != len(header):
            continue
        if row[0] == "" or not row[0].strip().isdigit():   # the units row
            continue
        record = dict(zip(header, row))
        metrics: dict[str, float] = {}
        for name, value in record.items():
            if "__" not in name and "." not in name:
                continue
            try:
                metrics[name] = float(value.replace(",", ""))
            except ValueError:
                continue
        kernels.append((record.get("Kernel Name", "?"), metrics))
    return kernels


def merge(kernels: list[tuple[str, dict[str, float]]]) -> dict[str, float]:
    if not kernels:
        return {}
    if len(kernels) == 1:
        return dict(kernels[0][1])
    longest = max(kernels, key=lambda k: k[1].get(_DURATION, 0.0))
    merged = dict(longest[1])
    for i, (name, metrics) in enumerate(kernels):
        for metric, value in metrics.items():
            merged[f"{i}:{name}:{metric}"] = value
    return merged


class NcuObserver:
    def __init__(self, sections=SECTIONS, metrics=METRICS, timeout_s: float = 240.0):
        self.sections = tuple(sections)
        self.metrics = tuple(metrics)
        self.timeout_s = timeout_s

    def command(self, kernels: list[str], launches: int, job_path: str) -> list[str]:
        try:
            ncu = find_tool("ncu")
        except ToolMissing as exc:
            raise ObserverUnavailable(str(exc)) from None
        command = [ncu, "--clock-control", "none", "--csv", "--page", "raw", "--print-units", "base"]
        for section in self.sections:
            command += ["--section", section]
        if self.metrics:
            command += ["--metrics", ",".join(self.metrics)]
        pattern = "|".join(kernels)
        command += ["--kernel-name", f"regex:^({pattern})$", "--launch-count", str(launches),
                    sys.executable, "-m", "gpu_runner.observers.ncu_target", job_path]
        return command

    def profile(self, problem, candidate, cubin: bytes | None, device_module: str, *, seed: int = 0
                ) -> dict[str, float]:
        kernels = candidate.kernel_names
        launches = sum(1 for s in candidate.launch if hasattr(s, "kernel"))
        if not kernels:
            raise ObserverUnavailable("the candidate launches no kernel")
        with tempfile.TemporaryDirectory(prefix="kl-ncu-") as tmp:
            job_path = os.path.join(tmp, "job.pkl")
            with open(job_path, "wb") as handle:
                pickle.dump({"problem": problem, "candidate": candidate, "cubin": cubin,
                             "device_module": device_module, "seed": seed}, handle)
            root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
            try:
                proc = subprocess.run(self.command(kernels, launches, job_path), capture_output=True, text=True,
                                      timeout=self.timeout_s, env=env)
            except subprocess.TimeoutExpired:
                raise ObserverUnavailable(f"ncu did not finish within {self.timeout_s:.0f} s") from None
        kernels_found = parse_raw_csv(proc.stdout)
        if proc.returncode != 0 or not kernels_found:
            tail = (proc.stderr.strip() or proc.stdout.strip())[-400:]
            raise ObserverUnavailable(f"ncu exited with {proc.returncode} and no metrics: {tail}")
        return merge(kernels_found)

    def profile_many(self, problem, items: list[tuple], device_module: str, *, seed: int = 0
                     ) -> list[dict[str, float] | None]:
        """Profile several candidates of one problem under a single ncu start: `items` holds
        (candidate, cubin) pairs; the launches come back in order and are shared out by each
        candidate's launch count. A candidate whose launches are missing gets None."""
        if not items:
            return []
        kernels = sorted({name for candidate, _ in items for name in candidate.kernel_names})
        counts = [sum(1 for s in candidate.launch if hasattr(s, "kernel")) for candidate, _ in items]
        with tempfile.TemporaryDirectory(prefix="kl-ncu-") as tmp:
            job_path = os.path.join(tmp, "job.pkl")
            with open(job_path, "wb") as handle:
                pickle.dump({"problem": problem, "items": [{"candidate": c, "cubin": b} for c, b in items],
                             "device_module": device_module, "seed": seed}, handle)
            root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
            timeout = self.timeout_s * max(1, len(items)) / 4
            try:
                proc = subprocess.run(self.command(kernels, sum(counts), job_path), capture_output=True, text=True,
                                      timeout=timeout, env=env)
            except subprocess.TimeoutExpired:
                raise ObserverUnavailable(f"ncu did not finish {len(items)} candidates within {timeout:.0f} s") from None
        rows = parse_raw_csv(proc.stdout)
        if not rows:
            tail = (proc.stderr.strip() or proc.stdout.strip())[-400:]
            raise ObserverUnavailable(f"ncu exited with {proc.returncode} and no metrics: {tail}")
        return share_out(rows, counts)


def share_out(rows: list[tuple[str, dict[str, float]]], counts: list[int]) -> list[dict[str, float] | None]:
    """Give each candidate its own launches' rows, in order; a short tail (a crash) leaves None."""
    results: list[dict[str, float] | None] = []
    position = 0
    for count in counts:
        mine = rows[position:position + count]
        position += count
        results.append(merge(mine) if len(mine) == count and count else None)
    return results
