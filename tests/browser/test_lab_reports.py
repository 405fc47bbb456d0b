"""The lab pages in Chromium: a report's plotly charts draw, and two reports compare side by side."""
from __future__ import annotations

import os

import pytest

from search_engine.lab.evaluation import evaluate
from search_engine.lab.reports import save_report
from search_engine.surrogates.base import Forecast
from tests.browser.harness import CHROMIUM
from tests.lab.helpers import synthetic_rows

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"Chromium is not installed at {CHROMIUM}")]


def _save(folder, title: str, spread: float) -> str:
    rows = synthetic_rows({"a": [0.3, 0.6, 0.8, 1.2, 1.6, 3.0, 6.0], "b": [0.2, 0.9, 1.1, 2.5]})
    forecasts = []
    for i, r in enumerate(rows):
        probabilities = [spread / 7] * 8
        probabilities[(r["true_bin"] if i % 3 else max(1, r["true_bin"] - 1)) - 1] = 1 - spread
        forecasts.append(Forecast.from_probabilities(probabilities))
    evaluation = evaluate(forecasts, rows)
    return save_report(folder, {
        "title": title, "created_at": "2026-11-30T00:00:00+00:00", "surrogate": {"id": "test@1", "settings": {}},
        "dataset": {"name": "tiny", "rows": len(rows), "problems": {"a": 7, "b": 4}, "fingerprint": "f"},
        "protocol": "every row", "evaluation": evaluation,
        "recalibration": {"calibration": "test", "calibration_rows": 0, "test_rows": len(rows),
                          "methods": {"temperature": {"params": {"temperature": 1.5}, "evaluation": evaluation}}},
        "discovery": None, "cost": {"forecasts": len(rows), "cached": 0, "tokens_in": 10, "tokens_out": 5,
                                    "latency_mean_s": 0.1, "latency_p95_s": 0.2, "wall_s": 1.0, "usd": 0.001},
        "command": "test"})


def test_a_report_draws_its_charts_and_compares_with_another(server, browser_as, artifacts):
    folder = os.path.join(server.data_dir, "reports", "team")  # the lab keeps reports per workspace
    sharp = _save(folder, "Sharp forecasts", 0.1)
    blunt = _save(folder, "Blunt forecasts", 0.6)
    page = browser_as("viewer")
    page.goto(f"{server.url}/lab/reports/{sharp}/")
    for chart in ("chart-reliability", "chart-risk", "chart-confusion-0", "chart-confusion-1"):
        page.wait_for_selector(f"#{chart} .main-svg")
    assert page.locator("#chart-reliability .scatterlayer .trace").count() == 3  # diagonal + two columns
    assert "after temperature recalibration" in page.locator("#metrics").inner_text()
    page.screenshot(path=str(artifacts / "lab_report.png"), full_page=True)
    page.goto(f"{server.url}/lab/reports/")
    page.check(f"input[name=a][value='{blunt}']")
    page.check(f"input[name=b][value='{sharp}']")
    page.click("text=Compare A and B side by side")
    page.wait_for_selector("#chart-confusion-1 .main-svg")
    table = page.locator("#compare").inner_text()
    assert "Blunt forecasts" in table and "Sharp forecasts" in table
    assert page.locator("#compare td.better").count() > 0
    page.screenshot(path=str(artifacts / "lab_compare.png"), full_page=True)
