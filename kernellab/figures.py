"""The pages' charts, built here with plotly's Python API so the server owns what they show.

Each page embeds a map from a chart element's id to either a plotly figure (data and layout, as
JSON) or the sentence to show while there is nothing to draw; static/js/figures.js (and the node
panel's static/js/panel.js) only hand the figures to the vendored plotly.js.
"""
from __future__ import annotations

import json
import math
import random

import plotly.graph_objects as go

# Every chart's frame; "none" keeps plotly.js's own look instead of plotly.py's default template.
_BASE_LAYOUT = {"margin": {"l": 55, "r": 15, "t": 10, "b": 45}, "height": 320, "font": {"size": 11},
                "template": "none"}
# A legend above the plot area: below it, plotly draws it over the x-axis title.
LEGEND_ABOVE = {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.02, "yanchor": "bottom"}
# Room above the plot for that legend.
_LEGEND_TOP_MARGIN = 40

# The explorer's speedup colours: log2 speedup from 0.25x (red) through 1x (grey) to 4x (green).
_SPEEDUP_SCALE = [[0, "rgb(165,0,38)"], [0.25, "rgb(244,109,67)"], [0.5, "rgb(190,190,190)"],
                  [0.75, "rgb(102,189,99)"], [1, "rgb(0,104,55)"]]
_SPEEDUP_COLOURBAR = {"title": {"text": "speedup"}, "tickvals": [-2, -1, 0, 1, 2],
                      "ticktext": ["0.25×", "0.5×", "1×", "2×", "4×"]}

NO_MEASUREMENT = "No GPU measurement has finished yet."
NO_FORECAST_PAIR = "No node has both a forecast and a measurement yet."
NO_ENERGY = "No measured node has an energy reading yet."
NO_ANSWERED_FORECAST = "No answered forecast: nothing to draw."

# Confusion matrices, on the run dashboard and the lab's reports alike: few rows light, many dark.
CONFUSION_SCALE = [[0, "#f7fbff"], [1, "#08306b"]]


def _axis(title: str, **options) -> dict:
    return {"title": {"text": title}, **options}


def _figure(traces: list, *, legend: bool = False, **layout) -> dict:
    frame = {**_BASE_LAYOUT, **layout, "margin": {**_BASE_LAYOUT["margin"], **layout.get("margin", {})}}
    if legend:
        frame["showlegend"] = True
        frame["legend"] = LEGEND_ABOVE
        frame["margin"]["t"] = max(frame["margin"]["t"], _LEGEND_TOP_MARGIN)
    else:
        frame["showlegend"] = False
    return json.loads(go.Figure(data=traces, layout=frame).to_json())


def _drawn(figure: dict) -> dict:
    return {"figure": figure}


def _empty(sentence: str) -> dict:
    return {"empty": sentence}


# -- the run dashboard -----------------------------------------------------------------------


