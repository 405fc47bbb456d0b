"""The recorder writes one line per variant, resumes where it stopped and includes the baselines."""
import gzip
import json
import re
import shutil

from pathlib import Path

import pytest

from gpu_runner import MeasurementResult, Runner, load_problem
from gpu_runner.backends.base import Backend
from gpu_runner.record import main as record_main
from gpu_runner.recorder import record_family
from gpu_runner.result import TimingStats
from gpu_runner.vendor import vendor_candidate
from tests.gpu_runner.helpers import PROBLEMS, saxpy_problem
from tests.scripts import loaded_script

ROOT = Path(__file__).resolve().parents[2]


class CountingBackend(Backend):
    """Answers instantly; remembers what it was asked to measure."""

    name = "cupy"

    def __init__(self):
        self.measured = []

    def check(self, problem, candidate):
        raise NotImplementedError

    def _ok(self, problem, candidate):
        self.measured.append(candidate.name)
        return MeasurementResult(status="ok", speedup=1.5, backend=self.name, problem=problem.name,
                                 source_hash=candidate.source_hash, candidate_name=candidate.name,
                                 reference=TimingStats(1.5, 0.1, 10, 0.01), candidate=TimingStats(1.0, 0.1, 10, 0.01))

    def measure(self, problem, candidate, **kwargs):
        return self._ok(problem, candidate)

    def measure_vendor(self, problem, **kwargs):
        return self._ok(problem, vendor_candidate(problem))


def lines(path):
    with gzip.open(path, "rt") as handle:
        return [json.loads(line) for line in handle]


def test_it_records_reference_and_variants_then_resumes_without_repeating(tmp_path):
    problem = saxpy_problem()
    out = tmp_path / "records" / "h200.jsonl.gz"
    backend = CountingBackend()
    first = record_family(problem, out, limit=5, runner=Runner(backend), log=None)
    assert first["written"] == 6 and backend.measured[0] == "reference"
    second = record_family(problem, out, runner=Runner(backend), log=None)
    assert second["written"] == 21 - 5
    records = lines(out)
    assert len(records) == 22 and len({r["source_hash"] for r in records}) == 22
    variant = next(r for r in records if r["variant"] == "BLOCK=128,ITEMS=1,VEC=1")
    assert variant["knobs"] == {"BLOCK": 128, "ITEMS": 1, "VEC": 1} and variant["speedup"] == 1.5
    assert variant["status"] == "ok" and variant["reference"]["median_ms"] == 1.5
    third = record_family(problem, out, runner=Runner(backend), log=None)
    assert third["written"] == 0


def test_it_records_the_vendor_baseline_named_by_the_problem(tmp_path):
    problem = load_problem(PROBLEMS / "reduce_sum")
    out = tmp_path / "r.jsonl.gz"
    record_family(problem, out, runner=Runner(CountingBackend()), log=None)
    assert [r["variant"] for r in lines(out)] == ["reference", "vendor:cupy_sum"]


def test_the_cli_reports_a_bad_problem_folder(tmp_path, capsys):
    assert record_main([str(tmp_path), "--out", str(tmp_path / "x.jsonl.gz")]) == 2
    assert "problem.toml" in capsys.readouterr().err


class SlowBackend(CountingBackend):
    def _ok(self, problem, candidate):
        import time
        time.sleep(0.02)
        return super()._ok(problem, candidate)


def test_past_its_deadline_it_starts_no_more_variants_and_a_later_call_resumes(tmp_path):
    problem = saxpy_problem()
    out = tmp_path / "r.jsonl.gz"
    first = record_family(problem, out, runner=Runner(SlowBackend()), deadline_s=0.05, log=None)
    # The reference and the first chunk of at most 8 variants fit; the 21-variant family does not.
    assert 1 <= first["written"] <= 1 + 16 and first["left"] == 21 - (first["written"] - 1)
    second = record_family(problem, out, runner=Runner(CountingBackend()), log=None)
    assert second["written"] == first["left"] and second["left"] == 0
    assert len({r["source_hash"] for r in lines(out)}) == 22


