"""The lab's management commands: export, import, train, evaluate (learned, roofline, an LLM over HTTP), RL export."""
from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from search_engine.bins import DEFAULT_BINS
from search_engine.lab.datasets import read_dataset, write_dataset
from search_engine.lab.reports import list_reports, load_report
from search_engine.lab.datasets import row_request
from search_engine.prompts import forecast_messages
from tests.lab.helpers import SAXPY_DIR, SAXPY_RECORDS, synthetic_rows


@pytest.fixture
def saxpy_dataset(tmp_path, data_dir):
    out = tmp_path / "saxpy.jsonl"
    call_command("export_dataset", str(out), "--from", "records", "--problems-dir", str(SAXPY_DIR),
                 "--pairs", str(tmp_path / "saxpy-pairs.jsonl"))
    return out


def _records():
    with gzip.open(SAXPY_RECORDS, "rt") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def test_export_renders_each_recorded_variant_to_its_recorded_source(saxpy_dataset, tmp_path):
    rows = read_dataset(saxpy_dataset).rows
    records = _records()
    assert len(rows) == len(records) == 22
    by_hash = {r["source_hash"]: r for r in records}
    for row in rows:
        record = by_hash[hashlib.sha256(row["candidate_code"].encode()).hexdigest()]
        assert row["aggregated_speedup"] == record["speedup"]
        assert row["true_bin"] == DEFAULT_BINS.bin_of(record["speedup"])
        assert row["source"] == "recorded-h200" and row["pack"] == "saxpy" and row["hardware"] == "NVIDIA H200"
        assert row["reference_ms"] == record["reference"]["median_ms"]
        assert row["problem_sizes"] == {"N": 16777216} and row["problem_roofline"] == {"flops": "2*N", "bytes": "12*N"}
    pairs = read_dataset(tmp_path / "saxpy-pairs.jsonl").rows
    assert pairs
    for p in pairs:
        assert p["g_speedup"] == pytest.approx(p["child_speedup"] / p["parent_speedup"])


def test_export_from_the_database_takes_ok_measurements_and_measured_pairs(node, tmp_path, data_dir):
    from kernellab.models import Measurement

    child = node
    common = dict(problem=child.run.problem, hardware={"name": "NVIDIA H200", "sm_count": 132},
                  reference_stats={"median_ms": 0.5}, compiler_facts={"registers": 16})
    kept = Measurement.objects.create(kernel=child.kernel, status="ok", speedup=1.8, backend="cupy", **common)
    Measurement.objects.create(kernel=child.kernel, status="ok", speedup=1.7, backend="replay", **common)
    Measurement.objects.create(kernel=child.kernel, status="failed-correctness", speedup=None, backend="cupy", **common)
    Measurement.objects.create(kernel=child.parent.kernel, status="ok", speedup=1.0, backend="cupy", **common)
    child.speedup = 1.8
    child.save()
    out, pairs_out = tmp_path / "db.jsonl", tmp_path / "db-pairs.jsonl"
    call_command("export_dataset", str(out), "--from", "db", "--pairs", str(pairs_out))
    rows = read_dataset(out).rows
    assert len(rows) == 2 and {r["source"] for r in rows} == {"kernellab-db"}
    row = next(r for r in rows if r["comparison_id"] == f"kernellab-db:measurement:{kept.pk}")
    assert row["anchor_code"] == child.run.problem.reference.source
    assert row["candidate_code"] == child.kernel.source
    assert (row["aggregated_speedup"], row["true_bin"], row["reference_ms"]) == (1.8, 6, 0.5)
    assert row["problem_sizes"] == {"N": 1048576}
    pair = read_dataset(pairs_out).rows[0]
    assert (pair["parent_node_id"], pair["child_node_id"], pair["g_speedup"]) == ("n0", "n1", pytest.approx(1.8))
    assert pair["parent_code"] == child.parent.kernel.source


