"""manage.py search, QA round 3 (command line): a problem folder whose records the replay backend cannot answer from
is refused in one sentence, a time budget that is no number of seconds is refused, only ASCII digits are an id,
kombu's "No hostname was supplied" is not printed, and Ctrl-C while the search is set up is one sentence."""
import gzip
import io
import json
import logging
import shutil
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from kernellab.models import Problem, SearchRun

pytestmark = pytest.mark.django_db(transaction=True)

SAXPY = Path(__file__).resolve().parents[1] / "gpu_runner" / "problems" / "saxpy"


@pytest.fixture
def lab(settings, tmp_path, members):
    settings.DATA_DIR = tmp_path / "data"
    return members


def _search(*args) -> str:
    out = io.StringIO()
    call_command("search", *args, stdout=out)
    return out.getvalue()


def _renamed_saxpy(tmp_path, name: str) -> Path:
    """A copy of saxpy named `name`, keeping saxpy's records (which name saxpy)."""
    folder = tmp_path / name
    shutil.copytree(SAXPY, folder)
    toml = folder / "problem.toml"
    toml.write_text(toml.read_text().replace('name = "saxpy"', f'name = "{name}"', 1))
    assert f'name = "{name}"' in toml.read_text()
    return folder


def _write_records(folder: Path, content: bytes) -> Path:
    path = folder / "records" / "h200.jsonl.gz"
    path.write_bytes(content)
    return path


# ---- 1. records the replay backend cannot answer from ----------------------------------------------
@pytest.mark.parametrize("content, why", [
    (b"garbage\n", r"it is not gzip-compressed JSON lines \(Not a gzipped file"),
    (b"", "it holds no records"),
    (gzip.compress(b""), "it holds no records"),
    (gzip.compress(b"not json\n"), "it holds no records"),
    (gzip.compress(b'{"problem": "saxpy", "source_hash": "abc", "status": "ok"}\n')[:12],
     "it is cut off before its first record"),
], ids=["not-gzip", "empty-file", "empty-gzip", "no-json", "cut-off"])
def test_a_folder_whose_records_hold_no_readable_measurement_is_refused_and_nothing_is_stored(lab, tmp_path, settings,
                                                                                           content, why):
    folder = _renamed_saxpy(tmp_path, "garb_rec")
    path = _write_records(folder, content)
    with pytest.raises(CommandError) as raised:
        _search(str(folder), "--backend", "replay", "--budget", "2", "--surrogate", "roofline")
    message = str(raised.value)
    assert message.startswith("The replay backend cannot measure ")
    assert f"{path} holds no readable measurement of garb_rec, since " in message
    assert __import__("re").search(why, message), message
    assert message.count(". ") == 0 and message.endswith(".")  # one sentence
    assert not Problem.objects.exists() and not SearchRun.objects.exists()
    assert not (settings.DATA_DIR / "records").exists()


def test_a_folder_whose_records_are_another_problems_is_refused_naming_it(lab, tmp_path, settings):
    folder = _renamed_saxpy(tmp_path, "uni_rs")  # saxpy's own records, whose every record says "saxpy"
    with pytest.raises(CommandError, match=r"holds no readable measurement of uni_rs, since its records are of "
                                           r"another problem \(saxpy\)\."):
        _search(str(folder), "--backend", "replay", "--budget", "2", "--surrogate", "roofline")
    assert not Problem.objects.exists() and not SearchRun.objects.exists()
    assert not (settings.DATA_DIR / "records").exists()


def test_the_auto_backend_without_a_gpu_refuses_them_too(lab, tmp_path, monkeypatch, embedded_setup):
    monkeypatch.setattr("gpu_runner.gpu_present", lambda: False)
    folder = _renamed_saxpy(tmp_path, "garb_rec")
    _write_records(folder, b"garbage\n")
    with pytest.raises(CommandError, match="The auto backend cannot measure .* holds no readable measurement"):
        _search(str(folder), "--budget", "2", "--surrogate", "roofline")
    assert not SearchRun.objects.exists()


def test_a_broken_file_does_not_replace_the_records_an_earlier_search_copied_in(lab, tmp_path, settings):
    folder = tmp_path / "saxpy"
    shutil.copytree(SAXPY, folder)
    _search(str(folder), "--backend", "replay", "--budget", "2", "--surrogate", "roofline")
    copied = next((settings.DATA_DIR / "records").rglob("h200.jsonl.gz"))
    before = copied.read_bytes()
    _write_records(folder, b"garbage\n")
    with pytest.raises(CommandError, match="holds no readable measurement of saxpy"):
        _search(str(folder), "--backend", "replay", "--budget", "2", "--surrogate", "roofline")
    assert copied.read_bytes() == before
    assert SearchRun.objects.count() == 1