def test_profiling_a_recordings_reference_rewrites_only_its_record(tmp_path, monkeypatch):
    from gpu_runner import recorder

    problem = saxpy_problem()
    out = tmp_path / "h200.jsonl.gz"
    record_family(problem, out, limit=3, runner=Runner(CountingBackend()), log=None)
    before = lines(out)
    calls = []

    def fake_profile(runner, problem, pairs, *, seed):
        calls.append([candidate.name for candidate, _ in pairs])
        for _, result in pairs:
            result.profiler = {"l1tex__t_sector_hit_rate.pct": 61.5}

    monkeypatch.setattr(recorder, "profile_batch", fake_profile)
    summary = recorder.profile_reference(problem, out, runner=Runner(CountingBackend()))
    assert summary["profiled"] and calls == [["reference"]]
    after = lines(out)
    assert [r["source_hash"] for r in after] == [r["source_hash"] for r in before]
    assert after[0]["profiler"] == {"l1tex__t_sector_hit_rate.pct": 61.5}
    assert after[1:] == before[1:] and {k: v for k, v in after[0].items() if k != "profiler"} == \
        {k: v for k, v in before[0].items() if k != "profiler"}
    again = recorder.profile_reference(problem, out, runner=Runner(CountingBackend()))
    assert not again["profiled"] and again["already"] and len(calls) == 1


def test_a_reference_that_cannot_be_profiled_leaves_the_recording_alone_and_says_why(tmp_path, monkeypatch):
    from gpu_runner import recorder

    problem = saxpy_problem()
    assert not recorder.profile_reference(problem, tmp_path / "none.jsonl.gz")["profiled"]
    out = tmp_path / "h200.jsonl.gz"
    record_family(problem, out, limit=1, runner=Runner(CountingBackend()), log=None)
    before = out.read_bytes()

    def no_ncu(runner, problem, pairs, *, seed):
        for _, result in pairs:
            result.observer_errors["ncu"] = "ncu not found"

    monkeypatch.setattr(recorder, "profile_batch", no_ncu)
    summary = recorder.profile_reference(problem, out, runner=Runner(CountingBackend()))
    assert summary == {"path": str(out), "profiled": False, "reason": "ncu not found"}
    assert out.read_bytes() == before
    changed = load_problem(PROBLEMS / "reduce_sum")   # another problem's reference: a different source
    assert "changed" in recorder.profile_reference(changed, out)["reason"]


def test_a_profiled_recording_profiles_its_reference_too(tmp_path, monkeypatch):
    from gpu_runner import recorder

    profiled = []
    monkeypatch.setattr(recorder, "profile_batch",
                        lambda runner, problem, pairs, *, seed: profiled.extend(c.name for c, _ in pairs))
    record_family(saxpy_problem(), tmp_path / "r.jsonl.gz", limit=4, profile_sample=2,
                  runner=Runner(CountingBackend()), log=None)
    assert profiled[0] == "reference" and len(profiled) == 3


def test_counters_measured_elsewhere_are_stored_in_the_reference_record(tmp_path):
    from gpu_runner.recorder import store_reference_profile

    problem = saxpy_problem()
    out = tmp_path / "h200.jsonl.gz"
    record_family(problem, out, limit=2, runner=Runner(CountingBackend()), log=None)
    before = lines(out)
    assert store_reference_profile(problem, out, {"dram__bytes_read.sum": 8.0})["profiled"]
    after = lines(out)
    assert after[0]["profiler"] == {"dram__bytes_read.sum": 8.0} and after[1:] == before[1:]


@pytest.fixture
def reference_profiles_tool():
    with loaded_script(ROOT / "kernellab" / "problems" / "tools" / "reference_profiles.py", "reference_profiles") as tool:
        yield tool


