import gzip
import json
import shutil

from gpu_runner import MeasurementResult, Runner, render_variant
from gpu_runner.backends.replay import ReplayBackend
from gpu_runner.recorder import record_line
from gpu_runner.result import Hardware, TimingStats
from tests.gpu_runner.helpers import PROBLEMS, saxpy_problem
from gpu_runner import load_problem


def _recorded(tmp_path, results):
    folder = tmp_path / "saxpy"
    shutil.copytree(PROBLEMS / "saxpy", folder, ignore=shutil.ignore_patterns("records"))
    (folder / "records").mkdir()
    with gzip.open(folder / "records" / "h200.jsonl.gz", "wt") as handle:
        for variant, knobs, result in results:
            handle.write(record_line(variant, knobs, result) + "\n")
        handle.write('{"variant": "cut sho')   # an interrupted line is skipped
    return load_problem(folder)


def _result(candidate, speedup):
    return MeasurementResult(status="ok", speedup=speedup, backend="cupy", seed=3, problem="saxpy",
                             source_hash=candidate.source_hash, candidate_name=candidate.name,
                             reference=TimingStats(1.0, 0.01, 20, 0.004), candidate=TimingStats(1 / speedup, 0.01, 20, 0.01),
                             hardware=Hardware("NVIDIA H200", 132, 150 << 30, 4800.0, 1980, 3201, "9.0", "580"))


def test_it_answers_from_recorded_measurements_by_source_hash(tmp_path):
    base = saxpy_problem()
    knobs = {"BLOCK": 256, "ITEMS": 2, "VEC": 4}
    recorded = render_variant(base, knobs)
    problem = _recorded(tmp_path, [("BLOCK=256,ITEMS=2,VEC=4", knobs, _result(recorded, 1.27))])
    runner = Runner("replay")
    result = runner.measure(problem, render_variant(problem, knobs))
    assert result.status == "ok" and result.backend == "replay"
    assert result.speedup == 1.27 and result.hardware.name == "NVIDIA H200" and result.reference.n == 20


def test_a_source_never_recorded_is_unavailable_not_failed(tmp_path):
    base = saxpy_problem()
    problem = _recorded(tmp_path, [("v", {}, _result(render_variant(base, {"BLOCK": 256, "ITEMS": 2, "VEC": 4}), 1.1))])
    result = Runner("replay").measure(problem, render_variant(problem, {"BLOCK": 128, "ITEMS": 1, "VEC": 1}))
    assert result.status == "unavailable" and "no measurement" in result.reason


def test_auto_chooses_replay_when_records_exist_and_static_otherwise(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_GPU", "0")
    base = saxpy_problem()
    problem = _recorded(tmp_path, [("v", {}, _result(render_variant(base, {"BLOCK": 256, "ITEMS": 2, "VEC": 4}), 1.1))])
    runner = Runner()
    assert runner.backend_for(problem).name == "replay"
    assert runner.backend_for(saxpy_problem()).name == "replay"    # the fixture ships H200 records
    bare = load_problem(PROBLEMS / "reduce_sum")
    assert runner.backend_for(bare).name == "static"


def test_measurement_results_round_trip_through_dicts():
    candidate = render_variant(saxpy_problem(), {"BLOCK": 256, "ITEMS": 2, "VEC": 4})
    result = _result(candidate, 2.0)
    again = MeasurementResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result


def test_it_replays_a_whole_family_recorded_on_an_h200():
    """records/h200.jsonl.gz was written by `python -m gpu_runner.record` on an H200 (2026-11-29)."""
    from gpu_runner import enumerate_variants, reference_candidate

    problem = load_problem(PROBLEMS / "saxpy")
    runner = Runner("replay")
    results = [runner.measure(problem, render_variant(problem, k)) for k in enumerate_variants(problem)]
    assert len(results) == 21 and all(r.status == "ok" and r.backend == "replay" for r in results)
    assert all(r.hardware.name == "NVIDIA H200" and r.hardware.sm_count == 132 for r in results)
    best = max(results, key=lambda r: r.speedup)
    assert best.candidate_name.endswith("VEC=4") and best.speedup > 1.1
    assert any(r.profiler.get("gpu__time_duration.sum", 0) > 0 for r in results)   # the ncu sample
    assert runner.measure(problem, reference_candidate(problem)).status == "ok"


def test_the_bundled_cute_hgemm_family_replays_from_its_h200_records_beside_cublas():
    """kernellab/problems/hgemm/records/h200.jsonl.gz: the CuTe family recorded on an H200 (issue 23)."""
    from pathlib import Path

    from gpu_runner import enumerate_variants
    from gpu_runner.backends.replay import read_records
    from gpu_runner.vendor import vendor_candidate

    folder = Path(__file__).resolve().parents[2] / "kernellab" / "problems" / "hgemm"
    problem = load_problem(folder)
    recorded = {r["source_hash"]: r for r in read_records(folder / "records" / "h200.jsonl.gz")}
    runner = Runner("replay")
    results = [runner.measure(problem, render_variant(problem, k)) for k in enumerate_variants(problem)]
    # Every variant of today's family.cu was recorded, and replays as it was measured.
    assert all(r.backend == "replay" and r.status == recorded[r.source_hash]["status"] for r in results)
    ok = [r for r in results if r.status == "ok"]
    assert ok and all(r.hardware.name == "NVIDIA H200" and r.compiler.cutlass for r in ok)
    assert all(r.compiler.spill_stores == 0 and any(op.startswith("HGMMA") for op in r.compiler.sass) for r in ok)
    vendor = runner.measure(problem, vendor_candidate(problem))
    assert vendor.status == "ok" and vendor.candidate_name == "vendor:cublas_hgemm"
    best = min(ok, key=lambda r: r.candidate.median_ms)
    flops = 2 * 4096 ** 3
    # Tensor cores, both: far past the H200's 67 TFLOP/s of fp32 arithmetic.
    assert flops / (best.candidate.median_ms * 1e-3) > 200e12 and flops / (vendor.candidate.median_ms * 1e-3) > 200e12
