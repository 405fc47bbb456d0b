// The node panel's forecast chart (built by the server): plotly is loaded on first need, so the explorer's first paint
// does not wait for 1.5 MB of charting code.
(function () {
  "use strict";
  let plotlyLoading = null;

  function plotlyUrl() {
    const holder = document.querySelector("[data-plotly]");
    return holder ? holder.dataset.plotly : null;
  }

  function loadPlotly() {
    if (window.Plotly) return Promise.resolve(window.Plotly);
    if (!plotlyLoading) {
      plotlyLoading = new Promise((resolve, reject) => {
        const script = document.createElement("script");
        script.src = plotlyUrl();
        script.onload = () => resolve(window.Plotly);
        script.onerror = () => { plotlyLoading = null; reject(new Error("could not load plotly")); };
        document.head.appendChild(script);
      });
    }
    return plotlyLoading;
  }

  // The bins' names ("1: severe slowdown") are long for a narrow panel: each is written on two lines,
  // and the margins grow to hold them (automargin), so that none is cut at the chart's left edge.
  function fitTickLabels(figure) {
    const bar = (figure.data || [])[0];
    const layout = figure.layout || (figure.layout = {});
    if (!bar || !Array.isArray(bar.x) || !bar.x.every(x => typeof x === "string")) return figure;
    const wrap = label => {
      const words = label.split(" ");
      if (words.length < 2) return label;
      const half = Math.ceil(words.length / 2);
      return words.slice(0, half).join(" ") + "<br>" + words.slice(half).join(" ");
    };
    layout.xaxis = Object.assign({}, layout.xaxis, {
      tickmode: "array", tickvals: bar.x, ticktext: bar.x.map(wrap), tickangle: -35, automargin: true,
    });
    layout.margin = Object.assign({}, layout.margin, { b: 60 });  // automargin adds what the labels need
    return figure;
  }

  function renderForecastCharts(scope) {
    (scope || document).querySelectorAll(".forecast-chart[data-figure]").forEach(el => {
      if (el.dataset.drawn) return;
      el.dataset.drawn = "1";
      const figure = fitTickLabels(JSON.parse(el.dataset.figure));  // built by kernellab/figures.py
      loadPlotly().then(Plotly => {
        Plotly.newPlot(el, figure.data, figure.layout, { displayModeBar: false, responsive: true });
      }).catch(err => { el.textContent = "The chart could not be drawn (" + err.message + ")."; });
    });
  }

  window.klPanel = { renderForecastCharts, loadPlotly };
  document.addEventListener("DOMContentLoaded", () => renderForecastCharts(document));
  document.addEventListener("htmx:afterSettle", ev => renderForecastCharts(ev.target));
})();
