"""Where problems live on disk."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings


def bundled_dir() -> Path:
    """Where the bundled problems (and their recorded measurements) live."""
    return Path(settings.KERNELLAB_PROBLEMS_DIR)


def imported_records_root(workspace) -> Path:
    """Where recorded measurements brought along with a problem folder live (``manage.py search
    FOLDER``): ``<root>/<problem name>/records/<gpu>.jsonl.gz``, one root per workspace."""
    return Path(settings.DATA_DIR) / "records" / workspace.slug


def problem_records_root(problem) -> Path:
    """The folder holding ``<problem name>/records/`` for this problem: the bundled problems' folder,
    or the workspace's imported records for an uploaded one."""
    return bundled_dir() if problem.bundled else imported_records_root(problem.workspace)


def problem_records_file(problem, gpu: str) -> Path:
    return problem_records_root(problem) / problem.name / "records" / f"{gpu}.jsonl.gz"


# The reference's counters the problem page shows (the same ones the learned surrogate can read as features),
# with the words it shows them under.
REFERENCE_COUNTER_LABELS = {
    "ref_dram_pct_of_peak": "DRAM throughput, % of peak",
    "ref_sm_pct_of_peak": "SM throughput, % of peak",
    "ref_l1_hit_pct": "L1 hit rate, %",
    "ref_l2_hit_pct": "L2 hit rate, %",
    "ref_occupancy_pct": "achieved occupancy, % of the SM's warps",
    "ref_long_scoreboard_per_issue": "warps waiting on memory per issued instruction",
    "ref_sectors_per_load": "32-byte sectors per global load (4: a coalesced warp of floats)",
    "ref_log_dram_over_roofline": "DRAM bytes over the roofline's bytes",
}

# What the problem page says of the counters the learned surrogate's forecasts read, per counter set
COUNTERS_READ_NOTES = {
    "all": "The learned surrogate's forecasts read all of them, the same for every candidate of this problem.",
    "portable": "The learned surrogate's forecasts read the counters marked so, the same for every candidate of this "
                "problem: those that follow from the reference's access pattern and read alike on GPUs of one chip. "
                "The others follow the memory's speed.",
}


def reference_recording(problem, spec, gpu: str = "h200") -> dict | None:
    """The reference's recorded measurement on `gpu` (None where the problem has no recording there): its time at
    the default size case and, where it was profiled, its main counters; "record" is the whole record (the view
    asks the micro-profiling experts about it)."""
    try:
        record = recorded_reference_record(problem, gpu)
    except (OSError, EOFError, ValueError) as exc:  # a damaged recording: say so, keep the page
        return {"error": f"the recording {problem_records_file(problem, gpu).name} cannot be read: {exc}"}
    if record is None or record.get("status") != "ok":
        return None
    return _reference_summary(record, spec, gpu)


def recorded_reference_record(problem, gpu: str) -> dict | None:
    """The reference's record of the problem's recording on `gpu` (None without one), read up to that record only
    (it comes first): what a GPU worker checks before each measurement, without loading the whole recording."""
    from gpu_runner.backends.replay import read_records

    path = problem_records_file(problem, gpu)
    if not path.is_file():
        return None
    return next((r for r in read_records(path) if r.get("variant") == "reference"), None)


def reference_measurement(problem, gpu: str) -> dict:
    """What a run's GPU worker measured of the problem's reference on `gpu` (services.reference_measurements keeps
    it; {} for nothing)."""
    return dict((problem.reference_measurements or {}).get(gpu.lower()) or {})


def reference_measured(problem, spec, gpu: str = "h200") -> dict | None:
    """The reference as a run's GPU worker measured it on `gpu` (services.reference_measurements), for a problem
    whose recording does not hold it: the same summary as reference_recording, with the run it came from."""
    kept = reference_measurement(problem, gpu)
    if not (kept.get("timing") or {}).get("median_ms"):
        return None
    # the kernel profiled and timed is the reference itself, its own "candidate" (as in a recording's reference record)
    record = {"status": "ok", "variant": "reference", "reference": kept["timing"], "candidate": kept["timing"],
              "hardware": kept.get("hardware") or {}, "profiler": kept.get("profiler") or {}}
    profiled_on = (kept.get("profiler_hardware") or {}).get("name")
    if profiled_on and profiled_on != record["hardware"].get("name"):
        record["profiler_hardware"] = {"name": profiled_on}
    from kernellab.models import SearchRun

    run_id = kept.get("run_id")
    return _reference_summary(record, spec, gpu) | {
        # the run is named while it exists (a deleted run leaves the measurement)
        "measured_in_run": run_id if run_id and SearchRun.objects.filter(pk=run_id, problem=problem).exists() else None,
        "measured_at": kept.get("measured_at"),
        "profiler_error": None if kept.get("profiler") else kept.get("profiler_error")}


def _reference_summary(record: dict, spec, gpu: str) -> dict:
    import math

    from kernellab.datasets import problem_numbers
    from search_engine.experts.profile import COPY_EFFICIENCY
    from search_engine.surrogates.features import (DEFAULT_REFERENCE_COUNTERS, DEFAULT_REFERENCE_PROFILE,
                                                   REFERENCE_COUNTER_SETS, REFERENCE_PROFILE_FEATURES,
                                                   reference_profile_features)

    timing = record.get("reference") or {}
    numbers = problem_numbers(spec) if spec is not None else {}
    hardware = record.get("hardware") or {}
    profile = record.get("profiler") or {}
    counters = []
    if profile:
        values = dict(zip(REFERENCE_PROFILE_FEATURES, reference_profile_features(profile, numbers)))
        values["ref_log_dram_over_roofline"] = math.exp(values["ref_log_dram_over_roofline"]) \
            if not math.isnan(values["ref_log_dram_over_roofline"]) else math.nan
        # which of them the learned surrogate's forecasts read (the four that read alike on GPUs of one chip)
        read = set(REFERENCE_COUNTER_SETS[DEFAULT_REFERENCE_COUNTERS]) if DEFAULT_REFERENCE_PROFILE else set()
        counters = [{"label": label, "value": values[name], "read": name in read}
                    for name, label in REFERENCE_COUNTER_LABELS.items() if not math.isnan(values[name])]
    return {
        "gpu": hardware.get("name") or gpu.upper(),
        "median_ms": timing.get("median_ms"),
        "iqr_ms": timing.get("iqr_ms"),
        "n": timing.get("n"),
        "profiled": bool(profile),
        # counters read on another GPU than the recording's, standing in for it (reference_profiles.py --stand-in)
        "profiled_on": (record.get("profiler_hardware") or {}).get("name") if profile else None,
        "counters": counters,
        "counters_read_note": COUNTERS_READ_NOTES[DEFAULT_REFERENCE_COUNTERS]
        if DEFAULT_REFERENCE_PROFILE and counters else None,
        "record": record,
        "copy_efficiency_pct": 100.0 * COPY_EFFICIENCY,
    }
