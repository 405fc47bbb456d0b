from gpu_runner.observers.ncu import share_out

D = "gpu__time_duration.sum"


def test_each_candidate_gets_its_own_launches_in_order():
    rows = [("k", {D: 1.0}), ("k", {D: 2.0}), ("a", {D: 5.0}), ("b", {D: 7.0})]
    shared = share_out(rows, [1, 1, 2])
    assert shared[0][D] == 1.0 and shared[1][D] == 2.0
    assert shared[2][D] == 7.0  # a two-launch plan keeps its longer launch's metrics plainly named
    assert shared[2][f"0:a:{D}"] == 5.0


def test_a_candidate_whose_launches_are_missing_gets_nothing():
    assert share_out([("k", {D: 1.0})], [1, 1]) == [{D: 1.0}, None]


def test_a_recording_cut_mid_write_is_repaired_and_resumes(tmp_path):
    import gzip
    import json

    from gpu_runner.backends.replay import read_records
    from gpu_runner.recorder import recorded_hashes

    path = tmp_path / "h200.jsonl.gz"
    for i in range(3):
        if i == 2:
            complete = path.stat().st_size
        with gzip.open(path, "at") as handle:
            handle.write(json.dumps({"source_hash": f"h{i}"}) + "\n")
    path.write_bytes(path.read_bytes()[:complete + 12])  # killed while writing the third member
    assert recorded_hashes(path) == {"h0", "h1"}
    with gzip.open(path, "at") as handle:
        handle.write(json.dumps({"source_hash": "h3"}) + "\n")
    assert [r["source_hash"] for r in read_records(path)] == ["h0", "h1", "h3"]
