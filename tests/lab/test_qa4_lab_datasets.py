"""QA4: lab datasets: an import's final placement is exclusive, the exports write JSON Lines only, the readers'
sentences (BOM, non-UTF-8 bytes, gzip under a .jsonl name, the accepted suffixes, plurals) and train_surrogate's
default output under the workspace."""
from __future__ import annotations

import gzip
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.core.management.base import CommandError

from kernellab.models import Membership, Role
from search_engine.lab.datasets import DatasetError, read_dataset, write_dataset
from tests.lab.helpers import SAXPY_DIR, synthetic_rows

CSV_HEADER = "comparison_id,pack,anchor_code,candidate_code,hardware,aggregated_speedup,source\n"


def _csv_rows(n: int) -> str:
    return "".join(f"c{i},p,ref,cand,H200,1.5,x\n" for i in range(n))


# ---- 1. two imports of one name at once ----------------------------------------------------------------

def test_an_import_that_loses_the_name_to_another_is_refused_and_replaces_nothing(tmp_path, data_dir, workspace,
                                                                                   monkeypatch):
    from kernellab.services import lab

    ours, theirs = tmp_path / "ours.jsonl", tmp_path / "theirs.jsonl"
    write_dataset(ours, synthetic_rows({"ours": [1.5, 2.0]}))
    write_dataset(theirs, synthetic_rows({"theirs": [0.5]}))
    real_read = lab.read_dataset

    def read_while_another_import_lands(path, **kwargs):
        if path == ours:  # the other engineer's import is stored while ours is read (after our name check)
            lab.dataset_import(workspace=workspace, user=None, file=theirs, name="race")
        return real_read(path, **kwargs)

    monkeypatch.setattr(lab, "read_dataset", read_while_another_import_lands)
    with pytest.raises(lab.DatasetRejected) as err:
        lab.dataset_import(workspace=workspace, user=None, file=ours, name="race")
    assert str(err.value) == ("A dataset named 'race' exists already in Team; tick 'replace a dataset of the same "
                              "name' or choose another name.")
    stored = data_dir / "datasets" / "team"
    assert {r["pack"] for r in read_dataset(stored / "race.jsonl").rows} == {"theirs"}
    assert sorted(p.name for p in stored.iterdir()) == ["race.jsonl"]  # no temporary file left


def test_the_command_line_says_pass_replace_and_replace_still_replaces(tmp_path, data_dir, workspace, capsys):
    good = tmp_path / "good.csv"
    good.write_text(CSV_HEADER + _csv_rows(1))
    call_command("import_dataset", str(good), "--name", "mine")
    assert "Imported 1 comparison row as 'mine' in Team" in capsys.readouterr().out
    call_command("import_dataset", str(good), "--name", "mine", "--replace")
    assert "; 1 problem: p 1." in capsys.readouterr().out
    with pytest.raises(CommandError) as err:
        call_command("import_dataset", str(good), "--name", "mine")
    assert str(err.value) == "A dataset named 'mine' exists already in Team; pass --replace or choose another name."


# ---- 2. exports write JSON Lines only --------------------------------------------------------------------

def test_export_rl_refuses_an_output_named_csv_before_any_work(tmp_path, data_dir):
    dataset = tmp_path / "three.jsonl"
    write_dataset(dataset, synthetic_rows({"a": [0.5, 1.0], "b": [0.6, 1.1], "c": [0.7, 1.2]}))
    out = tmp_path / "rl.csv"
    with pytest.raises(CommandError) as err:
        call_command("export_rl", "--dataset", str(dataset), "--out", str(out))
    assert str(err.value) == f"--out {out}: the file is written as JSON Lines, so its name must end in .jsonl or .jsonl.gz."
    assert not out.exists()
    with pytest.raises(CommandError, match=r"^--eval-out .*held\.csv: the file is written as JSON Lines"):
        call_command("export_rl", "--dataset", str(dataset), "--out", str(tmp_path / "rl.jsonl"),
                     "--eval-out", str(tmp_path / "held.csv"))


def test_export_dataset_refuses_an_output_named_csv_before_any_work(tmp_path, data_dir):
    out = tmp_path / "rows.csv"
    with pytest.raises(CommandError) as err:
        call_command("export_dataset", str(out), "--from", "records", "--problems-dir", str(SAXPY_DIR),
                     "--problem", "no-such-problem")
    assert str(err.value) == (f"The output {out}: the file is written as JSON Lines, so its name must end in "
                              ".jsonl or .jsonl.gz.")
    with pytest.raises(CommandError, match=r"^--pairs .*pairs\.csv: the file is written as JSON Lines"):
        call_command("export_dataset", str(tmp_path / "rows.jsonl.gz"), "--pairs", str(tmp_path / "pairs.csv"),
                     "--from", "records", "--problems-dir", str(SAXPY_DIR), "--problem", "no-such-problem")


