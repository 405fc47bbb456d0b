#!/usr/bin/env python
"""Scale-out: a fixed batch of GPU verifications through 1, 2, 4 ... Celery workers.

    python benchmarks/scaleout_bench.py                          # replay backend, CPU workers
    python benchmarks/scaleout_bench.py --backend cupy --problems reduce_sum,transpose --per-problem 12

Creates a fresh database (PostgreSQL at 127.0.0.1:5432 where it answers, else SQLite) and, with
Redis at 127.0.0.1:6379, uses an empty Redis database as the broker (else the filesystem broker);
migrates, loads the bundled problems and stores a fixed batch of their recorded variants as
kernels. For each worker count W it starts W real worker processes (the commands of
benchmarks/scaleout_launch.py, one GPU each where there are enough GPUs, else round-robin),
waits until they are ready, creates one run per problem with one node per variant, asks for a
verification of every node (`verification_enqueue_for_policy`, as the search does) and waits
until every verification is finished. It reports jobs per minute, the efficiency against
W x the one-worker rate, and checks that every verification is done after one attempt, that it
has exactly one Measurement (of its own kernel) and no other was stored, that its node is
measured, and that every result is correct: status ok and, for replay, the speedup recorded in
the dataset. The JSON goes to benchmarks/results/scaleout_<label>_<date>.json after every round.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from scaleout_launch import list_gpus, model_slug, start, worker_specs  # noqa: E402

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_BASE = "redis://127.0.0.1:6379"
_TASK_LINE = re.compile(r"Task kernellab\.tasks\.verification_execute\[[^\]]+\] (succeeded in ([\d.]+)s: '([^']*)'|raised)")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- infrastructure ---------------------------------------------------------------------------
def postgres_create() -> str | None:
    try:
        import psycopg
    except ImportError:
        return None
    name = f"kl_scaleout_{datetime.now():%Y%m%d_%H%M%S}_{os.getpid()}"
    try:
        with psycopg.connect(PG_ADMIN, connect_timeout=3, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except Exception as exc:  # noqa: BLE001 - any failure means: use SQLite
        print(f"PostgreSQL does not answer at {PG_ADMIN} ({exc.__class__.__name__}); using SQLite", flush=True)
        return None
    return name


def postgres_drop(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, connect_timeout=3, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def redis_pick() -> tuple[str, int] | None:
    """An empty Redis database (15 down to 8), so that no other worker shares its queues."""
    try:
        import redis
    except ImportError:
        return None
    for index in range(15, 7, -1):
        try:
            client = redis.Redis.from_url(f"{REDIS_BASE}/{index}", socket_connect_timeout=2)
            if client.dbsize() == 0:
                return f"{REDIS_BASE}/{index}", index
        except Exception as exc:  # noqa: BLE001
            print(f"Redis does not answer at {REDIS_BASE} ({exc.__class__.__name__}); using the filesystem broker",
                  flush=True)
            return None
    print("No empty Redis database among 8-15; using the filesystem broker", flush=True)
    return None


def redis_flush(url: str) -> None:
    import redis

    redis.Redis.from_url(url, socket_connect_timeout=2).flushdb()


# --- the batch --------------------------------------------------------------------------------
def select_variants(problem_names: list[str], per_problem: int, min_speedup: float) -> list[dict]:
    """A fixed, reproducible batch: per problem, the recorded correct variants ordered by source
    hash (a stable shuffle), the first `per_problem` whose re-rendered source is the recorded one."""
    from gpu_runner import load_problem, render_variant
    from gpu_runner.backends.replay import read_records

    from kernellab.selectors.problems import bundled_dir

    batch = []
    for name in problem_names:
        folder = bundled_dir() / name
        spec = load_problem(folder)
        records = [r for r in read_records(folder / "records" / "h200.jsonl.gz")
                   if r.get("knobs") and r.get("status") == "ok" and (r.get("speedup") or 0) >= min_speedup]
        records.sort(key=lambda r: r["source_hash"])
        chosen = 0
        for record in records:
            candidate = render_variant(spec, record["knobs"])
            if candidate.source_hash != record["source_hash"]:
                continue
            batch.append({"problem": name, "candidate": candidate.to_dict(), "source_hash": record["source_hash"],
                          "recorded_speedup": record["speedup"], "name": candidate.name})
            chosen += 1
            if chosen == per_problem:
                break
        if chosen < per_problem:
            raise SystemExit(f"{name}: only {chosen} recorded variants fit (asked for {per_problem})")
    return batch


def setup_database(batch: list[dict]):
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from kernellab.models import Membership, Role, Workspace
    from kernellab.services.kernels import kernel_get_or_create
    from kernellab.services.problems import problem_load_bundled

    started = time.perf_counter()
    call_command("migrate", verbosity=0, interactive=False)
    migrate_s = time.perf_counter() - started
    workspace = Workspace.objects.create(name="Scale-out", slug="scaleout")
    user = get_user_model().objects.create_user(username="scaleout", password="scaleout-bench-pw")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ENGINEER)
    problems = {p.name: p for p in problem_load_bundled(workspace=workspace, compile=False)}
    for item in batch:
        item["kernel_id"] = kernel_get_or_create(candidate={**item["candidate"], "name": item["name"]}).pk
    return workspace, user, problems, migrate_s


def enqueue_round(label: str, batch: list[dict], problems: dict, user, backend: str, target_gpu: str):
    from kernellab.models import Node, NodeState
    from kernellab.services.runs import run_create
    from kernellab.services.verifications import verification_enqueue_for_policy

    runs, nodes = {}, []
    for item in batch:
        name = item["problem"]
        if name not in runs:
            problem = problems[name]
            run = run_create(problem=problem, user=user, name=f"scale-out {label} {name}", generator="template",
                             surrogate="none", backend=backend, target_gpu=target_gpu, start=False)
            root = Node.objects.create(run=run, key="root", kernel=problem.reference, origin="root",
                                       state=NodeState.MEASURED, speedup=1.0)
            runs[name] = (run, root)
        run, root = runs[name]
        nodes.append(Node.objects.create(run=run, key=f"v{len(nodes)}", parent=root, kernel_id=item["kernel_id"],
                                         depth=1, state=NodeState.FORECAST, rationale=item["name"]))
    enqueue_started = time.perf_counter()
    verifications = [verification_enqueue_for_policy(node=node, reason="scale-out benchmark") for node in nodes]
    return [r for r, _ in runs.values()], nodes, verifications, time.perf_counter() - enqueue_started


# --- workers ----------------------------------------------------------------------------------
class Workers:
    def __init__(self, count: int, gpus: int, queue: str, model: str, log_dir: Path, env: dict[str, str]):
        per_gpu = math.ceil(count / gpus) if gpus else count
        specs = worker_specs(gpus, model, workers_per_gpu=per_gpu, queue=queue,
                             extra=["--without-gossip", "--without-mingle", "--without-heartbeat"])
        self.specs = specs[:count]
        self.logs = [log_dir / f"{s.name}.log" for s in self.specs]
        self.env = env
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        for spec, log in zip(self.specs, self.logs):
            self.procs.append(start(spec, log_path=log, base_env=self.env, new_session=True))

    def wait_ready(self, timeout_s: float) -> float:
        started = time.perf_counter()
        while time.perf_counter() - started < timeout_s:
            ready = sum(1 for log in self.logs if log.exists() and " ready." in log.read_text(errors="replace"))
            dead = [s.name for s, p in zip(self.specs, self.procs) if p.poll() is not None]
            if dead:
                tail = self.logs[[s.name for s in self.specs].index(dead[0])].read_text(errors="replace")[-3000:]
                raise RuntimeError(f"workers exited at start: {dead}; the log of {dead[0]} ends:\n{tail}")
            if ready == len(self.logs):
                return time.perf_counter() - started
            time.sleep(0.1)
        raise RuntimeError(f"workers not ready within {timeout_s:.0f} s; see {self.logs[0].parent}")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)   # Celery's warm shutdown: the worker stops its pool
        deadline = time.monotonic() + 20
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)

    def outcomes(self) -> dict[str, dict]:
        """Per worker, from its log: tasks finished by outcome and the task time Celery measured."""
        result = {}
        for spec, log in zip(self.specs, self.logs):
            counts: dict[str, int] = {}
            seconds = []
            errors = []
            text = log.read_text(errors="replace") if log.exists() else ""
            for match in _TASK_LINE.finditer(text):
                outcome = match.group(3) if match.group(2) else "raised"
                counts[outcome] = counts.get(outcome, 0) + 1
                if match.group(2) and outcome == "done":
                    seconds.append(float(match.group(2)))
            for line in text.splitlines():
                if ("ERROR" in line or "Traceback" in line or "Error" in line) and len(errors) < 5:
                    errors.append(line[:300])
            result[spec.name] = {"gpu": spec.gpu, "tasks": counts,
                                 "task_s_median": round(statistics.median(seconds), 3) if seconds else None,
                                 "errors": errors}
        return result


class GpuActivity:
    """Each GPU's own NVML readings over a round: energy-counter delta and sampled utilisation, so
    the report shows which GPUs did the work (a worker pinned to GPU 1 must light up GPU 1 only)."""

    def __init__(self, period_s: float = 0.2):
        self.period_s = period_s
        self.handles: list = []
        self.samples: dict[int, list[int]] = {}
        self.energy0: dict[int, int] = {}
        self.error = ""
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception as exc:  # noqa: BLE001 - no NVML: the report says so
            self.error = f"{exc.__class__.__name__}: {exc}"
        self._stop = None
        self._thread = None

    def _energy(self, handle) -> int | None:
        try:
            return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        except Exception:  # noqa: BLE001
            return None

    def start(self) -> None:
        import threading

        if not self.handles:
            return
        self.samples = {i: [] for i in range(len(self.handles))}
        self.energy0 = {i: self._energy(h) for i, h in enumerate(self.handles)}
        self.t0 = time.perf_counter()
        self._stop = threading.Event()

        def loop():
            while not self._stop.wait(self.period_s):
                for i, handle in enumerate(self.handles):
                    try:
                        self.samples[i].append(int(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
                    except Exception:  # noqa: BLE001
                        pass

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> dict:
        if not self.handles:
            return {"error": self.error or "no GPU"}
        self._stop.set()
        self._thread.join(timeout=5)
        seconds = time.perf_counter() - self.t0
        report = {}
        for i, handle in enumerate(self.handles):
            end, start = self._energy(handle), self.energy0.get(i)
            util = self.samples.get(i) or [0]
            report[str(i)] = {"energy_j": round((end - start) / 1e3, 1) if end is not None and start is not None else None,
                              "mean_power_w": round((end - start) / 1e3 / seconds, 1)
                              if end is not None and start is not None and seconds > 0 else None,
                              "util_mean_pct": round(statistics.mean(util), 1), "util_max_pct": max(util),
                              "busy_samples_pct": round(100 * sum(1 for u in util if u > 0) / len(util), 1)}
        return report


# --- one round --------------------------------------------------------------------------------
def run_round(count: int, args, ctx: dict) -> dict:
    from django.db import close_old_connections

    from kernellab.models import Measurement, Verification, VerificationState

    label = f"w{count}"
    log_dir = ctx["tmp"] / f"logs-{label}"
    log_dir.mkdir()
    env = dict(ctx["env"])
    # Cold compile caches per round, so that no round gains from an earlier one.
    env["KERNELLAB_CACHE"] = str(ctx["tmp"] / f"cache-{label}")
    env["CUPY_CACHE_DIR"] = str(ctx["tmp"] / f"cupy-cache-{label}")
    workers = Workers(count, ctx["gpus"], ctx["queue"], ctx["model"], log_dir, env)
    round_started = time.perf_counter()
    workers.start()
    try:
        ready_s = workers.wait_ready(args.ready_timeout_s)
        measurements_before = Measurement.objects.count()
        last_measurement = Measurement.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
        activity = GpuActivity() if args.backend != "replay" else None
        if activity:
            activity.start()
        t0 = time.perf_counter()
        runs, nodes, verifications, enqueue_s = enqueue_round(label, ctx["batch"], ctx["problems"], ctx["user"],
                                                             args.backend, ctx["model"])
        ids = [v.pk for v in verifications]
        finished = 0
        timed_out = False
        while True:
            finished = Verification.objects.filter(pk__in=ids, state__in=[VerificationState.DONE,
                                                                          VerificationState.FAILED]).count()
            if finished == len(ids):
                break
            if time.perf_counter() - t0 > ctx["round_timeout_s"]:
                timed_out = True
                break
            time.sleep(0.1)
        wall_s = time.perf_counter() - t0
        gpu_activity = activity.stop() if activity else None
        time.sleep(args.settle_s)  # a duplicate delivery, if any, gets the time to show itself
    finally:
        workers.stop()
    close_old_connections()
    rows = list(Verification.objects.filter(pk__in=ids).select_related("node", "measurement").order_by("pk"))
    by_node = {item_node.pk: item for item_node, item in zip(nodes, ctx["batch"])}
    new_measurements = list(Measurement.objects.filter(pk__gt=last_measurement))
    checks = {"done": 0, "one_attempt": 0, "measurement_linked": 0, "own_kernel": 0, "node_measured": 0,
              "status_ok": 0, "correct": 0}
    problems_seen = []
    service, waits, ratios = [], [], []
    observer_errors: dict[str, int] = {}
    hardware = set()
    for row in rows:
        item = by_node[row.node_id]
        m = row.measurement
        ok = {"done": row.state == VerificationState.DONE, "one_attempt": row.attempts == 1,
              "measurement_linked": m is not None, "own_kernel": m is not None and m.kernel_id == row.node.kernel_id,
              "node_measured": row.node.state == "measured", "status_ok": m is not None and m.status == "ok"}
        if args.backend == "replay":
            ok["correct"] = ok["status_ok"] and m.speedup is not None and \
                math.isclose(m.speedup, item["recorded_speedup"], rel_tol=1e-12)
        else:
            # The runner's verdict: correct on every input set, within the problem's tolerances.
            ok["correct"] = ok["status_ok"]
        for key, value in ok.items():
            checks[key] += int(bool(value))
        if not all(ok.values()) and len(problems_seen) < 10:
            problems_seen.append({"verification": row.pk, "variant": item["name"], "state": row.state,
                                  "attempts": row.attempts, "reason": (row.reason or (m.reason if m else ""))[:300],
                                  **{k: v for k, v in ok.items() if not v}})
        if row.started_at and row.finished_at:
            service.append((row.finished_at - row.started_at).total_seconds())
        if row.queued_at and row.started_at:
            waits.append((row.started_at - row.queued_at).total_seconds())
        if m is not None:
            for key in (m.observer_errors or {}):
                observer_errors[key] = observer_errors.get(key, 0) + 1
            if (m.hardware or {}).get("name"):
                hardware.add(m.hardware["name"])
        if m is not None and m.speedup and item["recorded_speedup"]:
            ratios.append(m.speedup / item["recorded_speedup"])
    linked = [r.measurement_id for r in rows if r.measurement_id]
    jobs = len(rows)
    exactly_once = (len(new_measurements) == jobs and len(set(linked)) == jobs
                    and {m.pk for m in new_measurements} == set(linked))
    queued = [r.queued_at for r in rows if r.queued_at]
    ends = [r.finished_at for r in rows if r.finished_at]
    makespan_s = (max(ends) - min(queued)).total_seconds() if queued and ends and not timed_out else None
    per_worker = workers.outcomes()
    result = {
        "workers": count,
        "gpus_used": sorted({s.gpu for s in workers.specs if s.gpu is not None}),
        "jobs": jobs,
        "finished": finished,
        "timed_out": timed_out,
        "workers_ready_s": round(ready_s, 2),
        "enqueue_s": round(enqueue_s, 2),
        "wall_s": round(wall_s, 2),
        "makespan_s": round(makespan_s, 2) if makespan_s else None,
        "jobs_per_min": round(jobs / makespan_s * 60, 1) if makespan_s else None,
        "service_s_median": round(statistics.median(service), 3) if service else None,
        "service_s_p90": round(sorted(service)[int(0.9 * (len(service) - 1))], 3) if service else None,
        "queue_wait_s_median": round(statistics.median(waits), 3) if waits else None,
        "measurements_stored": len(new_measurements),
        "measurements_total_before": measurements_before,
        "exactly_once": exactly_once,
        "checks": checks,
        "all_correct": checks["correct"] == jobs and not timed_out,
        "speedup_vs_recorded": speedup_agreement(ratios),
        "observer_errors": observer_errors,
        "measured_on": sorted(hardware),
        "failures": problems_seen,
        "per_worker": per_worker,
        "gpu_activity": gpu_activity,
        "round_s": round(time.perf_counter() - round_started, 1),
    }
    return result


def speedup_agreement(ratios: list[float]) -> dict | None:
    if not ratios:
        return None
    logs = sorted(abs(math.log(r)) for r in ratios)
    return {"n": len(ratios), "median_ratio": round(statistics.median(ratios), 4),
            "median_abs_log_ratio": round(statistics.median(logs), 4),
            "within_10pct": sum(1 for r in ratios if 1 / 1.1 <= r <= 1.1),
            "within_25pct": sum(1 for r in ratios if 1 / 1.25 <= r <= 1.25)}


def gpu_cell(activity: dict | None) -> str:
    if not activity or "error" in activity:
        return (activity or {}).get("error", "-")
    return " ".join(f"gpu{i}: {a['util_mean_pct']:.0f}% ({a['energy_j']} J)" for i, a in activity.items())


def table(rounds: list[dict]) -> str:
    base = next((r for r in rounds if r["workers"] == 1 and r["jobs_per_min"]), None)
    lines = [f"{'workers':>7} {'jobs':>5} {'seconds':>8} {'jobs/min':>9} {'efficiency':>10} {'service s':>9} "
             f"{'exactly once':>12} {'correct':>8}  GPU utilisation, mean % (energy J)"]
    for r in rounds:
        eff = (r["jobs_per_min"] / (r["workers"] * base["jobs_per_min"])) if base and r["jobs_per_min"] else None
        r["efficiency"] = round(eff, 3) if eff is not None else None
        lines.append(f"{r['workers']:>7} {r['jobs']:>5} {r['makespan_s'] or float('nan'):>8.1f} "
                     f"{r['jobs_per_min'] or float('nan'):>9.1f} {(f'{eff:.0%}' if eff is not None else '-'):>10} "
                     f"{r['service_s_median'] or float('nan'):>9.2f} {str(r['exactly_once']):>12} "
                     f"{r['checks']['correct']:>4}/{r['jobs']:<3}  {gpu_cell(r.get('gpu_activity'))}")
    return "\n".join(lines)


# --- main -------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("replay", "cupy", "pycuda"), default="replay")
    parser.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated")
    parser.add_argument("--problems", default="histogram256,reduce_sum,rmsnorm,sgemm,softmax,transpose")
    parser.add_argument("--per-problem", type=int, default=15, help="variants per problem (the batch is fixed)")
    parser.add_argument("--min-speedup", type=float, default=0.0, help="only variants recorded at least this fast")
    parser.add_argument("--db", choices=("auto", "postgres", "sqlite"), default="auto")
    parser.add_argument("--broker", choices=("auto", "redis", "filesystem"), default="auto")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs to pin workers to (default: nvidia-smi -L; "
                                                               "0 for the replay backend)")
    parser.add_argument("--no-profile", action="store_true",
                        help="skip Nsight Compute in the workers (KERNELLAB_NCU=/bin/false: recorded as an "
                             "observer error on each measurement)")
    parser.add_argument("--fs-poll-s", type=float, default=None,
                        help="filesystem broker only: poll every this many seconds (kombu's default: 1 s) through "
                             "benchmarks/scaleout_settings.py")
    parser.add_argument("--emulate-gpu-s", type=float, default=0,
                        help="add this many seconds of sleep to every job (the worker-kill test's delay hook), "
                             "standing in for device time on a GPU that no other worker shares")
    parser.add_argument("--label", default=None, help="file label (default: cpu for replay, the GPU model else)")
    parser.add_argument("--out", default=None, help="JSON path (default benchmarks/results/scaleout_<label>_<date>.json)")
    parser.add_argument("--ready-timeout-s", type=float, default=90)
    parser.add_argument("--round-timeout-s", type=float, default=600)
    parser.add_argument("--settle-s", type=float, default=1.5)
    parser.add_argument("--deadline-s", type=float, default=0,
                        help="skip a round that the one before says will not end within this many seconds of start")
    parser.add_argument("--log-archive", default=None, help="write the workers' logs to this .tar.gz")
    parser.add_argument("--keep", action="store_true", help="keep the database and the temporary folder")
    args = parser.parse_args()
    script_started = time.perf_counter()

    counts = [int(c) for c in args.workers.split(",") if c.strip()]
    found = list_gpus()
    gpus = args.gpus if args.gpus is not None else (len(found) if args.backend != "replay" else 0)
    if args.backend != "replay" and gpus == 0:
        print("The cupy/pycuda backends need a GPU (nvidia-smi -L lists none).", file=sys.stderr)
        return 2
    model = model_slug(found[0].name) if found and args.backend != "replay" else "h200"
    queue = "replay" if args.backend == "replay" else f"gpu.{model}"
    label = args.label or ("cpu" if args.backend == "replay" else model)

    tmp = Path(tempfile.mkdtemp(prefix="kl-scaleout-"))
    env = dict(os.environ)
    for key in ("DATABASE_URL", "REDIS_URL", "KERNELLAB_TASKS_EAGER"):
        env.pop(key, None)
    env.update({"DJANGO_SETTINGS_MODULE": "kernellab.settings", "KERNELLAB_DATA_DIR": str(tmp / "data"),
                "PYTHONUNBUFFERED": "1"})
    if args.fs_poll_s is not None:
        env["DJANGO_SETTINGS_MODULE"] = "benchmarks.scaleout_settings"
        env["KERNELLAB_SCALEOUT_POLL_S"] = str(args.fs_poll_s)
    if args.emulate_gpu_s:
        env["KERNELLAB_TEST_VERIFY_DELAY_S"] = str(args.emulate_gpu_s)
    if args.no_profile:
        env["KERNELLAB_NCU"] = "/bin/false"
    pg_name = postgres_create() if args.db in ("auto", "postgres") else None
    if args.db == "postgres" and pg_name is None:
        return 2
    if pg_name:
        env["DATABASE_URL"] = f"postgresql://postgres@127.0.0.1:5432/{pg_name}"
    redis = redis_pick() if args.broker in ("auto", "redis") else None
    if args.broker == "redis" and redis is None:
        return 2
    if redis:
        env["REDIS_URL"] = redis[0]
    os.environ.clear()
    os.environ.update(env)

    import django

    django.setup()
    from django.conf import settings
    from django.db import connection, connections

    report: dict = {
        "date": now_iso(),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "backend": args.backend,
        "queue": queue,
        "database": connection.vendor + (f" {connection.pg_version}" if connection.vendor == "postgresql" else ""),
        "broker": "redis" if redis else "filesystem",
        "broker_polling_interval_s": None if redis else settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("polling_interval", 1.0),
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
                 "gpus": [g.name for g in found], "gpus_used": gpus},
        "profile": not args.no_profile,
        "emulated_gpu_s_per_job": args.emulate_gpu_s,
        "settings": {"prefetch_multiplier": settings.CELERY_WORKER_PREFETCH_MULTIPLIER,
                     "acks_late": settings.CELERY_TASK_ACKS_LATE, "concurrency_per_worker": 1},
        "rounds": [],
    }
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / \
        f"scaleout_{label}_{datetime.now(timezone.utc):%Y-%m-%d}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    code = 0
    try:
        problem_names = [p.strip() for p in args.problems.split(",") if p.strip()]
        batch = select_variants(problem_names, args.per_problem, args.min_speedup)
        workspace, user, problems, migrate_s = setup_database(batch)
        report["batch"] = {"jobs": len(batch), "problems": {n: sum(1 for b in batch if b["problem"] == n)
                                                            for n in problem_names},
                           "variants": [b["name"] for b in batch][:500], "min_speedup": args.min_speedup}
        report["setup_s"] = round(time.perf_counter() - script_started, 1)
        print(f"{len(batch)} jobs ({', '.join(problem_names)}), {report['database']}, {report['broker']} broker, "
              f"backend {args.backend}, queue {queue}, GPUs {gpus}; setup {report['setup_s']} s "
              f"(migrate {migrate_s:.1f} s)", flush=True)
        ctx = {"tmp": tmp, "env": env, "gpus": gpus, "queue": queue, "model": model, "batch": batch,
               "problems": problems, "user": user}
        last = None
        for count in counts:
            elapsed = time.perf_counter() - script_started
            ctx["round_timeout_s"] = args.round_timeout_s
            if args.deadline_s:
                ctx["round_timeout_s"] = min(args.round_timeout_s, args.deadline_s - elapsed - 15)
            predicted = None
            if last is not None and last["makespan_s"]:
                # The last round's fixed cost (start, stop) plus its work shared by more workers.
                overhead = last["round_s"] - last["makespan_s"]
                predicted = overhead + 1.2 * last["makespan_s"] * last["workers"] / count
            if args.deadline_s and predicted is not None and elapsed + predicted > args.deadline_s:
                report.setdefault("skipped", []).append(
                    {"workers": count, "why": f"{elapsed:.0f} s gone, about {predicted:.0f} s needed, "
                                              f"deadline {args.deadline_s:.0f} s"})
                print(f"skipping {count} workers: not enough time left", flush=True)
                continue
            result = run_round(count, args, ctx)
            report["rounds"].append(result)
            last = result
            print(f"{count} worker(s): {result['jobs']} jobs in {result['makespan_s']} s = "
                  f"{result['jobs_per_min']} jobs/min; exactly once {result['exactly_once']}; "
                  f"correct {result['checks']['correct']}/{result['jobs']}; per worker "
                  f"{ {k: v['tasks'] for k, v in result['per_worker'].items()} }", flush=True)
            table(report["rounds"])
            report["total_s"] = round(time.perf_counter() - script_started, 1)
            out.write_text(json.dumps(report, indent=1, default=str))
            if not (result["exactly_once"] and result["all_correct"]):
                code = 1
        print()
        print(table(report["rounds"]))
        report["all_exactly_once"] = all(r["exactly_once"] for r in report["rounds"])
        report["all_correct"] = all(r["all_correct"] for r in report["rounds"])
        report["total_s"] = round(time.perf_counter() - script_started, 1)
        out.write_text(json.dumps(report, indent=1, default=str))
        print(f"wrote {out}")
    finally:
        if args.log_archive:
            import tarfile

            with tarfile.open(args.log_archive, "w:gz") as archive:
                for folder in sorted(tmp.glob("logs-*")):
                    archive.add(folder, arcname=folder.name)
        connections.close_all()
        if pg_name and not args.keep:
            postgres_drop(pg_name)
        if redis and not args.keep:
            redis_flush(redis[0])
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}" + (f" and database {pg_name}" if pg_name else ""))
    return code


if __name__ == "__main__":
    sys.exit(main())
