"""The lab pages: report list, one report with its charts' data, two side by side, dataset upload."""
from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from search_engine.lab.datasets import read_dataset
from search_engine.lab.evaluation import evaluate
from search_engine.lab.reports import save_report
from search_engine.surrogates.base import Forecast
from tests.lab.helpers import synthetic_rows


@pytest.fixture
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    return tmp_path


def _report(data_dir, title: str, right: bool) -> str:
    rows = synthetic_rows({"a": [0.3, 1.2, 3.0, 6.0]})
    forecasts = []
    for r in rows:
        probabilities = [0.02] * 8
        probabilities[(r["true_bin"] if right else 1) - 1] = 0.86
        forecasts.append(Forecast.from_probabilities(probabilities))
    return save_report(data_dir / "reports" / "team", {
        "title": title, "created_at": "2026-11-30T00:00:00+00:00", "surrogate": {"id": "test@1", "settings": {}},
        "dataset": {"name": "tiny", "rows": 4, "problems": {"a": 4}, "fingerprint": "f"}, "protocol": "every row",
        "evaluation": evaluate(forecasts, rows), "recalibration": None, "discovery": None,
        "cost": {"forecasts": 4, "cached": 0, "tokens_in": 0, "tokens_out": 0, "latency_mean_s": 0.0,
                 "latency_p95_s": 0.0, "wall_s": 0.1, "usd": None}, "command": "test"})


def test_pages_need_a_login(client, data_dir):
    response = client.get(reverse("lab-reports"))
    assert response.status_code == 302 and "login" in response["Location"]


def test_a_report_page_shows_its_scores_and_chart_data(client, members, data_dir):
    report_id = _report(data_dir, "Right every time", right=True)
    client.force_login(members["viewer"])
    listing = client.get(reverse("lab-reports")).content.decode()
    assert "Right every time" in listing
    page = client.get(reverse("lab-report", args=[report_id]))
    html = page.content.decode()
    assert page.status_code == 200
    assert "exact accuracy" in html and "Reliability diagram" in html and "plotly-cartesian" in html
    charts = page.context["charts"]
    assert charts["series"][0]["confusion"][1][1] == 1  # true bin 2 forecast as 2
    figures = json.loads(html.split('id="figures" type="application/json">')[1].split("</script>")[0])
    assert figures == page.context["figures"]
    assert figures["chart-confusion-0"]["figure"]["data"][0]["z"] == charts["series"][0]["confusion"]


def test_a_missing_or_unsafe_report_id_is_404(client, members, data_dir):
    client.force_login(members["viewer"])
    assert client.get("/lab/reports/nothing-here/").status_code == 404
    assert client.get("/lab/reports/..%2Fsecret/").status_code == 404


def test_compare_marks_the_better_report_on_each_score(client, members, data_dir):
    good = _report(data_dir, "Good", right=True)
    bad = _report(data_dir, "Bad", right=False)
    client.force_login(members["viewer"])
    page = client.get(reverse("lab-compare"), {"a": bad, "b": good})
    assert page.status_code == 200
    rows = {r["label"]: r for r in page.context["rows"]}
    assert rows["exact accuracy"]["better"] == "b" and rows["exact accuracy"]["delta"] == pytest.approx(1.0)
    assert rows["Brier"]["better"] == "b" and rows["Brier"]["delta"] < 0
    assert len(page.context["charts"]["series"]) == 2
    assert "Confusion matrix, B" in page.content.decode()


def test_upload_with_a_bad_row_lists_it_and_stores_nothing(client, members, data_dir):
    client.force_login(members["engineer"])
    bad = SimpleUploadedFile("mine.csv", b"id,problem,reference_code,candidate_code,gpu,speedup\n"
                                         b"a,p,ref,cand,H200,1.5\nb,p,ref,cand,H200,-1\n")
    response = client.post(reverse("lab-dataset-upload"), {"file": bad})
    assert response.status_code == 400
    assert "row 2, field &#x27;aggregated_speedup&#x27;: must be a positive finite number" in response.content.decode()
    assert not (data_dir / "datasets" / "team" / "mine.jsonl").exists()
    good = SimpleUploadedFile("mine.csv", b"id,problem,reference_code,candidate_code,gpu,speedup\na,p,ref,cand,H200,1.5\n")
    response = client.post(reverse("lab-dataset-upload"), {"file": good}, follow=True)
    assert "Imported 1 comparison rows as &#x27;mine&#x27;" in response.content.decode()
    assert read_dataset(data_dir / "datasets" / "team" / "mine.jsonl").rows[0]["true_bin"] == 6
    assert "mine" in client.get(reverse("lab")).content.decode()


def test_a_viewer_cannot_upload(client, members, data_dir):
    client.force_login(members["viewer"])
    good = SimpleUploadedFile("v.csv", b"id,problem,reference_code,candidate_code,gpu,speedup\na,p,ref,cand,H200,1.5\n")
    client.post(reverse("lab-dataset-upload"), {"file": good})
    assert not (data_dir / "datasets" / "team" / "v.jsonl").exists()


def test_a_report_with_discovery_detection_shows_precision_beside_chance(client, members, data_dir):
    from search_engine.lab.datasets import neighbour_pairs
    from search_engine.lab.discovery import discovery_report
    from search_engine.lab.reports import load_report

    report_id = _report(data_dir, "With pairs", right=True)
    report = load_report(data_dir / "reports" / "team", report_id)
    pairs = neighbour_pairs(synthetic_rows({"a": [1.0, 2.0, 1.1]}), knob_values={"BLOCK": [32, 64, 128]})
    forecasts = []
    for p in pairs:
        probabilities = [0.02] * 8
        probabilities[6 if p["g_speedup"] >= 2 ** 0.5 else 2] = 0.86
        forecasts.append(Forecast.from_probabilities(probabilities))
    report["discovery"] = discovery_report(forecasts, pairs, levels=(0.5,))
    (data_dir / "reports" / "team" / f"{report_id}.json").write_text(json.dumps(report))
    client.force_login(members["viewer"])
    html = client.get(reverse("lab-report", args=[report_id])).content.decode()
    assert "Discovery detection" in html
    table = html.split('id="discovery"')[1].split("</table>")[0]
    # 2 of the 4 pairs are discoveries and the forecasts flag exactly those: precision 1, chance 0.5
    assert "<td>1.000</td><td>1.000</td><td>0.500</td>" in table
