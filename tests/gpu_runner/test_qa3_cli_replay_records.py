"""read_records says what is wrong with a records file that cannot be read (QA round 3, command line): strict, for a
caller that can show it, it raises naming the file; otherwise it logs that and reads on, so pages and workers keep
working. A recording cut off after its last complete record is still read as before."""
import gzip
import json
import logging

import pytest

from gpu_runner.backends.replay import RecordsUnreadable, read_records, records_unusable

RECORD = {"problem": "p", "source_hash": "h1", "status": "ok", "speedup": 2.0}


def _gz(path, *records, cut: int = 0):
    data = gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode())
    path.write_bytes(data[:-cut] if cut else data)
    return path


@pytest.mark.parametrize("content, why", [
    (b"garbage\n", "it is not gzip-compressed JSON lines (Not a gzipped file (b'ga'))"),
    (b"\x1f\x8b", "it is cut off before its first record"),
    (gzip.compress(b"\xff\xfe\x00"), "it is not gzip-compressed JSON lines ("),
], ids=["not-gzip", "cut-header", "not-text"])
def test_strict_reading_names_the_file_and_what_is_wrong(tmp_path, content, why):
    path = tmp_path / "h200.jsonl.gz"
    path.write_bytes(content)
    with pytest.raises(RecordsUnreadable) as raised:
        list(read_records(path, strict=True))
    assert str(raised.value).startswith(f"{path} cannot be read: {why}")
    assert raised.value.path == path and raised.value.why.startswith(why)


def test_otherwise_a_corrupt_file_is_logged_not_silently_empty(tmp_path, caplog):
    path = tmp_path / "h200.jsonl.gz"
    path.write_bytes(b"garbage\n")
    with caplog.at_level(logging.WARNING, logger="gpu_runner.backends.replay"):
        assert list(read_records(path)) == []
    assert [f"{path} cannot be read: it is not gzip-compressed JSON lines (Not a gzipped file (b'ga')); "
            "read as holding no records."] == [r.getMessage() for r in caplog.records]


def test_a_recording_cut_after_its_records_reads_them_without_a_word(tmp_path, caplog):
    path = _gz(tmp_path / "h200.jsonl.gz", RECORD, RECORD | {"source_hash": "h2"}, cut=6)
    with caplog.at_level(logging.WARNING):
        assert [r["source_hash"] for r in read_records(path, strict=True)] == ["h1", "h2"]
    assert not caplog.records


def test_a_line_that_is_json_but_no_record_is_skipped(tmp_path):
    path = tmp_path / "h200.jsonl.gz"
    path.write_bytes(gzip.compress(b'5\n"text"\n[1]\n' + json.dumps(RECORD).encode() + b"\n"))
    assert list(read_records(path, strict=True)) == [RECORD]


def test_records_unusable_says_why_a_file_answers_nothing_for_the_problem(tmp_path):
    path = tmp_path / "h200.jsonl.gz"
    assert records_unusable(_gz(path, RECORD), "p") is None
    assert records_unusable(_gz(path, {k: v for k, v in RECORD.items() if k != "problem"}), "p") is None
    assert records_unusable(_gz(path, RECORD, RECORD | {"problem": "q"}), "r") == \
        "its records are of another problem (p, q)"
    assert records_unusable(_gz(path), "p") == "it holds no records"
    assert records_unusable(_gz(path, {"problem": "p", "status": "ok"}), "p") == "none of its records has a source hash"
    path.write_bytes(b"")
    assert records_unusable(path, "p") == "it holds no records"
    path.write_bytes(b"garbage")
    assert records_unusable(path, "p").startswith("it is not gzip-compressed JSON lines")
    assert records_unusable(tmp_path / "missing.jsonl.gz", "p").startswith("it cannot be opened (")


def test_the_replay_backend_still_answers_from_a_good_file_and_nothing_from_a_bad_one(tmp_path):
    from gpu_runner.backends.replay import ReplayBackend

    class Spec:
        name, spec_hash, folder = "p", "x", tmp_path

    (tmp_path / "records").mkdir()
    _gz(tmp_path / "records" / "h200.jsonl.gz", RECORD)
    assert ReplayBackend(gpu="h200").has_records(Spec)
    (tmp_path / "records" / "h200.jsonl.gz").write_bytes(b"garbage")
    assert not ReplayBackend(gpu="h200").has_records(Spec)
