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


@pytest.mark.parametrize("protocol, config, extra", [(22, "R22", []), (26, "R26", ["--protocol", "26"]),
                                                    (27, "R22", ["--protocol", "27"]),
                                                    (28, "P28", ["--protocol", "28"]),
                                                    (29, "H29", ["--protocol", "29"]),
                                                    (30, "G30", ["--protocol", "30"]),
                                                    (31, "G31", ["--protocol", "31"]),
                                                    (32, "S32", ["--protocol", "32"])])
def test_its_twelve_runs_write_exactly_the_files_the_protocols_rule_reads(select_settings, protocol, config, extra):
    listed = subprocess.run(["bash", str(SCRIPT), "--list", *extra], capture_output=True, text=True, check=True).stdout
    runs = [line.split() for line in listed.splitlines()]
    if protocol == 32:  # and G31's rerun, seen in protocol 32's own test
        runs = [run for run in runs if "_G31-rerun_" not in run[0]]
    assert sorted(Path(run[0]).name for run in runs) == sorted(select_settings.run_files(config, protocol))
    assert all("--reference-profile" in run and "--skip-baselines" in run and "--lopo-searched-only" in run
               for run in runs)
    # P28, H29, G30, G31 and S32 read the four portable counters; the others all eight
    portable = ["--reference-counters", "portable"]
    assert all((run[run.index("--reference-profile") + 1:][:2] == portable) is
               (config in ("P28", "H29", "G30", "G31", "S32")) for run in runs)
    # G30, G31 and S32 have a Gaussian process as their run-local model, G31's and S32's widened for unseen knob values
    local_model = {"G30": "gp", "G31": "gp-novelty", "S32": "gp-novelty"}.get(config)
    assert all(("--local-model" in run and run[run.index("--local-model") + 1]) == (local_model or False)
               for run in runs)
    # S32 alone weighs the trained families by their likeness to the searched one
    assert all((run[run.index("--family-weights") + 1:][:3] == ["similar", "--similar-strength", "1"]
                if "--family-weights" in run else config != "S32") for run in runs)
    assert all(("--family-weights" in run) is (config == "S32") for run in runs)
    # H29 alone draws its measurements from the forecasts
    assert all(("--measure-choice" in run and run[run.index("--measure-choice") + 1] == "thompson")
               is (config == "H29") for run in runs)
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


def test_an_unknown_protocol_is_refused_with_the_usage():
    done = subprocess.run(["bash", str(SCRIPT), "--list", "--protocol", "23"], capture_output=True, text=True)
    assert done.returncode == 2 and "usage:" in done.stderr


def test_r26s_runs_must_have_read_an_h100s_counters_and_r22s_an_h200s(select_settings):
    def run(**read_on):
        return {"datasets": {family: {"reference_profiled_on": gpu} for family, gpu in read_on.items()}}

    select_settings.check_profiled_on("r.json", run(gelu="NVIDIA H100 80GB HBM3", dot=None), "H100")
    select_settings.check_profiled_on("r.json", run(gelu="NVIDIA H200"), "H200")
    with pytest.raises(SystemExit, match="r.json: .* not all read on an H100 \\(gelu: NVIDIA H200\\)"):
        select_settings.check_profiled_on("r.json", run(gelu="NVIDIA H200", dot="NVIDIA H100 80GB HBM3"), "H100")
    with pytest.raises(SystemExit, match="none was profiled"):
        select_settings.check_profiled_on("r.json", run(gelu=None), "H100")
    # R26 is R22 in every setting, and each setting a configuration of protocol 26 records has a value for both
    for since, setting, values in select_settings.SETTINGS_SINCE:
        assert values["R26"] == values["R22"], setting


def test_protocol_27_weighs_the_h200s_counters_against_r26_which_a_tie_keeps(select_settings):
    protocol, configs, keep, written = select_settings.PROTOCOLS[27]
    assert configs == ("R26", "R22") and keep == "R26" and written.endswith("-27.json")
    assert (ROOT / "benchmarks" / "results" / f"search_cpu_2026-12-05_{protocol}").is_file()
    assert select_settings.PROFILED_ON["R22"] == "H200" and select_settings.PROFILED_ON["R26"] == "H100"
    # R26's runs are its committed ones: the rule reads them where protocol 26 wrote them
    assert select_settings.run_files("R26", 27) == select_settings.run_files("R26", 26)


