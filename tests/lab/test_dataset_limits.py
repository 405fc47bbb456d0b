"""Reading a dataset is bounded (rows, decompressed bytes, problems kept) and a file that cannot be read is a
DatasetError with a sentence, never another exception (a 500 on the lab's upload form)."""
from __future__ import annotations

import csv
import gzip
import json
import subprocess
import sys
import textwrap

import pytest

from search_engine.lab import datasets
from search_engine.lab.datasets import (MAX_COLUMNS, MAX_ERRORS, MAX_ROW_CHARS, MAX_ROWS, UPLOAD_MAX_BYTES,
                                        DatasetError, check_decompressed_size, read_dataset, write_dataset)
from tests.lab.helpers import ROOT, synthetic_rows

COLUMNS = ["comparison_id", "pack", "anchor_code", "candidate_code", "hardware", "aggregated_speedup", "source"]


def test_the_real_datasets_fit_the_row_limit():
    # export_dataset --from records of the bundled recordings: 13,751 comparisons and 99,672 pairs
    assert MAX_ROWS >= 2 * 99_672


def test_a_gzip_bomb_of_empty_rows_is_refused_at_the_row_limit_with_bounded_memory(tmp_path):
    """600,000 lines of {} in 1.8 KB of gzip: before, every raw row and 7 RowErrors per row were kept (14 s,
    +515 MiB here; 1 GB in the web process). Measured in a fresh process, whose peak RSS is its own."""
    bomb = tmp_path / "bomb.jsonl.gz"
    bomb.write_bytes(gzip.compress(b"{}\n" * 600_000, 9))
    assert bomb.stat().st_size < 4000
    script = textwrap.dedent(f"""
        import json, resource, sys
        sys.path.insert(0, {str(ROOT)!r})
        from search_engine.lab.datasets import DatasetError, read_dataset
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            read_dataset({str(bomb)!r})
            out = {{"refused": False}}
        except DatasetError as exc:
            out = {{"refused": True, "head": str(exc).splitlines()[0], "kept": len(exc.errors), "total": exc.total}}
        out["extra_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        print(json.dumps(out))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["refused"]
    assert f"more than {MAX_ROWS:,} rows, the most one dataset may hold; reading stopped there" in out["head"]
    assert out["kept"] == MAX_ERRORS and out["total"] == 7 * MAX_ROWS
    assert out["extra_kib"] < 100 * 1024, f"peak memory grew by {out['extra_kib'] / 1024:.0f} MiB"


def test_reading_stops_past_max_bytes_decompressed(tmp_path):
    path = tmp_path / "big.jsonl.gz"
    write_dataset(path, synthetic_rows({"a": [1.0] * 40}))
    with pytest.raises(DatasetError, match=r"more than 4,096 bytes once decompressed, the most a dataset file may "
                                           r"hold here; reading stopped there and nothing was imported\."):
        read_dataset(path, max_bytes=4096)
    assert len(read_dataset(path)) == 40


def test_the_upload_cap_is_checked_on_the_decompressed_bytes_without_reading_them_all(tmp_path):
    bomb = tmp_path / "bomb.jsonl.gz"
    bomb.write_bytes(gzip.compress(b"\n" * (UPLOAD_MAX_BYTES + 1), 1))
    assert bomb.stat().st_size < 1024 * 1024
    with pytest.raises(DatasetError, match=r"more than 64 MiB once decompressed"):
        check_decompressed_size(bomb)
    small = tmp_path / "small.jsonl.gz"
    write_dataset(small, synthetic_rows({"a": [1.0]}))
    assert check_decompressed_size(small) == len(gzip.decompress(small.read_bytes()))


def test_the_first_problems_are_kept_and_all_counted(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("{}\n" * 1000)
    with pytest.raises(DatasetError) as err:
        read_dataset(path)
    assert len(err.value.errors) == MAX_ERRORS and err.value.total == 7000
    assert str(err.value).splitlines()[0] == f"{path}: 7,000 problems (the first {MAX_ERRORS} are listed); " \
                                             "nothing was imported."
    assert "... and 6,800 more" in str(err.value)  # every kept problem printed, as the first line says


def test_a_csv_cell_over_128_kib_is_read(tmp_path):
    path = tmp_path / "big.csv"
    anchor = "// " + "x" * (200 * 1024) + "\n__global__ void k() {}\n"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        writer.writerow(["r1", "p", anchor, "cand", "H200", "1.5", "s"])
    assert read_dataset(path).rows[0]["anchor_code"] == anchor


def test_a_csv_the_csv_module_refuses_cannot_be_read_with_its_line(tmp_path, monkeypatch):
    limit = csv.field_size_limit()
    monkeypatch.setattr(datasets, "CSV_FIELD_LIMIT", 1000)
    path = tmp_path / "big.csv"
    path.write_text(",".join(COLUMNS) + "\nr1,p,a,c,H200,1.5,s\nr2,p," + "y" * 2000 + ",c,H200,1.5,s\n")
    try:
        csv.field_size_limit(1000)
        with pytest.raises(DatasetError, match=r"big\.csv: cannot be read \(line 3: field larger than field limit"):
            read_dataset(path)
    finally:
        csv.field_size_limit(limit)


def test_a_line_nested_too_deeply_is_a_row_error(tmp_path):
    path = tmp_path / "deep.jsonl"
    good = json.dumps(synthetic_rows({"a": [1.0]})[0])
    path.write_text(good + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(DatasetError) as err:
        read_dataset(path)
    assert [str(e) for e in err.value.errors] == ["row 2: cannot be read: it is nested too deeply"]


def test_a_csv_json_cell_nested_too_deeply_is_a_field_error(tmp_path):
    path = tmp_path / "deep.csv"
    path.write_text(",".join(COLUMNS) + ",knobs\nr1,p,a,c,H200,1.5,s," + "[" * 100_000 + "\n")
    with pytest.raises(DatasetError, match=r"row 1, field 'knobs': must be a JSON object \(JSON text in a CSV cell\): "
                                           r"cannot be read, it is nested too deeply"):
        read_dataset(path)


@pytest.mark.parametrize("extra, message", [
    ('"true_bin": 1e400', "field 'true_bin': must be an integer within 1..8, got inf"),
    ('"true_bin": NaN', "field 'true_bin': must be an integer within 1..8, got nan"),
    ('"reference_ms": ' + "9" * 400, "field 'reference_ms': must be a positive number, got 99"),
    ('"source_id": ' + "9" * 5000, "row 1: is not valid JSON (Exceeds the limit (4300 digits)"),
])
def test_numbers_json_allows_but_python_cannot_convert_are_row_errors(tmp_path, extra, message):
    row = {"comparison_id": "1", "pack": "p", "anchor_code": "a", "candidate_code": "b", "hardware": "h",
           "aggregated_speedup": 2.0, "source": "s"}
    path = tmp_path / "n.jsonl"
    path.write_text(json.dumps(row)[:-1] + ", " + extra + "}\n")
    with pytest.raises(DatasetError) as err:
        read_dataset(path)
    assert message in str(err.value)
    assert len(str(err.value)) < 1000


def test_an_upper_case_gzip_name_is_read(tmp_path):
    rows = synthetic_rows({"a": [1.0, 2.0]})
    write_dataset(tmp_path / "d.jsonl.gz", rows)
    upper = tmp_path / "D.JSONL.GZ"
    (tmp_path / "d.jsonl.gz").rename(upper)
    assert read_dataset(upper).rows == rows


def test_a_row_longer_than_the_row_limit_is_refused_before_it_is_parsed(tmp_path):
    """A 64 MiB line of {"k0":0,"k1":0,...} took 915 MiB parsed; the row limit refuses it unread."""
    path = tmp_path / "wide.jsonl"
    path.write_text(json.dumps(synthetic_rows({"a": [1.0]})[0]) + "\n{" +
                    ",".join(f'"k{i}":0' for i in range(MAX_ROW_CHARS // 8)) + "}\n")
    with pytest.raises(DatasetError, match=r"wide\.jsonl: row 2 is longer than 4 MiB of text \(with any blank lines "
                                           r"before it\), the most one row may hold; reading stopped there"):
        read_dataset(path)
    blank = tmp_path / "blank.jsonl"
    blank.write_bytes(b"\n" * (MAX_ROW_CHARS + 2) + b"{}\n")
    with pytest.raises(DatasetError, match=r"row 1 is longer than 4 MiB of text"):
        read_dataset(blank)
    wide_csv = tmp_path / "wide.csv"
    wide_csv.write_text(",".join(COLUMNS) + "\nr1,p,a,c,H200,1.5,s\nr2,p," + "y" * 2000 + ",c,H200,1.5,s\n")
    with pytest.raises(DatasetError, match=r"row 2 is longer than 1,000 characters of text"):
        read_dataset(wide_csv, max_row_chars=1000)
    assert len(read_dataset(wide_csv, max_row_chars=2100, default_source="x")) == 2


def test_a_csv_header_of_too_many_columns_is_refused(tmp_path):
    path = tmp_path / "cols.csv"
    path.write_text(",".join(COLUMNS + [f"c{i}" for i in range(MAX_COLUMNS)]) + "\n" + ",\n" * 10)
    with pytest.raises(DatasetError, match=rf"the header has {len(COLUMNS) + MAX_COLUMNS:,} columns, more than the "
                                           rf"{MAX_COLUMNS:,} a dataset may have"):
        read_dataset(path)


def test_a_corrupt_gzip_cannot_be_read(tmp_path):
    data = bytearray(gzip.compress(b'{"a": 1}\n' * 100_000))
    for i in range(30, 200):
        data[i] ^= 0x5A
    path = tmp_path / "corrupt.jsonl.gz"
    path.write_bytes(bytes(data))
    for read in (read_dataset, check_decompressed_size):
        with pytest.raises(DatasetError, match=r"corrupt\.jsonl\.gz: cannot be read \(Error -3 while decompressing"):
            read(path)
