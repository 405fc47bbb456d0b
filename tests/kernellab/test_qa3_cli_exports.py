"""export_dataset, export_rl and train_surrogate (QA round 3, command line): an --out that cannot be written is
refused before the work, a write that fails late is one sentence, --eval-fraction is checked under its own name,
an unknown --problem is named, and a records file that cannot be read is named rather than exported as nothing."""
from __future__ import annotations

import errno
import gzip
import io
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from search_engine.lab.datasets import write_dataset
from tests.lab.helpers import synthetic_rows

PROC = Path("/proc")


@pytest.fixture
def dataset(tmp_path, data_dir):
    path = tmp_path / "three.jsonl"
    write_dataset(path, synthetic_rows({"a": [0.5, 1.0, 2.0], "b": [0.6, 1.1, 2.2], "c": [0.7, 1.2, 2.4]}))
    return path


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "a_file"
    path.write_text("not a folder")
    return path


def _unwritable(a_file) -> dict[str, tuple[str, str]]:
    """name: (the --out given, what the refusal says of it)."""
    cases = {"under-a-file": (str(a_file / "x.jsonl"), rf"cannot be written: {a_file} is a file, not a folder\.$")}
    if PROC.is_dir():
        cases["proc"] = ("/proc/x.jsonl", r"cannot be written: /proc takes no new file \(.+\)\.$")
    return cases


@pytest.fixture
def export_reads_nothing(monkeypatch):
    from kernellab.management.commands import export_dataset

    monkeypatch.setattr(export_dataset, "records_dataset", lambda **kw: pytest.fail("exported before the check"))
    monkeypatch.setattr(export_dataset, "database_rows", lambda **kw: pytest.fail("exported before the check"))


# ---- 5. an --out that cannot be written, checked first -----------------------------------------------
@pytest.mark.parametrize("case", ["under-a-file", "proc"])
def test_export_dataset_refuses_an_output_it_cannot_write_before_exporting(tmp_path, data_dir, a_file,
                                                                         export_reads_nothing, case):
    cases = _unwritable(a_file)
    if case not in cases:
        pytest.skip("no /proc here")
    out, said = cases[case]
    with pytest.raises(CommandError, match=rf"^The output {out} {said}"):
        call_command("export_dataset", out, "--from", "records")
    with pytest.raises(CommandError, match=rf"^--pairs {out} {said}"):
        call_command("export_dataset", str(tmp_path / "rows.jsonl"), "--from", "records", "--pairs", out)
    assert not (tmp_path / "rows.jsonl").exists()


def test_two_outputs_named_as_one_file_are_refused_before_anything_is_read(tmp_path, data_dir, export_reads_nothing,
                                                                          monkeypatch):
    """The second write replaced the first and the command said it wrote both (QA round 4)."""
    from kernellab.management.commands import export_rl

    out = tmp_path / "same.jsonl"
    with pytest.raises(CommandError, match=r"^The output and --pairs name the same file, .*same\.jsonl; give each its own\.$"):
        call_command("export_dataset", str(out), "--from", "records", "--pairs", str(tmp_path / "." / "same.jsonl"))
    monkeypatch.setattr(export_rl, "load_dataset", lambda *a, **k: pytest.fail("read before the check"))
    with pytest.raises(CommandError, match=r"^--out and --eval-out name the same file"):
        call_command("export_rl", "--dataset", "x.jsonl", "--out", str(out), "--eval-out", str(out))
    assert not out.exists()


@pytest.mark.parametrize("case", ["under-a-file", "proc"])
def test_export_rl_refuses_an_output_it_cannot_write_before_reading_the_dataset(tmp_path, data_dir, a_file,
                                                                              monkeypatch, case):
    from kernellab.management.commands import export_rl

    cases = _unwritable(a_file)
    if case not in cases:
        pytest.skip("no /proc here")
    out, said = cases[case]
    monkeypatch.setattr(export_rl, "load_dataset", lambda *a, **k: pytest.fail("read before the check"))
    with pytest.raises(CommandError, match=rf"^--out {out} {said}"):
        call_command("export_rl", "--dataset", "x.jsonl", "--out", out)
    with pytest.raises(CommandError, match=rf"^--eval-out {out} {said}"):
        call_command("export_rl", "--dataset", "x.jsonl", "--out", str(tmp_path / "rl.jsonl"), "--eval-out", out)


@pytest.mark.parametrize("surrogate, kind", [("learned", "pkl"), ("roofline", "json")])
def test_train_surrogate_refuses_an_output_it_cannot_write_before_reading_and_fitting(tmp_path, data_dir, a_file,
                                                                                    monkeypatch, surrogate, kind):
    from kernellab.management.commands import train_surrogate

    monkeypatch.setattr(train_surrogate, "load_dataset", lambda *a, **k: pytest.fail("read before the check"))

    def train(out):
        call_command("train_surrogate", "--dataset", "x.jsonl", "--surrogate", surrogate, "--out", out)

    with pytest.raises(CommandError, match=rf"^--out {tmp_path} is a folder; give a file name \(a \.{kind}\), e\.g\. "):
        train(str(tmp_path))
    for out, said in _unwritable(a_file).values():
        out = out.replace(".jsonl", f".{kind}")
        with pytest.raises(CommandError, match=rf"^--out {out} {said}"):
            train(out)


