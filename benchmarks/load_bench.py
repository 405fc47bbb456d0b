"""Load benchmark of the web tier: websocket clients on one run and HTTP clients on its explorer and
node panels, while the run keeps changing.

    .venv/bin/python benchmarks/load_bench.py                      # 50 websockets + 20 HTTP clients, 60 s
    .venv/bin/python benchmarks/load_bench.py --seconds 20 --machine cpu-2core

It starts a real daphne serving KernelLab against PostgreSQL and Redis (a fresh database of its own,
tests/browser/harness.py), loads the bundled problems and grows a run on recorded H200 measurements
(template generator, roofline surrogate, replay backend), then for --seconds:
- --clients websocket clients subscribe to that run, as the explorer does after its snapshot;
- --http-clients clients (threads of a separate process) fetch the explorer page, its tree.json and
  node panels of random nodes, one request after another;
- the run gets --rate new nodes a second, each a numbered change that every websocket must receive
  exactly once (gaps and duplicates are counted per client by the change sequence number).
daphne's RSS is read before the load and --settle seconds after it; PostgreSQL connections of the
benchmark's database are counted at peak and after. Prints a table and writes
benchmarks/results/load_<machine>_<date>.json (or --out FILE; nothing with --no-write).
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import http.client
import json
import math
import multiprocessing
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser.harness import KernelLabServer  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PG_URL = os.environ.get("KERNELLAB_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/kernellab_bench_load")
# A Redis database of its own, so that nothing of another deployment or benchmark mixes with ours.
REDIS_URL = os.environ.get("KERNELLAB_BENCH_REDIS", "redis://127.0.0.1:6379/9")
GOALS = {"errors": 0, "ws_gaps": 0, "ws_duplicates": 0, "http_p95_ms": 1000.0, "rss_growth": 0.20}


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))]


def default_machine() -> str:
    return f"cpu-{os.cpu_count()}core"


# ---- the world ---------------------------------------------------------------------------------


def fresh_postgres_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    subprocess.run(["psql", admin, "-q", "-c", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'], check=True)
    subprocess.run(["psql", admin, "-q", "-c", f'CREATE DATABASE "{name}"'], check=True)


def build_world(problem_name: str, budget: int, screening: int) -> dict:
    """Runs inside a process configured like the server (tasks eager): a replay run that searches
    to its end, so its tree has real kernels, forecasts, measurements and expert notes."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kernellab.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from kernellab.celery import app
    from kernellab.models import Node, Problem
    from kernellab.services.runs import run_create
    from tests.browser import world

    app.conf.task_always_eager = True
    world.setup()
    world.load_bundled()
    problem = Problem.objects.get(bundled=True, name=problem_name)
    run = run_create(problem=problem, user=get_user_model().objects.get(username="engineer"), name="load", generator="template",
                     surrogate="roofline", backend="replay", gpu_budget=budget, children_per_step=4, screening_width=screening)
    run.refresh_from_db()
    return {"run": run.pk, "problem": problem_name, "status": run.status, "nodes": Node.objects.filter(run=run).count(),
            "measured": Node.objects.filter(run=run, state="measured").count(), "keys": list(Node.objects.filter(run=run).values_list("key", flat=True))}


# ---- HTTP clients (a process of their own, so their work does not slow the websocket clients) --


def _http_client(host: str, port: int, cookie: str, run: int, keys: list[str], stop_at: float, seed: int, think: float, out: list) -> None:
    rng = random.Random(seed)
    connection = http.client.HTTPConnection(host, port, timeout=30)
    headers = {"Cookie": f"sessionid={cookie}", "Accept-Encoding": "gzip"}
    while time.time() < stop_at:
        roll = rng.random()
        if roll < 0.5:
            what, path, extra = "node panel", f"/runs/{run}/nodes/{rng.choice(keys)}/", {"HX-Request": "true"}
        elif roll < 0.8:
            what, path, extra = "tree.json", f"/runs/{run}/tree.json", {}
        else:
            what, path, extra = "explorer page", f"/runs/{run}/", {}
        started = time.perf_counter()
        try:
            connection.request("GET", path, headers={**headers, **extra})
            response = connection.getresponse()
            response.read()
            status = response.status
            if response.getheader("Connection", "").lower() == "close":
                connection.close()
        except (OSError, http.client.HTTPException) as exc:
            status = f"{type(exc).__name__}: {exc}"
            connection.close()
            connection = http.client.HTTPConnection(host, port, timeout=30)
        out.append((what, status, (time.perf_counter() - started) * 1000.0))
        if think:
            time.sleep(rng.uniform(0.5, 1.5) * think)