def test_export_from_a_database_of_several_teams_takes_the_workspace_named(node, tmp_path, data_dir):
    from django.core.management.base import CommandError

    from kernellab.models import Measurement, Problem, Workspace

    other = Workspace.objects.create(name="Other", slug="other")
    theirs = Problem.objects.create(workspace=other, name="vector_scale", title="Theirs", spec_toml=node.run.problem.spec_toml,
                                    reference=node.run.problem.reference)
    common = dict(hardware={"name": "NVIDIA H200"}, reference_stats={"median_ms": 0.5})
    ours = Measurement.objects.create(kernel=node.kernel, problem=node.run.problem, status="ok", speedup=1.8,
                                      backend="cupy", **common)
    secret = Measurement.objects.create(kernel=node.kernel, problem=theirs, status="ok", speedup=1.2, backend="cupy",
                                        **common)
    out = tmp_path / "db.jsonl"
    # Two teams' kernel sources are not exported together unless asked: an import puts them in one team's lab.
    with pytest.raises(CommandError, match=r"holds 2 workspaces \(other, team\): name the one to export"):
        call_command("export_dataset", str(out), "--from", "db")
    with pytest.raises(CommandError, match="No workspace 'nope'"):
        call_command("export_dataset", str(out), "--from", "db", "--workspace", "nope")
    call_command("export_dataset", str(out), "--from", "db", "--workspace", "team")
    rows = read_dataset(out).rows
    assert [r["comparison_id"] for r in rows] == [f"kernellab-db:measurement:{ours.pk}"] and rows[0]["pack"] == "vector_scale"
    call_command("export_dataset", str(out), "--from", "db", "--all-workspaces")
    packs = {r["comparison_id"]: r["pack"] for r in read_dataset(out).rows}
    assert packs == {f"kernellab-db:measurement:{ours.pk}": "team/vector_scale",
                     f"kernellab-db:measurement:{secret.pk}": "other/vector_scale"}


def test_import_refuses_a_bad_file_whole_and_stores_a_good_one(tmp_path, data_dir, workspace):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,problem,reference_code,candidate_code,gpu,speedup\n"
                   "a,p,ref,cand,H200,1.5\n"
                   "b,p,ref,,H200,zero\n")
    with pytest.raises(CommandError) as err:
        call_command("import_dataset", str(bad))
    assert "row 2, field 'candidate_code': is missing" in str(err.value)
    assert "row 2, field 'aggregated_speedup': must be a positive finite number, got 'zero'" in str(err.value)
    assert not (data_dir / "datasets" / "team").exists() or not list((data_dir / "datasets" / "team").iterdir())
    good = tmp_path / "good.csv"
    good.write_text("id,problem,reference_code,candidate_code,gpu,speedup\na,p,ref,cand,H200,1.5\n")
    call_command("import_dataset", str(good), "--name", "mine")
    stored = read_dataset(data_dir / "datasets" / "team" / "mine.jsonl").rows
    assert stored[0]["true_bin"] == 6 and stored[0]["source"] == "imported:good.csv"
    with pytest.raises(CommandError, match="exists already"):
        call_command("import_dataset", str(good), "--name", "mine")


def test_with_several_workspaces_a_named_dataset_needs_its_workspace(tmp_path, data_dir, workspace):
    from kernellab.models import Workspace

    Workspace.objects.create(name="Other", slug="other")
    good = tmp_path / "good.csv"
    good.write_text("id,problem,reference_code,candidate_code,gpu,speedup\na,p,ref,cand,H200,1.5\n")
    with pytest.raises(CommandError, match="Several workspaces exist; pass --workspace \\(one of other, team\\)"):
        call_command("import_dataset", str(good), "--name", "mine")
    call_command("import_dataset", str(good), "--name", "mine", "--workspace", "other")
    assert (data_dir / "datasets" / "other" / "mine.jsonl").is_file()
    with pytest.raises(CommandError, match="No dataset 'mine'"):
        call_command("export_rl", "--dataset", "mine", "--workspace", "team", "--out", str(tmp_path / "rl.jsonl"))


def test_evaluate_roofline_with_recalibration_and_discovery_saves_a_report(saxpy_dataset, tmp_path, data_dir, workspace,
                                                                           capsys):
    call_command("evaluate_surrogate", "--dataset", str(saxpy_dataset), "--surrogate", "roofline",
                 "--recalibrate", "temperature,isotonic", "--calibration-fraction", "0.4",
                 "--pairs", str(tmp_path / "saxpy-pairs.jsonl"))
    out = capsys.readouterr().out
    assert "exact accuracy" in out and "+temperature" in out and "discovery detection" in out
    [summary] = list_reports(data_dir / "reports" / "team")
    report = load_report(data_dir / "reports" / "team", summary["id"])
    assert report["recalibration"]["calibration_rows"] == 9 and report["evaluation"]["rows"] == 13
    assert set(report["recalibration"]["methods"]) == {"temperature", "isotonic"}
    assert report["discovery"]["pairs"] > 0 and 0 <= report["discovery"]["base_rate"] <= 1
    assert report["surrogate"]["id"] == "roofline@1"


