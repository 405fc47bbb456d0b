"""Explorer benchmark: first paint of a 5,000-node run, page weight, pan/zoom frame cost, delay from a
node change in the database to the browser, and 50 websocket clients on a run growing at 20 nodes/s.

    .venv/bin/python benchmarks/explorer_bench.py                  # embedded (SQLite) and team (PostgreSQL + Redis)
    .venv/bin/python benchmarks/explorer_bench.py --setups embedded

Each setup starts a real daphne server on a fresh database (tests/browser/harness.py), feeds it from
a helper process, and drives Debian's Chromium through Playwright. Prints a table and writes
benchmarks/results/explorer_<cpu>_<date>.json (or --out FILE).
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import math
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser.harness import CHROMIUM, CHROMIUM_ARGS, KernelLabServer, login  # noqa: E402
from tests.browser.world import PASSWORDS  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PG_URL = os.environ.get("KERNELLAB_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/kernellab_bench_explorer")
# A Redis database of its own, so that group names of other test databases never mix with ours.
REDIS_URL = os.environ.get("KERNELLAB_BENCH_REDIS", "redis://127.0.0.1:6379/7")


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


def summary(values: list[float]) -> dict:
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "max": max(values) if values else None,
        "mean": statistics.fmean(values) if values else None,
    }


def cpu_slug() -> str:
    model = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-") or "cpu"
    return f"{slug}-{os.cpu_count()}c"


# ---- a search-shaped tree ----------------------------------------------------------------------


def search_shaped_tree(total: int, children: int = 4, seed: int = 1) -> list[dict]:
    """Nodes grown the way a PUCT search grows them: the parent is the best of a few by value plus an
    exploration bonus, so good branches go deep while others stay shallow."""
    rng = random.Random(seed)
    nodes = [{"key": "n0", "value": 1.0, "kids": 0, "depth": 0}]
    out: list[dict] = []
    while len(out) < total - 1:
        sample = rng.sample(nodes, min(24, len(nodes)))
        parent = max(sample, key=lambda n: n["value"] + 0.6 * rng.random() / math.sqrt(1 + n["kids"]))
        for _ in range(children):
            if len(out) >= total - 1:
                break
            value = parent["value"] * math.exp(rng.gauss(0.02, 0.18))
            key = f"k{len(out) + 1}"
            roll = rng.random()
            spec = {"key": key, "parent": parent["key"]}
            bin_ = max(1, min(8, 5 + round(math.log2(value) * 2)))
            if roll < 0.15:
                spec.update(state="measured", speedup=round(value, 4), bin=bin_, confidence=round(rng.uniform(0.3, 0.95), 3))
            elif roll < 0.85:
                spec.update(state="forecast", bin=bin_, confidence=round(rng.uniform(0.2, 0.95), 3))
            elif roll < 0.90:
                spec.update(state=rng.choice(["failed-compile", "failed-correctness"]))
            elif roll < 0.92:
                spec.update(state="awaiting-approval", bin=bin_, confidence=0.3)
            elif roll < 0.93:
                spec.update(state="queued", bin=bin_, confidence=0.4)
            elif roll < 0.94:
                spec.update(state="measuring", bin=bin_, confidence=0.4)
            else:
                spec.update(state="proposed")
            out.append(spec)
            nodes.append({"key": key, "value": value, "kids": 0, "depth": parent["depth"] + 1})
            parent["kids"] += 1
    return out


# ---- browser measurements ----------------------------------------------------------------------


def browser_page(playwright_browser, server: KernelLabServer, role: str = "viewer"):
    context = playwright_browser.new_context(viewport={"width": 1500, "height": 950})
    page = context.new_page()
    login(page, server, role, PASSWORDS[role])
    return context, page


FIRST_PAINT_JS = """
() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const paints = Object.fromEntries(performance.getEntriesByType('paint').map(p => [p.name, p.startTime]));
  const tree = performance.getEntriesByType('resource').find(r => r.name.includes('/tree.json'));
  return {
    first_tree_frame_ms: window.klExplorer.stats.firstFullDrawAt,
    first_contentful_paint_ms: paints['first-contentful-paint'] || null,
    dom_content_loaded_ms: nav.domContentLoadedEventEnd,
    tree_json_ms: tree ? tree.responseEnd - tree.startTime : null,
    tree_json_transfer_bytes: tree ? tree.transferSize : null,
    tree_json_decoded_bytes: tree ? tree.decodedBodySize : null,
    layout_ms: window.klExplorer.stats.firstLayoutMs,
    first_draw_ms: window.klExplorer.stats.firstFullDrawMs,
    nodes: window.klExplorer.size,
  };
}
"""

WEIGHT_JS = """
() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const resources = performance.getEntriesByType('resource');
  const rows = [{name: nav.name, type: 'document', transfer: nav.transferSize, decoded: nav.decodedBodySize}]
    .concat(resources.map(r => ({name: r.name, type: r.initiatorType, transfer: r.transferSize, decoded: r.decodedBodySize})));
  return rows;
}
"""


def measure_first_paint(chromium, server, run: int, total: int, repeats: int) -> dict:
    samples = []
    for _ in range(repeats):
        context, page = browser_page(chromium, server)
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"{server.url}/runs/{run}/")
        try:
            page.wait_for_function(f"window.klExplorer && window.klExplorer.stats.firstFullDrawAt && window.klExplorer.size === {total}", timeout=60000)
        except Exception:
            state = page.evaluate("window.klExplorer ? {size: window.klExplorer.size, live: document.getElementById('live-status').textContent} : null")
            raise RuntimeError(f"the explorer did not draw {total} nodes: {state}, script errors {errors}") from None
        samples.append(page.evaluate(FIRST_PAINT_JS))
        context.close()
    keys = ["first_tree_frame_ms", "first_contentful_paint_ms", "dom_content_loaded_ms", "tree_json_ms", "layout_ms", "first_draw_ms"]
    return {
        "samples": samples,
        **{f"{k}_median": statistics.median([s[k] for s in samples if s[k] is not None]) for k in keys},
        "tree_json_transfer_bytes": samples[-1]["tree_json_transfer_bytes"],
        "tree_json_decoded_bytes": samples[-1]["tree_json_decoded_bytes"],
    }


def measure_weight(chromium, server, run: int, total: int) -> dict:
    context, page = browser_page(chromium, server)
    page.goto(f"{server.url}/runs/{run}/")
    page.wait_for_function(f"window.klExplorer && window.klExplorer.size === {total} && window.klExplorer.stats.draws > 0", timeout=60000)
    page.wait_for_load_state("networkidle")
    first = page.evaluate(WEIGHT_JS)
    # A node with a forecast, so that the panel's chart loads plotly.
    server.feeder("add_node", run=run, key="charted", parent="n0", bin=6, confidence=0.7, probabilities=[0, 0, 0, 0.05, 0.15, 0.7, 0.1, 0])
    page.wait_for_function("window.klExplorer.node('charted') !== null", timeout=30000)
    page.evaluate("window.klExplorer.select('charted')")
    page.wait_for_selector("#node-panel .forecast-chart .main-svg", timeout=30000)
    page.wait_for_load_state("networkidle")
    after = page.evaluate(WEIGHT_JS)
    context.close()

    def total_of(rows, field):
        return sum(r[field] or 0 for r in rows)

    return {
        "explorer_transfer_bytes": total_of(first, "transfer"),
        "explorer_decoded_bytes": total_of(first, "decoded"),
        "explorer_resources": [{"name": r["name"].split("/", 3)[-1], "transfer": r["transfer"], "decoded": r["decoded"]} for r in first],
        "after_opening_a_node_transfer_bytes": total_of(after, "transfer"),
        "after_opening_a_node_decoded_bytes": total_of(after, "decoded"),
        "nodes_in_tree": total,
    }


PAN_ZOOM_JS = """
async () => {
  const ex = window.klExplorer, canvas = document.getElementById('tree-canvas');
  const rect = canvas.getBoundingClientRect();
  const before = ex.stats.drawMs.length;
  const frames = [];
  let last = performance.now();
  let running = true;
  (function tick(t) { frames.push(t - last); last = t; if (running) requestAnimationFrame(tick); })(performance.now());
  const cx = rect.left + rect.width / 2, cy = rect.top + rect.height / 2;
  for (let i = 0; i < 40; i++) {   // zoom in towards the middle, then out
    canvas.dispatchEvent(new WheelEvent('wheel', {deltaY: i < 20 ? -120 : 120, clientX: cx, clientY: cy, bubbles: true, cancelable: true}));
    await new Promise(r => requestAnimationFrame(r));
  }
  canvas.dispatchEvent(new PointerEvent('pointerdown', {clientX: cx, clientY: cy, pointerId: 1, bubbles: true}));
  for (let i = 0; i < 60; i++) {   // drag
    canvas.dispatchEvent(new PointerEvent('pointermove', {clientX: cx + 4 * i, clientY: cy + 2 * i, pointerId: 1, bubbles: true}));
    await new Promise(r => requestAnimationFrame(r));
  }
  canvas.dispatchEvent(new PointerEvent('pointerup', {clientX: cx + 240, clientY: cy + 120, pointerId: 1, bubbles: true}));
  running = false;
  return {draw_ms: ex.stats.drawMs.slice(before), frame_interval_ms: frames.slice(2)};
}
"""


def measure_pan_zoom(chromium, server, run: int, total: int) -> dict:
    context, page = browser_page(chromium, server)
    page.goto(f"{server.url}/runs/{run}/")
    page.wait_for_function(f"window.klExplorer && window.klExplorer.size >= {total} && window.klExplorer.stats.draws > 0", timeout=60000)
    page.wait_for_timeout(500)
    result = page.evaluate(PAN_ZOOM_JS)
    context.close()
    return {"draw_ms": summary(result["draw_ms"]), "frame_interval_ms": summary(result["frame_interval_ms"])}


class Pacer(threading.Thread):
    """Adds nodes to a run at a fixed rate from the feeder; keeps each change's seq and commit time."""

    def __init__(self, server: KernelLabServer, run: int, rate: float, count: int, prefix: str):
        super().__init__(daemon=True)
        self.server, self.run_id, self.rate, self.count, self.prefix = server, run, rate, count, prefix
        self.records: list[dict] = []
        self.late: int = 0

    def run(self) -> None:
        start = time.time()
        parents = ["n0"]
        for i in range(self.count):
            due = start + i / self.rate
            wait = due - time.time()
            if wait > 0:
                time.sleep(wait)
            else:
                self.late += 1
            key = f"{self.prefix}{i}"
            record = self.server.feeder("add_node_timed", run=self.run_id, key=key, parent=random.choice(parents[-40:]))
            record["key"] = key
            self.records.append(record)
            parents.append(key)


