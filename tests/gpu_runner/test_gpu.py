"""On a real GPU: guard candidates are rejected, faults fail only their candidate, backends agree."""
import gzip
import json
from pathlib import Path

import pytest

from gpu_runner import (Candidate, MeasureSettings, Runner, load_problem, parse_problem, reference_candidate,
                        render_variant)
from klexpr import parse_expression
from gpu_runner.recorder import record_family
from gpu_runner.spec import ArgSpec
from tests.gpu_runner.helpers import PROBLEMS, candidate, reduce_problem, saxpy_problem

pytestmark = pytest.mark.gpu

SETTINGS = MeasureSettings(validation_sets=2, min_reps=10, max_reps=30, target_timing_ms=30.0, kernel_timeout_s=5.0)
SIGNATURE = 'extern "C" __global__ void cand(const float* x, const float* y, float* out, float a, int n)'


@pytest.fixture(scope="module")
def runner():
    with Runner("cupy", settings=SETTINGS) as runner:
        yield runner


@pytest.fixture(scope="module")
def problem():
    return saxpy_problem()


def cand(body: str, prelude: str = "", **kwargs) -> Candidate:
    source = prelude + SIGNATURE + " {\n    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n" \
        + body + "\n}\n"
    return candidate(source, "cand", **kwargs)


HONEST = "    if (i < n) out[i] = a * x[i] + y[i];"


def test_the_reference_against_itself_is_ok_with_speedup_near_one(runner, problem):
    result = runner.measure(problem, reference_candidate(problem), seed=1)
    assert result.status == "ok", result.reason
    assert 0.9 < result.speedup < 1.1
    assert result.hardware.sm_count > 0 and result.hardware.memory_bandwidth_gbs > 0
    assert result.backend == "cupy" and result.compiler.registers > 0


def test_it_rejects_a_candidate_that_returns_without_computing(runner, problem):
    result = runner.measure(problem, cand("    return;"))
    assert result.status == "rejected-guard" and "wrote none" in result.reason


def test_it_rejects_a_candidate_that_writes_part_of_the_output(runner, problem):
    result = runner.measure(problem, cand("    if (i < n / 2) out[i] = a * x[i] + y[i];"))
    assert result.status == "rejected-guard" and "wrote only" in result.reason


def test_it_rejects_a_candidate_that_relies_on_its_earlier_result_in_the_output_buffer(runner, problem):
    prelude = "__device__ int done_blocks[1 << 17];\n"
    body = ("    if (done_blocks[blockIdx.x]) return;\n" + HONEST +
            "\n    __syncthreads();\n    if (threadIdx.x == 0) done_blocks[blockIdx.x] = 1;")
    result = runner.measure(problem, cand(body, prelude))
    assert result.status == "rejected-guard" and "poison" in result.reason


def test_it_rejects_a_candidate_that_memoises_results_in_device_globals(runner, problem):
    prelude = "__device__ int memo_valid[1 << 17];\n__device__ float memo_cache[1 << 24];\n"
    body = ("    bool cached = memo_valid[blockIdx.x];\n    __syncthreads();\n"
            "    if (i < n) { if (cached) out[i] = memo_cache[i]; else { float v = a * x[i] + y[i]; "
            "memo_cache[i] = v; out[i] = v; } }\n"
            "    __syncthreads();\n    if (threadIdx.x == 0) memo_valid[blockIdx.x] = 1;")
    result = runner.measure(problem, cand(body, prelude))
    assert result.status == "rejected-guard" and "memoised" in result.reason, result.reason


def test_it_rejects_a_candidate_that_launches_work_from_the_device(runner, problem):
    prelude = 'extern "C" __global__ void helper(float* out) { out[0] = 0.0f; }\n'
    result = runner.measure(problem, cand(HONEST + "\n    if (i == 0) helper<<<1, 1>>>(out);", prelude))
    assert result.status == "rejected-guard" and "escapes the timer" in result.reason


def test_it_rejects_a_candidate_that_modifies_its_inputs(runner, problem):
    body = "    if (i < n) { out[i] = a * x[i] + y[i]; const_cast<float*>(x)[i] = 0.0f; }"
    result = runner.measure(problem, cand(body))
    assert result.status == "rejected-guard" and "modifies its input 'x'" in result.reason


def test_it_rejects_a_time_below_the_problems_roofline(runner):
    text = (PROBLEMS / "saxpy" / "problem.toml").read_text().replace('bytes = "12*N"', 'bytes = "1200*N"')
    inflated = parse_problem(text, (PROBLEMS / "saxpy" / "reference.cu").read_text(),
                             (PROBLEMS / "saxpy" / "family.cu").read_text())
    result = runner.measure(inflated, reference_candidate(inflated))
    assert result.status == "rejected-guard" and "roofline" in result.reason