def test_train_then_evaluate_a_learned_surrogate_and_leave_one_problem_out(tmp_path, data_dir, workspace, capsys):
    rows = synthetic_rows({"a": [0.3, 0.6, 1.2, 2.5, 5.0, 0.9], "b": [0.4, 0.7, 1.3, 2.2, 4.5, 1.1],
                           "c": [0.35, 0.65, 1.25, 2.4, 4.8, 1.0]})
    write_dataset(tmp_path / "syn.jsonl", rows)
    model = tmp_path / "learned.pkl"
    call_command("train_surrogate", "--dataset", str(tmp_path / "syn.jsonl"), "--exclude-problem", "c", "--out", str(model))
    assert "Trained learned@1 on 12 rows" in capsys.readouterr().out
    call_command("evaluate_surrogate", "--dataset", str(tmp_path / "syn.jsonl"), "--model", str(model), "--no-save")
    out = capsys.readouterr().out
    assert "rows 18, answered 18" in out
    call_command("evaluate_surrogate", "--dataset", str(tmp_path / "syn.jsonl"), "--loo", "--recalibrate", "temperature")
    [summary] = list_reports(data_dir / "reports" / "team")
    report = load_report(data_dir / "reports" / "team", summary["id"])
    assert report["protocol"].startswith("leave one problem out")
    assert report["recalibration"]["calibration"].startswith("nested")
    # a candidate's speedup grows with its BLOCK in every problem, so a held-out problem's ranking is learnable
    recovered = report["evaluation"]["recovered_speedup"]
    assert recovered["surrogate"]["0.25"] > recovered["random"]["0.25"] + 0.2
    with pytest.raises(CommandError, match="needs --model"):
        call_command("evaluate_surrogate", "--dataset", str(tmp_path / "syn.jsonl"))


def test_evaluate_an_llm_endpoint_counts_tokens_and_cost_and_caches(saxpy_dataset, tmp_path, data_dir, fake_endpoint,
                                                                     workspace, capsys):
    args = ["evaluate_surrogate", "--dataset", str(saxpy_dataset), "--surrogate", "llm", "--llm-model", "fake",
            "--base-url", fake_endpoint.base_url, "--concurrency", "4", "--price-in", "0.5", "--price-out", "2",
            "--cache", str(tmp_path / "cache.sqlite3")]
    call_command(*args)
    out = capsys.readouterr()
    assert len(fake_endpoint.requests) == 22
    assert "22000 tokens in, 1100 out, $0.0132" in out.out
    assert "forecast 22/22" in out.err
    call_command(*args)
    assert len(fake_endpoint.requests) == 22  # all from the cache the second time
    reports = [load_report(data_dir / "reports" / "team", r["id"]) for r in list_reports(data_dir / "reports" / "team")]
    costs = sorted((r["cost"]["cached"], r["cost"]["tokens_in"]) for r in reports)
    assert costs == [(0, 22000), (22, 0)]
    assert all(r["evaluation"]["predicted_bin_counts"][4] == 22 for r in reports)


def test_llm_without_an_endpoint_is_a_clear_error(saxpy_dataset, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(CommandError, match="needs an endpoint and a model"):
        call_command("evaluate_surrogate", "--dataset", str(saxpy_dataset), "--surrogate", "llm", "--base-url", "")


def test_export_rl_writes_the_surrogates_prompts_with_true_bins(saxpy_dataset, tmp_path):
    out = tmp_path / "rl.jsonl"
    call_command("export_rl", "--dataset", str(saxpy_dataset), "--out", str(out))
    examples = [json.loads(line) for line in out.read_text().splitlines()]
    rows = read_dataset(saxpy_dataset).rows
    assert [e["true_bin"] for e in examples] == [r["true_bin"] for r in rows]
    assert examples[0]["prompt"] == forecast_messages(row_request(rows[0]))
    assert Path(out).stat().st_size > 0


def test_nested_calibration_with_two_problems_is_a_clear_error(tmp_path, data_dir):
    write_dataset(tmp_path / "two.jsonl", synthetic_rows({"a": [0.5, 1.0, 2.0], "b": [0.6, 1.1, 2.2]}))
    with pytest.raises(CommandError, match="at least three problems"):
        call_command("evaluate_surrogate", "--dataset", str(tmp_path / "two.jsonl"), "--loo",
                     "--recalibrate", "temperature", "--no-save")


def test_a_roofline_recalibration_is_trained_saved_and_applied(saxpy_dataset, tmp_path, data_dir, capsys):
    saved = tmp_path / "roofline-iso.json"
    call_command("train_surrogate", "--dataset", str(saxpy_dataset), "--surrogate", "roofline",
                 "--recalibrate", "isotonic", "--out", str(saved))
    assert json.loads(saved.read_text())["method"] == "isotonic"
    call_command("evaluate_surrogate", "--dataset", str(saxpy_dataset), "--surrogate", "roofline", "--no-save")
    plain = capsys.readouterr().out
    call_command("evaluate_surrogate", "--dataset", str(saxpy_dataset), "--surrogate", "roofline",
                 "--recalibration", str(saved), "--no-save")
    fitted = capsys.readouterr().out
    assert "recalibrated with" in fitted

    def nll(text):
        return float(next(line for line in text.splitlines() if line.startswith("NLL")).split()[1])

    # fitted and reported on the same rows here, so the isotonic maps lower the NLL of these forecasts
    assert nll(fitted) < nll(plain)
