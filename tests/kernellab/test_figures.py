"""The charts are built on the server with plotly: what each one shows, that its axes are named, and that
no legend sits where an axis title is."""
from __future__ import annotations

import json
import re

import pytest

from django.urls import reverse
from django.utils import timezone

from kernellab.figures import NO_FORECAST_PAIR, NO_MEASUREMENT, forecast_figure, lab_report_figures
from tests.kernellab.test_views_runs import _measured_child

pytestmark = pytest.mark.usefixtures("embedded_setup")

DASHBOARD_CHARTS = ("chart-progress", "chart-considered", "chart-confusion", "chart-scatter", "chart-reliability",
                    "chart-risk", "chart-energy")


def _onehot(bin_: int) -> list[float]:
    return [1.0 if i == bin_ - 1 else 0.0 for i in range(8)]


def _dashboard_page(client, members, node):
    run, root = node.run, node.parent
    now = timezone.now()
    _measured_child(run, root, "a", speedup=1.2, probabilities=_onehot(5), confidence=1.0, finished_at=now, energy={"j_per_call": 0.02})
    _measured_child(run, root, "b", speedup=3.0, probabilities=_onehot(7), confidence=1.0, finished_at=now, energy={"j_per_call": 0.01})
    _measured_child(run, root, "c", speedup=0.6, probabilities=[0, 0, 0, 0, 0, 0.6, 0.4, 0], confidence=0.6, finished_at=now)
    client.force_login(members["viewer"])
    return client.get(reverse("run-dashboard", args=[run.pk]))


def _assert_axes_named_and_legend_above(figure: dict) -> None:
    layout = figure["layout"]
    assert layout["xaxis"]["title"]["text"] and layout["yaxis"]["title"]["text"]
    if layout.get("showlegend"):
        # Above the plot area, with room for it in the top margin: never over the x-axis title below.
        assert layout["legend"]["y"] >= 1 and layout["legend"]["yanchor"] == "bottom"
        assert layout["margin"]["t"] >= 40


def test_every_dashboard_chart_names_its_axes_and_keeps_its_legend_above_the_plot(client, members, node):
    figures = _dashboard_page(client, members, node).context["figures"]
    assert sorted(figures) == sorted(DASHBOARD_CHARTS)
    for chart in DASHBOARD_CHARTS:
        _assert_axes_named_and_legend_above(figures[chart]["figure"])
    with_legend = [chart for chart in DASHBOARD_CHARTS if figures[chart]["figure"]["layout"].get("showlegend")]
    assert sorted(with_legend) == ["chart-considered", "chart-energy", "chart-reliability"]


def test_the_dashboard_figures_show_the_runs_measurements_and_forecasts(client, members, node):
    figures = _dashboard_page(client, members, node).context["figures"]
    assert figures["chart-progress"]["figure"]["data"][0]["y"] == [1.2, 3.0, 3.0]
    confusion = figures["chart-confusion"]["figure"]["data"][0]
    assert confusion["z"][4][4] == 1 and confusion["z"][6][6] == 1 and confusion["z"][5][2] == 1
    assert confusion["x"][4] == confusion["y"][4] and confusion["x"][4].startswith("5 ")
    measured, front = figures["chart-energy"]["figure"]["data"]
    assert sorted(measured["text"]) == ["a", "b"]
    assert front["name"] == "time–energy Pareto front" and front["text"] == ["b"]  # b is faster and uses less energy
    assert figures["chart-scatter"]["figure"]["layout"]["xaxis"]["type"] == "log"


def test_the_dashboard_page_embeds_its_figures_for_a_script_file_under_the_content_security_policy(client, members, node):
    response = _dashboard_page(client, members, node)
    html = response.content.decode()
    embedded = json.loads(html.split('<script id="figures" type="application/json">')[1].split("</script>")[0])
    assert embedded == response.context["figures"]
    assert "js/figures.js" in html
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert "src=" in tag or 'type="application/json"' in tag or "nonce=" in tag, tag


def test_an_empty_dashboard_sends_a_sentence_for_each_chart_instead_of_a_figure(client, members, run):
    client.force_login(members["viewer"])
    figures = client.get(reverse("run-dashboard", args=[run.pk])).context["figures"]
    assert figures["chart-progress"] == {"empty": NO_MEASUREMENT}
    assert figures["chart-scatter"] == {"empty": NO_FORECAST_PAIR}
    assert all("figure" not in entry for entry in figures.values())


