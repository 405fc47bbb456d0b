"""evaluate_surrogate against a real OpenAI-compatible server (llama.cpp with Gemma 3 270M)."""
from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from search_engine.lab.reports import list_reports, load_report
from tests.lab.helpers import SAXPY_DIR

pytestmark = [pytest.mark.llm, pytest.mark.timeout(1800)]


def test_a_real_model_is_evaluated_with_tokens_counted_and_answers_cached(llm_server, settings, tmp_path, capsys,
                                                                           workspace):
    settings.DATA_DIR = tmp_path
    reports = tmp_path / "reports" / workspace.slug  # the lab keeps reports per workspace
    dataset = tmp_path / "saxpy.jsonl"
    call_command("export_dataset", str(dataset), "--from", "records", "--problems-dir", str(SAXPY_DIR))
    args = ["evaluate_surrogate", "--dataset", str(dataset), "--surrogate", "llm", "--llm-model", llm_server["model"],
            "--base-url", llm_server["base_url"], "--limit", "2", "--concurrency", "1", "--max-tokens", "300",
            "--cache", str(tmp_path / "cache.sqlite3"), "--price-in", "0.1", "--price-out", "0.4"]
    call_command(*args)
    first = load_report(reports, list_reports(reports)[0]["id"])
    ev = first["evaluation"]
    assert ev["rows"] == 2 and ev["answered"] + ev["abstained"] == 2
    assert first["cost"]["tokens_in"] > 1000 and first["cost"]["usd"] > 0  # two prompts of reference + candidate
    call_command(*args)
    second = max((load_report(reports, r["id"]) for r in list_reports(reports)),
                 key=lambda r: r["id"])
    assert second["cost"]["cached"] == ev["answered"]  # usable answers come from the cache; abstentions are asked again
    print(capsys.readouterr().out)


def test_a_real_model_is_scored_on_the_held_out_tasks_like_the_program_surrogate(llm_server, settings, tmp_path):
    import json

    from kernellab.selectors.kernelbench import cuda_l1_dir
    from search_engine.lab.heldout_eval import HEADLINE

    if not (cuda_l1_dir() / "h100.jsonl").is_file():
        pytest.skip(f"CUDA-L1 is not at {cuda_l1_dir()}")
    settings.DATA_DIR = tmp_path
    out = tmp_path / "heldout.json"
    try:
        call_command("evaluate_surrogate", "--heldout", "--surrogate", "llm", "--llm-model", llm_server["model"],
                     "--base-url", llm_server["base_url"], "--limit", "3", "--concurrency", "1", "--max-tokens", "300",
                     "--no-cache", "--out", str(out))
    except CommandError as exc:
        # The tiny model often answers with unusable numbers (probabilities [1, 2, ..., 8]); when no row gets a
        # usable answer the command refuses, naming the answers' fault, and writes nothing. That fault must be
        # the answer's: an endpoint that never answered is a failure of this test, not a refusal to accept.
        message = str(exc)
        assert "made no forecast: all" in message and "Nothing was written." in message, message
        assert "did not answer" not in message and "onnection" not in message, message
        assert not out.exists()
        return
    report = json.loads(out.read_text())
    assert set(HEADLINE) <= set(report) and 1 <= report["rows"] <= 3
    # Each row is answered (its tokens counted, its probabilities scored) or an abstention with its reason;
    # a program pair can outgrow the tiny model's 4,096-token context, which the endpoint refuses.
    answered = report["rows"] - report["abstained"]
    assert report["abstained"] == sum(report["abstain_reasons"].values())
    # The server must have answered: a dead or unreachable endpoint is not an abstention to pass on.
    assert not [r for r in report["abstain_reasons"] if "did not answer" in r or "onnection" in r], report["abstain_reasons"]
    assert answered == 0 or report["cost"]["tokens_in"] > 500
    assert report["report"]["cold"].get("rows", 0) <= answered