def http_load(url: str, cookie: str, run: int, keys: list[str], clients: int, seconds: float, think: float, queue) -> None:
    host, port = url.removeprefix("http://").split(":")
    stop_at = time.time() + seconds
    results: list[list] = [[] for _ in range(clients)]
    threads = [threading.Thread(target=_http_client, args=(host, int(port), cookie, run, keys, stop_at, i, think, results[i])) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    queue.put([row for rows in results for row in rows])


# ---- websocket clients ------------------------------------------------------------------------


class SocketClient:
    def __init__(self, index: int):
        self.index = index
        self.connected = False
        self.closed_early: str | None = None
        self.handshake_error: str | None = None
        self.error_messages: list[str] = []
        self.seqs: list[int] = []


async def socket_client(client: SocketClient, url: str, origin: str, cookie: str, after: int, stop: asyncio.Event) -> None:
    import websockets

    try:
        ws = await websockets.connect(url, additional_headers={"Cookie": f"sessionid={cookie}"}, origin=origin, max_size=None, open_timeout=15)
    except Exception as exc:
        client.handshake_error = f"{type(exc).__name__}: {exc}"
        return
    client.connected = True
    try:
        await ws.send(json.dumps({"type": "subscribe", "after": after}))
        while not stop.is_set():
            try:
                message = await asyncio.wait_for(ws.recv(), timeout=0.5)
            except asyncio.TimeoutError:
                continue
            content = json.loads(message)
            if content.get("type") == "error":
                client.error_messages.append(content.get("message", ""))
            client.seqs.extend(change["seq"] for change in content.get("changes", []))
    except Exception as exc:
        client.closed_early = f"{type(exc).__name__}: {exc}"
    finally:
        await ws.close()


def publish_changes(server: KernelLabServer, run: int, rate: float, seconds: float, keys: list[str], records: list[dict], stop: threading.Event) -> None:
    """New forecast nodes at a fixed rate, each one numbered change of the run."""
    start = time.time()
    parents = list(keys)
    for i in range(int(rate * seconds)):
        wait = start + i / rate - time.time()
        if wait > 0 and stop.wait(wait):
            return
        key = f"load{i}"
        try:
            record = server.feeder("add_node_timed", run=run, key=key, parent=random.choice(parents[-50:]))
        except Exception as exc:
            records.append({"error": str(exc)})
            continue
        records.append(record)
        parents.append(key)


# ---- measurements -----------------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"no VmRSS for process {pid}")


def pg_connections(url: str) -> dict:
    """Connections to the benchmark's database by state (this psql's own is left out)."""
    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    query = (f"SELECT coalesce(state, 'none'), count(*) FROM pg_stat_activity WHERE datname = '{name}' "
             "AND pid <> pg_backend_pid() GROUP BY 1")
    out = subprocess.run(["psql", admin, "-At", "-F", "\t", "-c", query], check=True, capture_output=True, text=True).stdout
    states = {state: int(count) for state, count in (line.split("\t") for line in out.splitlines() if line)}
    return {"total": sum(states.values()), **states}


class ConnectionSampler(threading.Thread):
    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.peak, self.stop = url, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self.peak = max(self.peak, pg_connections(self.url)["total"])
            except subprocess.CalledProcessError:
                pass


def warm_up(server: KernelLabServer, cookie: str, run: int, keys: list[str], connections: int = 8) -> None:
    """The pages once over several connections, so that every web process (the kernel spreads
    connections over them) has opened its database pool before the starting RSS is read."""
    host, port = server.url.removeprefix("http://").split(":")
    for _ in range(connections):
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        for path in [f"/runs/{run}/", f"/runs/{run}/tree.json"] + [f"/runs/{run}/nodes/{key}/" for key in keys[:5]]:
            connection.request("GET", path, headers={"Cookie": f"sessionid={cookie}", "HX-Request": "true"})
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"warm-up: {path} answered {response.status}")
        connection.close()