def _series(title: str, right: bool) -> dict:
    confusion = [[0] * 8 for _ in range(8)]
    confusion[4][4 if right else 2] = 3
    return {"title": title, "confusion": confusion,
            "reliability": [{"confidence": 0.9, "accuracy": 1.0 if right else 0.0, "count": 3},
                            {"confidence": 0.5, "accuracy": 0.0, "count": 0}],
            "risk_coverage": {"coverage": [0.5, 1.0], "risk": [0.0, 0.0 if right else 1.0]}}


def test_a_lab_reports_figures_draw_one_series_per_report_with_the_legend_above():
    names = [f"{i} bin" for i in range(1, 9)]
    figures = lab_report_figures(bin_names=names, series=[_series("A: right", True), _series("B: wrong", False)])
    reliability = figures["chart-reliability"]["figure"]
    assert [trace["name"] for trace in reliability["data"]] == ["perfect calibration", "A: right", "B: wrong"]
    assert reliability["data"][1]["x"] == [0.9]  # the empty bucket is left out
    assert [trace["name"] for trace in figures["chart-risk"]["figure"]["data"]] == ["A: right", "B: wrong"]
    assert figures["chart-confusion-1"]["figure"]["data"][0]["z"][4][2] == 3
    for figure in figures.values():
        _assert_axes_named_and_legend_above(figure["figure"])


def test_a_lab_reports_confusion_matrix_is_light_where_empty_and_dark_where_full_as_the_dashboards():
    """"Blues" with reversescale drew empty cells dark navy and the fullest near white (QA round 4)."""
    from kernellab.figures import CONFUSION_SCALE

    figures = lab_report_figures(bin_names=[f"{i} bin" for i in range(1, 9)], series=[_series("A", True)])
    heatmap = figures["chart-confusion-0"]["figure"]["data"][0]
    assert not heatmap.get("reversescale")
    scale = [list(stop) for stop in heatmap["colorscale"]]
    assert scale == CONFUSION_SCALE and scale[0][1] == "#f7fbff" and scale[-1][1] == "#08306b"


def test_report_ids_of_the_same_second_surrogate_and_dataset_differ():
    """Two workspaces' reports saved in one second had one id, and the lab's pages opened only one of them."""
    from datetime import datetime, timezone

    from search_engine.lab.reports import new_report_id

    when = datetime(2026, 12, 6, 22, 22, 20, tzinfo=timezone.utc)
    ids = {new_report_id("roofline@1", "good", when) for _ in range(50)}
    assert len(ids) == 50 and all(i.startswith("20261206-222220-roofline-1-good-") for i in ids)


def test_a_lab_report_without_an_answered_forecast_says_so_on_every_chart():
    silent = {"title": "A", "confusion": [[0] * 8 for _ in range(8)], "reliability": [],
              "risk_coverage": {"coverage": [], "risk": []}}
    figures = lab_report_figures(bin_names=[str(i) for i in range(8)], series=[silent])
    assert set(figures) == {"chart-reliability", "chart-risk", "chart-confusion-0"}
    assert all(entry == {"empty": "No answered forecast: nothing to draw."} for entry in figures.values())


def test_the_forecast_figure_colours_the_forecast_bin_blue_and_marks_the_measured_bin_green():
    figure = forecast_figure(probabilities=[0, 0, 0, 0.1, 0.7, 0.2, 0, 0], bin_names=[f"b{i}" for i in range(1, 9)],
                             forecast_bin=5, measured_bin=6)
    bars = figure["data"][0]
    assert bars["x"][4] == "5: b5" and bars["y"][4] == 0.7
    assert bars["marker"]["color"][4] == "#2f6fdb" and bars["marker"]["color"][5] == "#1e8e3e"
    assert bars["marker"]["color"][0] == "#9fb6e0"
    assert figure["layout"]["annotations"][0]["x"] == "6: b6" and figure["layout"]["annotations"][0]["text"] == "measured"
    assert figure["layout"]["yaxis"]["title"]["text"] == "probability"
    # the slanted bin names reach left of the plot: the margins grow to fit them rather than clip the first
    assert figure["layout"]["xaxis"]["tickangle"] == -35 and figure["layout"]["xaxis"]["automargin"] is True
    assert "annotations" not in forecast_figure(probabilities=[1.0], bin_names=["b1"], forecast_bin=1,
                                                 measured_bin=None)["layout"]


def test_no_page_loads_the_htmx_websocket_extension(client, members):
    client.force_login(members["viewer"])
    assert "htmx-ext-ws" not in client.get("/").content.decode()
