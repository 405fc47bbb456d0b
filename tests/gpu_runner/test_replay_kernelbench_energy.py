"""KernelBench records store energy paired ({"reference": ..., "candidate": ...}); replay must read them."""
import gzip
import json
from pathlib import Path
from types import SimpleNamespace

from gpu_runner.backends.replay import ReplayBackend
from gpu_runner.result import MeasurementResult
from gpu_runner.settings import MeasureSettings

RECORDS = Path(__file__).resolve().parents[2] / "kernellab/problems/kernelbench/records/h200.jsonl.gz"


def _paired_record() -> dict:
    with gzip.open(RECORDS, "rt") as handle:
        for line in handle:
            record = json.loads(line)
            energy = record.get("energy")
            if (isinstance(energy, dict) and "candidate" in energy and "source_hash" in record
                    and record.get("speedup") is not None):
                return record
    raise AssertionError("no KernelBench record with paired energy and a speedup")


def test_a_paired_energy_record_parses_with_the_candidates_energy():
    record = _paired_record()
    result = MeasurementResult.from_dict(record)
    candidate = record["energy"]["candidate"]
    assert result.energy.j_per_call == candidate["j_per_call"] and result.energy.mean_w == candidate["mean_w"]
    assert result.energy.j_per_call != record["energy"]["reference"]["j_per_call"]
    assert result.speedup == record["speedup"] and result.candidate.median_ms == record["candidate"]["median_ms"]


def test_the_replay_backend_answers_a_kernelbench_record_with_a_speedup(tmp_path):
    record = _paired_record()
    with gzip.open(tmp_path / "h200.jsonl.gz", "wt") as handle:
        handle.write(json.dumps(record) + "\n")
    problem = SimpleNamespace(name=record["problem"], spec_hash="kb", folder=None)
    candidate = SimpleNamespace(name="cuda-l1", source_hash=record["source_hash"])
    result = ReplayBackend(records_root=tmp_path).measure(problem, candidate, seed=0, profile=False, energy=True,
                                                          timeout_s=60, settings=MeasureSettings())
    assert result.backend == "replay" and result.status == record["status"]
    assert result.speedup == record["speedup"] and result.speedup > 0
    assert result.energy.mean_w == record["energy"]["candidate"]["mean_w"]


def test_an_unreadable_energy_entry_keeps_the_timing_and_says_so():
    record = _paired_record()
    for energy in ({"candidate": {"mean_w": 3.0}}, {"candidate": {"error": "NVML unavailable"}}, "garbage",
                   {"reference": record["energy"]["reference"]}, {"j_per_call": "x", "mean_w": None}):
        result = MeasurementResult.from_dict(record | {"energy": energy})
        assert result.energy is None and "energy" in result.observer_errors
        assert result.speedup == record["speedup"] and result.reference.n == record["reference"]["n"]


def test_the_flat_shape_still_reads():
    record = _paired_record()
    flat = record["energy"]["reference"]
    result = MeasurementResult.from_dict(record | {"energy": flat})
    assert result.energy.j_per_call == flat["j_per_call"] and "energy" not in result.observer_errors
