// Draws the figures the server built (kernellab/figures.py): the page's "figures" JSON maps a chart
// element's id to a plotly figure, or to the sentence to show while there is nothing to draw.
(function () {
  "use strict";
  const config = { displaylogo: false, responsive: true };

  function draw() {
    const holder = document.getElementById("figures");
    if (!holder) return;
    Object.entries(JSON.parse(holder.textContent)).forEach(([id, entry]) => {
      const el = document.getElementById(id);
      if (!el) return;
      if (entry.empty) {
        el.classList.add("empty");
        el.textContent = entry.empty;
        return;
      }
      Plotly.newPlot(el, entry.figure.data, entry.figure.layout, config);
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