def test_the_reference_profiles_tool_stores_counters_profiled_elsewhere_and_skips_failures(
        tmp_path, capsys, reference_profiles_tool):
    tool = reference_profiles_tool
    shutil.copy(ROOT / "kernellab" / "problems" / "column_sum" / "records" / "h200.jsonl.gz", tmp_path / "column_sum.jsonl.gz")
    before = lines(tmp_path / "column_sum.jsonl.gz")
    found = tmp_path / "profiles.json"
    found.write_text(json.dumps({"column_sum": {"l1tex__t_sector_hit_rate.pct": 3.5},
                                 "gelu": {"error": "ncu exited with 1"}}))
    assert tool.main(["store", str(found), "--recordings", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "column_sum: stored" in out and "gelu: skipped" in out and "stored 1 of 2" in out
    after = lines(tmp_path / "column_sum.jsonl.gz")
    reference = next(r for r in after if r["variant"] == "reference")
    assert reference["profiler"] == {"l1tex__t_sector_hit_rate.pct": 3.5}
    assert [r for r in after if r["variant"] != "reference"] == [r for r in before if r["variant"] != "reference"]
    assert tool.chosen_problems(None, str(tmp_path)) == ["column_sum"]


def test_a_profile_call_cut_short_keeps_the_counters_it_read_and_the_next_finds_them_profiled(
        tmp_path, monkeypatch, capsys, reference_profiles_tool):
    import gpu_runner
    from gpu_runner import recorder

    tool = reference_profiles_tool
    for name in ("column_sum", "gelu"):
        shutil.copy(ROOT / "kernellab" / "problems" / name / "records" / "h200.jsonl.gz", tmp_path / f"{name}.jsonl.gz")

    class NoGpu:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    real_profile_reference = recorder.profile_reference

    def first_call(problem, path, *, runner=None, stand_in=False):
        if problem.name == "gelu":
            raise KeyboardInterrupt  # the device call's time limit stops the process here
        recorder.store_reference_profile(problem, path, {"l1tex__t_sector_hit_rate.pct": 42.0})
        return {"path": str(path), "profiled": True}

    monkeypatch.setattr(gpu_runner, "Runner", NoGpu)
    monkeypatch.setattr(recorder, "profile_reference", first_call)
    out = tmp_path / "profiles.json"
    with pytest.raises(KeyboardInterrupt):
        tool.profile(["column_sum", "gelu"], str(tmp_path), out)
    assert json.loads(out.read_text()) == {"column_sum": {"l1tex__t_sector_hit_rate.pct": 42.0}}
    assert not out.with_name(out.name + ".partial").exists()

    # The next call: column_sum's reference carries its counters and is not profiled again (the recorder's own
    # answer, before any GPU is asked for); gelu, here without a GPU, is reported.
    def next_call(problem, path, *, runner=None, stand_in=False):
        if problem.name == "gelu":
            return {"path": str(path), "profiled": False, "reason": "no GPU here"}
        return real_profile_reference(problem, path, runner=runner)

    monkeypatch.setattr(recorder, "profile_reference", next_call)
    assert tool.profile(["column_sum", "gelu"], str(tmp_path), out) == 0
    assert json.loads(out.read_text()) == {"column_sum": {"l1tex__t_sector_hit_rate.pct": 42.0},
                                           "gelu": {"error": "no GPU here"}, "_profiled_on": "NVIDIA H200"}
    # Each reference's line says how long it took, so a device call's log tells what the next one will cost.
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].endswith("1 of 2 references profiled on NVIDIA H200")
    assert re.fullmatch(r"column_sum: 1 counters \(\d+\.\d s\)", lines[0])
    assert re.fullmatch(r"gelu: not profiled \(\d+\.\d s\): no GPU here", lines[2])


def test_profiling_a_reference_where_no_gpu_worker_starts_says_so_and_changes_nothing(tmp_path, monkeypatch):
    from gpu_runner import recorder
    from gpu_runner.backends.gpu import WorkerUnavailable

    problem = saxpy_problem()
    out = tmp_path / "h200.jsonl.gz"
    record_family(problem, out, limit=1, runner=Runner(CountingBackend()), log=None)
    before = out.read_bytes()

    def no_gpu(runner, problem, pairs, *, seed):
        raise WorkerUnavailable("the cupy worker could not use the GPU: no device")

    monkeypatch.setattr(recorder, "profile_batch", no_gpu)
    summary = recorder.profile_reference(problem, out, runner=Runner(CountingBackend()))
    assert not summary["profiled"] and "could not use the GPU" in summary["reason"]
    assert out.read_bytes() == before


def recorded_on_an_h200(problem, out: Path, limit: int) -> list[dict]:
    """A recording of `problem` whose records say it was made on an H200; returns them."""
    record_family(problem, out, limit=limit, runner=Runner(CountingBackend()), log=None)
    records = [{**r, "hardware": {"name": "NVIDIA H200"}} for r in lines(out)]
    with gzip.open(out, "wt") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in records))
    return records