def test_a_hang_fails_only_that_candidate(runner, problem):
    body = "    while (kl_forever) { }\n" + HONEST
    result = runner.measure(problem, cand(body, "__device__ volatile int kl_forever = 1;\n"), timeout_s=60)
    assert result.status == "failed-timeout", result.reason
    after = runner.measure(problem, cand(HONEST))
    assert after.status == "ok", after.reason


def test_an_illegal_address_fails_only_that_candidate(runner, problem):
    result = runner.measure(problem, cand("    out[i + (1LL << 40)] = 1.0f;"))
    assert result.status == "failed-runtime" and "illegal" in result.reason.lower(), result.reason
    assert runner.measure(problem, cand(HONEST)).status == "ok"


def test_too_many_threads_per_block_fails_only_that_candidate(runner, problem):
    result = runner.measure(problem, cand(HONEST, block=2048, grid="ceil_div(N, 2048)"))
    # refused before the launch since the launch limits are checked with the plan (spec.check_launch_limits); the
    # GPU would refuse it too ("invalid configuration argument")
    assert result.status == "failed-compile" and "1024 threads per block" in result.reason, result.reason
    assert runner.measure(problem, cand(HONEST)).status == "ok"


def test_static_and_dynamic_shared_memory_over_48_kib_together_launch(runner, problem):
    # 40 KiB of static arrays and 16 KiB dynamic: legal (under 227 KiB), but over CUDA's default cap of 48 KiB less
    # the static part unless the plan raises the kernel's dynamic limit, which it once did only past 48 KiB dynamic.
    prelude = "__shared__ float kept[10240];\n"
    body = ("    extern __shared__ float more[];\n    kept[threadIdx.x] = a; more[threadIdx.x] = 1.0f;\n    __syncthreads();\n"
            "    if (i < n) out[i] = kept[threadIdx.x] * x[i] + y[i] * more[threadIdx.x];")
    result = runner.measure(problem, cand(body, prelude, shared="16384"))
    assert result.status == "ok", result.reason


def test_out_of_memory_fails_only_that_candidate(runner, problem, monkeypatch):
    # Past the card's memory but under the per-problem cap, so the device itself refuses it.
    monkeypatch.setenv("KERNELLAB_MAX_PROBLEM_BYTES", "1TiB")
    base = cand(HONEST)
    huge = Candidate(source=base.source, launch=base.launch, name="huge",
                     temps=(ArgSpec("scratch", "temp", "float32", (parse_expression("N * 4096", {"N"}),)),))
    result = runner.measure(problem, huge)
    assert result.status == "failed-runtime" and "GiB" in result.reason, result.reason
    assert runner.measure(problem, cand(HONEST)).status == "ok"


def test_cupy_and_pycuda_agree(problem):
    pytest.importorskip("pycuda")
    variant = render_variant(problem, {"BLOCK": 256, "ITEMS": 1, "VEC": 4})
    with Runner("cupy", settings=SETTINGS) as a, Runner("pycuda", settings=SETTINGS) as b:
        ra = a.measure(problem, variant, seed=5)
        rb = b.measure(problem, variant, seed=5)
    assert ra.status == rb.status == "ok", (ra.reason, rb.reason)
    assert ra.max_abs_error == rb.max_abs_error      # the same seeded inputs on both backends
    assert abs(ra.candidate.median_ms / rb.candidate.median_ms - 1) < 0.05
    assert abs(ra.speedup / rb.speedup - 1) < 0.05


def test_energy_and_profile_observers_report_or_say_why(runner, problem):
    variant = render_variant(problem, {"BLOCK": 256, "ITEMS": 2, "VEC": 4})
    result = runner.measure(problem, variant, energy=True, profile=True)
    assert result.status == "ok", result.reason
    assert result.energy is not None or "nvml" in result.observer_errors
    if result.energy is not None:
        assert result.energy.j_per_call > 0 and 20 < result.energy.mean_w < 1500 and result.energy.window_s >= 0.1
    assert result.profiler or "ncu" in result.observer_errors
    if result.profiler:
        assert result.profiler.get("gpu__time_duration.sum", 0) > 0


def test_measure_many_compiles_in_parallel_and_times_each(runner, problem):
    variants = [render_variant(problem, k) for k in [{"BLOCK": b, "ITEMS": 1, "VEC": v}
                                                      for b in (128, 256, 512) for v in (1, 4)]]
    results = runner.measure_many(problem, variants, seed=2)
    assert [r.status for r in results] == ["ok"] * 6, [r.reason for r in results]
    assert all(r.compiler and r.compiler.sass for r in results)


