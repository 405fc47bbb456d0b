// The live search tree: d3-hierarchy lays it out, a canvas draws it, a websocket keeps it current.
//
// The page loads the tree with the sequence number it corresponds to, then subscribes to every
// change after that number. A node change carries the node's whole state, so applying one twice
// is harmless; a change at or below the last one seen is skipped, and a gap asks the server again.
(function () {
  "use strict";

  const root = document.getElementById("explorer");
  if (!root) return;
  const canvas = document.getElementById("tree-canvas");
  const ctx = canvas.getContext("2d");
  const tooltip = document.getElementById("tree-tooltip");
  const liveStatus = document.getElementById("live-status");
  const midpoints = JSON.parse(document.getElementById("bin-midpoints").textContent);
  const panelUrl = root.dataset.panelUrl;

  const NODE_R = 5;            // world units
  const DEPTH_GAP = 110;       // tidy layout: distance between depths
  const SIBLING_GAP = 14;      // tidy layout: distance between neighbours
  const FAILED = new Set(["failed-compile", "failed-correctness", "failed-runtime"]);
  const RECONNECT_MAX_MS = 10000;
  // A parent with more than FOLD_MIN leaf children standing on a forecast (a run screening 256
  // candidates at the root has hundreds) shows them as one "+N" mark; clicking it shows them.
  const FOLD_MIN = 12;
  const FOLDABLE = new Set(["proposed", "forecast", "accepted", "pruned"]);
  const FOLD_STYLE = { id: "fold", kind: "fold", colour: "rgb(140,146,160)", alpha: 1 };

  // ---- state ------------------------------------------------------------------------------
  const nodes = new Map();       // key -> node record (payload fields + layout)
  const verifications = new Map(); // node key -> latest verification payload
  let ordered = [];              // nodes in layout order, for drawing and hit tests
  let edges = [];                // [parent, child] pairs
  let lastSeq = 0;
  let layoutDirty = false;
  let drawDirty = true;
  let statsDirty = true;
  let frameRequested = false;
  let transform = { k: 1, x: 40, y: 40 };
  let selectedKey = root.dataset.selected || null;
  let hoverKey = null;
  let cursorKey = null;          // the keyboard's node (or "+N" mark): arrows move it, Enter opens it
  let keyboardActive = false;    // the cursor ring shows once a key is used, until the mouse is
  const layoutKids = new Map();  // key -> its children as drawn (folded leaves replaced by their mark)
  let layoutRoots = [];
  let layoutMode = "tidy";
  let folding = true;            // fold the forecast-only leaves of wide parents
  const unfolded = new Set();    // parent keys shown in full although folding is on
  const foldOf = new Map();      // hidden node key -> the "+N" mark standing for it
  const foldMarks = new Map();   // parent key -> its "+N" mark
  let bestKey = null;
  let searchBest = null;         // the search's own best ({node, speedup}); it knows the objective
  let gpuBudget = null;
  let bestPath = new Set();
  let fittedOnce = false;
  let following = true;          // refit as the tree grows until the person moves the view
  let anyMeasuring = false;
  const firstShown = new Map();  // key -> Date.now() of the first frame that drew it
  let notYetShown = [];
  let snapshotApplied = false;
  const stats = { firstFullDrawAt: null, draws: 0, lastDrawMs: 0, drawMs: [], layouts: 0, lastLayoutMs: 0, changesApplied: 0, resubscribes: 0, connects: 0 };

  // ---- colour -----------------------------------------------------------------------------
  // Speedup on a log2 axis: 0.25x deep red, 1x neutral grey, 4x deep green.
  const STOPS = [[-2, [165, 0, 38]], [-1, [244, 109, 67]], [0, [190, 190, 190]], [1, [102, 189, 99]], [2, [0, 104, 55]]];
  function speedupColour(s) {
    if (!(s > 0)) return "rgb(150,150,150)";
    const t = Math.max(-2, Math.min(2, Math.log2(s)));
    for (let i = 1; i < STOPS.length; i++) {
      if (t <= STOPS[i][0]) {
        const [t0, c0] = STOPS[i - 1], [t1, c1] = STOPS[i];
        const f = (t - t0) / (t1 - t0);
        return "rgb(" + c0.map((c, j) => Math.round(c + f * (c1[j] - c))).join(",") + ")";
      }
    }
    return "rgb(0,104,55)";
  }

  // Styles are quantised (1/8 of a doubling, tenths of opacity) so that a frame draws one path per
  // style instead of one per node.
  const styles = new Map();
  function styleFor(kind, speedup, alpha) {
    const level = speedup > 0 ? Math.round(Math.max(-2, Math.min(2, Math.log2(speedup))) * 8) : null;
    const a = Math.round(alpha * 10) / 10;
    const id = kind + "|" + level + "|" + a;
    let style = styles.get(id);
    if (!style) {
      const colour = kind === "failed" ? "rgb(120,120,120)" : kind === "plain" ? "rgb(160,166,178)" : speedupColour(level === null ? 0 : 2 ** (level / 8));
      styles.set(id, style = { id, kind, colour, alpha: a });
    }
    return style;
  }

  function style(n) {
    if (n.state === "measured" && n.speedup > 0) return styleFor("measured", n.speedup, 1);
    if (FAILED.has(n.state)) return styleFor("failed", null, 1);
    if (n.forecast_bin) {
      const conf = n.forecast_confidence == null ? 0.5 : n.forecast_confidence;
      return styleFor("forecast", midpoints[n.forecast_bin - 1], 0.2 + 0.8 * Math.max(0, Math.min(1, conf)));
    }
    return styleFor("plain", null, 1);
  }

  // ---- applying changes ---------------------------------------------------------------------
  function upsertNode(p) {
    let n = nodes.get(p.key);
    if (!n) {
      n = { key: p.key, x: 0, y: 0 };
      nodes.set(p.key, n);
      layoutDirty = true;
      notYetShown.push(p.key);
      // Until the next layout, a new node stands just beyond its parent (or joins its parent's "+N").
      const parent = p.parent != null ? nodes.get(p.parent) : null;
      const mark = parent ? foldMarks.get(parent.key) : null;
      if (mark && FOLDABLE.has(p.state)) {
        mark.members.push(n);
        mark.count++;
        foldOf.set(p.key, mark);
      } else if (parent && ordered.length) {
        n.x = parent.x + (layoutMode === "tidy" ? DEPTH_GAP : 0.3 * DEPTH_GAP);
        n.y = parent.y + (Math.random() - 0.5) * SIBLING_GAP;
        ordered.push(n);
        edges.push([parent, n]);
      }
    } else if (n.parent !== p.parent || FOLDABLE.has(n.state) !== FOLDABLE.has(p.state)) {
      layoutDirty = true;          // moved, or now (un)foldable
    }
    Object.assign(n, p);
    n.style = style(n);
    statsDirty = true;
    drawDirty = true;
  }

  function applyChanges(changes) {
    for (const change of changes) {
      if (change.seq <= lastSeq) continue;            // already applied (a snapshot or a repeat)
      if (change.seq !== lastSeq + 1) {                 // a gap: ask again from what we have
        stats.resubscribes++;
        subscribe();
        break;
      }
      lastSeq = change.seq;
      stats.changesApplied++;
      const p = change.payload || {};
      if (change.kind === "node" || change.kind === "discovery" || change.kind === "forecast") {
        upsertNode(p);
        if (p.key === selectedKey) refreshPanel("live");
        if (p.key === selectedKey && change.kind === "discovery") refreshPanel("discovery");  // (un)marked, maybe by someone else
      } else if (change.kind === "best") {
        searchBest = p.node ? p : null;
        statsDirty = true;
        drawDirty = true;
      } else if (change.kind === "step") {
        if (p.counters) setGpuCounter(p.counters.measurements_requested);
        setThreshold(p.threshold);
      } else if (change.kind === "gpu") {  // the budget use changed between steps (a measurement people asked for)
        setGpuCounter(p.used);
      } else if (change.kind === "verification") {
        verifications.set(p.node, p);
        if (p.node === selectedKey) refreshPanel("live");
      } else if (change.kind === "comment") {
        if (p.node === selectedKey) refreshPanel("comments");
      } else if (change.kind === "run") {
        refreshControls(p);
      }
    }
    requestFrame();
  }

  // ---- layout -------------------------------------------------------------------------------
  function computeLayout() {
    const started = performance.now();
    const kids = new Map();
    const roots = [];
    for (const n of nodes.values()) {
      const parent = n.parent != null ? nodes.get(n.parent) : null;
      if (parent) {
        let list = kids.get(parent.key);
        if (!list) kids.set(parent.key, list = []);
        list.push(n);
      } else {
        roots.push(n);
      }
    }
    for (const list of kids.values()) list.sort((a, b) => a.id - b.id);
    roots.sort((a, b) => a.id - b.id);
    foldOf.clear();
    foldMarks.clear();
    if (folding) {
      for (const [parentKey, list] of kids) {
        if (unfolded.has(parentKey)) continue;
        const leaves = list.filter(n => FOLDABLE.has(n.state) && !kids.has(n.key) && n.key !== selectedKey);
        if (leaves.length <= FOLD_MIN) continue;
        const hidden = new Set(leaves);
        const mark = { key: "+" + parentKey, fold: true, parent: parentKey, members: leaves, count: leaves.length, style: FOLD_STYLE, x: 0, y: 0 };
        kids.set(parentKey, list.filter(n => !hidden.has(n)).concat([mark]));
        foldMarks.set(parentKey, mark);
        for (const n of leaves) foldOf.set(n.key, mark);
      }
    }
    const top = roots.length === 1 ? roots[0] : { key: "__forest__", virtual: true };
    const children = d => (d.virtual ? roots : kids.get(d.key) || null);
    const h = d3.hierarchy(top, children);
    ordered = [];
    edges = [];
    layoutKids.clear();
    layoutRoots = top.virtual ? roots : [top];
    if (layoutMode === "tidy") {
      d3.tree().nodeSize([SIBLING_GAP, DEPTH_GAP]).separation((a, b) => (a.parent === b.parent ? 1 : 1.4))(h);
      h.each(d => { d.data.x = d.y; d.data.y = d.x; });
    } else {
      const height = Math.max(1, h.height);
      const radius = Math.max(200, height * DEPTH_GAP);
      d3.tree().size([2 * Math.PI, radius]).separation((a, b) => (a.parent === b.parent ? 1 : 2) / Math.max(1, a.depth))(h);
      h.each(d => { d.data.x = d.y * Math.cos(d.x - Math.PI / 2); d.data.y = d.y * Math.sin(d.x - Math.PI / 2); });
    }
    h.each(d => {
      if (d.data.virtual) return;
      ordered.push(d.data);
      if (d.parent && !d.parent.data.virtual) edges.push([d.parent.data, d.data]);
      if (d.children) layoutKids.set(d.data.key, d.children.map(c => c.data));
    });
    layoutDirty = false;
    stats.layouts++;
    stats.lastLayoutMs = performance.now() - started;
  }

  function computeBest() {
    // The search's best when it has named one; until then the fastest measured node.
    let best = searchBest && nodes.has(searchBest.node) ? nodes.get(searchBest.node) : null;
    if (!best) {
      for (const n of nodes.values()) {
        if (n.state === "measured" && n.speedup > 0 && (!best || n.speedup > best.speedup)) best = n;
      }
    }
    bestKey = best ? best.key : null;
    bestPath = new Set();
    let cur = best;
    while (cur) {
      bestPath.add(cur.key);
      cur = cur.parent != null ? nodes.get(cur.parent) : null;
    }
  }

  function updateCounters() {
    let measured = 0, forecast = 0, pending = 0, gpu = 0, failed = 0;
    anyMeasuring = false;
    for (const n of nodes.values()) {
      // The reference is 1.00x by definition, not by a measurement: it never counts as measured.
      if (n.state === "measured") { if (n.origin !== "root") measured++; }
      else if (n.forecast_bin) forecast++;
      if (n.state === "awaiting-approval") pending++;
      if (n.state === "queued" || n.state === "measuring") gpu++;
      if (n.state === "measuring") anyMeasuring = true;
      if (FAILED.has(n.state)) failed++;
    }
    const set = (name, value) => { const el = document.querySelector('[data-count="' + name + '"]'); if (el) el.textContent = value; };
    set("nodes", nodes.size); set("measured", measured); set("forecast", forecast); set("pending", pending);
    set("gpu", gpu); set("failed", failed);
    if (queuedOrAwaiting !== null && pending + gpu !== queuedOrAwaiting) refreshControlsSoon();
    queuedOrAwaiting = pending + gpu;
    followCounters();
    const best = bestKey ? nodes.get(bestKey) : null;
    // Until a candidate is measured there is no best, only the reference.
    set("best", measured && best && best.speedup ? best.speedup.toFixed(2) + "× (" + (best.origin === "root" ? "the reference" : best.name || best.key) + ")" : "—");
    document.getElementById("tree-empty").hidden = nodes.size > 0;
  }

  // The run waits while the search has measurements out or approvals to wait for; once they are done
  // it is only between steps (the next one starts shortly), and the badge says so as the counters do.
  let queuedOrAwaiting = null;
  const BETWEEN_STEPS = "no GPU measurement is queued or awaiting approval; the next step starts shortly";
  function followCounters() {
    const badge = document.getElementById("run-status");
    if (!badge || queuedOrAwaiting === null) return;
    if (badge.dataset.label == null) badge.dataset.label = badge.textContent;
    const reason = document.getElementById("run-status-reason");
    if (reason && reason.dataset.label == null) reason.dataset.label = reason.textContent;
    const idle = badge.dataset.status === "waiting" && queuedOrAwaiting === 0;
    badge.textContent = idle ? "Between steps" : badge.dataset.label;
    if (reason) reason.textContent = idle ? BETWEEN_STEPS : reason.dataset.label;
    else if (idle) badge.title = BETWEEN_STEPS;
    if (!idle) badge.removeAttribute("title");
    // The wait reason counts the same verifications as the counters: with none left it is out of date.
    const wait = document.getElementById("run-wait-reason");
    if (wait) wait.hidden = queuedOrAwaiting === 0;
  }
  // ...and is re-read from the server when they change (once they settle), so that it says what they say.
  let controlsTimer = null;
  function refreshControlsSoon() {
    clearTimeout(controlsTimer);
    controlsTimer = setTimeout(() => {
      const badge = document.getElementById("run-status");
      if (badge && (badge.dataset.status === "running" || badge.dataset.status === "waiting")) {
        htmx.ajax("GET", window.location.pathname + "?part=controls", { target: "#run-controls", swap: "outerHTML" });
      }
    }, 800);
  }
  document.addEventListener("htmx:afterSettle", followCounters);  // the run's controls are re-rendered by the server

  function setGpuCounter(used) {
    const el = document.querySelector('[data-count="gpu-used"]');
    if (el && used != null) el.textContent = used + (gpuBudget ? " / " + gpuBudget : "");
  }

  // The confidence at which the policy trusts a forecast now: the run's threshold, or the conformal one once the run
  // has measured enough forecasts (at 1 or above it trusts none, and every candidate competes for the GPU).
  let currentThreshold = null;
  function setThreshold(threshold) {
    const el = document.querySelector('[data-count="threshold"]');
    if (!el || threshold == null) return;
    currentThreshold = threshold;
    el.textContent = threshold >= 1 ? "none" : "at confidence \u2265 " + Number(threshold).toFixed(2);
  }

  // ---- drawing ------------------------------------------------------------------------------
  function resize() {
    const rect = canvas.parentElement.getBoundingClientRect();
    const dpr = window.devicePixelRatio || 1;
    const width = Math.max(200, Math.floor(rect.width)), height = Math.max(200, Math.floor(rect.height));
    canvas.style.width = width + "px";
    canvas.style.height = height + "px";
    canvas.width = Math.floor(width * dpr);
    canvas.height = Math.floor(height * dpr);
    drawDirty = true;
    if (fittedOnce && following) fit();
    requestFrame();
  }

  function requestFrame() {
    if (frameRequested) return;
    frameRequested = true;
    requestAnimationFrame(frame);
  }

  // A layout of a large tree costs tens of milliseconds, so while the tree grows it is redone at
  // most every few layout-durations; new nodes are drawn beside their parents meanwhile.
  let lastLayoutAt = -Infinity;
  let layoutTimer = null;

  function frame(now) {
    frameRequested = false;
    let relaid = false;
    if (layoutDirty) {
      const due = lastLayoutAt + Math.min(1000, 6 * stats.lastLayoutMs);
      if (performance.now() >= due || !fittedOnce) {
        computeLayout();
        lastLayoutAt = performance.now();
        relaid = true;
      } else if (!layoutTimer) {
        layoutTimer = setTimeout(() => { layoutTimer = null; drawDirty = true; requestFrame(); }, due - performance.now());
      }
    }
    if (statsDirty) { computeBest(); updateCounters(); statsDirty = false; }
    if (!fittedOnce && ordered.length) {
      fit();
      fittedOnce = true;
      if (selectedKey && nodes.has(selectedKey)) { following = false; centreOn(selectedKey, false); }
    } else if (relaid && following) {
      fit();
    }
    if (drawDirty || anyMeasuring) draw(now);
    if (anyMeasuring) setTimeout(requestFrame, 100); // the measuring marker pulses
  }

  function draw(now) {
    const started = performance.now();
    drawDirty = false;
    const dpr = window.devicePixelRatio || 1;
    const width = canvas.width / dpr, height = canvas.height / dpr;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const k = transform.k;
    ctx.setTransform(dpr * k, 0, 0, dpr * k, dpr * transform.x, dpr * transform.y);
    // Visible world rectangle, with a margin, for culling.
    const margin = 20 / k;
    const x0 = -transform.x / k - margin, y0 = -transform.y / k - margin;
    const x1 = (width - transform.x) / k + margin, y1 = (height - transform.y) / k + margin;
    const visible = n => n.x >= x0 && n.x <= x1 && n.y >= y0 && n.y <= y1;

    // Edges: ordinary ones in one path, the path to the best kernel on top.
    ctx.lineWidth = Math.max(0.6 / k, 0.6);
    ctx.strokeStyle = "rgba(120,130,150,0.45)";
    ctx.beginPath();
    for (const [a, b] of edges) {
      if (!visible(a) && !visible(b)) continue;
      ctx.moveTo(a.x, a.y);
      ctx.lineTo(b.x, b.y);
    }
    ctx.stroke();
    if (bestPath.size > 1) {
      ctx.lineWidth = Math.max(3.5 / k, 3.5);
      ctx.strokeStyle = "rgba(230,160,0,0.9)";
      ctx.beginPath();
      for (const key of bestPath) {
        const n = nodes.get(key);
        const p = n && n.parent != null ? nodes.get(n.parent) : null;
        if (p) { ctx.moveTo(p.x, p.y); ctx.lineTo(n.x, n.y); }
      }
      ctx.stroke();
    }

    const tiny = NODE_R * k < 1.6;   // zoomed far out: squares, no outlines
    const r = tiny ? 1.6 / k : NODE_R;
    const shownNow = Date.now();
    const buckets = new Map();
    const marks = [];
    for (const n of ordered) {
      if (!visible(n)) continue;
      if (n.fold) { marks.push(n); continue; }
      let bucket = buckets.get(n.style.id);
      if (!bucket) buckets.set(n.style.id, bucket = { style: n.style, list: [] });
      bucket.list.push(n);
    }
    for (const { style: s, list } of buckets.values()) {
      ctx.globalAlpha = s.alpha;
      ctx.beginPath();
      if (tiny) {
        for (const n of list) ctx.rect(n.x - r, n.y - r, 2 * r, 2 * r);
        ctx.fillStyle = s.colour;
        ctx.fill();
        continue;
      }
      const radius = s.kind === "plain" ? r * 0.6 : r;
      for (const n of list) { ctx.moveTo(n.x + radius, n.y); ctx.arc(n.x, n.y, radius, 0, 2 * Math.PI); }
      if (s.kind === "forecast") {
        ctx.fillStyle = "#fff";
        ctx.fill();
        ctx.lineWidth = 2.2;
        ctx.strokeStyle = s.colour;
        ctx.stroke();
      } else {
        ctx.fillStyle = s.colour;
        ctx.fill();
        if (s.kind === "measured") { ctx.lineWidth = 0.8; ctx.strokeStyle = "rgba(0,0,0,0.5)"; ctx.stroke(); }
      }
    }
    ctx.globalAlpha = 1;
    if (marks.length) drawFolds(marks, tiny, r);
    if (!tiny) drawMarkers(now, r, visible);
    drawSelection(r);

    if (notYetShown.length) {
      for (const key of notYetShown) if (!firstShown.has(key)) firstShown.set(key, shownNow);
      notYetShown = [];
    }
    stats.draws++;
    stats.lastDrawMs = performance.now() - started;
    if (snapshotApplied && !stats.firstFullDrawAt) {
      stats.firstFullDrawAt = performance.now();
      stats.firstFullDrawMs = stats.lastDrawMs;
      stats.firstLayoutMs = stats.lastLayoutMs;
    }
    stats.drawMs.push(stats.lastDrawMs);
    if (stats.drawMs.length > 600) stats.drawMs.splice(0, 300);
  }

  function drawMarkers(now, r, visible) {
    const pulse = 1 + 0.35 * Math.sin((now || 0) / 180);
    const awaiting = new Path2D(), queued = new Path2D(), measuring = new Path2D(), failed = new Path2D(), rejected = new Path2D(), stars = new Path2D();
    const d = r + 1.5;
    for (const n of ordered) {
      if (!visible(n)) continue;
      const st = n.state;
      if (st === "awaiting-approval") awaiting.rect(n.x - r - 3, n.y - r - 3, 2 * r + 6, 2 * r + 6);
      else if (st === "queued") { queued.moveTo(n.x + r + 3.5, n.y); queued.arc(n.x, n.y, r + 3.5, 0, 2 * Math.PI); }
      else if (st === "measuring") { const m = (r + 3) * pulse; measuring.moveTo(n.x + m, n.y); measuring.arc(n.x, n.y, m, 0, 2 * Math.PI); }
      else if (FAILED.has(st) || st === "rejected") {
        const path = st === "rejected" ? rejected : failed;
        path.moveTo(n.x - d, n.y - d); path.lineTo(n.x + d, n.y + d); path.moveTo(n.x + d, n.y - d); path.lineTo(n.x - d, n.y + d);
      }
      if (n.discovery) star(stars, n.x + r + 3, n.y - r - 3, 4.5);
    }
    ctx.lineWidth = 2; ctx.strokeStyle = "#e67e00"; ctx.stroke(awaiting);
    ctx.lineWidth = 1.6; ctx.strokeStyle = "#2f6fdb"; ctx.setLineDash([2.5, 2]); ctx.stroke(queued); ctx.setLineDash([]);
    ctx.lineWidth = 2; ctx.strokeStyle = "#8e44ad"; ctx.stroke(measuring);
    ctx.lineWidth = 1.8; ctx.strokeStyle = "#c0392b"; ctx.stroke(failed);
    ctx.strokeStyle = "#555"; ctx.stroke(rejected);
    ctx.fillStyle = "#f1c40f"; ctx.strokeStyle = "#8a6d00"; ctx.lineWidth = 0.8; ctx.fill(stars); ctx.stroke(stars);
    if (bestKey && nodes.has(bestKey)) {
      const b = nodes.get(bestKey);
      ctx.lineWidth = 2.5; ctx.strokeStyle = "#e6a000";
      ctx.beginPath(); ctx.arc(b.x, b.y, r + 6, 0, 2 * Math.PI); ctx.stroke();
    }
  }

  // A "+N" mark: a pill with the number of children it stands for.
  function drawFolds(marks, tiny, r) {
    ctx.beginPath();
    for (const m of marks) {
      const w = tiny ? 2 * r : foldWidth(m), h = tiny ? 2 * r : 11;
      if (ctx.roundRect) ctx.roundRect(m.x - w / 2 + r, m.y - h / 2, w, h, h / 2);
      else ctx.rect(m.x - w / 2 + r, m.y - h / 2, w, h);
    }
    ctx.fillStyle = "#eef0f4";
    ctx.fill();
    ctx.lineWidth = 1;
    ctx.strokeStyle = FOLD_STYLE.colour;
    ctx.stroke();
    if (tiny) return;
    ctx.fillStyle = "#2d3340";
    ctx.font = "8px system-ui, sans-serif";
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    for (const m of marks) ctx.fillText("+" + m.count, m.x + r, m.y + 0.5);
  }

  function star(path, cx, cy, outer) {
    for (let i = 0; i < 10; i++) {
      const rad = i % 2 ? outer * 0.45 : outer;
      const a = -Math.PI / 2 + i * Math.PI / 5;
      path[i ? "lineTo" : "moveTo"](cx + rad * Math.cos(a), cy + rad * Math.sin(a));
    }
    path.closePath();
  }

  function drawSelection(r) {
    const k = transform.k;
    for (const [key, colour, width] of [[hoverKey, "rgba(0,0,0,0.35)", 1.5], [selectedKey, "#111", 2.5]]) {
      const n = key ? nodes.get(key) : null;
      if (!n) continue;
      ctx.lineWidth = width / k;
      ctx.strokeStyle = colour;
      ctx.beginPath();
      ctx.arc(n.x, n.y, Math.max(r + 8, 10 / k), 0, 2 * Math.PI);
      ctx.stroke();
    }
    const c = keyboardActive && document.activeElement === canvas ? cursorItem() : null;
    if (c) {
      ctx.lineWidth = 3 / k;
      ctx.strokeStyle = "rgba(200,0,110,0.85)";   // not a state's colour: the keyboard's place in the tree
      ctx.beginPath();
      if (c.fold) ctx.arc(c.x + r, c.y, Math.max(foldWidth(c) / 2 + 4, 12 / k), 0, 2 * Math.PI);
      else ctx.arc(c.x, c.y, Math.max(r + 11, 13 / k), 0, 2 * Math.PI);
      ctx.stroke();
    }
  }

  // ---- view: fit, zoom, pan, pick -----------------------------------------------------------
  // What a node draws around its centre, in world units: the selection ring (r + 8), the best-kernel
  // ring (r + 6) and the discovery star (up to r + 7.5 above and right).
  const NODE_REACH = NODE_R + 9;
  function foldWidth(m) { return 12 + 5 * String(m.count).length; }

  function bounds() {
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (const n of ordered) {
      // a "+N" pill stands right of its point (drawFolds): from x + r - w/2 to x + r + w/2
      const left = n.fold ? Math.min(NODE_REACH, foldWidth(n) / 2 - NODE_R) : NODE_REACH;
      const right = n.fold ? Math.max(NODE_REACH, NODE_R + foldWidth(n) / 2) : NODE_REACH;
      x0 = Math.min(x0, n.x - left); y0 = Math.min(y0, n.y - NODE_REACH);
      x1 = Math.max(x1, n.x + right); y1 = Math.max(y1, n.y + NODE_REACH);
    }
    return { x0, y0, x1, y1 };
  }

  // The part of the canvas that the toolbar (top) and the legend (bottom) leave uncovered, in canvas
  // pixels: fitting and centring use it, so that no node, and no "+N" mark, ends up under either.
  function freeArea() {
    const dpr = window.devicePixelRatio || 1;
    const width = canvas.width / dpr, height = canvas.height / dpr;
    const area = { left: 8, top: 8, right: width - 8, bottom: height - 8 };
    const c = canvas.getBoundingClientRect();
    const tools = root.querySelector(".tree-tools"), legend = root.querySelector(".legend");
    if (tools && tools.offsetParent) area.top = Math.max(area.top, tools.getBoundingClientRect().bottom - c.top + 6);
    if (legend && legend.offsetParent) area.bottom = Math.min(area.bottom, legend.getBoundingClientRect().top - c.top - 6);
    if (area.bottom - area.top < 80) { area.top = 8; area.bottom = height - 8; }  // a pane too short for both: use it all
    return area;
  }

  function fit() {
    if (!ordered.length) return;
    const b = bounds();
    const a = freeArea();
    const w = a.right - a.left, h = a.bottom - a.top;
    const k = Math.min(2, w / Math.max(1, b.x1 - b.x0), h / Math.max(1, b.y1 - b.y0));
    transform = { k, x: a.left - b.x0 * k + (w - (b.x1 - b.x0) * k) / 2, y: a.top - b.y0 * k + (h - (b.y1 - b.y0) * k) / 2 };
    drawDirty = true;
    requestFrame();
  }

  function centreOn(key, zoomIn = true) {
    const n = nodes.get(key);
    if (!n) return;
    if (layoutDirty) computeLayout();
    const a = freeArea();
    const k = zoomIn ? Math.max(transform.k, 1.2) : transform.k;
    following = false;
    transform = { k, x: (a.left + a.right) / 2 - n.x * k, y: (a.top + a.bottom) / 2 - n.y * k };
    drawDirty = true;
    requestFrame();
  }

  function zoomAt(px, py, factor) {
    following = false;
    const k = Math.max(0.002, Math.min(12, transform.k * factor));
    const f = k / transform.k;
    transform = { k, x: px - (px - transform.x) * f, y: py - (py - transform.y) * f };
    drawDirty = true;
    requestFrame();
  }

  function pick(px, py) {
    const wx = (px - transform.x) / transform.k, wy = (py - transform.y) / transform.k;
    const reach = Math.max(NODE_R + 2, 7 / transform.k);
    let best = null, bestD = reach * reach;
    for (const n of ordered) {
      const dx = n.x - wx, dy = n.y - wy, d = dx * dx + dy * dy;
      if (d <= bestD) { best = n; bestD = d; }
    }
    return best;
  }

  function screenPosition(key) {
    const n = nodes.get(key);
    if (!n) return null;
    if (layoutDirty) computeLayout();
    const rect = canvas.getBoundingClientRect();
    return { x: rect.left + transform.x + n.x * transform.k, y: rect.top + transform.y + n.y * transform.k };
  }

  let drag = null;
  canvas.addEventListener("pointerdown", ev => {
    if (keyboardActive) { keyboardActive = false; drawDirty = true; requestFrame(); }
    canvas.setPointerCapture(ev.pointerId);
    drag = { x: ev.clientX, y: ev.clientY, tx: transform.x, ty: transform.y, moved: false };
  });
  canvas.addEventListener("pointermove", ev => {
    const rect = canvas.getBoundingClientRect();
    if (drag) {
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 4) drag.moved = true;
      if (drag.moved) {
        following = false;
        transform = { k: transform.k, x: drag.tx + dx, y: drag.ty + dy };
        drawDirty = true;
        requestFrame();
        return;
      }
    }
    const n = pick(ev.clientX - rect.left, ev.clientY - rect.top);
    const key = n ? n.key : null;
    if (key !== hoverKey) { hoverKey = key; drawDirty = true; requestFrame(); }
    if (n) {
      tooltip.hidden = false;
      tooltip.style.left = (ev.clientX - rect.left + 14) + "px";
      tooltip.style.top = (ev.clientY - rect.top + 10) + "px";
      tooltip.textContent = describe(n);
    } else {
      tooltip.hidden = true;
    }
  });
  canvas.addEventListener("pointerup", ev => {
    const rect = canvas.getBoundingClientRect();
    if (drag && !drag.moved) {
      const n = pick(ev.clientX - rect.left, ev.clientY - rect.top);
      if (n && n.fold) { cursorKey = n.parent; unfold(n.parent); }
      else if (n) { cursorKey = n.key; select(n.key); }
    }
    drag = null;
  });
  canvas.addEventListener("pointerleave", () => { tooltip.hidden = true; if (hoverKey) { hoverKey = null; drawDirty = true; requestFrame(); } });
  canvas.addEventListener("wheel", ev => {
    ev.preventDefault();
    const rect = canvas.getBoundingClientRect();
    zoomAt(ev.clientX - rect.left, ev.clientY - rect.top, Math.exp(-ev.deltaY * 0.0015));
  }, { passive: false });
  // Keys, with the tree focused (Tab to it): arrows move between nodes (left: parent, right: first
  // child, up/down: siblings), Enter or Space opens the node in the panel (or a "+N" mark's
  // children), Home goes back to the root, Shift+arrows pan, + and - zoom.
  canvas.addEventListener("keydown", ev => {
    const a = freeArea(), cx = (a.left + a.right) / 2, cy = (a.top + a.bottom) / 2;
    const pans = { ArrowLeft: [60, 0], ArrowRight: [-60, 0], ArrowUp: [0, 60], ArrowDown: [0, -60] };
    if (ev.altKey || ev.ctrlKey || ev.metaKey) return;
    if (ev.key === "+" || ev.key === "=") zoomAt(cx, cy, 1.25);
    else if (ev.key === "-") zoomAt(cx, cy, 0.8);
    else if (pans[ev.key] && (ev.shiftKey || !ordered.length)) {
      following = false; transform.x += pans[ev.key][0]; transform.y += pans[ev.key][1]; drawDirty = true; requestFrame();
    } else if (pans[ev.key]) moveCursor(ev.key);
    else if (ev.key === "Enter" || ev.key === " ") openCursor();
    else if (ev.key === "Home") setCursor(layoutRoots[0] || null);
    else if (ev.key === "Escape") { keyboardActive = false; tooltip.hidden = true; drawDirty = true; requestFrame(); }
    else return;
    ev.preventDefault();
  });
  canvas.addEventListener("focus", () => {
    if (canvas.matches(":focus-visible")) { keyboardActive = true; setCursor(cursorItem() || startItem()); }
  });
  canvas.addEventListener("blur", () => { if (keyboardActive) { tooltip.hidden = true; drawDirty = true; requestFrame(); } });

  // The cursor's node as drawn: a folded node stands as its "+N" mark.
  function itemFor(key) {
    if (key == null) return null;
    if (layoutDirty) computeLayout();
    if (foldOf.has(key)) return foldMarks.get(foldOf.get(key).parent) || null;
    if (nodes.has(key)) return nodes.get(key);
    if (key.charAt(0) === "+" && foldMarks.has(key.slice(1))) return foldMarks.get(key.slice(1));
    return null;
  }
  function cursorItem() { return itemFor(cursorKey); }
  function startItem() {
    if (layoutDirty) computeLayout();
    return itemFor(selectedKey) || layoutRoots[0] || null;
  }

  function setCursor(item) {
    if (!item) return;
    keyboardActive = true;
    cursorKey = item.key;
    keepInView(item);
    const p = itemScreen(item), a = freeArea();
    tooltip.textContent = describe(item).replace("click to show them", "Enter shows them") + (item.fold ? "" : " · Enter opens it");
    tooltip.hidden = false;
    // beside the node, inside the part of the pane that the toolbar and the legend leave free
    const w = tooltip.offsetWidth, h = tooltip.offsetHeight;
    const left = p.x + 16 + w <= a.right ? p.x + 16 : Math.max(a.left, p.x - 16 - w);
    const top = p.y + 10 + h <= a.bottom ? p.y + 10 : Math.max(a.top, p.y - 10 - h);
    tooltip.style.left = Math.round(left) + "px";
    tooltip.style.top = Math.round(top) + "px";
    drawDirty = true;
    requestFrame();
  }

  function moveCursor(key) {
    const cur = cursorItem() || startItem();
    if (!cur) return;
    if (!cursorItem()) return setCursor(cur);
    const parentKey = cur.parent != null && (nodes.has(cur.parent)) ? cur.parent : null;
    const siblings = parentKey != null ? layoutKids.get(parentKey) || [] : layoutRoots;
    const at = siblings.indexOf(cur);
    let next = null;
    if (key === "ArrowLeft") next = parentKey != null ? nodes.get(parentKey) : null;
    else if (key === "ArrowRight") next = (layoutKids.get(cur.key) || [])[0] || null;
    else if (key === "ArrowUp") next = at > 0 ? siblings[at - 1] : null;
    else if (key === "ArrowDown") next = at >= 0 && at < siblings.length - 1 ? siblings[at + 1] : null;
    setCursor(next || cur);
  }

  function openCursor() {
    const cur = cursorItem() || startItem();
    if (!cur) return;
    if (cur.fold) {
      const first = cur.members[0];
      unfold(cur.parent);
      setCursor(first ? itemFor(first.key) : nodes.get(cur.parent));
    } else {
      setCursor(cur);
      select(cur.key);
    }
  }

  // Canvas pixels of a drawn node or mark (a mark's pill is centred right of its point).
  function itemScreen(item) {
    return { x: transform.x + (item.x + (item.fold ? NODE_R : 0)) * transform.k, y: transform.y + item.y * transform.k };
  }
  function keepInView(item) {
    const a = freeArea(), p = itemScreen(item), m = 24;
    if (p.x >= a.left + m && p.x <= a.right - m && p.y >= a.top + m && p.y <= a.bottom - m) return;
    following = false;
    transform = { k: transform.k, x: transform.x + (a.left + a.right) / 2 - p.x, y: transform.y + (a.top + a.bottom) / 2 - p.y };
    drawDirty = true;
    requestFrame();
  }

  function describe(n) {
    if (n.fold) {
      const byState = {};
      let best = null;
      for (const m of n.members) {
        byState[m.state] = (byState[m.state] || 0) + 1;
        if (m.forecast_bin && (best === null || midpoints[m.forecast_bin - 1] > best)) best = midpoints[m.forecast_bin - 1];
      }
      const parent = nodes.get(n.parent);
      return "+" + n.count + " children of " + (parent ? parent.name || parent.key : n.parent) + " not measured (" +
        Object.entries(byState).map(([state, count]) => count + " " + state).join(", ") + ")" +
        (best !== null ? " · best forecast about " + best.toFixed(2) + "×" : "") + " · click to show them";
    }
    const parts = [(n.name || n.key) + " (" + n.key + ")", n.state];
    if (n.speedup) parts.push(n.speedup.toFixed(3) + "× measured");
    if (n.forecast_bin) parts.push("forecast bin " + n.forecast_bin + (n.forecast_confidence != null ? " at " + n.forecast_confidence.toFixed(2) : ""));
    const v = verifications.get(n.key);
    if (v && v.progress && (n.state === "measuring" || n.state === "queued")) parts.push(v.progress);
    if (n.discovery) parts.push("discovery");
    return parts.join(" · ");
  }

  // ---- the node panel -----------------------------------------------------------------------
  // Show the folded children of one parent, keeping that parent where it is on the screen.
  function unfold(parentKey) {
    unfolded.add(parentKey);
    relayoutKeeping(parentKey);
  }

  function relayoutKeeping(key) {
    const n = nodes.get(key);
    const before = n ? { x: n.x, y: n.y } : null;
    computeLayout();
    if (before) {
      transform = { k: transform.k, x: transform.x + (before.x - n.x) * transform.k, y: transform.y + (before.y - n.y) * transform.k };
    }
    following = false;
    drawDirty = true;
    requestFrame();
  }

  function select(key, options = {}) {
    if (!nodes.has(key)) return false;
    if (foldOf.has(key)) {           // a hidden node: show its siblings first
      unfolded.add(foldOf.get(key).parent);
      layoutDirty = true;
      if (!options.centre) relayoutKeeping(foldOf.get(key).parent);
    }
    selectedKey = key;
    drawDirty = true;
    requestFrame();
    const url = new URL(window.location.href);
    url.searchParams.set("node", key);
    history.replaceState(null, "", url);
    if (options.centre) centreOn(key);
    htmx.ajax("GET", panelUrl + encodeURIComponent(key) + "/", { target: "#node-panel", swap: "innerHTML" });
    return true;
  }

  // A change pushed for the open node re-fetches the part of the panel it affects (views/explorer.py PANEL_PARTS).
  const PARTS = { live: "panel-live", comments: "panel-comments", discovery: "panel-discovery-part" };
  const refreshTimers = {};
  let discoveryWasOpen = null;
  function refreshPanel(part) {
    clearTimeout(refreshTimers[part]);
    refreshTimers[part] = setTimeout(() => {
      const shown = document.querySelector("#node-panel .panel");
      const target = document.getElementById(PARTS[part]);
      if (!shown || !target || shown.dataset.node !== selectedKey) return;
      if (part === "discovery") {
        const details = target.querySelector("details");
        discoveryWasOpen = details ? details.open : null;
      }
      htmx.trigger(target, "kl-refresh");
    }, 200);
  }
  document.addEventListener("htmx:afterSettle", ev => {
    if (!ev.target || ev.target.id !== PARTS.discovery || discoveryWasOpen === null) return;
    const details = ev.target.querySelector("details");
    if (details && discoveryWasOpen) details.open = true;  // one the reader opened stays open
    discoveryWasOpen = null;
  });

  // ?node= named a node this run does not have: nothing is selected, and the panel says so.
  function showMissing(key) {
    selectedKey = null;
    const url = new URL(window.location.href);
    url.searchParams.delete("node");
    history.replaceState(null, "", url);
    const panel = document.getElementById("node-panel");
    if (panel.querySelector(".panel-missing")) return;
    const sentence = document.createElement("p");
    sentence.className = "msg error panel-missing";
    sentence.setAttribute("role", "alert");
    sentence.textContent = "No node " + key + " in this run.";
    panel.prepend(sentence);
  }

  function refreshControls(payload) {
    const badge = document.getElementById("run-status");
    if (badge && payload.status && badge.dataset.status !== payload.status) {
      htmx.ajax("GET", window.location.pathname + "?part=controls", { target: "#run-controls", swap: "outerHTML" });
    }
  }

  document.getElementById("node-panel").addEventListener("click", ev => {
    const link = ev.target.closest("[data-select]");
    if (link && nodes.has(link.dataset.select)) {
      ev.preventDefault();
      select(link.dataset.select, { centre: true });
    }
  });

  root.querySelectorAll("[data-tool]").forEach(button => button.addEventListener("click", () => {
    const tool = button.dataset.tool;
    if (tool === "fit") { following = true; fit(); }
    else if (tool === "best" && bestKey) select(bestKey, { centre: true });
    else if (tool === "layout") {
      layoutMode = layoutMode === "tidy" ? "radial" : "tidy";
      button.textContent = layoutMode === "tidy" ? "Radial" : "Tidy";
      computeLayout();
      fit();
    } else if (tool === "fold") {
      folding = !folding;
      unfolded.clear();
      button.textContent = folding ? "Show all" : "Fold";
      button.setAttribute("aria-pressed", String(!folding));
      computeLayout();
      following = true;
      fit();
    }
  }));
  document.getElementById("node-find").addEventListener("keydown", ev => {
    if (ev.key !== "Enter") return;
    ev.preventDefault();
    const key = ev.target.value.trim();
    if (!select(key, { centre: true })) ev.target.setCustomValidity("No node " + key), ev.target.reportValidity();
    else ev.target.setCustomValidity("");
  });

  // ---- the websocket ------------------------------------------------------------------------
  let socket = null;
  let attempt = 0;
  let reconnectTimer = null;

  function setLive(state, text) {
    liveStatus.dataset.state = state;
    liveStatus.textContent = text;
  }

  function subscribe() {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "subscribe", after: lastSeq }));
  }

  function connect() {
    clearTimeout(reconnectTimer);
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(scheme + window.location.host + root.dataset.wsPath);
    socket = ws;
    setLive("connecting", attempt ? "reconnecting…" : "connecting…");
    ws.onopen = () => {
      attempt = 0;
      stats.connects++;
      subscribe();
      setLive("live", "live");
    };
    ws.onmessage = ev => {
      const message = JSON.parse(ev.data);
      if (message.type === "changes") applyChanges(message.changes);
    };
    ws.onclose = ev => {
      if (socket !== ws) return;
      socket = null;
      if (ev.code === 4401 || ev.code === 4403) {
        setLive("closed", ev.code === 4401 ? "logged out: reload to log in" : "no access to this run");
        // A session that ended while the socket was open is closed with 4403 too: ask once whether it was that.
        checkSession();
        return;
      }
      const delay = Math.min(RECONNECT_MAX_MS, 500 * 2 ** attempt) * (0.5 + Math.random() / 2);
      attempt++;
      setLive("offline", "connection lost; retrying in " + Math.ceil(delay / 1000) + " s");
      reconnectTimer = setTimeout(connect, delay);
    };
  }

  window.addEventListener("online", () => { if (!socket && !leaving) { attempt = 0; connect(); } });

  // ---- an ended session -------------------------------------------------------------------
  // The tree is asked for as htmx asks (HX-Request, and the page's address in HX-Current-URL). Once the
  // session has ended (logged out in another tab, expired) the server answers such a request with 401 and
  // HX-Redirect: the login page with next= this page (kernellab/views/htmx_login.py); the page goes there,
  // as htmx would. Without the header fetch would follow the redirect to the login page, fail to read its
  // HTML as JSON and retry for ever, the page saying only that the tree could not be loaded.
  let leaving = false;

  function fetchTree() {
    return fetch(root.dataset.treeUrl, {
      credentials: "same-origin",
      headers: { Accept: "application/json", "HX-Request": "true", "HX-Current-URL": window.location.href },
    });
  }

  // The login page to go to when `response` says the session ended, or null.
  function loginTarget(response) {
    let target = response.status === 401 ? response.headers.get("HX-Redirect") : null;
    if (!target && response.redirected && !(response.headers.get("Content-Type") || "").includes("json")) {
      // No middleware in front (another deployment): fetch followed the login redirect, ?next= the tree.
      const login = new URL(response.url);
      if (login.origin === window.location.origin && login.searchParams.has("next")) {
        login.searchParams.set("next", window.location.pathname + window.location.search);
        target = login.href;
      }
    }
    if (!target) return null;
    const url = new URL(target, window.location.href);
    return url.protocol === "https:" || url.protocol === "http:" ? url.href : null;
  }

  function goToLogin(target) {
    leaving = true;
    clearTimeout(reconnectTimer);
    if (socket) { const ws = socket; socket = null; ws.close(1000, "session ended"); }
    setLive("closed", "session ended: opening the login page…");
    window.location.assign(target);
  }

  async function checkSession() {
    if (leaving) return;
    try {
      const target = loginTarget(await fetchTree());
      if (target) goToLogin(target);
    } catch (error) {
      // offline: the socket's own message stands
    }
  }

  // ---- start ----------------------------------------------------------------------------------
  // A busy server (a search step, a restart) must not leave a dead page: the snapshot is retried
  // with backoff until it loads; only "no access" stops it.
  async function loadSnapshot() {
    for (let attempt = 0; ; attempt++) {
      setLive("connecting", attempt ? "loading tree (attempt " + (attempt + 1) + ")…" : "loading tree…");
      let status = 0;
      try {
        const response = await fetchTree();
        const login = loginTarget(response);
        if (login) {
          goToLogin(login);
          return null;
        }
        if (response.ok) return await response.json();
        status = response.status;
      } catch (error) {
        status = 0;
      }
      if (status === 401 || status === 403 || status === 404) {
        setLive("closed", "could not load the tree (" + status + ")");
        return null;
      }
      const delay = Math.min(RECONNECT_MAX_MS, 500 * 2 ** attempt) * (0.5 + Math.random() / 2);
      setLive("offline", "could not load the tree (" + (status || "no answer") + "); retrying in " + Math.ceil(delay / 1000) + " s");
      await new Promise(resolve => setTimeout(resolve, delay));
    }
  }

  async function start() {
    resize();
    new ResizeObserver(resize).observe(canvas.parentElement);
    const snapshot = await loadSnapshot();
    if (!snapshot) return;
    for (const p of snapshot.nodes) upsertNode(p);
    searchBest = snapshot.best || null;
    gpuBudget = snapshot.gpu_budget;
    if (snapshot.counters) setGpuCounter(snapshot.counters.measurements_requested);
    setThreshold(snapshot.threshold);
    lastSeq = snapshot.seq;
    snapshotApplied = true;
    drawDirty = true;
    requestFrame();
    connect();
    if (root.dataset.missing) showMissing(root.dataset.missing);
    if (selectedKey && nodes.has(selectedKey)) { cursorKey = selectedKey; select(selectedKey); }
    else if (selectedKey) showMissing(selectedKey);
  }

  // Read-only handles for tests and benchmarks.
  window.klExplorer = {
    get lastSeq() { return lastSeq; },
    get threshold() { return currentThreshold; },
    get size() { return nodes.size; },
    get selected() { return selectedKey; },
    get cursor() { return cursorKey; },
    get transform() { return Object.assign({}, transform); },
    get connected() { return !!socket && socket.readyState === WebSocket.OPEN; },
    node: key => (nodes.has(key) ? Object.assign({}, nodes.get(key)) : null),
    keys: () => Array.from(nodes.keys()),
    folds: () => Array.from(foldMarks.values(), m => ({ parent: m.parent, count: m.count, key: m.key })),
    isFolded: key => foldOf.has(key),
    foldPosition: parentKey => {
      const m = foldMarks.get(parentKey);
      if (!m) return null;
      const rect = canvas.getBoundingClientRect();
      return { x: rect.left + transform.x + (m.x + NODE_R) * transform.k, y: rect.top + transform.y + m.y * transform.k };
    },
    describeFold: parentKey => (foldMarks.has(parentKey) ? describe(foldMarks.get(parentKey)) : null),
    bestPath: () => Array.from(bestPath),
    firstShown: key => firstShown.get(key) || null,
    firstShownAll: () => Object.fromEntries(firstShown),
    stats,
    screenPosition,
    select: key => select(key, { centre: true }),
    zoomAt,
    fit,
    dropConnection: () => { if (socket) socket.close(4000, "dropped by the page"); },
  };

  start();
})();
