"""The profiles-by-knob probe (benchmarks/probes/cpu_2026-12-05/profiles_by_knob.py) keeps away from the test families
and summarises the recorded profiles of each value of a knob."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scripts import loaded_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "probes" / "cpu_2026-12-05" / "profiles_by_knob.py"


@pytest.fixture(scope="module")
def probe():
    with loaded_script(_PATH, "profiles_by_knob_probe_under_test") as module:
        yield module


def test_a_test_family_and_a_family_without_records_are_refused(probe, capsys, tmp_path):
    assert probe.main(["--families", "maxpool2d,transpose", "--out", str(tmp_path / "x.json")]) == 2
    assert "transpose" in capsys.readouterr().err
    assert probe.main(["--families", "no_such_family", "--out", str(tmp_path / "x.json")]) == 2
    assert "no_such_family" in capsys.readouterr().err


def test_only_correct_profiled_variants_count_and_each_value_gets_its_medians(probe):
    l1 = probe.COUNTERS["l1_hit_pct"]
    records = [{"knobs": {"ALGO": "direct"}, "status": "ok", "speedup": 1.2, "profiler": {l1: 70.0}},
               {"knobs": {"ALGO": "direct"}, "status": "ok", "speedup": 1.0, "profiler": {l1: 60.0}},
               {"knobs": {"ALGO": "smem"}, "status": "ok", "speedup": 0.8, "profiler": {l1: 15.0}},
               {"knobs": {"ALGO": "smem"}, "status": "wrong", "speedup": 9.0, "profiler": {l1: 99.0}},
               {"knobs": {"ALGO": "smem"}, "status": "ok", "speedup": 5.0},  # not profiled
               {"variant": "reference", "status": "ok", "speedup": 1.0, "profiler": {l1: 50.0}}]
    table = probe.by_knob(probe.profiled(records), "ALGO")
    assert table["direct"]["variants"] == 2 and table["direct"]["median_speedup"] == pytest.approx(1.1)
    assert table["direct"]["l1_hit_pct"] == pytest.approx(65.0)
    assert table["smem"] == {"variants": 1, "median_speedup": 0.8, "l1_hit_pct": 15.0,
                             **{n: None for n in probe.COUNTERS if n != "l1_hit_pct"}}


def test_the_bundled_maxpool_records_carry_profiles(probe, tmp_path):
    out = tmp_path / "p.json"
    assert probe.main(["--families", "maxpool2d", "--out", str(out)]) == 0
    import json

    family = json.loads(out.read_text())["families"]["maxpool2d"]
    assert family["profiled"] >= 20 and set(family["ALGO"]) == {"direct", "smem"}
