"""QA4 lab reports: stray files in a reports folder, server paths on report pages, --pairs read before forecasting."""
from __future__ import annotations

import json
import logging

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from search_engine.lab.datasets import write_dataset
from search_engine.lab.evaluation import evaluate
from search_engine.lab.reports import load_report, save_report
from search_engine.surrogates.base import Forecast
from tests.lab.helpers import synthetic_rows


def _report(data_dir, title: str, **extra) -> str:
    rows = synthetic_rows({"a": [0.3, 1.2, 3.0, 6.0]})
    forecasts = [Forecast.from_probabilities([0.02] * 7 + [0.86]) for _ in rows]
    report = {
        "title": title, "created_at": "2026-11-30T00:00:00+00:00",
        "surrogate": {"id": "learned@1", "kind": "learned", "settings": {}},
        "dataset": {"name": "tiny", "rows": 4, "problems": {"a": 4}, "fingerprint": "f"}, "protocol": "every row",
        "evaluation": evaluate(forecasts, rows), "recalibration": None, "discovery": None,
        "cost": {"forecasts": 4, "cached": 0, "tokens_in": 0, "tokens_out": 0, "latency_mean_s": 0.0,
                 "latency_p95_s": 0.0, "wall_s": 0.1, "usd": None}, "command": "manage.py evaluate_surrogate"}
    report.update(extra)
    return save_report(data_dir / "reports" / "team", report)


def _stray(data_dir, name: str, content) -> str:
    (data_dir / "reports" / "team" / f"{name}.json").write_text(json.dumps(content))
    return name


def test_a_file_that_is_no_report_is_left_out_of_the_lists_with_a_line_in_the_log(client, members, data_dir, caplog):
    _report(data_dir, "A good report")
    _stray(data_dir, "20260101-000000-a-list", [1, 2])
    _stray(data_dir, "20260101-000000-minimal", {"title": "minimal"})
    client.force_login(members["viewer"])
    with caplog.at_level(logging.WARNING, logger="search_engine.lab.reports"):
        for page in ("/lab/", "/lab/reports/", "/lab/compare"):
            response = client.get(page)
            html = response.content.decode()
            assert response.status_code == 200 and "A good report" in html
            assert "20260101-000000-a-list" not in html and "minimal" not in html
    lines = [r.getMessage() for r in caplog.records]
    assert any("20260101-000000-a-list.json is not a report KernelLab can read: it holds a list, not a report "
               "object. It is left out of the list." in line for line in lines)
    assert any("20260101-000000-minimal.json is not a report KernelLab can read: it has no \"evaluation\" object."
               in line for line in lines)


def test_opening_or_comparing_a_file_that_is_no_report_is_a_404_saying_why(client, members, data_dir):
    good = _report(data_dir, "A good report")
    minimal = _stray(data_dir, "20260101-000000-minimal", {"title": "minimal"})
    listed = _stray(data_dir, "20260101-000000-a-list", [1, 2])
    no_charts = _report(data_dir, "No charts")
    path = data_dir / "reports" / "team" / f"{no_charts}.json"
    report = json.loads(path.read_text())
    del report["evaluation"]["reliability"]
    path.write_text(json.dumps(report))
    client.force_login(members["viewer"])
    cases = [
        (reverse("lab-report", args=[minimal]), f'{minimal}.json is not a report KernelLab can read: it has no '
                                                '&quot;evaluation&quot; object.'),
        (reverse("lab-report", args=[listed]), f"{listed}.json is not a report KernelLab can read: it holds a list, "
                                               "not a report object."),
        (reverse("lab-report", args=[no_charts]), f"{no_charts}.json is not a report KernelLab can read: its "
                                                  "evaluation has no &quot;reliability&quot;."),
        (f"/lab/compare?a={good}&b={minimal}", f'{minimal}.json is not a report KernelLab can read: it has no '
                                               '&quot;evaluation&quot; object.'),
        (f"/lab/compare?a={listed}&b={good}", f"{listed}.json is not a report KernelLab can read: it holds a list, "
                                              "not a report object."),
    ]
    for url, sentence in cases:
        response = client.get(url)
        assert response.status_code == 404, url
        assert sentence in response.content.decode(), url
    assert client.get(reverse("lab-report", args=[good])).status_code == 200