def test_protocol_28_stores_nothing_and_weighs_the_portable_counters_against_r26(select_settings, tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path), "--protocol", "28"], capture_output=True, text=True)
    assert done.returncode == 2 and "protocol 28 stores no counters: its FILES_AT is -" in done.stderr
    protocol, configs, keep, _ = select_settings.PROTOCOLS[28]
    assert configs == ("R26", "P28") and keep == "R26"
    assert (ROOT / "benchmarks" / "results" / f"search_cpu_2026-12-05_{protocol}").is_file()
    assert {c: select_settings.REFERENCE_COUNTERS[c] for c in ("R22", "R26", "P28")} == \
        {"R22": "all", "R26": "all", "P28": "portable"}
    assert select_settings.PROFILED_ON["P28"] == "H100"
    for since, setting, values in select_settings.SETTINGS_SINCE:
        if setting != "reference_counters":
            assert values["P28"] == values["R26"], setting


@pytest.mark.parametrize("number, candidate, setting, value", [
    (29, "H29", "measure_choice", "thompson"),  # Thompson sampling from a run's second measurement
    (30, "G30", "local_model", "gp"),  # a Gaussian process as the run-local model
    (31, "G31", "local_model", "gp-novelty")])  # the same, widened for unseen knob values
def test_protocols_29_to_31_change_one_setting_of_p28_which_a_tie_keeps_and_checks_first(select_settings, tmp_path,
                                                                                        number, candidate, setting,
                                                                                        value):
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path), "--protocol", str(number)], capture_output=True,
                          text=True)
    assert done.returncode == 2 and f"protocol {number} stores no counters: its FILES_AT is -" in done.stderr
    protocol, configs, keep, written = select_settings.PROTOCOLS[number]
    assert configs == ("P28", candidate) and keep == "P28" and written.endswith(f"-{number}.json")
    assert (ROOT / "benchmarks" / "results" / f"search_cpu_2026-12-05_{protocol}").is_file()
    for since, name, values in select_settings.SETTINGS_SINCE:
        if name == setting:
            assert values[candidate] == value and values["P28"] != value
        else:
            assert values[candidate] == values["P28"], name
    # P28's runs are its committed ones: the rule reads them where protocol 28 wrote them
    assert select_settings.run_files("P28", number) == select_settings.run_files("P28", 28)


def test_protocol_32_changes_one_setting_of_g31_and_reruns_g31_which_a_tie_keeps(select_settings, tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path), "--protocol", "32"], capture_output=True, text=True)
    assert done.returncode == 2 and "protocol 32 stores no counters: its FILES_AT is -" in done.stderr
    protocol, configs, keep, written = select_settings.PROTOCOLS[32]
    assert configs == ("G31r", "S32") and keep == "G31r" and written.endswith("-32.json")
    assert (ROOT / "benchmarks" / "results" / f"search_cpu_2026-12-05_{protocol}").is_file()
    for since, name, values in select_settings.SETTINGS_SINCE:
        assert values["G31r"] == values["G31"], name
        if name == "family_weights":
            assert values["S32"] == "similar" and values["G31"] == "rows"
        else:
            assert values["S32"] == values["G31"], name
    # G31's runs did not reproduce on this protocol's machine: its twelve are run again, with G31's flags, in files
    # of their own (the committed ones stay as protocol 31 read them)
    listed = subprocess.run(["bash", str(SCRIPT), "--list", "--protocol", "32"], capture_output=True, text=True,
                            check=True).stdout
    rerun = {Path(line.split()[0]).name: line.split()[1:] for line in listed.splitlines() if "_G31-rerun_" in line}
    assert sorted(rerun) == sorted(select_settings.run_files("G31r", 32))
    assert not set(rerun) & set(select_settings.run_files("G31", 31))
    g31 = {Path(line.split()[0]).name.replace("_G31_", "_G31-rerun_"): line.split()[1:] for line in subprocess.run(
        ["bash", str(SCRIPT), "--list", "--protocol", "31"], capture_output=True, text=True, check=True
    ).stdout.splitlines()}
    assert rerun == g31


def test_the_whole_script_parses():
    # (--list and the argument checks stop before the later steps are read: a quoting slip there passed every other
    # test of this file)
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
