#!/usr/bin/env python
"""Start one Celery GPU worker per GPU of this host (docs/scaleout.md).

    python benchmarks/scaleout_launch.py                 # one worker per `nvidia-smi -L` GPU
    python benchmarks/scaleout_launch.py --dry-run       # print the commands and exit
    python benchmarks/scaleout_launch.py --model h200 --gpus 2

Worker i runs `celery -A kernellab worker -Q gpu.<model> --concurrency 1 -n gpu<i>@%h` with
CUDA_VISIBLE_DEVICES=i (and CUDA_DEVICE_ORDER=PCI_BUS_ID, so that i is nvidia-smi's numbering).
The model comes from the GPU's name ("NVIDIA H200" -> h200) unless --model names it; runs that
target that model send their verifications to the queue gpu.<model>. The environment (REDIS_URL,
DATABASE_URL, ...) is passed on unchanged: every worker must reach the same broker and database.
SIGTERM or Ctrl-C is passed on to every worker (a warm shutdown: the job in hand finishes, the
rest stay queued); the launcher exits when every worker has.

`--workers-per-gpu K` starts K workers on each GPU. That only serves throughput experiments
(benchmarks/scaleout_bench.py): workers sharing a GPU disturb each other's timings and energy.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from gpu_runner.result import gpu_model_slug as model_slug  # noqa: E402  (scaleout_bench imports it from here)
_GPU_LINE = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: ([^)]+)\))?\s*$")


@dataclass
class Gpu:
    index: int
    name: str
    uuid: str = ""


@dataclass
class WorkerSpec:
    name: str            # celery node name, unique per host
    queue: str
    gpu: int | None      # the CUDA_VISIBLE_DEVICES value, None = leave the environment alone
    env: dict[str, str] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"{env} {shlex.join(self.argv)}".strip()


def list_gpus(nvidia_smi: str = "nvidia-smi") -> list[Gpu]:
    """The GPUs `nvidia-smi -L` lists (MIG instances are not listed separately)."""
    try:
        out = subprocess.run([nvidia_smi, "-L"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.splitlines():
        match = _GPU_LINE.match(line.strip())
        if match:
            gpus.append(Gpu(int(match.group(1)), match.group(2).strip(), match.group(3) or ""))
    return gpus


def worker_specs(gpus: int, model: str, *, workers_per_gpu: int = 1, queue: str | None = None,
                 python: str = sys.executable, loglevel: str = "INFO", name_prefix: str = "gpu",
                 extra: list[str] | None = None) -> list[WorkerSpec]:
    """One spec per worker: gpus x workers_per_gpu, pinned round-robin (worker i on GPU i % gpus). gpus == 0 means no GPU
    (CPU workers for the replay queue): workers_per_gpu workers, no pinning."""
    queue = queue or f"gpu.{model}"
    specs = []
    # Round-robin: the first `gpus` workers take one GPU each, the next `gpus` a second slot, ...
    slots = [(g, k) for k in range(workers_per_gpu) for g in range(gpus)] if gpus else \
        [(None, k) for k in range(workers_per_gpu)]
    for gpu, k in slots:
        if gpu is None:
            label = f"cpu{k}"
        else:
            label = f"{name_prefix}{gpu}" + (f"w{k}" if workers_per_gpu > 1 else "")
        env = {} if gpu is None else {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": str(gpu)}
        argv = [python, "-m", "celery", "-A", "kernellab", "worker", "-Q", queue, "--concurrency", "1",
                "-n", f"{label}@%h", "--loglevel", loglevel, *(extra or [])]
        specs.append(WorkerSpec(name=label, queue=queue, gpu=gpu, env=env, argv=argv))
    return specs


def start(spec: WorkerSpec, *, log_path: Path | None = None, base_env: dict[str, str] | None = None,
          new_session: bool = False) -> subprocess.Popen:
    env = dict(os.environ if base_env is None else base_env)
    env.pop("KERNELLAB_TASKS_EAGER", None)
    env.update(spec.env)
    out = open(log_path, "ab") if log_path else None
    try:
        return subprocess.Popen(spec.argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT if out else None,
                                start_new_session=new_session)
    finally:
        if out:
            out.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=None, help="how many GPUs (default: nvidia-smi -L)")
    parser.add_argument("--model", default=None, help="GPU model for the queue name (default: from the GPU name)")
    parser.add_argument("--queue", default=None, help="consume this queue instead of gpu.<model>")
    parser.add_argument("--workers-per-gpu", type=int, default=1)
    parser.add_argument("--loglevel", default="INFO")
    parser.add_argument("--log-dir", default=None, help="one log file per worker here (default: inherit stdout)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    parser.add_argument("extra", nargs="*", help="after --: more celery worker options")
    args = parser.parse_args(argv)

    found = list_gpus()
    count = args.gpus if args.gpus is not None else len(found)
    if count == 0 and args.queue is None:
        print("No GPU found (nvidia-smi -L lists none). Pass --gpus N and --model, or --queue replay for CPU "
              "workers.", file=sys.stderr)
        return 2
    names = {g.name for g in found}
    model = args.model or (model_slug(found[0].name) if found else "")
    if not args.model and len(names) > 1:
        print(f"This host has several GPU models ({', '.join(sorted(names))}); start one launcher per model "
              "with --gpus and --model (CUDA_VISIBLE_DEVICES takes their indices).", file=sys.stderr)
        return 2
    if not model and args.queue is None:
        print("Name the GPU model with --model (as in h200).", file=sys.stderr)
        return 2
    specs = worker_specs(count, model, workers_per_gpu=args.workers_per_gpu, queue=args.queue,
                         loglevel=args.loglevel, extra=args.extra)
    for spec in specs:
        print(spec.shell(), flush=True)
    if args.dry_run:
        return 0
    log_dir = Path(args.log_dir) if args.log_dir else None
    if log_dir:
        log_dir.mkdir(parents=True, exist_ok=True)
    # Own sessions: a terminal's Ctrl-C reaches the launcher alone, which asks each worker for a warm
    # shutdown (its pool children are not signalled directly).
    procs = [start(s, log_path=(log_dir / f"{s.name}.log") if log_dir else None, new_session=True) for s in specs]

    def forward(signum, _frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = 0
    while any(p.poll() is None for p in procs):
        time.sleep(0.5)
    for spec, p in zip(specs, procs):
        if p.returncode not in (0, -signal.SIGTERM):
            print(f"worker {spec.name} exited with {p.returncode}", file=sys.stderr)
            code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