def test_a_reference_is_not_profiled_on_another_gpu_than_its_recording_was_made_on(tmp_path, monkeypatch):
    from gpu_runner import recorder

    problem = saxpy_problem()
    out = tmp_path / "h200.jsonl.gz"
    recorded_on_an_h200(problem, out, limit=1)
    before = out.read_bytes()
    calls = []
    monkeypatch.setattr(recorder, "profile_batch", lambda *a, **k: calls.append(a))
    summary = recorder.profile_reference(problem, out, runner=Runner(OnAnH100()))
    assert not summary["profiled"] and calls == [] and out.read_bytes() == before
    assert summary["reason"] == ("the recording was made on NVIDIA H200 and this machine's GPU is NVIDIA H100 80GB HBM3: "
                                 "its counters would describe another GPU")


class OnAnH100(CountingBackend):
    def hardware(self):
        from gpu_runner.result import Hardware

        return Hardware(name="NVIDIA H100 80GB HBM3", sm_count=132, memory_bytes=80 << 30, memory_bandwidth_gbs=3350.0,
                        sm_clock_mhz=1980.0, mem_clock_mhz=2619.0, compute_capability="9.0", driver="580")


class OnAnH200(OnAnH100):
    def hardware(self):
        import dataclasses

        return dataclasses.replace(super().hardware(), name="NVIDIA H200", memory_bandwidth_gbs=4800.0)


def test_a_stand_in_gpu_profiles_a_reference_only_when_asked_and_the_record_names_it_until_its_own_gpu_does(
        tmp_path, monkeypatch):
    from gpu_runner import recorder

    problem = saxpy_problem()
    out = tmp_path / "h200.jsonl.gz"
    records = recorded_on_an_h200(problem, out, limit=2)
    read = iter([{"l1tex__t_sector_hit_rate.pct": 61.5}, {"l1tex__t_sector_hit_rate.pct": 58.0}])

    def fake_profile(runner, problem, pairs, *, seed):
        for _, result in pairs:
            result.profiler = next(read)

    monkeypatch.setattr(recorder, "profile_batch", fake_profile)
    summary = recorder.profile_reference(problem, out, runner=Runner(OnAnH100()), stand_in=True)
    assert summary["profiled"] and summary["profiled_on"] == "NVIDIA H100 80GB HBM3"
    assert summary["stand_in_for"] == "NVIDIA H200"
    after = lines(out)
    assert after[0]["profiler"] == {"l1tex__t_sector_hit_rate.pct": 61.5}
    assert after[0]["profiler_hardware"] == {"name": "NVIDIA H100 80GB HBM3"}
    assert after[0]["hardware"] == {"name": "NVIDIA H200"} and after[1:] == records[1:]
    # the stand-in again: already profiled; the recording's own GPU: profiled again, and the mark goes
    assert recorder.profile_reference(problem, out, runner=Runner(OnAnH100()), stand_in=True)["already"]
    summary = recorder.profile_reference(problem, out, runner=Runner(OnAnH200()))
    assert summary["profiled"] and summary["stand_in_for"] is None
    after = lines(out)
    assert after[0]["profiler"] == {"l1tex__t_sector_hit_rate.pct": 58.0} and "profiler_hardware" not in after[0]
    assert recorder.profile_reference(problem, out, runner=Runner(OnAnH200()))["already"]