def test_an_uploaded_problem_whose_stored_records_cannot_be_read_is_refused_by_name(lab, tmp_path, settings):
    """A copy an earlier search made before the check existed (or a file damaged since) answers nothing either."""
    _search(str(SAXPY), "--backend", "replay", "--budget", "1", "--surrogate", "roofline")
    stored = next((settings.DATA_DIR / "records").rglob("h200.jsonl.gz"))
    stored.write_bytes(b"garbage\n")
    with pytest.raises(CommandError, match=rf"^The replay backend cannot measure SAXPY: {stored} holds no readable "
                                           r"measurement of saxpy, since it is not gzip-compressed JSON lines"):
        _search("saxpy", "--backend", "replay", "--budget", "1", "--surrogate", "roofline")
    assert SearchRun.objects.count() == 1


# ---- 4. a time budget that is no number of seconds -------------------------------------------------
@pytest.mark.parametrize("seconds", ["nan", "inf", "-inf", "NaN"])
def test_a_time_budget_of_nan_or_infinity_is_refused_before_anything_is_stored(lab, tmp_path, seconds):
    with pytest.raises(CommandError, match=r"^The time budget must be a positive number of seconds\.$"):
        _search(str(SAXPY), "--backend", "replay", f"--seconds={seconds}", "--budget", "2", "--out", str(tmp_path / "o"))
    assert not Problem.objects.exists() and not SearchRun.objects.exists()
    assert not (tmp_path / "o").exists()


def test_the_report_of_a_timed_search_is_strict_json(lab, tmp_path):
    _search(str(SAXPY), "--backend", "replay", "--seconds", "30", "--budget", "2", "--surrogate", "roofline",
            "--out", str(tmp_path / "o"))
    json.loads((tmp_path / "o" / "report.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))


# ---- 7. an id is ASCII digits ------------------------------------------------------------------------
@pytest.mark.parametrize("digits", ["⁰¹²³⁴⁵⁶⁷⁸⁹", "٠١٢٣٤٥٦٧٨٩", "０１２３４５６７８９"],
                         ids=["superscript", "arabic-indic", "fullwidth"])
def test_the_id_in_unicode_digits_is_an_unknown_name_not_the_id(lab, digits):
    """int() refuses superscripts (a traceback before) and reads the others as the id (a search of that problem)."""
    _search(str(SAXPY), "--backend", "replay", "--budget", "1", "--surrogate", "roofline")  # uploads saxpy
    saxpy = Problem.objects.get()
    key = str(saxpy.pk).translate(str.maketrans("0123456789", digits))
    with pytest.raises(CommandError, match=rf"^Team has no problem '{key}' \(and {key} is no problem folder\); "
                                           r"problems: saxpy\.$"):
        _search(key, "--backend", "replay", "--budget", "1", "--surrogate", "roofline")
    assert SearchRun.objects.count() == 1


def test_an_ascii_id_still_finds_the_problem(lab):
    _search(str(SAXPY), "--backend", "replay", "--budget", "1", "--surrogate", "roofline")
    saxpy = Problem.objects.get()
    _search(str(saxpy.pk), "--backend", "replay", "--budget", "1", "--surrogate", "roofline")
    assert SearchRun.objects.filter(problem=saxpy).count() == 2


# ---- 12. no kombu noise; Ctrl-C while the search is set up --------------------------------------------
def test_a_search_prints_no_kombu_hostname_warning(lab, caplog):
    with caplog.at_level(logging.WARNING):
        _search(str(SAXPY), "--backend", "replay", "--budget", "2", "--surrogate", "roofline")
    assert SearchRun.objects.get().status == "finished"
    assert not [r for r in caplog.records if "No hostname was supplied" in r.getMessage()]
    # Only for the search: the filter is gone afterwards.
    assert not logging.getLogger("kombu.connection").filters


def test_ctrl_c_before_the_search_starts_is_one_sentence_and_stores_nothing(lab, monkeypatch):
    from kernellab.management.commands import search

    def interrupted(**kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(search, "search_create", interrupted)
    with pytest.raises(CommandError, match=r"^The search was interrupted before it started; nothing was stored\.$") \
            as raised:
        _search(str(SAXPY), "--backend", "replay", "--budget", "2")
    assert raised.value.returncode == 130
    assert not Problem.objects.exists() and not SearchRun.objects.exists()


def test_ctrl_c_after_the_run_is_stored_says_which_run_is_left_unstarted(lab, monkeypatch):
    from kernellab.management.commands import search

    def interrupted(**kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(search, "folder_records_copy", interrupted)
    with pytest.raises(CommandError, match=r"^The search was interrupted before it started; run \d+ is stored but "
                                           r"not started \(start it from the web app\)\.$") as raised:
        _search(str(SAXPY), "--backend", "replay", "--budget", "2")
    assert raised.value.returncode == 130
    assert SearchRun.objects.get().status == "created"