FRAME_RECORDER_JS = """
() => { window.__frames = []; let last = performance.now();
  (function tick(t) { window.__frames.push(t - last); last = t; if (!window.__stopFrames) requestAnimationFrame(tick); })(last); }
"""


def measure_browser_delay(chromium, server, rate: float, seconds: float, run: int | None = None, prefix: str = "b") -> dict:
    """Nodes added at `rate` per second to a run open in the browser: commit → first frame showing the node."""
    run = run or server.feeder("create_run", name="browser delay")
    context, page = browser_page(chromium, server)
    page.goto(f"{server.url}/runs/{run}/")
    page.wait_for_function("window.klExplorer && window.klExplorer.connected && window.klExplorer.stats.firstFullDrawAt", timeout=60000)
    size_before = page.evaluate("window.klExplorer.size")
    page.evaluate(FRAME_RECORDER_JS)
    pacer = Pacer(server, run, rate, int(rate * seconds), prefix)
    pacer.start()
    pacer.join()
    last = pacer.records[-1]["key"]
    page.wait_for_function(f"window.klExplorer.firstShown('{last}') !== null", timeout=30000)
    page.evaluate("window.__stopFrames = true")
    shown = page.evaluate("window.klExplorer.firstShownAll()")
    frames = page.evaluate("window.__frames.slice(2)")
    context.close()
    delays = [(shown[r["key"]] / 1000.0 - r["committed"]) * 1000.0 for r in pacer.records if r["key"] in shown]
    missing = [r["key"] for r in pacer.records if r["key"] not in shown]
    return {"rate_per_s": rate, "tree_nodes_before": size_before, "nodes": len(pacer.records), "missing": len(missing),
            "pacer_late": pacer.late, "delay_ms": summary(delays), "frame_interval_ms": summary(frames)}