def run_dashboard_figures(dashboard: dict, *, energy_coverage: dict | None = None) -> dict[str, dict]:
    """The dashboard's seven charts from kernellab.selectors.explorer.run_dashboard's series; energy_coverage (how
    many measured nodes have an energy reading and why the others have none, kernellab.views.runs._energy_coverage)
    gives the energy chart its note, or its empty sentence."""
    figures: dict[str, dict] = {}
    progress = dashboard["progress"]
    if progress["gpu"]:
        measurements = _axis("GPU measurements used")
        figures["chart-progress"] = _drawn(_figure(
            [go.Scatter(x=progress["gpu"], y=progress["best"], mode="lines+markers", line={"shape": "hv"},
                        name="best speedup")],
            xaxis=measurements, yaxis=_axis("best measured speedup (×)")))
        figures["chart-considered"] = _drawn(_figure(
            [go.Scatter(x=progress["gpu"], y=progress["candidates"], mode="lines", name="candidates considered"),
             go.Scatter(x=progress["gpu"], y=progress["per_gpu"], mode="lines", name="per GPU measurement", yaxis="y2")],
            legend=True, xaxis=measurements, yaxis=_axis("candidates (cumulative)"),
            yaxis2=_axis("candidates per measurement", overlaying="y", side="right"), margin={"r": 60}))
    else:
        figures["chart-progress"] = figures["chart-considered"] = _empty(NO_MEASUREMENT)

    bin_names = [f"{i} {name}" for i, name in enumerate(dashboard["bins"]["names"], start=1)]
    pairs = dashboard["pairs"]
    if pairs:
        figures["chart-confusion"] = _drawn(_figure(
            [go.Heatmap(z=dashboard["confusion"], x=bin_names, y=bin_names, colorscale=CONFUSION_SCALE,
                        texttemplate="%{z}",
                        hovertemplate="forecast %{y}<br>measured %{x}<br>%{z} node(s)<extra></extra>")],
            xaxis=_axis("measured bin", tickangle=-30), yaxis=_axis("forecast bin"),
            margin={"l": 150, "r": 10, "t": 10, "b": 110}, height=380))
        figures["chart-scatter"] = _drawn(_forecast_scatter(pairs, dashboard["bins"]))
        reliability = dashboard["reliability"]
        figures["chart-reliability"] = _drawn(_figure(
            [go.Bar(x=reliability["confidence"], y=reliability["accuracy"], name="accuracy", width=0.08,
                    text=[f"{count} node(s)" for count in reliability["count"]]),
             go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfect calibration", line={"dash": "dash", "color": "#888"})],
            legend=True, xaxis=_axis("mean confidence in bucket", range=[0, 1]), yaxis=_axis("accuracy", range=[0, 1])))
        risk = dashboard["risk_coverage"]
        figures["chart-risk"] = _drawn(_figure(
            [go.Scatter(x=risk["coverage"], y=risk["risk"], mode="lines", name="risk")],
            xaxis=_axis("coverage (most confident first)", range=[0, 1]), yaxis=_axis("risk (bin error rate)", range=[0, 1])))
    else:
        for chart in ("chart-confusion", "chart-scatter", "chart-reliability", "chart-risk"):
            figures[chart] = _empty(NO_FORECAST_PAIR)

    energy = dashboard["energy"]
    note = energy_note(energy_coverage, drawn=len(energy["runtime_ms"])) if energy_coverage is not None else None
    if energy["runtime_ms"]:
        figures["chart-energy"] = _drawn(_energy_figure(energy))
        if note:
            figures["chart-energy"]["note"] = note
    else:
        figures["chart-energy"] = _empty(note or NO_ENERGY)
    return figures


def _nodes(n: int) -> str:
    return f"{n} measured node{'s' if n != 1 else ''}"


def energy_note(coverage: dict, *, drawn: int) -> str:
    """How many of the run's measured nodes the energy chart can draw and why the others are missing: the chart's
    note, or with none drawn the sentence shown instead of an empty chart."""
    measured, with_energy = coverage.get("measured", 0), coverage.get("with_energy", 0)
    if not measured and not drawn:
        return NO_ENERGY
    reasons = []
    for count, why in ((coverage.get("replayed_without", 0), "answered from recorded data that has no energy reading"),
                       (coverage.get("energy_failed", 0), "measured on a GPU whose energy reading failed"),
                       (coverage.get("without", 0), "measured without an energy reading")):
        if count:
            reasons.append(f"{count} {'was' if count == 1 else 'were'} {why}")
    why_not = (": " + "; ".join(reasons)) if reasons else ""
    if not with_energy:
        lead = (f"None of the {_nodes(measured)} has an energy reading" if measured > 1
                else f"The {_nodes(measured)} has no energy reading" if measured else "No measured node has an energy reading")
        if drawn:  # only the reference (measured again, 1.0x by definition) has one
            return f"{lead}{why_not}; only the reference's is drawn."
        return f"{lead}{why_not}, so there is nothing to draw."
    verb = "has" if with_energy == 1 else "have"
    return f"{with_energy} of the {_nodes(measured)} {verb} an energy reading{why_not}." if with_energy < measured \
        else f"All {_nodes(measured)} have an energy reading." if measured > 1 else f"The {_nodes(measured)} has an energy reading."


def _forecast_scatter(pairs: list[dict], bins: dict) -> dict:
    # Nodes forecast in the same bin are spread a little up and down, the same way on every load.
    spread = random.Random(len(pairs))
    edges = bins["edges"]
    return _figure(
        [go.Scatter(x=[pair["speedup"] for pair in pairs], y=[pair["forecast_bin"] + spread.uniform(-0.1, 0.1) for pair in pairs],
                    mode="markers", text=[pair["key"] for pair in pairs],
                    marker={"color": [pair["forecast_confidence"] for pair in pairs], "colorscale": "Viridis", "cmin": 0, "cmax": 1,
                            "showscale": True, "colorbar": {"title": {"text": "confidence"}}},
                    hovertemplate="node %{text}<br>measured %{x:.3f}×<br>forecast bin %{y:.0f}<extra></extra>")],
        xaxis=_axis("measured speedup (×, log)", type="log", tickvals=edges, ticktext=[f"{edge}×" for edge in edges]),
        yaxis=_axis("forecast bin", dtick=1, range=[0.5, len(bins["names"]) + 0.5]),
        shapes=[{"type": "line", "x0": edge, "x1": edge, "yref": "paper", "y0": 0, "y1": 1,
                 "line": {"color": "#ccc", "dash": "dot", "width": 1}} for edge in edges])


def _energy_figure(energy: dict) -> dict:
    front = sorted((runtime, joules, key) for runtime, joules, key, on_front
                   in zip(energy["runtime_ms"], energy["j_per_call"], energy["key"], energy["pareto"]) if on_front)
    return _figure(
        [go.Scatter(x=energy["runtime_ms"], y=energy["j_per_call"], mode="markers", text=energy["key"], name="measured nodes",
                    marker={"color": [math.log2(max(1e-9, speedup or 0)) for speedup in energy["speedup"]],
                            "colorscale": _SPEEDUP_SCALE, "cmin": -2, "cmax": 2, "showscale": True,
                            "colorbar": _SPEEDUP_COLOURBAR, "size": 9},
                    hovertemplate="node %{text}<br>%{x:.4f} ms<br>%{y:.4g} J per call<extra></extra>"),
         go.Scatter(x=[point[0] for point in front], y=[point[1] for point in front], text=[point[2] for point in front],
                    mode="lines+markers", name="time–energy Pareto front", line={"color": "#c0392b", "width": 2},
                    marker={"symbol": "diamond-open", "size": 13, "color": "#c0392b"},
                    hovertemplate="Pareto: node %{text}<extra></extra>")],
        # Neither a runtime nor an energy is ever negative: the axes start at 0 (plotly pads a lone point to -0.5).
        legend=True, xaxis=_axis("median runtime (ms)", rangemode="tozero"),
        yaxis=_axis("energy per call (J)", rangemode="tozero"))


# -- the surrogate lab's reports ---------------------------------------------------------------


def lab_report_figures(*, bin_names: list[str], series: list[dict]) -> dict[str, dict]:
    """A report's (or two reports') reliability diagram and risk–coverage curve, one series each, and
    one confusion matrix per series, under the ids chart-confusion-0, chart-confusion-1, …"""
    figures: dict[str, dict] = {}
    if not any(one["risk_coverage"]["coverage"] for one in series):
        figures["chart-reliability"] = figures["chart-risk"] = _empty(NO_ANSWERED_FORECAST)
    else:
        reliability = [go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfect calibration",
                                  line={"dash": "dot", "color": "#999"}, hoverinfo="skip")]
        for one in series:
            buckets = [bucket for bucket in one["reliability"] if bucket["count"] > 0]
            reliability.append(go.Scatter(
                x=[bucket["confidence"] for bucket in buckets], y=[bucket["accuracy"] for bucket in buckets],
                mode="lines+markers", name=one["title"], text=[bucket["count"] for bucket in buckets],
                marker={"size": [6 + min(14, math.sqrt(bucket["count"])) for bucket in buckets]},
                hovertemplate=f"confidence %{{x:.2f}}<br>accuracy %{{y:.2f}}<br>%{{text}} forecast(s)<extra>{one['title']}</extra>"))
        figures["chart-reliability"] = _drawn(_figure(
            reliability, legend=True, margin={"b": 50}, height=340,
            xaxis=_axis("mean confidence in bucket", range=[0, 1]), yaxis=_axis("accuracy in bucket", range=[0, 1.02])))
        figures["chart-risk"] = _drawn(_figure(
            [go.Scatter(x=one["risk_coverage"]["coverage"], y=one["risk_coverage"]["risk"], mode="lines", name=one["title"],
                        hovertemplate=f"coverage %{{x:.2f}}<br>risk %{{y:.3f}}<extra>{one['title']}</extra>")
             for one in series],
            legend=True, margin={"b": 50}, height=340,
            xaxis=_axis("coverage (most confident first)", range=[0, 1]), yaxis=_axis("risk (0/1 bin error)", range=[0, 1.02])))
    for index, one in enumerate(series):
        if not sum(map(sum, one["confusion"])):
            figures[f"chart-confusion-{index}"] = _empty(NO_ANSWERED_FORECAST)
            continue
        figures[f"chart-confusion-{index}"] = _drawn(_figure(
            [go.Heatmap(z=one["confusion"], x=bin_names, y=bin_names, colorscale=CONFUSION_SCALE,
                        hovertemplate="true %{y}<br>forecast %{x}<br>%{z} row(s)<extra></extra>")],
            xaxis=_axis("forecast bin", tickangle=-30), yaxis=_axis("true bin", autorange="reversed"),
            margin={"l": 150, "r": 10, "t": 10, "b": 120}, height=420))
    return figures


