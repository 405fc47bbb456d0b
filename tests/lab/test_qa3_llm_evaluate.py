"""QA round 3 (area kb), `evaluate_surrogate --surrogate llm`: the LLM endpoint's retries, answer size limit and
time-out come from the settings a run takes (KERNELLAB_LLM_RETRIES, KERNELLAB_LLM_MAX_ANSWER_KB,
KERNELLAB_LLM_TIMEOUT_S; --timeout still wins) (finding 5); an endpoint that fails every call is one sentence that
names --base-url, not OPENAI_BASE_URL or resuming (8); the saved report keeps no credentials of the address (4)."""
from __future__ import annotations

import json
import socket
import sys
from dataclasses import replace

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from search_engine.lab.datasets import write_dataset
from search_engine.lab.reports import list_reports, load_report
from tests.lab.helpers import synthetic_rows
from tests.llm_stub import Answer, ChatServer, forecast_answer

pytestmark = pytest.mark.timeout(300)

GOOD = {"reasoning": "fine", "probabilities": [0, 0, 0, 0.2, 0.6, 0.2, 0, 0], "predicted_bin": 5}


@pytest.fixture
def dataset(tmp_path, data_dir):
    path = tmp_path / "three.jsonl"
    write_dataset(path, synthetic_rows({"a": [0.5, 1.0, 2.0]}))
    return path


def _evaluate(dataset, base_url, *more):
    call_command("evaluate_surrogate", "--dataset", str(dataset), "--surrogate", "llm", "--llm-model", "m",
                 "--no-cache", "--base-url", base_url, "--concurrency", "1", *more)


def test_the_retries_come_from_kernellab_llm_retries(dataset, settings):
    settings.KERNELLAB_LLM = replace(settings.KERNELLAB_LLM, max_retries=0)
    with ChatServer(lambda request: Answer("", "", {"error": {"message": "internal"}}, status=500)) as server:
        with pytest.raises(CommandError) as raised:
            _evaluate(dataset, server.base_url, "--no-save")
    assert len(server.requests) == 3  # three calls of one attempt each, then the endpoint is given up on
    assert str(raised.value) == (f"The LLM endpoint {server.base_url} answered HTTP 500 to 3 calls in a row: internal; "
                                 "check the server's logs (no report was saved).")


def test_the_answer_size_limit_comes_from_kernellab_llm_max_answer_kb(dataset, settings, capsys):
    settings.KERNELLAB_LLM = replace(settings.KERNELLAB_LLM, max_answer_chars=1024 * 1024)
    long = json.dumps({**GOOD, "reasoning": "memory bound " * 30_000})  # 381 KiB
    with ChatServer(lambda request: forecast_answer(long)) as server:
        _evaluate(dataset, server.base_url, "--no-save")
    printed = capsys.readouterr().out
    assert "rows 3, answered 3, abstained 0" in printed and "KiB limit" not in printed


def test_the_time_out_comes_from_kernellab_llm_timeout_s_and_timeout_wins(dataset, settings, capsys):
    settings.KERNELLAB_LLM = replace(settings.KERNELLAB_LLM, timeout_s=0.3, max_retries=0)
    with ChatServer(lambda request: Answer("", "", forecast_answer(json.dumps(GOOD)).body, delay_s=1.0)) as server:
        with pytest.raises(CommandError) as raised:
            _evaluate(dataset, server.base_url, "--no-save")
        assert str(raised.value) == (f"The LLM endpoint {server.base_url} timed out on 3 calls in a row; check the "
                                     "server or raise --timeout (no report was saved).")
        capsys.readouterr()
        _evaluate(dataset, server.base_url, "--no-save", "--timeout", "5")
    assert "rows 3, answered 3, abstained 0" in capsys.readouterr().out


def test_a_refused_endpoint_is_one_sentence_that_names_base_url(dataset):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(CommandError) as raised:
        _evaluate(dataset, f"http://127.0.0.1:{port}/v1", "--no-save", "--timeout", "2")
    message = str(raised.value)
    assert message == (f"The LLM endpoint http://127.0.0.1:{port}/v1 did not answer: Connection error; check "
                       "--base-url and that the server runs (no report was saved).")
    assert "OPENAI_BASE_URL" not in message and "resume" not in message.lower()


def test_the_saved_report_keeps_no_credentials_of_the_endpoint(dataset, data_dir, workspace, monkeypatch):
    with ChatServer(lambda request: forecast_answer(json.dumps(GOOD))) as server:
        secret = server.base_url.replace("http://", "http://qa:URLSECRETPW@") + "?token=QUERYSECRET"
        monkeypatch.setattr(sys, "argv", ["manage.py", "evaluate_surrogate", "--dataset", str(dataset), "--surrogate",
                                          "llm", "--base-url", secret])
        _evaluate(dataset, secret)
    assert len(server.requests) == 3
    reports = data_dir / "reports" / workspace.slug
    [listed] = list_reports(reports)
    report = load_report(reports, listed["id"])
    saved = json.dumps(report)
    assert "URLSECRETPW" not in saved and "QUERYSECRET" not in saved
    assert report["surrogate"]["settings"]["base_url"] == server.base_url
    assert f"--base-url {server.base_url}" in report["command"]
