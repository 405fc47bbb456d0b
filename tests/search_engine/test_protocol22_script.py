"""benchmarks/device/protocol22_after_profile.sh: its runs are the files the rule reads, and it stops on missing input."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.scripts import loaded_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "device" / "protocol22_after_profile.sh"
SELECT = ROOT / "benchmarks" / "probes" / "cpu_2026-12-03" / "select_settings.py"


@pytest.fixture(scope="module")
def select_settings():
    with loaded_script(SELECT, "select_settings_under_test") as module:
        yield module


def test_its_twelve_runs_write_exactly_the_files_protocol_22s_rule_reads(select_settings):
    listed = subprocess.run(["bash", str(SCRIPT), "--list"], capture_output=True, text=True, check=True).stdout
    runs = [line.split() for line in listed.splitlines()]
    assert sorted(Path(run[0]).name for run in runs) == sorted(select_settings.run_files("R22", 22))
    assert all("--reference-profile" in run and "--skip-baselines" in run and "--lopo-searched-only" in run
               for run in runs)
    # The nine are trained on the families X18's committed runs were; the two conv-kind families on every other one.
    for run in runs:
        heldout = "_heldout_" in run[0]
        assert ("--exclude" in run) is not heldout, run
    hgemm = [run for run in runs if "hgemm_mma" in run[0]]
    assert len(hgemm) == 2 and all(run[run.index("--ignore-vendor") + 1] == "hgemm_mma" for run in hgemm)


def test_a_device_call_that_did_not_finish_stops_it_before_anything_is_stored(tmp_path):
    (tmp_path / "reference_profiles_bundled.json").write_text("{}")
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 1
    assert "reference_profiles_second.json is missing" in done.stderr
    assert "storing" not in done.stdout