def test_the_check_leaves_nothing_behind_and_makes_no_folder(tmp_path, data_dir, export_reads_nothing, a_file):
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(CommandError):
        call_command("export_dataset", str(a_file / "deeper" / "x.jsonl"), "--from", "records")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# ---- 5. a write that fails late ----------------------------------------------------------------------
def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_export_dataset_says_in_one_sentence_why_it_could_not_write(tmp_path, data_dir, monkeypatch):
    from kernellab.management.commands import export_dataset

    rows = synthetic_rows({"a": [1.5]})
    monkeypatch.setattr(export_dataset, "records_dataset", lambda **kw: (rows, []))
    monkeypatch.setattr(export_dataset, "write_dataset", _no_space)
    out = tmp_path / "rows.jsonl"
    with pytest.raises(CommandError, match=rf"^Cannot write {out}: No space left on device\.$"):
        call_command("export_dataset", str(out), "--from", "records")


def test_export_rl_says_in_one_sentence_why_it_could_not_write(tmp_path, dataset, monkeypatch):
    from kernellab.management.commands import export_rl

    monkeypatch.setattr(export_rl, "write_dataset", _no_space)
    out = tmp_path / "rl.jsonl"
    with pytest.raises(CommandError, match=rf"^Cannot write {out}: No space left on device\.$"):
        call_command("export_rl", "--dataset", str(dataset), "--out", str(out), stdout=io.StringIO())


def test_train_surrogate_says_in_one_sentence_why_it_could_not_write(tmp_path, dataset, monkeypatch):
    """The folder the recalibration goes into became a file while it was fitted."""
    from kernellab.management.commands import train_surrogate

    fit = train_surrogate.recalibration.fit_on_forecasts
    folder = tmp_path / "made-later"

    def fit_then_lose_the_folder(*args, **kwargs):
        folder.write_text("now a file")
        return fit(*args, **kwargs)

    monkeypatch.setattr(train_surrogate.recalibration, "fit_on_forecasts", fit_then_lose_the_folder)
    out = folder / "recalibration.json"
    with pytest.raises(CommandError, match=rf"^Cannot write {out}: File exists\.$"):
        call_command("train_surrogate", "--dataset", str(dataset), "--surrogate", "roofline", "--out", str(out),
                     stdout=io.StringIO(), stderr=io.StringIO())


def test_train_surrogate_saving_a_learned_model_that_fails_is_one_sentence(tmp_path, dataset, monkeypatch):
    from search_engine.surrogates.learned import LearnedSurrogate

    monkeypatch.setattr(LearnedSurrogate, "save", lambda self, path: _no_space())
    out = tmp_path / "learned.pkl"
    with pytest.raises(CommandError, match=rf"^Cannot write {out}: No space left on device\.$"):
        call_command("train_surrogate", "--dataset", str(dataset), "--out", str(out), stdout=io.StringIO())


# ---- 12. --eval-fraction under its own name; an unknown --problem named ---------------------------------
@pytest.mark.parametrize("fraction", ["1.5", "-0.5", "0", "1", "nan"])
def test_export_rl_checks_eval_fraction_under_its_own_name_first(tmp_path, data_dir, monkeypatch, fraction):
    from kernellab.management.commands import export_rl

    monkeypatch.setattr(export_rl, "load_dataset", lambda *a, **k: pytest.fail("read before the check"))
    with pytest.raises(CommandError, match=r"^--eval-fraction must be between 0 and 1 \(both excluded\), not "):
        call_command("export_rl", "--dataset", "x.jsonl", "--out", str(tmp_path / "rl.jsonl"),
                     "--eval-out", str(tmp_path / "held.jsonl"), f"--eval-fraction={fraction}")


def test_export_dataset_names_an_unknown_problem_of_the_recorded_datasets(tmp_path, data_dir, export_reads_nothing):
    with pytest.raises(CommandError, match=r"^--problem nosuch: no such problem in the recorded datasets under .+; "
                                           r"there are: .*reduce_sum.*\.$"):
        call_command("export_dataset", str(tmp_path / "x.jsonl"), "--from", "records",
                     "--problem", "nosuch", "--problem", "reduce_sum")


@pytest.mark.django_db
def test_export_dataset_names_an_unknown_problem_of_the_database(tmp_path, data_dir, problem, export_reads_nothing):
    with pytest.raises(CommandError, match=rf"^--problem nosuch: no such problem in the database; there are: "
                                           rf"{problem.name}\.$"):
        call_command("export_dataset", str(tmp_path / "x.jsonl"), "--from", "db", "--problem", "nosuch")


# ---- 1. a records file that cannot be read is named ---------------------------------------------------
@pytest.mark.parametrize("content, why", [(b"garbage", "it is not gzip-compressed JSON lines"),
                                          (gzip.compress(b"{}\n")[:12], "it is cut off before its first record")])
def test_export_dataset_names_a_records_file_it_cannot_read(tmp_path, data_dir, content, why):
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(content)
    with pytest.raises(CommandError, match=rf"^{bad} cannot be read: {why}"):
        call_command("export_dataset", str(tmp_path / "x.jsonl"), "--from", "records", "--gpu", "none",
                     "--records-file", f"reduce_sum={bad}", stderr=io.StringIO())
    assert not (tmp_path / "x.jsonl").exists()