def test_report_pages_show_files_by_name_never_by_their_server_path(client, members, data_dir):
    folder = "/tmp/qa4-secret-folder"
    command = (f"manage.py evaluate_surrogate --dataset {folder}/data/good.jsonl --surrogate learned "
               f"--model {folder}/out/learned-good.pkl --pairs={folder}/out/pairs.jsonl "
               f"--recalibration '{folder}/my dir/recal.json' --base-url http://host:8000/v1")
    report_id = _report(
        data_dir, "Learned on good", command=command,
        protocol=f"every row, recalibrated with {folder}/my dir/recal.json (temperature)",
        surrogate={"id": "learned@1", "kind": "learned",
                   "settings": {"model": f"{folder}/out/learned-good.pkl", "trained_on": f"{folder}/data/train.jsonl",
                                "trained_rows": 4}},
        dataset={"name": "good", "path": f"{folder}/data/good.jsonl", "rows": 4, "problems": {"a": 4},
                 "fingerprint": "f"})
    other = _report(data_dir, "Other")
    client.force_login(members["viewer"])
    for url in (reverse("lab-report", args=[report_id]), f"/lab/compare?a={report_id}&b={other}"):
        response = client.get(url)
        html = response.content.decode()
        assert response.status_code == 200
        assert "/tmp/" not in html and "qa4-secret-folder" not in html and "my dir" not in html, url
    html = client.get(reverse("lab-report", args=[report_id])).content.decode()
    assert "--model learned-good.pkl" in html and "--pairs=pairs.jsonl" in html and "--dataset good.jsonl" in html
    assert "learned-good.pkl" in html and "train.jsonl" in html and "http://host:8000/v1" in html
    # the saved report keeps the paths, for the commands that read it
    assert load_report(data_dir / "reports" / "team", report_id)["surrogate"]["settings"]["model"] == \
        f"{folder}/out/learned-good.pkl"


@pytest.fixture
def no_forecasting(monkeypatch):
    from kernellab.management.commands import evaluate_surrogate

    def refuse(*args, **kwargs):
        raise AssertionError("a row was forecast before --pairs was checked")

    monkeypatch.setattr(evaluate_surrogate, "forecast_rows", refuse)
    monkeypatch.setattr(evaluate_surrogate, "loo_forecasts", refuse)


def test_pairs_that_are_comparisons_are_refused_before_any_row_is_forecast(tmp_path, data_dir, workspace,
                                                                            no_forecasting):
    rows = tmp_path / "rows.jsonl"
    write_dataset(rows, synthetic_rows({"a": [0.5, 1.5, 3.0], "b": [0.7, 2.0, 4.0]}))
    for extra in ((), ("--loo",)):
        with pytest.raises(CommandError) as caught:
            call_command("evaluate_surrogate", "--dataset", str(rows), "--surrogate", "roofline" if not extra
                         else "learned", "--pairs", str(rows), *extra)
        assert str(caught.value) == (f"--pairs {rows} is a dataset of comparisons, not pairs: discovery detection "
                                     "needs parent -> child pairs (pair_id, parent_code, child_code, g_speedup, ...).")


def test_a_pairs_file_that_is_missing_is_refused_before_any_row_is_forecast(tmp_path, data_dir, workspace,
                                                                             no_forecasting):
    rows = tmp_path / "rows.jsonl"
    write_dataset(rows, synthetic_rows({"a": [0.5, 1.5, 3.0], "b": [0.7, 2.0, 4.0]}))
    with pytest.raises(CommandError):
        call_command("evaluate_surrogate", "--dataset", str(rows), "--surrogate", "roofline",
                     "--pairs", str(tmp_path / "pairs-typo.jsonl"))
