"""evaluate_surrogate --heldout: any surrogate scored on the frozen held-out KernelBench tasks the way
benchmarks/surrogate_heldout.py scores the program surrogate (an LLM through an OpenAI-compatible
endpoint included)."""
from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from search_engine.heldout import is_held_out
from search_engine.lab.heldout_eval import HEADLINE


@pytest.fixture
def cuda_l1():
    from kernellab.selectors.kernelbench import cuda_l1_dir

    if not (cuda_l1_dir() / "h100.jsonl").is_file():
        pytest.skip(f"CUDA-L1 is not at {cuda_l1_dir()}")
    return cuda_l1_dir()


def test_the_shipped_program_surrogate_is_scored_on_held_out_pools_beside_random_and_roofline(cuda_l1, tmp_path):
    pytest.importorskip("lightgbm")
    out = tmp_path / "heldout.json"
    call_command("evaluate_surrogate", "--heldout", "--limit", "40", "--out", str(out))
    report = json.loads(out.read_text())
    assert set(HEADLINE) <= set(report)
    assert report["surrogate"]["id"].startswith("learned-program@")
    assert 0 < report["rows"] <= 40 and report["report"]["ranking"]["pools"] >= 1
    assert -1 <= report["spearman_within_task"] <= 1 and 0 <= report["random_at_1pct"] <= 1
    assert report["brier_uniform"] == pytest.approx(0.4375) and report["brier_roofline"] is not None
    assert all(is_held_out(task) for task in report["report"]["ranking"]["spearman_by_task"])


def test_an_llm_endpoint_is_scored_the_same_way_with_its_tokens_counted(cuda_l1, tmp_path, fake_endpoint):
    out = tmp_path / "llm.json"
    call_command("evaluate_surrogate", "--heldout", "--surrogate", "llm", "--llm-model", "fake",
                 "--base-url", fake_endpoint.base_url, "--no-cache", "--limit", "6", "--out", str(out))
    report = json.loads(out.read_text())
    assert report["surrogate"]["kind"] == "llm" and report["rows"] <= 6
    assert len(fake_endpoint.requests) >= report["rows"] and report["cost"]["tokens_in"] > 0
    assert report["brier"] is not None and report["cold_forecasts_per_s"] > 0


def test_without_a_dataset_or_heldout_it_says_what_to_name():
    with pytest.raises(CommandError, match="--dataset.*--heldout"):
        call_command("evaluate_surrogate", "--surrogate", "roofline", "--no-save")


def test_an_llm_endpoint_that_never_answers_is_refused_with_its_reason_and_nothing_is_written(cuda_l1, tmp_path):
    import socket

    with socket.socket() as s:   # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "llm.json"
    # (the LLM client gives up after three calls in a row are refused, rather than let every row abstain)
    with pytest.raises(CommandError, match=r"made no forecast: .*did not answer"):
        call_command("evaluate_surrogate", "--heldout", "--surrogate", "llm", "--llm-model", "absent",
                     "--base-url", f"http://127.0.0.1:{port}/v1", "--no-cache", "--limit", "3", "--out", str(out))
    assert not out.exists()
