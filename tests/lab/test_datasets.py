"""Datasets: the GPU Forecasters layout, all-or-nothing reading with row/field errors, pairs, splits."""
from __future__ import annotations

import csv
import gzip
import json

import pytest

from search_engine.bins import DEFAULT_BINS
from search_engine.lab.datasets import (COMPARISON, PAIR, DatasetError, neighbour_pairs, read_dataset, row_request,
                                        split_rows, write_dataset)
from tests.lab.helpers import synthetic_rows


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_it_round_trips_rows_through_gzip_jsonl(tmp_path):
    rows = synthetic_rows({"a": [0.3, 1.2, 5.0]})
    write_dataset(tmp_path / "d.jsonl.gz", rows)
    back = read_dataset(tmp_path / "d.jsonl.gz")
    assert back.kind == COMPARISON
    assert back.rows == rows
    assert [r["true_bin"] for r in back.rows] == [2, 5, 8]


def test_it_lists_every_bad_row_with_its_field_and_reads_nothing(tmp_path):
    rows = synthetic_rows({"a": [0.9, 1.1, 1.3, 2.2]})
    rows[1]["aggregated_speedup"] = -2
    del rows[2]["candidate_code"]
    rows[3]["true_bin"] = 5  # 2.2 is bin 7
    with pytest.raises(DatasetError) as err:
        read_dataset(_write_jsonl(tmp_path / "bad.jsonl", rows))
    text = str(err.value)
    assert "row 2, field 'aggregated_speedup': must be a positive finite number, got -2" in text
    assert "row 3, field 'candidate_code': is missing" in text
    assert "row 4, field 'true_bin': is 5 but the speedup 2.2 falls in bin 7" in text
    assert "row 1" not in text
    assert len(err.value.errors) == 3


def test_it_names_a_line_that_is_not_json(tmp_path):
    path = tmp_path / "cut.jsonl"
    path.write_text(json.dumps(synthetic_rows({"a": [1.0]})[0]) + "\n{\"comparison_id\": \"x\", \n")
    with pytest.raises(DatasetError, match=r"row 2: is not valid JSON"):
        read_dataset(path)


def test_it_refuses_a_repeated_id(tmp_path):
    rows = synthetic_rows({"a": [1.0, 2.0]})
    rows[1]["comparison_id"] = rows[0]["comparison_id"]
    with pytest.raises(DatasetError, match=r"row 2, field 'comparison_id': 'a-0' was already used by row 1"):
        read_dataset(_write_jsonl(tmp_path / "dup.jsonl", rows))


def test_it_reads_csv_from_elsewhere_with_aliases_and_json_cells(tmp_path):
    path = tmp_path / "other.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "problem", "reference_code", "candidate_code", "gpu", "speedup", "candidate_launch", "note"])
        writer.writerow(["r1", "gemm", "ref code", "cand code", "A100", "3.1", json.dumps([{"kernel": "k"}]), "x"])
        writer.writerow(["r2", "gemm", "ref code", "cand code 2", "A100", "0.4", "", ""])
    data = read_dataset(path, default_source="imported:other.csv")
    assert [r["true_bin"] for r in data.rows] == [7, 2]
    assert data.rows[0]["candidate_launch"] == [{"kernel": "k"}]
    assert data.rows[0]["pack"] == "gemm" and data.rows[0]["source"] == "imported:other.csv"
    assert data.ignored_fields == ("note",)


def test_a_csv_json_cell_that_does_not_parse_is_an_error(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("comparison_id,pack,anchor_code,candidate_code,hardware,aggregated_speedup,source,knobs\n"
                    "r1,p,a,c,H200,1.0,x,{not json\n")
    with pytest.raises(DatasetError, match=r"row 1, field 'knobs': must be a JSON object \(JSON text in a CSV cell\)"):
        read_dataset(path)


def test_a_row_without_source_needs_a_default(tmp_path):
    row = synthetic_rows({"a": [1.0]})[0]
    del row["source"]
    path = _write_jsonl(tmp_path / "nosource.jsonl", [row])
    with pytest.raises(DatasetError, match="field 'source': is missing"):
        read_dataset(path)
    assert read_dataset(path, default_source="imported:x").rows[0]["source"] == "imported:x"


def test_pairs_are_one_knob_apart_in_both_directions_with_the_ratio_as_speedup():
    rows = synthetic_rows({"p": [1.0, 2.0, 4.0]})  # BLOCK 32, 64, 128
    pairs = neighbour_pairs(rows, knob_values={"BLOCK": [32, 64, 128], "ITEMS": [1]})
    ratios = sorted((p["parent_node_id"], p["child_node_id"], round(p["g_speedup"], 6)) for p in pairs)
    # 32 and 128 are not adjacent values of BLOCK, so they are not a generator move
    assert ratios == [("0", "1", 2.0), ("1", "0", 0.5), ("1", "2", 2.0), ("2", "1", 0.5)]
    assert {p["true_bin"] for p in pairs} == {DEFAULT_BINS.bin_of(2.0), DEFAULT_BINS.bin_of(0.5)}


def test_a_pair_request_anchors_the_child_on_its_parent(tmp_path):
    rows = synthetic_rows({"p": [1.0, 2.0]})
    pair = neighbour_pairs(rows)[0]
    write_dataset(tmp_path / "pairs.jsonl", [pair])
    back = read_dataset(tmp_path / "pairs.jsonl")
    assert back.kind == PAIR
    request = row_request(back.rows[0])
    assert request.reference["source"] == pair["parent_code"] == request.parent["source"]
    assert request.candidate["source"] == pair["child_code"]
    assert request.parent_speedup == pair["parent_speedup"]


def test_pair_ratio_must_agree_with_the_two_speedups(tmp_path):
    pair = neighbour_pairs(synthetic_rows({"p": [1.0, 2.0]}))[0]
    pair["g_speedup"] = 3.0
    pair["true_bin"] = 7
    with pytest.raises(DatasetError, match="child_speedup / parent_speedup is"):
        read_dataset(_write_jsonl(tmp_path / "p.jsonl", [pair]))


def test_split_by_problem_never_divides_a_problem():
    rows = synthetic_rows({"a": [1.0] * 3, "b": [1.0] * 3, "c": [1.0] * 3})
    rest, held = split_rows(rows, 0.34, seed=1, by_problem=True)
    assert {r["pack"] for r in rest}.isdisjoint({r["pack"] for r in held})
    assert len(rest) + len(held) == 9 and held


def test_gzip_that_is_cut_short_is_reported_not_raised_raw(tmp_path):
    good = tmp_path / "d.jsonl.gz"
    write_dataset(good, synthetic_rows({"a": [1.0] * 50}))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(good.read_bytes()[:40])
    with pytest.raises(DatasetError, match="cannot be read"):
        read_dataset(cut)
    assert gzip.open(good).read()