def test_the_vendor_baseline_is_validated_and_timed():
    with Runner("cupy", settings=SETTINGS) as runner:
        result = runner.measure_vendor(reduce_problem(), seed=3)
    assert result.status == "ok", result.reason
    assert result.speedup > 0 and result.candidate_name == "vendor:cupy_sum"


def test_the_cublas_dot_baseline_is_validated_and_timed():
    dot = load_problem(Path(__file__).resolve().parents[2] / "kernellab" / "problems" / "dot")
    with Runner("cupy", settings=SETTINGS) as runner:
        result = runner.measure_vendor(dot, seed=3)
    assert result.status == "ok", result.reason
    assert result.speedup > 0 and result.candidate_name == "vendor:cupy_dot"
    assert result.max_abs_error == 0.0      # integer-valued inputs: every summation order is exact


def test_record_family_writes_the_dataset(tmp_path, runner, problem):
    out = tmp_path / "h200.jsonl.gz"
    summary = record_family(problem, out, limit=4, runner=runner, log=None)
    with gzip.open(out, "rt") as handle:
        records = [json.loads(line) for line in handle]
    assert summary["written"] == 5 and len(records) == 5
    assert all(r["status"] == "ok" for r in records), [r["reason"] for r in records]


def test_a_recordings_reference_is_profiled_in_place_and_a_profiled_recording_profiles_it(tmp_path, runner, problem):
    from gpu_runner.recorder import profile_reference

    out = tmp_path / "h200.jsonl.gz"
    record_family(problem, out, limit=2, runner=runner, log=None)
    summary = profile_reference(problem, out, runner=runner)
    with gzip.open(out, "rt") as handle:
        records = [json.loads(line) for line in handle]
    assert len(records) == 3
    reference = next(r for r in records if r["variant"] == "reference")
    if not summary["profiled"]:
        pytest.skip(f"Nsight Compute could not profile here: {summary['reason']}")
    assert reference["profiler"].get("gpu__time_duration.sum", 0) > 0
    assert reference["profiler"].get("l1tex__t_sector_hit_rate.pct") is not None
    assert profile_reference(problem, out, runner=runner)["reason"] == "the reference already carries counters"
    fresh = tmp_path / "fresh.jsonl.gz"
    record_family(problem, fresh, limit=1, profile_sample=1, runner=runner, log=None)
    with gzip.open(fresh, "rt") as handle:
        first = json.loads(handle.readline())
    assert first["variant"] == "reference" and first["profiler"].get("gpu__time_duration.sum", 0) > 0


def test_an_uploaded_kernels_reference_is_profiled_with_the_counters_the_forecasts_read(runner):
    """What a run's GPU worker does after an uploaded problem's first measurement (kernellab's
    services.measurement): one ncu start on the reference, whose counters become the learned surrogate's features."""
    import math

    from search_engine.surrogates.features import (PORTABLE_REFERENCE_PROFILE_FEATURES, REFERENCE_PROFILE_FEATURES,
                                                   REFERENCE_PROFILE_INPUTS, reference_profile_features,
                                                   reference_profile_inputs)

    problem = load_problem(Path(__file__).parent / "own_kernels" / "row_rmsnorm")
    measured = runner.measure(problem, reference_candidate(problem), seed=1)
    assert measured.status == "ok", measured.reason
    counters, why_not = runner.profile_reference(problem, seed=1)
    if not counters:
        pytest.skip(f"Nsight Compute could not profile here: {why_not}")
    assert why_not == "" and counters["gpu__time_duration.sum"] > 0
    assert set(reference_profile_inputs(counters)) == set(REFERENCE_PROFILE_INPUTS)
    case = dict(problem.default_case.sizes)
    values = dict(zip(REFERENCE_PROFILE_FEATURES, reference_profile_features(
        counters, {"sizes": case, "bytes": float(problem.roofline.bytes.evaluate(case))})))
    assert all(math.isfinite(values[name]) for name in PORTABLE_REFERENCE_PROFILE_FEATURES), values
    # it reads its input and writes its output once (the second pass over a row hits the caches): DRAM bytes of
    # the roofline's order, not of a counter read from another kernel or in other units
    assert abs(values["ref_log_dram_over_roofline"]) < math.log(8.0), values
    assert 0 <= values["ref_l1_hit_pct"] <= 100 and 0 < values["ref_occupancy_pct"] <= 100, values