async def _clients(server: KernelLabServer, run: int, count: int, cookie: str, stop: asyncio.Event, after: int):
    import websockets

    origin = server.url
    url = server.url.replace("http://", "ws://") + f"/ws/runs/{run}/"
    received: list[dict[int, float]] = [dict() for _ in range(count)]
    duplicates = [0] * count
    out_of_order = [0] * count
    ready = [asyncio.Event() for _ in range(count)]

    async def one(i: int):
        async with websockets.connect(url, additional_headers={"Cookie": f"sessionid={cookie}"}, origin=origin, max_size=None) as ws:
            await ws.send(json.dumps({"type": "subscribe", "after": after}))
            ready[i].set()
            last = after
            while not stop.is_set():
                try:
                    message = await asyncio.wait_for(ws.recv(), timeout=0.5)
                except asyncio.TimeoutError:
                    continue
                now = time.time()
                for change in json.loads(message).get("changes", []):
                    seq = change["seq"]
                    if seq in received[i]:
                        duplicates[i] += 1
                    if seq != last + 1:
                        out_of_order[i] += 1
                    received[i][seq] = now
                    last = max(last, seq)

    tasks = [asyncio.create_task(one(i)) for i in range(count)]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready)), timeout=60)
    return tasks, received, duplicates, out_of_order