# ---- 3. what the readers say ----------------------------------------------------------------------------

def test_a_csv_or_jsonl_saved_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (CSV_HEADER + _csv_rows(3)).encode())
    assert len(read_dataset(path)) == 3
    lines = tmp_path / "notepad.jsonl"
    lines.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in synthetic_rows({"a": [1.5]})).encode())
    assert len(read_dataset(lines)) == 1


def test_a_byte_that_is_not_utf8_is_named_by_its_line(tmp_path):
    path = tmp_path / "latin1.csv"
    text = (CSV_HEADER + _csv_rows(400)).encode()
    at = text.index(b"c300,")  # line 302: the header is line 1, past the reader's first block
    path.write_bytes(text[:at] + b"\xe9" + text[at + 1:])
    with pytest.raises(DatasetError) as err:
        read_dataset(path)
    assert str(err.value) == f"{path}: cannot be read: line 302 holds a byte that is not UTF-8 (0xe9); save it as UTF-8."


def test_a_gzip_file_named_jsonl_is_said_to_be_gzip(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in synthetic_rows({"a": [1.5]})).encode()))
    with pytest.raises(DatasetError) as err:
        read_dataset(path)
    assert str(err.value) == f"{path}: the file is gzip-compressed; name it .jsonl.gz to import it."


def test_the_command_line_names_every_accepted_suffix(tmp_path, data_dir, workspace):
    other = tmp_path / "rows.txt"
    other.write_text("x\n")
    with pytest.raises(CommandError) as err:
        call_command("import_dataset", str(other))
    assert str(err.value) == (f"{other}: unsupported file type; import a .jsonl, .jsonl.gz or .csv file "
                              "(also .ndjson, .ndjson.gz and .csv.gz).")


@pytest.mark.django_db
def test_the_web_form_takes_an_ndjson_gz_file_as_the_command_line_does(client, data_dir, workspace,
                                                                       django_user_model):
    user = django_user_model.objects.create_user(username="eng", password="pw-eng-123")
    Membership.objects.create(workspace=workspace, user=user, role=Role.ENGINEER)
    client.force_login(user)
    body = gzip.compress("".join(json.dumps(r) + "\n" for r in synthetic_rows({"a": [1.5, 2.0]})).encode())
    client.post("/lab/datasets/upload", {"file": SimpleUploadedFile("rows.ndjson.gz", body)}, follow=True)
    assert len(read_dataset(data_dir / "datasets" / "team" / "rows.jsonl")) == 2


def test_the_problems_said_to_be_listed_are_the_ones_printed(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("{}\n" * 1000)
    with pytest.raises(DatasetError) as err:
        read_dataset(path)
    lines = str(err.value).splitlines()
    assert lines[0] == f"{path}: 7,000 problems (the first 200 are listed); nothing was imported."
    assert len([line for line in lines if line.startswith("  row ")]) == 200
    assert lines[-1] == "  ... and 6,800 more"


def test_an_isotonic_recalibration_is_an_isotonic_one(tmp_path, data_dir, capsys):
    dataset = tmp_path / "saxpy.jsonl"
    call_command("export_dataset", str(dataset), "--from", "records", "--problems-dir", str(SAXPY_DIR))
    call_command("train_surrogate", "--dataset", str(dataset), "--surrogate", "roofline",
                 "--recalibrate", "isotonic", "--out", str(tmp_path / "iso.json"))
    assert "Fitted an isotonic recalibration of roofline@1 on " in capsys.readouterr().out


# ---- 4. train_surrogate's default output is the workspace's ------------------------------------------------

def test_a_model_saved_without_out_goes_to_the_workspace_folder(tmp_path, data_dir, workspace, capsys):
    from kernellab.models import Workspace

    Workspace.objects.create(name="Other", slug="other")
    dataset = tmp_path / "three.jsonl.gz"
    write_dataset(dataset, synthetic_rows({"a": [0.5, 1.0, 2.0], "b": [0.6, 1.1, 2.2], "c": [0.7, 1.2, 2.4]}))
    call_command("train_surrogate", "--dataset", str(dataset), "--workspace", "team")
    saved = data_dir / "surrogates" / "team" / "learned-three.pkl"
    assert saved.is_file() and f"Saved to {saved}." in capsys.readouterr().out
    assert not (data_dir / "surrogates" / "learned-three.pkl").exists()
    with pytest.raises(CommandError, match=r"Several workspaces exist; pass --workspace \(one of other, team\)\. "
                                           r"\(Or name the file to save with --out\.\)"):
        call_command("train_surrogate", "--dataset", str(dataset))
