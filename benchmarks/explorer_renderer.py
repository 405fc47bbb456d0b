"""Why the explorer draws with d3-hierarchy + canvas: the same 5,000-node search tree drawn by the
explorer and by cytoscape.js (breadthfirst layout, canvas renderer), in the same Chromium.

    .venv/bin/python benchmarks/explorer_renderer.py [--cytoscape path/to/cytoscape.min.js]

Without --cytoscape it fetches cytoscape with `npm pack` into a temporary folder (it is not vendored:
KernelLab does not use it). Measures layout + first frame and frame intervals while zooming and
panning. Prints a table and writes benchmarks/results/explorer_renderer_<cpu>_<date>.json
(or --out FILE).
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.explorer_bench import PAN_ZOOM_JS, RESULTS, browser_page, cpu_slug, search_shaped_tree, summary  # noqa: E402
from tests.browser.harness import CHROMIUM, CHROMIUM_ARGS, KernelLabServer  # noqa: E402

CYTOSCAPE_VERSION = "3.35.0"

CYTOSCAPE_PAGE = """<!doctype html><html><head><style>html,body{margin:0;height:100%}#cy{width:1000px;height:800px}</style></head>
<body><div id="cy"></div></body></html>"""

CYTOSCAPE_RUN = """
async (nodes) => {
  const elements = [{data: {id: 'n0'}}];
  for (const n of nodes) { elements.push({data: {id: n.key}}); elements.push({data: {id: 'e' + n.key, source: n.parent, target: n.key}}); }
  const started = performance.now();
  let firstRender = null;
  const cy = cytoscape({
    container: document.getElementById('cy'), elements,
    style: [{selector: 'node', style: {width: 10, height: 10, 'background-color': '#66bd63'}}, {selector: 'edge', style: {width: 1, 'line-color': '#aab'}}],
    layout: {name: 'breadthfirst', roots: ['n0'], directed: true, spacingFactor: 0.6, animate: false},
    textureOnViewport: false, hideEdgesOnViewport: false,
  });
  cy.one('render', () => { firstRender = performance.now() - started; });
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const readyMs = performance.now() - started;
  const frames = []; let last = performance.now(); let running = true;
  (function tick(t) { frames.push(t - last); last = t; if (running) requestAnimationFrame(tick); })(performance.now());
  for (let i = 0; i < 40; i++) { cy.zoom({level: cy.zoom() * (i < 20 ? 1.2 : 1 / 1.2), renderedPosition: {x: 500, y: 400}}); await new Promise(r => requestAnimationFrame(r)); }
  for (let i = 0; i < 60; i++) { cy.panBy({x: 4, y: 2}); await new Promise(r => requestAnimationFrame(r)); }
  running = false;
  return {layout_and_first_frame_ms: firstRender || readyMs, ready_ms: readyMs, frame_interval_ms: frames.slice(2)};
}
"""


def fetch_cytoscape() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="cytoscape-"))
    subprocess.run(["npm", "pack", f"cytoscape@{CYTOSCAPE_VERSION}", "--silent"], cwd=folder, check=True, capture_output=True)
    archive = next(folder.glob("cytoscape-*.tgz"))
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    return folder / "package" / "dist" / "cytoscape.min.js"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cytoscape", help="path to cytoscape.min.js (default: npm pack into a temporary folder)")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path,
                        help="the JSON to write (default benchmarks/results/explorer_renderer_<cpu>_<date>.json)")
    args = parser.parse_args()
    if args.out is not None and args.out.is_dir():
        parser.error(f"--out {args.out} is a folder; give a file name (.json)")
    cytoscape = Path(args.cytoscape) if args.cytoscape else fetch_cytoscape()
    tree = search_shaped_tree(args.nodes)
    from playwright.sync_api import sync_playwright

    ours, theirs = [], []
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        with KernelLabServer() as server:
            server.feeder("setup")
            run = server.feeder("create_run", name="renderer")
            for i in range(0, len(tree), 500):
                server.feeder("add_nodes", run=run, nodes=tree[i:i + 500])
            for _ in range(args.repeats):
                context, page = browser_page(chromium, server)
                page.goto(f"{server.url}/runs/{run}/")
                page.wait_for_function(f"window.klExplorer && window.klExplorer.size === {args.nodes} && window.klExplorer.stats.firstFullDrawAt", timeout=60000)
                page.wait_for_timeout(300)
                first = page.evaluate("({layout: window.klExplorer.stats.firstLayoutMs, draw: window.klExplorer.stats.firstFullDrawMs})")
                pan = page.evaluate(PAN_ZOOM_JS)
                ours.append({"layout_and_first_frame_ms": first["layout"] + first["draw"], "frame_interval_ms": pan["frame_interval_ms"]})
                context.close()
        for _ in range(args.repeats):
            context = chromium.new_context(viewport={"width": 1500, "height": 950})
            page = context.new_page()
            page.set_content(CYTOSCAPE_PAGE)
            page.add_script_tag(path=str(cytoscape))
            theirs.append(page.evaluate(CYTOSCAPE_RUN, tree))
            context.close()
        chromium.close()

    def digest(samples):
        frames = [f for s in samples for f in s["frame_interval_ms"]]
        firsts = sorted(s["layout_and_first_frame_ms"] for s in samples)
        return {"layout_and_first_frame_ms_median": firsts[len(firsts) // 2], "frame_interval_ms": summary(frames)}

    result = {"nodes": args.nodes, "d3_hierarchy_canvas": digest(ours), "cytoscape": {"version": CYTOSCAPE_VERSION, **digest(theirs)}}
    for name in ("d3_hierarchy_canvas", "cytoscape"):
        r = result[name]
        f = r["frame_interval_ms"]
        print(f"{name:20} layout + first frame {r['layout_and_first_frame_ms_median']:8.1f} ms   "
              f"frame interval while zooming/panning p50 {f['p50']:6.1f} ms  p95 {f['p95']:6.1f} ms  max {f['max']:6.1f} ms")
    path = args.out or RESULTS / f"explorer_renderer_{cpu_slug()}_{datetime.date.today().isoformat()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"command": " ".join(["python"] + sys.argv), "when": datetime.datetime.now().isoformat(timespec="seconds"), **result}, indent=1))
    print(f"wrote {path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    main()
