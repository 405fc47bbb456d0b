"""benchmarks/surrogate_lopo.py: each template family held out, scored cold and after a run's first measurements,
beside uniform, the roofline and the roofline moved to the run's level (on synthetic families here)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from search_engine.surrogates.base import ForecastRequest
from tests.scripts import loaded_script

pytest.importorskip("sklearn")

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "surrogate_lopo.py"


@pytest.fixture(scope="module")
def lopo():
    with loaded_script(_PATH, "surrogate_lopo_under_test") as module:
        yield module


def test_the_roofline_at_the_runs_level_moves_by_the_measured_gap_and_back(lopo):
    from benchmarks.search_bench import _requests, synthetic_datasets

    dataset = synthetic_datasets()[0]
    request = _requests(dataset.rows[:1])[0]
    assert isinstance(request, ForecastRequest)
    roofline = lopo.RooflineAtRunLevel()
    estimate = roofline.estimate_speedup(request)
    before = roofline.forecast_many([request])[0].expected_log_speedup()
    roofline.learn([{"request": request, "speedup": 4.0 * estimate}])
    assert roofline.gap == pytest.approx(math.log(4.0))
    after = roofline.forecast_many([request])[0].expected_log_speedup()
    assert after > before + 0.5
    roofline.learn([])
    assert roofline.forecast_many([request])[0].expected_log_speedup() == pytest.approx(before)


def test_a_held_out_family_is_scored_cold_and_after_its_first_measurements_on_the_same_rows(lopo):
    from benchmarks.search_bench import build_parser, synthetic_datasets

    datasets = [d for d in synthetic_datasets() if d.name in ("syn_elementwise", "syn_transpose", "syn_softmax")]
    for d in datasets:
        for row in d.rows:
            row["problem_name"] = d.name
    lopo._DATASETS[:] = datasets
    try:
        out = lopo.evaluate_family("syn_transpose", build_parser().parse_args(["--model-seed", "0"]), (1, 2))
    finally:
        lopo._DATASETS.clear()
    transpose = next(d for d in datasets if d.name == "syn_transpose")
    assert out["variants"] == len(transpose.rows)
    assert out["train_rows"] == sum(len(d.rows) for d in datasets) - len(transpose.rows)
    for stage, scored in (("cold", len(transpose.rows)), ("after_1", len(transpose.rows) - 1),
                          ("after_2", len(transpose.rows) - 2)):
        assert {f: out[stage][f]["rows"] for f in lopo.FORECASTERS} == dict.fromkeys(lopo.FORECASTERS, scored)
        assert out[stage]["uniform"]["brier"] == pytest.approx(0.4375)
    # The variants measured are the ones the cold forecast ranked first, and every forecaster sees the same rows.
    assert len(out["after_2"]["measured_speedups"]) == 2
    summary = lopo.summary({"syn_transpose": out}, "after_1")
    assert summary["families"] == 1 and set(summary["learned_beats"]) == set(lopo.FORECASTERS[1:])
    # One family pooled is that family: the same Brier and ECE.
    for forecaster in lopo.FORECASTERS:
        assert summary["pooled"][forecaster]["brier"] == pytest.approx(out["after_1"][forecaster]["brier"])
        assert summary["pooled"][forecaster]["ece"] == pytest.approx(out["after_1"][forecaster]["ece"])



def test_as_an_uploaded_problem_a_family_is_forecast_without_its_reference_until_the_run_has_measured_it(
        lopo, monkeypatch):
    """--uploaded: before and since the app keeps what a run's first GPU measurement reads of the reference."""
    from benchmarks.search_bench import build_parser, synthetic_datasets

    datasets = [d for d in synthetic_datasets() if d.name in ("syn_elementwise", "syn_transpose", "syn_softmax")]
    for d in datasets:
        for row in d.rows:
            row["problem_name"] = d.name
    seen = []  # per model built: whether it reads the counters, and the reference times of what it forecast

    def model(train, args, like=None):
        built = real(train, args, like=like)
        forecast, log = built.forecast_many, {"reads_counters": built.reference_profile, "reference_ms": set()}
        built.forecast_many = lambda requests: log["reference_ms"].update(q.reference_ms for q in requests) or \
            forecast(requests)
        seen.append(log)
        return built

    real = lopo.lopo_model
    monkeypatch.setattr(lopo, "lopo_model", model)
    lopo._DATASETS[:] = datasets
    try:
        out = lopo.evaluate_family("syn_transpose", build_parser().parse_args(["--model-seed", "0"]), (1, 2),
                                   uploaded=True)
    finally:
        lopo._DATASETS.clear()
    transpose = next(d for d in datasets if d.name == "syn_transpose")
    known = {r["reference_ms"] for r in transpose.rows}
    assert None not in known
    # the recorded problem's model (with counters) forecast with the reference's time; the uploaded run's cold
    # model (without counters) and its learning before today, never; since, the first model's copy learns with it
    assert seen == [{"reads_counters": True, "reference_ms": known},
                    {"reads_counters": False, "reference_ms": {None}}]
    assert out["cold"]["uploaded_before"] == out["cold"]["uploaded_now"]
    for stage, scored in (("after_1", len(transpose.rows) - 1), ("after_2", len(transpose.rows) - 2)):
        assert {f: out[stage][f]["rows"] for f in lopo.UPLOADED} == dict.fromkeys(lopo.UPLOADED, scored)
        assert out[stage]["uploaded_uniform"]["brier"] == pytest.approx(0.4375)
    summary = lopo.summary({"syn_transpose": out}, "after_1")
    assert set(summary["uploaded_now_beats"]) == {"uploaded_before", "uploaded_uniform"}
    assert summary["pooled"]["uploaded_now"]["brier"] == pytest.approx(out["after_1"]["uploaded_now"]["brier"])
