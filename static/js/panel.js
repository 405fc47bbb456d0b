// The node panel's forecast chart: plotly is loaded on first need, so the explorer's first paint
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

  function renderForecastCharts(scope) {
    (scope || document).querySelectorAll("[data-forecast-chart]").forEach(el => {
      if (el.dataset.drawn) return;
      el.dataset.drawn = "1";
      const chart = JSON.parse(el.dataset.forecastChart);
      const colours = chart.probabilities.map((_, i) =>
        i + 1 === chart.measured_bin ? "#1e8e3e" : (i + 1 === chart.predicted ? "#2f6fdb" : "#9fb6e0"));
      loadPlotly().then(Plotly => {
        Plotly.newPlot(el, [{
          type: "bar", x: chart.names, y: chart.probabilities, marker: { color: colours },
          hovertemplate: "%{x}<br>p = %{y:.3f}<extra></extra>",
        }], {
          height: 210, margin: { l: 40, r: 8, t: 8, b: 80 }, font: { size: 10 },
          yaxis: { range: [0, 1], title: { text: "probability" } }, xaxis: { tickangle: -35 },
          annotations: chart.measured_bin ? [{ x: chart.names[chart.measured_bin - 1], y: chart.probabilities[chart.measured_bin - 1],
            text: "measured", showarrow: true, arrowhead: 2, ay: -25 }] : [],
        }, { displayModeBar: false, responsive: true });
      }).catch(err => { el.textContent = "The chart could not be drawn (" + err.message + ")."; });
    });
  }

  window.klPanel = { renderForecastCharts, loadPlotly };
  document.addEventListener("DOMContentLoaded", () => renderForecastCharts(document));
  document.addEventListener("htmx:afterSettle", ev => renderForecastCharts(ev.target));
})();
