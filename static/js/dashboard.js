// The run dashboard: one plotly chart per question, each with a sentence when there is no data yet.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("dashboard-data").textContent);
  const config = { displaylogo: false, responsive: true };
  const base = { margin: { l: 55, r: 15, t: 10, b: 45 }, height: 320, font: { size: 11 } };
  // The explorer's speedup colours: log2 speedup from 0.25x (red) through 1x (grey) to 4x (green).
  const speedupScale = [[0, "rgb(165,0,38)"], [0.25, "rgb(244,109,67)"], [0.5, "rgb(190,190,190)"], [0.75, "rgb(102,189,99)"], [1, "rgb(0,104,55)"]];
  const speedupBar = { title: { text: "speedup" }, tickvals: [-2, -1, 0, 1, 2], ticktext: ["0.25×", "0.5×", "1×", "2×", "4×"] };
  const log2 = v => Math.log2(Math.max(1e-9, v));

  function empty(id, sentence) {
    const el = document.getElementById(id);
    el.classList.add("empty");
    el.textContent = sentence;
  }

  // A legend above the plot area: below it, plotly puts it on top of the x-axis title.
  const legendAbove = { showlegend: true, legend: { orientation: "h", x: 0, xanchor: "left", y: 1.02, yanchor: "bottom" } };
  const withLegend = (layout, margin) => Object.assign({}, legendAbove, layout, { margin: Object.assign({}, base.margin, { t: 40 }, margin || {}) });

  function plot(id, traces, layout) {
    Plotly.newPlot(id, traces, Object.assign({}, base, layout), config);
  }

  const p = data.progress;
  if (p.gpu.length) {
    plot("chart-progress", [{ x: p.gpu, y: p.best, mode: "lines+markers", line: { shape: "hv" }, name: "best speedup" }],
      { xaxis: { title: { text: "GPU measurements used" } }, yaxis: { title: { text: "best measured speedup (×)" } } });
    plot("chart-considered", [
      { x: p.gpu, y: p.candidates, mode: "lines", name: "candidates considered" },
      { x: p.gpu, y: p.per_gpu, mode: "lines", name: "per GPU measurement", yaxis: "y2" },
    ], withLegend({ xaxis: { title: { text: "GPU measurements used" } }, yaxis: { title: { text: "candidates (cumulative)" } },
         yaxis2: { title: { text: "candidates per measurement" }, overlaying: "y", side: "right" } }, { r: 60 }));
  } else {
    empty("chart-progress", "No GPU measurement has finished yet.");
    empty("chart-considered", "No GPU measurement has finished yet.");
  }

  const names = data.bins.names.map((n, i) => (i + 1) + " " + n);
  if (data.pairs.length) {
    plot("chart-confusion", [{ z: data.confusion, x: names, y: names, type: "heatmap", colorscale: [[0, "#f7fbff"], [1, "#08306b"]], texttemplate: "%{z}",
      hovertemplate: "forecast %{y}<br>measured %{x}<br>%{z} node(s)<extra></extra>" }],
      { xaxis: { title: { text: "measured bin" }, tickangle: -30 }, yaxis: { title: { text: "forecast bin" } }, margin: { l: 150, r: 10, t: 10, b: 110 }, height: 380 });
    plot("chart-scatter", [{
      x: data.pairs.map(q => q.speedup), y: data.pairs.map(q => q.bin + (Math.random() - 0.5) * 0.2), mode: "markers", type: "scatter",
      text: data.pairs.map(q => q.key), marker: { color: data.pairs.map(q => q.confidence), colorscale: "Viridis", cmin: 0, cmax: 1, showscale: true, colorbar: { title: { text: "confidence" } } },
      hovertemplate: "node %{text}<br>measured %{x:.3f}×<br>forecast bin %{y:.0f}<extra></extra>",
    }], { xaxis: { type: "log", title: { text: "measured speedup (×, log)" }, tickvals: data.bins.edges, ticktext: data.bins.edges.map(e => e + "×") }, yaxis: { title: { text: "forecast bin" }, dtick: 1, range: [0.5, data.bins.names.length + 0.5] },
          shapes: data.bins.edges.map(e => ({ type: "line", x0: e, x1: e, yref: "paper", y0: 0, y1: 1, line: { color: "#ccc", dash: "dot", width: 1 } })) });
    const r = data.reliability;
    plot("chart-reliability", [
      { x: r.confidence, y: r.accuracy, type: "bar", name: "accuracy", text: r.count.map(c => c + " node(s)"), width: 0.08 },
      { x: [0, 1], y: [0, 1], mode: "lines", name: "perfect calibration", line: { dash: "dash", color: "#888" } },
    ], withLegend({ xaxis: { title: { text: "mean confidence in bucket" }, range: [0, 1] }, yaxis: { title: { text: "accuracy" }, range: [0, 1] } }));
    const rc = data.risk_coverage;
    plot("chart-risk", [{ x: rc.coverage, y: rc.risk, mode: "lines", name: "risk" }],
      { xaxis: { title: { text: "coverage (most confident first)" }, range: [0, 1] }, yaxis: { title: { text: "risk (bin error rate)" }, range: [0, 1] } });
  } else {
    ["chart-confusion", "chart-scatter", "chart-reliability", "chart-risk"].forEach(id => empty(id, "No node has both a forecast and a measurement yet."));
  }

  const e = data.energy;
  if (e.runtime_ms.length) {
    plot("chart-energy", [{ x: e.runtime_ms, y: e.j_per_call, mode: "markers", text: e.key, marker: { color: e.speedup.map(log2), colorscale: speedupScale, cmin: -2, cmax: 2, showscale: true, colorbar: speedupBar, size: 9 },
      hovertemplate: "node %{text}<br>%{x:.4f} ms<br>%{y:.4g} J per call<extra></extra>", name: "measured nodes" },
      (() => {
        const front = e.runtime_ms.map((x, i) => [x, e.j_per_call[i], e.key[i], e.pareto[i]]).filter(p => p[3]).sort((a, b) => a[0] - b[0]);
        return { x: front.map(p => p[0]), y: front.map(p => p[1]), text: front.map(p => p[2]), mode: "lines+markers",
                 name: "time–energy Pareto front", line: { color: "#c0392b", width: 2 }, marker: { symbol: "diamond-open", size: 13, color: "#c0392b" },
                 hovertemplate: "Pareto: node %{text}<extra></extra>" };
      })()],
      withLegend({ xaxis: { title: { text: "median runtime (ms)" } }, yaxis: { title: { text: "energy per call (J)" } } }));
  } else {
    empty("chart-energy", "No measured node has an energy reading yet.");
  }
})();