def measure_many_clients(server, clients: int, rate: float, seconds: float) -> dict:
    run = server.feeder("create_run", name="fan-out")
    cookie = server.feeder("session_cookie", username="viewer")
    after = server.feeder("change_seq", run=run)
    pacer = Pacer(server, run, rate, int(rate * seconds), "w")

    async def main():
        stop = asyncio.Event()
        tasks, received, duplicates, out_of_order = await _clients(server, run, clients, cookie, stop, after)
        pacer.start()
        while pacer.is_alive():
            await asyncio.sleep(0.2)
        final = pacer.records[-1]["seq"]
        deadline = time.time() + 20
        while time.time() < deadline and not all(final in r for r in received):
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        return received, duplicates, out_of_order, final

    # Playwright's sync API owns this thread's event loop; the clients get a thread of their own.
    box: dict = {}
    worker = threading.Thread(target=lambda: box.update(result=asyncio.run(main())))
    worker.start()
    worker.join()
    received, duplicates, out_of_order, final = box["result"]
    expected = set(range(after + 1, final + 1))
    committed = {r["seq"]: r["committed"] for r in pacer.records}
    delays, per_client_missing = [], []
    for got in received:
        per_client_missing.append(len(expected - set(got)))
        delays.extend((got[seq] - committed[seq]) * 1000.0 for seq in committed if seq in got)
    return {
        "clients": clients,
        "rate_per_s": rate,
        "seconds": seconds,
        "changes": len(expected),
        "clients_missing_updates": sum(1 for m in per_client_missing if m),
        "updates_missed_total": sum(per_client_missing),
        "duplicates": sum(duplicates),
        "out_of_order": sum(out_of_order),
        "pacer_late": pacer.late,
        "delay_ms": summary(delays),
    }


# ---- setups ------------------------------------------------------------------------------------