# -- the node panel ------------------------------------------------------------------------------

_MEASURED_COLOUR, _FORECAST_COLOUR, _OTHER_COLOUR = "#1e8e3e", "#2f6fdb", "#9fb6e0"


def forecast_figure(*, probabilities: list[float], bin_names: list[str], forecast_bin: int | None,
                    measured_bin: int | None) -> dict:
    """A forecast's probability per bin; the forecast bin in blue, the measured one in green and marked."""
    names = [f"{i}: {name}" for i, name in enumerate(bin_names, start=1)][: len(probabilities)]
    colours = [_MEASURED_COLOUR if i == measured_bin else _FORECAST_COLOUR if i == forecast_bin else _OTHER_COLOUR
               for i in range(1, len(probabilities) + 1)]
    marks = []
    if measured_bin is not None and 1 <= measured_bin <= len(probabilities):
        marks.append({"x": names[measured_bin - 1], "y": probabilities[measured_bin - 1], "text": "measured",
                      "showarrow": True, "arrowhead": 2, "ay": -25})
    return _figure(
        [go.Bar(x=names, y=probabilities, marker={"color": colours}, hovertemplate="%{x}<br>p = %{y:.3f}<extra></extra>")],
        # the bin names are long and slanted: the first one reaches left of the plot, so the margins grow to fit them
        height=210, margin={"l": 40, "r": 8, "t": 8, "b": 80}, font={"size": 10},
        yaxis=_axis("probability", range=[0, 1]), xaxis={"tickangle": -35, "automargin": True}, annotations=marks)