def test_counters_of_another_gpu_are_stored_only_as_a_stand_in(tmp_path, capsys, reference_profiles_tool):
    tool = reference_profiles_tool
    shutil.copy(ROOT / "kernellab" / "problems" / "column_sum" / "records" / "h200.jsonl.gz", tmp_path / "column_sum.jsonl.gz")
    before = (tmp_path / "column_sum.jsonl.gz").read_bytes()
    found = tmp_path / "profiles.json"
    found.write_text(json.dumps({"column_sum": {"l1tex__t_sector_hit_rate.pct": 3.5},
                                 "_profiled_on": "NVIDIA H100 80GB HBM3"}))
    assert tool.main(["store", str(found), "--recordings", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert ("column_sum: not stored: the counters were read on NVIDIA H100 80GB HBM3 and the recording was made on "
            "NVIDIA H200") in out and "stored 0 of 1" in out
    assert (tmp_path / "column_sum.jsonl.gz").read_bytes() == before
    assert tool.main(["store", str(found), "--recordings", str(tmp_path), "--stand-in"]) == 0
    assert "column_sum: stored, read on NVIDIA H100 80GB HBM3 standing in for NVIDIA H200" in capsys.readouterr().out
    reference = next(r for r in lines(tmp_path / "column_sum.jsonl.gz") if r["variant"] == "reference")
    assert reference["profiler"] == {"l1tex__t_sector_hit_rate.pct": 3.5}
    assert reference["profiler_hardware"] == {"name": "NVIDIA H100 80GB HBM3"}
    # counters of the recording's own GPU are stored without --stand-in, and drop the mark
    found.write_text(json.dumps({"column_sum": {"l1tex__t_sector_hit_rate.pct": 4.0}, "_profiled_on": "NVIDIA H200"}))
    assert tool.main(["store", str(found), "--recordings", str(tmp_path)]) == 0
    reference = next(r for r in lines(tmp_path / "column_sum.jsonl.gz") if r["variant"] == "reference")
    assert reference["profiler"] == {"l1tex__t_sector_hit_rate.pct": 4.0} and "profiler_hardware" not in reference


def test_a_runner_profiles_a_cuda_reference_once_and_says_why_it_cannot(monkeypatch):
    """Runner.profile_reference, which the app's GPU worker calls for an uploaded problem's reference."""
    from gpu_runner import recorder

    problem = saxpy_problem()
    asked = []

    def ncu(runner, problem, pairs, *, seed):
        asked.append([candidate.name for candidate, _ in pairs])
        for _, result in pairs:
            result.profiler = {"l1tex__t_sector_hit_rate.pct": 61.5}

    # the static backend has no device module: nothing to profile on, said in words
    counters, why_not = Runner(backend="static").profile_reference(problem)
    assert counters == {} and why_not == "the backend has no device module to profile"
    monkeypatch.setattr(recorder, "profile_batch", ncu)
    assert Runner(CountingBackend()).profile_reference(problem, seed=3) == ({"l1tex__t_sector_hit_rate.pct": 61.5}, "")
    assert asked == [["reference"]]
    kernelbench = load_problem(ROOT / "kernellab" / "problems" / "kb_layernorm")
    counters, why_not = Runner(CountingBackend()).profile_reference(kernelbench)
    assert counters == {} and "PyTorch reference" in why_not and asked == [["reference"]]
