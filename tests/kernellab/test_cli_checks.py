"""The lab's command-line tools check what their arguments can tell before doing the work."""
from __future__ import annotations

import socket

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from search_engine.lab.datasets import write_dataset
from search_engine.lab.reports import list_reports
from tests.lab.helpers import synthetic_rows
from tests.llm_stub import ChatServer, text_answer


@pytest.fixture
def dataset(tmp_path, data_dir):
    path = tmp_path / "three.jsonl"
    write_dataset(path, synthetic_rows({"a": [0.5, 1.0, 2.0], "b": [0.6, 1.1, 2.2], "c": [0.7, 1.2, 2.4]}))
    return path


@pytest.fixture
def no_forecasting(monkeypatch):
    """Any forecast fails the test: the arguments must be refused before the first row is forecast."""
    from kernellab.management.commands import evaluate_surrogate

    def forecast(*args, **kwargs):
        raise AssertionError("rows were forecast before the arguments were checked")

    monkeypatch.setattr(evaluate_surrogate, "forecast_rows", forecast)


def _evaluate(*args):
    call_command("evaluate_surrogate", *args)


@pytest.mark.parametrize("content", [b"root:x:0:0:root:/root:/bin/bash\n", b"", b"\x80\x04"])
def test_a_model_that_is_no_saved_surrogate_says_why(dataset, tmp_path, content):
    model = tmp_path / "model.pkl"
    model.write_bytes(content)
    with pytest.raises(CommandError, match=r"Cannot load the learned surrogate .*model\.pkl: \S") as raised:
        _evaluate("--dataset", str(dataset), "--model", str(model), "--no-save")
    assert not str(raised.value).rstrip().endswith(":")


@pytest.mark.parametrize("fraction", ["1.5", "0", "-0.2"])
def test_a_calibration_fraction_out_of_range_is_refused_before_forecasting(dataset, no_forecasting, fraction):
    with pytest.raises(CommandError, match="--calibration-fraction must be between 0 and 1"):
        _evaluate("--dataset", str(dataset), "--surrogate", "roofline", "--recalibrate", "temperature",
                  "--calibration-fraction", fraction, "--no-save")


@pytest.mark.parametrize("limit", ["-3", "0"])
def test_a_limit_below_one_is_refused(dataset, no_forecasting, limit):
    with pytest.raises(CommandError, match="--limit must be a positive number of rows"):
        _evaluate("--dataset", str(dataset), "--surrogate", "roofline", "--limit", limit, "--no-save")


@pytest.mark.parametrize("url", ["not a url", "ftp://x", "http://", "localhost:8080/v1"])
def test_a_base_url_that_is_no_http_url_with_a_host_is_refused(dataset, no_forecasting, url):
    with pytest.raises(CommandError, match="is no http\\(s\\) URL with a host"):
        _evaluate("--dataset", str(dataset), "--surrogate", "llm", "--llm-model", "m", "--base-url", url, "--no-save")


def test_heldout_with_a_dataset_is_refused(dataset):
    with pytest.raises(CommandError, match="--heldout scores the held-out KernelBench tasks, not a dataset"):
        _evaluate("--heldout", "--dataset", str(dataset))


@pytest.fixture
def unusable_endpoint():
    """An OpenAI-compatible endpoint that answers every request with text and no forecast."""
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    with ChatServer(lambda request: text_answer("I cannot tell.", usage=usage)) as server:
        yield server.base_url


def test_a_model_that_answered_unusably_keeps_its_report_of_cost_and_reasons(dataset, data_dir, workspace,
                                                                            unusable_endpoint, capsys):
    # (what it cost and why each answer was refused are the result; an endpoint that never answered saves nothing,
    # below)
    _evaluate("--dataset", str(dataset), "--surrogate", "llm", "--llm-model", "m", "--no-cache",
              "--base-url", unusable_endpoint, "--timeout", "5", "--concurrency", "2")
    printed = capsys.readouterr().out
    # No figures: a ranking of rows none of which was answered is the tie-break's order, not the model's.
    assert "No answer was usable: no figures" in printed and "abstentions: 9x" in printed
    assert "recovered" not in printed and "Brier" not in printed
    from search_engine.lab.reports import load_report

    reports = data_dir / "reports" / workspace.slug
    [listed] = list_reports(reports)
    report = load_report(reports, listed["id"])
    assert report["evaluation"]["answered"] == 0 and report["evaluation"]["abstained"] == 9
    assert report["cost"]["tokens_out"] == 9 * 5 and report["evaluation"]["abstain_reasons"]


def test_an_endpoint_nobody_listens_on_is_a_sentence_not_a_traceback(dataset, data_dir, workspace):
    with socket.socket() as sock:  # a port nobody listens on: every request fails at once
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(CommandError, match=r"did not answer.*check --base-url.*\(no report was saved\)\.$"):
        _evaluate("--dataset", str(dataset), "--surrogate", "llm", "--llm-model", "m", "--no-cache",
                  "--base-url", f"http://127.0.0.1:{port}/v1", "--timeout", "2", "--concurrency", "1")
    assert not list_reports(data_dir / "reports" / workspace.slug)


def test_export_dataset_refuses_a_folder_before_exporting(tmp_path, data_dir, monkeypatch):
    from kernellab.management.commands import export_dataset

    monkeypatch.setattr(export_dataset, "records_dataset", lambda **kw: pytest.fail("exported before the check"))
    with pytest.raises(CommandError, match=r"The output .* is a folder; give a file name"):
        call_command("export_dataset", str(tmp_path), "--from", "records")
    with pytest.raises(CommandError, match=r"--pairs .* is a folder; give a file name"):
        call_command("export_dataset", str(tmp_path / "rows.jsonl"), "--from", "records", "--pairs", str(tmp_path))


def test_export_rl_refuses_a_folder_before_exporting(dataset, tmp_path):
    with pytest.raises(CommandError, match=r"--out .* is a folder; give a file name"):
        call_command("export_rl", "--dataset", str(dataset), "--out", str(tmp_path))
    with pytest.raises(CommandError, match=r"--eval-out .* is a folder; give a file name"):
        call_command("export_rl", "--dataset", str(dataset), "--out", str(tmp_path / "rl.jsonl"),
                     "--eval-out", str(tmp_path))
    assert not (tmp_path / "rl.jsonl").exists()


def test_import_dataset_names_an_unsupported_file_type_first(tmp_path, data_dir, workspace):
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(CommandError, match=r"passwd: unsupported file type; import a \.jsonl, \.jsonl\.gz or \.csv"):
        call_command("import_dataset", str(passwd))
