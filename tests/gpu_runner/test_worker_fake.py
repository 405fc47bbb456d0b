"""The worker's validation/timing flow on a CPU stand-in device: every guard candidate is caught."""
import numpy as np
import pytest

from gpu_runner.settings import MeasureSettings
from gpu_runner.verdict import judge
from gpu_runner.worker import WorkerState, run_job
from tests.gpu_runner.fake_device import FakeDevice, FakeKernel, saxpy_body
from tests.gpu_runner.helpers import candidate, saxpy_problem

SETTINGS = MeasureSettings(min_reps=6, max_reps=8, warmup=1, escape_runs=2)


class Memoiser:
    """Computes once, then copies the first result: a cache in 'device globals'."""

    def __init__(self):
        self.cache = {}

    def __call__(self, device, params):
        n = int(params[4])
        out = device.view(params[2], "float32", n)
        if n not in self.cache:
            saxpy_body(device, params)
            self.cache[n] = out.copy()
        else:
            out[:] = self.cache[n]


class StopsAfter:
    """Honest for the first `k` launches, then returns at once."""

    def __init__(self, k):
        self.k = k
        self.calls = 0

    def __call__(self, device, params):
        self.calls += 1
        if self.calls <= self.k:
            saxpy_body(device, params)


def modifies_input(device, params):
    saxpy_body(device, params)
    device.view(params[0], "float32", int(params[4]))[:3] = 0


def run(body, cost_ms=0.5, problem=None, settings=SETTINGS, **device_options):
    kernels = {"saxpy": FakeKernel("saxpy", saxpy_body, 1.0), "cand": FakeKernel("cand", body, cost_ms)}
    device = FakeDevice(kernels, **device_options)
    state = WorkerState(device)
    state.memory_limit = 1 << 30
    problem = problem or saxpy_problem(n=4096, odd=1001)
    job = {"kind": "measure", "problem": problem, "candidate": candidate('extern "C" __global__ void cand()', "cand"),
           "cubin": None, "seed": 11, "settings": settings, "energy": False}
    evidence = run_job(state, job)
    return judge(problem, evidence, settings, backend="fake", seed=11), evidence


def test_an_honest_faster_candidate_is_ok_and_validated_on_every_case_and_set():
    result, evidence = run(saxpy_body, cost_ms=0.25)
    assert result.status == "ok" and result.speedup == pytest.approx(4.0)
    assert {(c.case, c.set_index) for c in evidence.checks} == {(c, s) for c in ("default", "odd") for s in range(3)}
    assert len(evidence.reference_ms) == len(evidence.candidate_ms) >= SETTINGS.min_reps


def test_a_candidate_that_returns_without_computing_is_rejected():
    result, _ = run(lambda device, params: None)
    assert result.status == "rejected-guard" and "wrote none" in result.reason