def fresh_postgres_database(url: str) -> None:
    from urllib.parse import urlparse

    parsed = urlparse(url)
    name = parsed.path.strip("/")
    admin = url.rsplit("/", 1)[0] + "/postgres"
    subprocess.run(["psql", admin, "-q", "-c", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'], check=True)
    subprocess.run(["psql", admin, "-q", "-c", f'CREATE DATABASE "{name}"'], check=True)


def run_setup(name: str, args, chromium) -> dict:
    env = {}
    if name == "team":
        fresh_postgres_database(PG_URL)
        import redis

        redis.Redis.from_url(REDIS_URL).flushdb()
        env = {"DATABASE_URL": PG_URL, "REDIS_URL": REDIS_URL}
    result: dict = {"load_average_at_start": os.getloadavg(), "setup": name, "database": "postgresql" if name == "team" else "sqlite",
                    "push": "redis channel layer" if name == "team" else f"database poll every {0.1} s"}
    with KernelLabServer(env_extra=env) as server:
        server.feeder("setup")
        if not args.skip_tree:
            run = server.feeder("create_run", name="five thousand", with_root=True)
            tree = search_shaped_tree(args.nodes)
            started = time.time()
            for i in range(0, len(tree), 500):
                server.feeder("add_nodes", run=run, nodes=tree[i:i + 500])
            result["tree_build_s"] = time.time() - started
            result["first_paint"] = measure_first_paint(chromium, server, run, args.nodes, args.repeats)
            result["page_weight"] = measure_weight(chromium, server, run, args.nodes)
            result["pan_zoom"] = measure_pan_zoom(chromium, server, run, args.nodes)
            result["browser_delay_big_tree"] = measure_browser_delay(chromium, server, args.rate, args.browser_seconds, run=run, prefix="g")
        result["browser_delay"] = measure_browser_delay(chromium, server, args.rate, args.browser_seconds)
        result["websocket_fanout"] = measure_many_clients(server, args.clients, args.rate, args.seconds)
    result["load_average_at_end"] = os.getloadavg()
    return result


def fmt(value, unit="", digits=1):
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}{unit}"
    return f"{value}{unit}"


def print_table(results: list[dict]) -> None:
    rows = []
    for r in results:
        s = r["setup"]
        if "first_paint" in r:
            fp = r["first_paint"]
            rows.append((s, "first tree frame, 5,000 nodes (median)", fmt(fp["first_tree_frame_ms_median"], " ms")))
            rows.append((s, "first contentful paint (median)", fmt(fp["first_contentful_paint_ms_median"], " ms")))
            rows.append((s, "tree.json fetch (median)", fmt(fp["tree_json_ms_median"], " ms")))
            rows.append((s, "tree.json transfer / decoded", f"{fp['tree_json_transfer_bytes'] / 1024:.0f} / {fp['tree_json_decoded_bytes'] / 1024:.0f} KiB"))
            rows.append((s, "d3 layout / first canvas draw of 5,000 nodes (median)", f"{fmt(fp['layout_ms_median'], ' ms')} / {fmt(fp['first_draw_ms_median'], ' ms')}"))
            w = r["page_weight"]
            rows.append((s, "explorer page weight (transfer)", f"{w['explorer_transfer_bytes'] / 1024:.0f} KiB"))
            rows.append((s, "… after opening a node (plotly loaded)", f"{w['after_opening_a_node_transfer_bytes'] / 1024:.0f} KiB"))
            pz = r["pan_zoom"]
            rows.append((s, "canvas draw during pan/zoom p50 / p95", f"{fmt(pz['draw_ms']['p50'], ' ms')} / {fmt(pz['draw_ms']['p95'], ' ms')}"))
            rows.append((s, "frame interval during pan/zoom p50 / p95", f"{fmt(pz['frame_interval_ms']['p50'], ' ms')} / {fmt(pz['frame_interval_ms']['p95'], ' ms')}"))
        for label in ("browser_delay", "browser_delay_big_tree"):
            if label not in r:
                continue
            b = r[label]
            rows.append((s, f"DB change → drawn, tree of {b['tree_nodes_before']:,} + {b['nodes']} at {b['rate_per_s']:g}/s: p50 / p95",
                         f"{fmt(b['delay_ms']['p50'], ' ms')} / {fmt(b['delay_ms']['p95'], ' ms')}, missing {b['missing']}"))
            rows.append((s, "… frame interval meanwhile p50 / p95 / max",
                         f"{fmt(b['frame_interval_ms']['p50'], ' ms')} / {fmt(b['frame_interval_ms']['p95'], ' ms')} / {fmt(b['frame_interval_ms']['max'], ' ms')}"))
        f = r["websocket_fanout"]
        rows.append((s, f"{f['clients']} websocket clients, {f['changes']} changes at {f['rate_per_s']:g}/s: p50 / p95 / max",
                     f"{fmt(f['delay_ms']['p50'], ' ms')} / {fmt(f['delay_ms']['p95'], ' ms')} / {fmt(f['delay_ms']['max'], ' ms')}"))
        rows.append((s, "… clients missing an update / duplicates / out of order",
                     f"{f['clients_missing_updates']} / {f['duplicates']} / {f['out_of_order']}"))
    width = max(len(r[1]) for r in rows)
    for setup, what, value in rows:
        print(f"{setup:9} {what:{width}}  {value}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setups", default="embedded,team", help="comma-separated: embedded (SQLite, polling), team (PostgreSQL + Redis)")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the 50-client run")
    parser.add_argument("--browser-seconds", type=float, default=10.0)
    parser.add_argument("--skip-tree", action="store_true", help="skip the 5,000-node measurements")
    parser.add_argument("--out", type=Path, help="the JSON to write (default benchmarks/results/explorer_<cpu>_<date>.json)")
    args = parser.parse_args()
    if args.out is not None and args.out.is_dir():
        parser.error(f"--out {args.out} is a folder; give a file name (.json)")
    if not os.path.exists(CHROMIUM):
        sys.exit(f"Chromium is not installed at {CHROMIUM} (apt-get install -y chromium).")
    from playwright.sync_api import sync_playwright

    results = []
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for setup in [s.strip() for s in args.setups.split(",") if s.strip()]:
            print(f"-- {setup} …", flush=True)
            results.append(run_setup(setup, args, chromium))
        chromium.close()
    print_table(results)
    path = args.out or RESULTS / f"explorer_{cpu_slug()}_{datetime.date.today().isoformat()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        "cpu": cpu_slug(), "cpus": os.cpu_count(), "chromium": subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout.strip(),
        "when": datetime.datetime.now().isoformat(timespec="seconds"), "results": results,
    }, indent=1))
    print(f"wrote {path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    main()