def measure(args) -> dict:
    fresh_postgres_database(PG_URL)
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()
    env = {"DATABASE_URL": PG_URL, "REDIS_URL": REDIS_URL, **dict(kv.split("=", 1) for kv in args.env)}
    with KernelLabServer(env_extra=env, web_processes=args.web_processes) as server:
        started = time.time()
        world_env = {**server.env, "KERNELLAB_TASKS_EAGER": "1"}
        done = subprocess.run([sys.executable, __file__, "--build-world", args.problem, str(args.budget), str(args.screening)],
                              cwd=ROOT, env=world_env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"building the run failed:\n{done.stderr[-4000:]}")
        world = json.loads(done.stdout.strip().splitlines()[-1])
        world_s = time.time() - started
        run, keys = world["run"], world["keys"]
        print(f"run {run}: {world['nodes']} nodes ({world['measured']} measured), {world['status']}, built in {world_s:.0f} s", flush=True)
        cookie = server.feeder("session_cookie", username="viewer")
        warm_up(server, cookie, run, keys)
        time.sleep(2)
        rss_start = sum(rss_mb(web.pid) for web in server.webs)
        connections_before = pg_connections(PG_URL)

        after = server.feeder("change_seq", run=run)
        sampler = ConnectionSampler(PG_URL)
        sampler.start()
        queue = multiprocessing.get_context("spawn").Queue()
        http_process = multiprocessing.get_context("spawn").Process(
            target=http_load, args=(server.url, cookie, run, keys, args.http_clients, args.seconds, args.think, queue))
        records: list[dict] = []
        publisher_stop = threading.Event()
        publisher = threading.Thread(target=publish_changes, args=(server, run, args.rate, args.seconds, keys, records, publisher_stop), daemon=True)
        clients = [SocketClient(i) for i in range(args.clients)]
        rss_peak = rss_start

        async def main() -> None:
            nonlocal rss_peak
            stop = asyncio.Event()
            url = server.url.replace("http://", "ws://") + f"/ws/runs/{run}/"
            tasks = [asyncio.create_task(socket_client(c, url, server.url, cookie, after, stop)) for c in clients]
            http_process.start()
            publisher.start()
            load_end = time.time() + args.seconds
            while time.time() < load_end or publisher.is_alive():
                rss_peak = max(rss_peak, sum(rss_mb(web.pid) for web in server.webs))
                await asyncio.sleep(0.5)
            final = max((r["seq"] for r in records if "seq" in r), default=after)
            deadline = time.time() + 20
            while time.time() < deadline and not all(not c.connected or c.closed_early or (c.seqs and max(c.seqs) >= final) for c in clients):
                await asyncio.sleep(0.2)
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run(main())
        http_rows = queue.get(timeout=120)
        http_process.join(timeout=30)
        publisher_stop.set()
        time.sleep(args.settle)
        rss_end = sum(rss_mb(web.pid) for web in server.webs)
        sampler.stop.set()
        server.feeder.close()  # its own connection is not the web tier's
        time.sleep(1)
        connections_after = pg_connections(PG_URL)
        log_tail = server.log_path.read_text()[-3000:]
        server_errors = server.log_path.read_text().count("Traceback")

    published = [r["seq"] for r in records if "seq" in r]
    expected = set(range(after + 1, max(published, default=after) + 1))
    gaps = duplicates = out_of_order = 0
    for c in clients:
        if not c.connected:
            continue
        gaps += len(expected - set(c.seqs))
        duplicates += len(c.seqs) - len(set(c.seqs))
        out_of_order += sum(1 for a, b in zip(c.seqs, c.seqs[1:]) if b != a + 1)
    latencies = [ms for _, status, ms in http_rows if status == 200]
    http_errors = [(what, status) for what, status, _ in http_rows if status != 200]
    by_endpoint = {}
    for what in sorted({w for w, _, _ in http_rows}):
        ms = [m for w, s, m in http_rows if w == what and s == 200]
        by_endpoint[what] = {"requests": sum(1 for w, _, _ in http_rows if w == what), "p50_ms": percentile(ms, 50), "p95_ms": percentile(ms, 95)}
    ws_connected = sum(1 for c in clients if c.connected and not c.closed_early)
    errors = (len(http_errors) + sum(1 for c in clients if c.handshake_error or c.closed_early)
              + sum(1 for r in records if "error" in r) + server_errors)
    return {
        "errors": errors,
        "ws_clients": args.clients,
        "ws_connected": ws_connected,
        "ws_gaps": gaps,
        "ws_duplicates": duplicates,
        "http_p95_ms": percentile(latencies, 95),
        "rss_start_mb": round(rss_start, 1),
        "rss_end_mb": round(rss_end, 1),
        "rss_peak_mb": round(rss_peak, 1),
        "pg_idle_connections_after": connections_after.get("idle", 0),
        "pg_connections_after": connections_after,
        "pg_connections_before": connections_before,
        "pg_connections_peak": sampler.peak,
        "http_clients": args.http_clients,
        "http_requests": len(http_rows),
        "http_errors": len(http_errors),
        "http_error_samples": [f"{w}: {s}" for w, s in http_errors[:10]],
        "http_p50_ms": percentile(latencies, 50),
        "http_max_ms": max(latencies) if latencies else None,
        "http_by_endpoint": by_endpoint,
        "ws_handshake_failures": [c.handshake_error for c in clients if c.handshake_error][:10],
        "ws_closed_early": [c.closed_early for c in clients if c.closed_early][:10],
        "ws_out_of_order": out_of_order,
        "ws_error_messages": sum(len(c.error_messages) for c in clients),
        "changes_published": len(published),
        "publisher_errors": [r["error"] for r in records if "error" in r][:5],
        "server_tracebacks": server_errors,
        "server_log_tail": log_tail if server_errors else "",
        "seconds": args.seconds,
        "rate_per_s": args.rate,
        "http_think_s": args.think,
        "settle_s": args.settle,
        "run": {k: v for k, v in world.items() if k != "keys"},
        "world_build_s": round(world_s, 1),
    }


