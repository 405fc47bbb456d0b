"""A report whose model gave no usable answer shows no figures: its ranking would be the tie-break's.

`evaluate_surrogate --surrogate llm` keeps the report of a model that answered, if every answer was refused or
unreadable: what it cost and why are the result. Its probability scores are empty, but recovered speedup is still
a number, computed over rows that all rank last together in the tie-break order, which the page used to show as if
the model had ranked them. A partly answering model's figures say how many rows they cover."""
from __future__ import annotations

import pytest
from django.urls import reverse

from search_engine.lab.discovery import discovery_report
from search_engine.lab.evaluation import cost_summary, evaluate
from search_engine.lab.experiment import dataset_summary, new_report
from search_engine.lab.reports import save_report
from search_engine.surrogates.base import Forecast
from tests.lab.helpers import synthetic_rows

pytestmark = pytest.mark.django_db

REFUSAL = "The model refused to forecast."
UNREADABLE = "The answer held no probabilities."
SPEEDUPS = {"a": [0.3, 1.2, 3.0, 6.0], "b": [0.8, 1.6, 2.4]}


@pytest.fixture
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    return tmp_path


def _forecasts(rows: list[dict], answered: int) -> list[Forecast]:
    """The first `answered` rows get a right, confident forecast; the others a refusal or an unreadable answer,
    each with the tokens it cost, as the LLM surrogate records them."""
    out = []
    for i, row in enumerate(rows):
        cost = {"tokens_in": 900, "tokens_out": 40, "latency_s": 1.5, "surrogate": "llm:stub"}
        if i < answered:
            probabilities = [0.02] * 8
            probabilities[row["true_bin"] - 1] = 0.86
            out.append(Forecast.from_probabilities(probabilities, **cost))
        else:
            out.append(Forecast.abstention(REFUSAL if i % 2 else UNREADABLE, **cost))
    return out


def _save(data_dir, title: str, answered: int, *, pairs: bool = False) -> str:
    rows = synthetic_rows(SPEEDUPS)
    forecasts = _forecasts(rows, answered)
    discovery = None
    if pairs:
        pair_rows = [{**row, "problem_id": row["pack"], "g_speedup": row["aggregated_speedup"]} for row in rows]
        discovery = discovery_report(forecasts, pair_rows)
        discovery["evaluation"] = evaluate(forecasts, pair_rows)
    report = new_report(
        title=title, surrogate={"id": "llm:stub", "kind": "llm", "settings": {"model": "stub"}},
        dataset=dataset_summary("tiny", rows, "tiny.jsonl"), protocol="every row",
        evaluation=evaluate(forecasts, rows),
        cost=cost_summary(forecasts, wall_s=12.5, price_in_per_mtok=1.0, price_out_per_mtok=4.0),
        discovery=discovery, command="manage.py evaluate_surrogate --surrogate llm --dataset tiny")
    return save_report(data_dir / "reports" / "team", report)


def test_the_stored_report_of_a_model_that_answered_nothing_still_carries_a_tie_break_ranking(data_dir):
    """What the page has to guard against: the evaluation's recovered speedup is a number with no answer behind it."""
    rows = synthetic_rows(SPEEDUPS)
    evaluation = evaluate(_forecasts(rows, 0), rows)
    assert evaluation["answered"] == 0 and evaluation["metrics"] == {}
    assert all(v is not None for v in evaluation["recovered_speedup"]["surrogate"].values())


def test_a_report_with_no_usable_answer_says_so_with_its_reasons_and_cost_and_shows_no_figures(client, members, data_dir):
    report_id = _save(data_dir, "Refused everything", answered=0, pairs=True)
    client.force_login(members["viewer"])
    page = client.get(reverse("lab-report", args=[report_id]))
    html = " ".join(page.content.decode().split())
    assert page.status_code == 200
    assert 'id="no-usable-answer"' in html and "No answer was usable" in html
    assert "The model answered none of the 7 rows" in html
    # the reasons and what it cost, as stored
    assert f"4× {UNREADABLE}" in html and f"3× {REFUSAL}" in html
    assert "7 forecasts asked (0 from the cache), 6300 tokens in and 280 out, $0.0074" in html
    # no figure that reads as the model's: no score table, no recovered speedup, no charts, no per-problem scores
    for absent in ('id="metrics"', "recovered speedup @", "random ranking @", "Reliability diagram", "chart-risk",
                   "<th>Brier</th>", "plotly-cartesian", "<h2>By problem</h2>", 'id="discovery"'):
        assert absent not in html, absent
    assert page.context["table"] is None and page.context["figures"] == {}
    assert 'id="discovery-no-answer"' in html and "the model answered none of the pairs" in html


def test_a_partly_answered_report_says_how_many_rows_its_figures_cover(client, members, data_dir):
    report_id = _save(data_dir, "Answered some", answered=3, pairs=True)
    client.force_login(members["viewer"])
    page = client.get(reverse("lab-report", args=[report_id]))
    html = " ".join(page.content.decode().split())
    assert page.status_code == 200 and "No answer was usable" not in html
    assert 'id="partial-answers"' in html
    assert "The model answered 3 of the 7 rows" in html and "cover those 3 rows only" in html
    assert "<th>rows answered</th><td>3 of 7</td>" in html
    # problem b got no answer at all: its pool's part of recovered speedup is the tie-break's, and the page says so
    assert "The model answered no row of b: that problem&#x27;s share of recovered speedup is the tie-break order's" in html
    assert "recovered speedup @ top 1%" in html and 'id="metrics"' in html
    rows = {row[0]: row[1] for row in page.context["table"]["rows"]}
    assert rows["exact accuracy"] == pytest.approx(1.0) and rows["recovered speedup @ top 1%"] is not None
    assert 'id="discovery-partial"' in html and "The model answered 3 of the 7 pairs" in html


def test_a_fully_answered_report_has_no_banner(client, members, data_dir):
    report_id = _save(data_dir, "Answered all", answered=7)
    client.force_login(members["viewer"])
    html = client.get(reverse("lab-report", args=[report_id])).content.decode()
    assert "partial-answers" not in html and "no-usable-answer" not in html
    assert "<th>rows answered</th><td>7 of 7</td>" in html


def test_compare_shows_no_figures_for_the_side_that_answered_nothing(client, members, data_dir):
    nothing = _save(data_dir, "Refused everything", answered=0)
    some = _save(data_dir, "Answered some", answered=3)
    client.force_login(members["viewer"])
    page = client.get(reverse("lab-compare"), {"a": nothing, "b": some})
    html = " ".join(page.content.decode().split())
    assert page.status_code == 200
    assert 'id="no-usable-answer-a"' in html and "the model answered none of its 7 rows usably" in html
    assert 'id="partial-answers-b"' in html and "the 3 of its 7 rows the model answered" in html
    rows = {r["label"]: r for r in page.context["rows"]}
    recovered = rows["recovered speedup @ top 1%"]
    assert recovered["a"] is None and recovered["b"] is not None
    assert recovered["better"] == "" and recovered["delta"] is None  # nothing to be better than


def test_the_report_list_says_none_was_usable(client, members, data_dir):
    _save(data_dir, "Refused everything", answered=0)
    _save(data_dir, "Answered some", answered=3)
    client.force_login(members["viewer"])
    html = client.get(reverse("lab-reports")).content.decode()
    assert "<td>7 (none usable)</td>" in html and "<td>7 (3)</td>" in html