def test_a_candidate_that_writes_half_the_output_is_rejected():
    result, _ = run(lambda d, p: saxpy_body(d, p, limit=int(p[4]) // 2))
    assert result.status == "rejected-guard" and "wrote only 50" in result.reason


def test_a_candidate_relying_on_its_own_earlier_result_in_the_buffer_is_rejected():
    result, _ = run(StopsAfter(1))
    assert result.status == "rejected-guard" and "poison" in result.reason


def test_a_candidate_that_memoises_across_launches_is_rejected():
    result, evidence = run(Memoiser())
    assert result.status == "rejected-guard" and "memoised" in result.reason
    assert evidence.memoised


def test_a_candidate_that_stops_computing_during_timing_is_rejected():
    result, _ = run(StopsAfter(10))    # passes all 6 validation runs, then gives up
    assert result.status == "rejected-guard" and "after the timed runs" in result.reason.lower()


def test_a_candidate_that_modifies_its_input_is_rejected():
    result, _ = run(modifies_input)
    assert result.status == "rejected-guard" and "modifies its input 'x'" in result.reason


def test_wrong_values_are_a_correctness_failure_with_the_first_bad_element():
    result, _ = run(lambda d, p: saxpy_body(d, p, scale=1.001))
    assert result.status == "failed-correctness" and "first at index" in result.reason


def test_a_claim_below_the_roofline_is_rejected():
    from gpu_runner.result import Hardware

    slow = Hardware("Fake GPU", 4, 1 << 30, 1.0, 1000.0, 1000.0, "9.0", "fake", 1 << 20)
    problem = saxpy_problem(n=1 << 20, odd=1001)   # 12.6 MB at 1 GB/s: at least 12.6 ms on this fake GPU
    # numpy takes real milliseconds here; widen the escape margin so only the roofline speaks
    settings = SETTINGS.with_(escape_margin_ms=1e6)
    result, _ = run(saxpy_body, cost_ms=1.0, problem=problem, hardware=slow, settings=settings)
    assert result.status == "rejected-guard" and "roofline" in result.reason


def test_work_that_finishes_after_the_end_event_is_rejected():
    # the stand-in's events say 0.5 ms, but every synchronise waits another 20 ms of wall time
    result, evidence = run(saxpy_body, cost_ms=0.5, extra_wall_s=0.02)
    assert result.status == "rejected-guard" and "escapes the timer" in result.reason
    assert evidence.escape["wall_ms"] > 20


def test_a_launch_error_fails_the_candidate_with_its_cause():
    kernels = {"saxpy": FakeKernel("saxpy", saxpy_body, 1.0)}
    problem = saxpy_problem(n=4096, odd=1001)
    state = WorkerState(FakeDevice(kernels | {"cand": FakeKernel("cand", saxpy_body, 1.0)}))
    state.memory_limit = 1 << 30
    job = {"kind": "measure", "problem": problem, "seed": 1, "settings": SETTINGS, "energy": False, "cubin": None,
           "candidate": candidate('extern "C" __global__ void cand()', "cand", block=2048)}
    result = judge(problem, run_job(state, job), SETTINGS, backend="fake", seed=1)
    assert result.status == "failed-runtime" and "launch configuration is invalid" in result.reason


def test_a_candidate_over_the_memory_limit_fails_before_allocating():
    problem = saxpy_problem(n=4096, odd=1001)
    state = WorkerState(FakeDevice({"saxpy": FakeKernel("saxpy", saxpy_body, 1.0),
                                    "cand": FakeKernel("cand", saxpy_body, 1.0)}))
    state.memory_limit = 1 << 20
    from gpu_runner import Candidate
    from gpu_runner.spec import ArgSpec
    from klexpr import parse_expression
    base = candidate('extern "C" __global__ void cand()', "cand")
    huge = Candidate(source=base.source, launch=base.launch, name="huge",
                     temps=(ArgSpec("scratch", "temp", "float64", (parse_expression("N * 100000", {"N"}),)),))
    job = {"kind": "measure", "problem": problem, "seed": 1, "settings": SETTINGS, "energy": False, "cubin": None,
           "candidate": huge}
    result = judge(problem, run_job(state, job), SETTINGS, backend="fake", seed=1)
    assert result.status == "failed-runtime" and "GiB" in result.reason and "limit" in result.reason


def test_a_compile_failure_in_the_worker_is_failed_compile_with_the_line():
    problem = saxpy_problem(n=4096, odd=1001)
    state = WorkerState(FakeDevice({"saxpy": FakeKernel("saxpy", saxpy_body, 1.0)}))
    state.memory_limit = 1 << 30
    job = {"kind": "measure", "problem": problem, "seed": 1, "settings": SETTINGS, "energy": False, "cubin": None,
           "candidate": candidate('#error nope\nextern "C" __global__ void cand()', "cand")}
    result = judge(problem, run_job(state, job), SETTINGS, backend="fake", seed=1)
    assert result.status == "failed-compile" and "line 1" in result.reason


def test_inputs_differ_between_sets_and_between_timing_runs():
    seen = []

    def spy(device, params):
        seen.append(device.view(params[0], "float32", 4).copy())
        saxpy_body(device, params)

    run(spy, cost_ms=0.5)
    distinct = {tuple(np.round(s, 6)) for s in seen}
    assert len(distinct) >= len(seen) // 2   # each run sees fresh inputs, only reference/candidate pairs repeat


def test_recording_settings_reuse_the_reference_timing_within_one_worker():
    kernels = {"saxpy": FakeKernel("saxpy", saxpy_body, 1.0), "cand": FakeKernel("cand", saxpy_body, 0.5),
               "lazy": FakeKernel("lazy", StopsAfter(10), 0.5)}
    device = FakeDevice(kernels)
    state = WorkerState(device)
    state.memory_limit = 1 << 30
    problem = saxpy_problem(n=4096, odd=1001)
    settings = SETTINGS.with_(reference_cache_s=60.0)

    def job(kernel):
        return {"kind": "measure", "problem": problem, "seed": 11, "settings": settings, "energy": False,
                "cubin": None, "candidate": candidate(f'extern "C" __global__ void {kernel}()', kernel)}

    first = judge(problem, run_job(state, job("cand")), settings, backend="fake", seed=11)
    second_evidence = run_job(state, job("cand"))
    second = judge(problem, second_evidence, settings, backend="fake", seed=11)
    assert first.status == second.status == "ok" and second.speedup == pytest.approx(2.0)
    assert "reference_age" in second_evidence.phase_s and "earlier in this worker" in second.reason
    assert "reference_age" not in first.phase_s
    # the lazy candidate still meets the post-timing check against a fresh reference run
    lazy = judge(problem, run_job(state, job("lazy")), settings, backend="fake", seed=11)
    assert lazy.status == "rejected-guard" and "after the timed runs" in lazy.reason.lower()
