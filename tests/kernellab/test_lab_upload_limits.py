"""The lab's upload form: bombs are refused at a limit, unreadable files get a sentence and never a 500 (and
leave a stored dataset as it was), upper-case extensions are accepted, and no server path is shown."""
from __future__ import annotations

import csv
import gzip
import io
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from search_engine.lab import datasets
from search_engine.lab.datasets import MAX_ERRORS, MAX_ROWS, UPLOAD_MAX_BYTES, read_dataset
from tests.lab.helpers import synthetic_rows

pytestmark = pytest.mark.django_db

COLUMNS = ["comparison_id", "pack", "anchor_code", "candidate_code", "hardware", "aggregated_speedup", "source"]


def _post(client, user, filename: str, content: bytes, **fields):
    client.force_login(user)
    return client.post("/lab/datasets/upload", {"file": SimpleUploadedFile(filename, content), "workspace": "team",
                                                **fields}, follow=True)


def _jsonl(rows) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _stored(client, members, data_dir):
    """A dataset 'kept' already in the team's lab (3 rows), and its bytes."""
    response = _post(client, members["engineer"], "kept.jsonl", _jsonl(synthetic_rows({"a": [0.5, 1.5, 3.0]})))
    assert "Imported 3 comparison rows as &#x27;kept&#x27;" in response.content.decode()
    target = data_dir / "datasets" / "team" / "kept.jsonl"
    return target, target.read_bytes()


def test_a_gzip_bomb_of_empty_rows_is_refused_at_the_row_limit(client, members, data_dir):
    bomb = gzip.compress(b"{}\n" * 600_000, 9)
    response = _post(client, members["engineer"], "bomb.jsonl.gz", bomb)
    assert response.status_code == 400
    body = response.content.decode()
    assert f"bomb.jsonl.gz: more than {MAX_ROWS:,} rows, the most one dataset may hold; reading stopped there" in body
    assert body.count("<li>row ") == MAX_ERRORS
    assert not (data_dir / "datasets" / "team" / "bomb.jsonl").exists()


def test_a_gzip_past_the_decompressed_cap_is_refused_before_it_is_read(client, members, data_dir):
    bomb = gzip.compress(b"\n" * (UPLOAD_MAX_BYTES + 1), 1)
    response = _post(client, members["engineer"], "blank.jsonl.gz", bomb)
    body = response.content.decode()
    assert response.status_code == 200  # the form's message after the redirect
    assert "blank.jsonl.gz: more than 64 MiB once decompressed, the most a dataset file may hold here" in body
    assert str(data_dir) not in body and "/tmp/" not in body


def test_a_csv_with_a_cell_over_128_kib_is_imported(client, members, data_dir):
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    anchor = "// " + "x" * (200 * 1024) + "\n__global__ void k() {}\n"
    writer.writerow(["r1", "p", anchor, "cand", "H200", "1.5", "s"])
    response = _post(client, members["engineer"], "big.csv", out.getvalue().encode())
    assert "Imported 1 comparison rows as &#x27;big&#x27;" in response.content.decode()
    assert read_dataset(data_dir / "datasets" / "team" / "big.jsonl").rows[0]["anchor_code"] == anchor


def test_a_csv_the_csv_module_refuses_gets_the_cannot_be_read_sentence_and_keeps_the_stored_one(
        client, members, data_dir, monkeypatch):
    target, before = _stored(client, members, data_dir)
    limit = csv.field_size_limit()
    monkeypatch.setattr(datasets, "CSV_FIELD_LIMIT", 1000)
    try:
        csv.field_size_limit(1000)
        content = (",".join(COLUMNS) + "\nr1,p," + "y" * 2000 + ",c,H200,1.5,s\n").encode()
        response = _post(client, members["engineer"], "kept.csv", content, name="kept", replace="1")
    finally:
        csv.field_size_limit(limit)
    assert response.status_code == 200
    assert "kept.csv: cannot be read (line 2: field larger than field limit (1000))." in response.content.decode()
    assert target.read_bytes() == before


def test_a_line_nested_too_deeply_is_a_row_error_and_keeps_the_stored_one(client, members, data_dir):
    target, before = _stored(client, members, data_dir)
    content = _jsonl(synthetic_rows({"a": [1.0]})) + b"[" * 100_000 + b"]" * 100_000 + b"\n"
    response = _post(client, members["engineer"], "deep.jsonl", content, name="kept", replace="1")
    assert response.status_code == 400
    body = response.content.decode()
    assert "deep.jsonl was not imported" in body and "row 2: cannot be read: it is nested too deeply" in body
    assert target.read_bytes() == before


@pytest.mark.parametrize("filename, stored", [("Rows.JSONL", "Rows"), ("rows.CSV", "rows"), ("Up.Jsonl.GZ", "Up")])
def test_an_upper_case_extension_is_accepted_and_stripped(client, members, data_dir, filename, stored):
    rows = synthetic_rows({"a": [0.5, 1.5]})
    if filename.lower().endswith(".csv"):
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(COLUMNS)
        writer.writerows([[r[c] for c in COLUMNS] for r in rows])
        content = out.getvalue().encode()
    else:
        content = _jsonl(rows)
        if filename.lower().endswith(".gz"):
            content = gzip.compress(content)
    response = _post(client, members["engineer"], filename, content)
    assert f"Imported 2 comparison rows as &#x27;{stored}&#x27; in Team." in response.content.decode()
    assert (data_dir / "datasets" / "team" / f"{stored}.jsonl").is_file()


def test_the_lab_page_shows_no_server_path(client, members, data_dir):
    _stored(client, members, data_dir)
    client.force_login(members["viewer"])
    body = client.get("/lab/").content.decode()
    assert "<code>team/kept.jsonl</code>" in body
    assert str(data_dir) not in body