def verdict(result: dict) -> list[str]:
    failed = []
    if result["errors"] > GOALS["errors"]:
        failed.append(f"{result['errors']} errors")
    if result["ws_connected"] < result["ws_clients"]:
        failed.append(f"{result['ws_connected']}/{result['ws_clients']} websockets connected")
    if result["ws_gaps"] or result["ws_duplicates"]:
        failed.append(f"{result['ws_gaps']} gaps, {result['ws_duplicates']} duplicates")
    if result["http_p95_ms"] is None or result["http_p95_ms"] >= GOALS["http_p95_ms"]:
        failed.append(f"HTTP p95 {result['http_p95_ms']} ms")
    if result["rss_end_mb"] > result["rss_start_mb"] * (1 + GOALS["rss_growth"]):
        failed.append(f"RSS {result['rss_start_mb']} -> {result['rss_end_mb']} MB")
    return failed


def print_table(result: dict) -> None:
    rows = [
        ("errors (HTTP, websocket, publisher, server tracebacks)", result["errors"]),
        ("websockets connected for the whole load", f"{result['ws_connected']} / {result['ws_clients']}"),
        ("websocket gaps / duplicates / out of order", f"{result['ws_gaps']} / {result['ws_duplicates']} / {result['ws_out_of_order']}"),
        ("changes published", result["changes_published"]),
        (f"HTTP requests ({result['http_clients']} clients)", result["http_requests"]),
        ("HTTP p50 / p95 / max", f"{result['http_p50_ms']:.0f} / {result['http_p95_ms']:.0f} / {result['http_max_ms']:.0f} ms" if result["http_p95_ms"] else "—"),
    ]
    for what, stats in result["http_by_endpoint"].items():
        rows.append((f"  {what}: requests, p50 / p95", f"{stats['requests']}, {stats['p50_ms'] or 0:.0f} / {stats['p95_ms'] or 0:.0f} ms"))
    rows += [
        ("daphne RSS before / peak / after", f"{result['rss_start_mb']} / {result['rss_peak_mb']} / {result['rss_end_mb']} MB"),
        ("PostgreSQL connections peak / left idle after", f"{result['pg_connections_peak']} / {result['pg_idle_connections_after']}"),
    ]
    width = max(len(r[0]) for r in rows)
    for what, value in rows:
        print(f"{what:{width}}  {value}")
    for what in ("ws_handshake_failures", "ws_closed_early", "http_error_samples", "publisher_errors"):
        if result[what]:
            print(f"{what}: {result[what][:3]}")
    if result["server_log_tail"]:
        print("daphne log (end):\n" + result["server_log_tail"][-1500:])


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--build-world":
        print(json.dumps(build_world(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50, help="websocket clients on the run")
    parser.add_argument("--http-clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--think", type=float, default=0.0,
                        help="mean pause of an HTTP client between requests (0: the next request as soon as one answers)")
    parser.add_argument("--rate", type=float, default=5.0, help="changes a second published on the run during the load")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after the load before daphne's RSS is read again")
    parser.add_argument("--problem", default="sgemm", help="bundled problem the run searches")
    parser.add_argument("--budget", type=int, default=40, help="GPU measurements (replayed) of the run")
    parser.add_argument("--screening", type=int, default=128, help="candidates forecast at the root")
    parser.add_argument("--machine", default=default_machine())
    parser.add_argument("--env", action="append", default=[], help="NAME=value for the server, e.g. KERNELLAB_DB_POOL_MAX=0")
    parser.add_argument("--web-processes", type=int, default=2,
                        help="daphne processes sharing the port, as `serve --web-processes` starts them (RSS is their sum)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--out", type=Path, help="the JSON to write (default benchmarks/results/load_<machine>_<date>.json)")
    args = parser.parse_args()
    if args.out is not None and args.out.is_dir():
        parser.error(f"--out {args.out} is a folder; give a file name (.json)")
    result = measure(args)
    print_table(result)
    failed = verdict(result)
    print("goal met" if not failed else "goal NOT met: " + "; ".join(failed))
    if args.no_write:
        return
    path = args.out or RESULTS / f"load_{args.machine}_{datetime.date.today().isoformat()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        **result,
        "goal_met": not failed,
        "machine": args.machine,
        "cpus": os.cpu_count(),
        "server_env": args.env,
        "web_processes": args.web_processes,
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        "when": datetime.datetime.now().isoformat(timespec="seconds"),
    }, indent=1))
    print(f"wrote {path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    main()
