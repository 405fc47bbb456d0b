"""An uploaded problem has no recording, so its reference's time and Nsight Compute counters (features the learned
surrogate learned from every bundled recording) come from its runs: the first GPU measurement times the reference
beside the candidate and profiles it once; the problem keeps both, the run takes them up at its next step, and
later runs start with them.

The GPU worker here is the recorder tests' instant backend (named cupy) and a stand-in for ncu; the real profile of
a reference on a GPU is tests/gpu_runner/test_profile_reference_gpu.py."""
from pathlib import Path

import pytest

from kernellab.models import Measurement, Problem, RunStatus
from kernellab.services.problems import problem_create, problem_load_bundled
from kernellab.selectors.problems import reference_measurement
from kernellab.services.reference_measurements import ERROR_KEY, PROFILE_ATTEMPTS, reference_measurement_keep
from kernellab.services.runs import run_create
from tests.gpu_runner.test_recorder import CountingBackend
from tests.samples import problem_with_reference_profile

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("embedded_setup")]

RECORDED = Path(__file__).resolve().parents[1] / "gpu_runner" / "problems"
PROFILE = {"l1tex__t_sector_hit_rate.pct": 33.0, "dram__bytes_read.sum": 2.0e6}


@pytest.fixture
def gpu_worker(settings, tmp_path, monkeypatch):
    """An eager Celery that serves the gpu.h200 queue, the instant backend for measurements, and ncu's stand-in, which
    reads PROFILE (or fails, with `gpu_worker["ncu"] = "why"`) and logs what it was asked to profile."""
    from gpu_runner import Runner, recorder
    from kernellab.celery import app
    from kernellab.services import measurement

    settings.DATA_DIR = tmp_path
    problems = tmp_path / "problems"  # what the learned surrogate learns from: saxpy, its reference profiled
    problem_with_reference_profile(RECORDED / "saxpy", problems, PROFILE)
    settings.KERNELLAB_PROBLEMS_DIR = str(problems)
    settings.CELERY_TASK_ALWAYS_EAGER = True
    app.conf.task_always_eager = True
    monkeypatch.setenv("KERNELLAB_GPU", "1")  # eager tasks serve the gpu.h200 queue where a GPU is present
    state = {"profiled": [], "ncu": ""}

    def ncu(runner, problem, pairs, *, seed):
        state["profiled"].append([candidate.name for candidate, _ in pairs])
        for _, result in pairs:
            if state["ncu"]:
                result.observer_errors["ncu"] = state["ncu"]
            else:
                result.profiler = dict(PROFILE, **{"sm__cycles_elapsed.avg": 9.0})

    runner = Runner(CountingBackend())
    monkeypatch.setattr(measurement, "_runner", lambda *args: runner)
    monkeypatch.setattr(recorder, "profile_batch", ncu)
    yield state
    app.conf.task_always_eager = False
    from kernellab.services import surrogates

    surrogates.forget_learned(exclude_problem="my_saxpy", gpu="h200")


def upload(workspace, user) -> Problem:
    """saxpy uploaded under another name, with its family: no recording holds its reference."""
    spec = (RECORDED / "saxpy" / "problem.toml").read_text().replace('name = "saxpy"', 'name = "my_saxpy"')
    return problem_create(workspace=workspace, user=user, spec_toml=spec,
                          reference_source=(RECORDED / "saxpy" / "reference.cu").read_text(),
                          family_source=(RECORDED / "saxpy" / "family.cu").read_text(), compile=False)


def start(problem, user, **kwargs):
    run = run_create(problem=problem, user=user, generator="template", surrogate="learned", backend="cupy",
                     gpu_budget=6, children_per_step=2, max_gpu_per_step=1, **kwargs)
    run.refresh_from_db()
    return run


def test_an_uploaded_problems_run_takes_up_its_references_time_and_counters_from_its_first_gpu_measurement(
        gpu_worker, workspace, members, client, monkeypatch):
    from kernellab.services.run_context import RunContext
    from search_engine.surrogates import learned
    from search_engine.surrogates.features import DEFAULT_REFERENCE_PROFILE, reference_profile_inputs

    read = []  # the reference profiles the learned surrogate's forecasts read
    features = learned.reference_profile_features
    monkeypatch.setattr(learned, "reference_profile_features",
                        lambda profile, problem: read.append(profile) or features(profile, problem))

    problem = upload(workspace, members["engineer"])
    before = RunContext(run_create(problem=problem, user=members["engineer"], generator="template",
                                   surrogate="learned", backend="cupy", start=False))
    assert before.reference_ms is None and before.reference_profile is None
    assert before.surrogate().reference_profile is False  # the model that never reads counters

    run = start(problem, members["engineer"])
    assert run.status == RunStatus.FINISHED, run.status_reason
    assert Measurement.objects.filter(problem=problem, status="ok").count() >= 2
    assert gpu_worker["profiled"] == [["reference"]]  # one ncu start for the whole run
    kept = reference_measurement(Problem.objects.get(pk=problem.pk), "h200")
    assert kept["timing"]["median_ms"] == 1.5 and kept["run_id"] == run.pk
    assert kept["profiler"]["l1tex__t_sector_hit_rate.pct"] == 33.0 and "profiler_error" not in kept
    # the run took them up, and the surrogate its driver is built with reads the counters
    assert run.driver_state["reference_ms"] == 1.5
    assert run.driver_state["reference_profile"] == reference_profile_inputs(PROFILE)
    assert RunContext(run).surrogate().reference_profile is DEFAULT_REFERENCE_PROFILE
    assert read and all(profile == reference_profile_inputs(PROFILE) for profile in read)

    # a later run starts with them, and profiles nothing again
    second = start(problem, members["engineer"])
    assert second.status == RunStatus.FINISHED and gpu_worker["profiled"] == [["reference"]]
    assert RunContext(second).reference_ms == 1.5

    client.force_login(members["viewer"])
    page = client.get(f"/problems/{problem.pk}/").content.decode()
    assert "The reference as a run measured it on the" in page
    assert f'href="/runs/{run.pk}/"' in page and "1.5000 ms" in page and "profiled it once" in page
    assert "L1 hit rate, %" in page and "33.00" in page
    # the micro-profiling experts read the measured reference as they read a recorded one
    assert "<h3>Expert notes</h3>" in page


def test_a_reference_that_cannot_be_profiled_says_why_and_is_tried_a_few_times_only(gpu_worker, workspace, members,
                                                                                     client):
    gpu_worker["ncu"] = "ncu not found"
    problem = upload(workspace, members["engineer"])
    run = start(problem, members["engineer"], name="first")
    assert run.status == RunStatus.FINISHED, run.status_reason
    kept = reference_measurement(Problem.objects.get(pk=problem.pk), "h200")
    assert kept["timing"]["median_ms"] == 1.5 and kept["profiler_error"] == "ncu not found"
    assert "profiler" not in kept and kept["profile_attempts"] == len(gpu_worker["profiled"]) == PROFILE_ATTEMPTS
    # the measurements themselves are kept, and say why the reference has no counters
    assert Measurement.objects.filter(problem=problem, status="ok").exists()
    assert Measurement.objects.filter(observer_errors__has_key=ERROR_KEY).count() == PROFILE_ATTEMPTS
    client.force_login(members["viewer"])
    page = client.get(f"/problems/{problem.pk}/").content.decode()
    assert "Its Nsight Compute counters could not be read: ncu not found" in page
    assert "profiled it once" not in page


def test_only_a_successful_gpu_measurement_says_anything_of_the_reference(workspace, members):
    problem = upload(workspace, members["engineer"])
    timing = {"median_ms": 2.0, "iqr_ms": 0.1, "n": 10}
    ok = {"status": "ok", "backend": "cupy", "reference": timing, "hardware": {"name": "NVIDIA H200"}}
    for result in ({**ok, "status": "failed-correctness"}, {**ok, "backend": "replay"}, {**ok, "backend": "static"},
                   {"status": "ok", "backend": "cupy"}):
        assert not reference_measurement_keep(problem_id=problem.pk, gpu="h200", run_id=None, result=result)
    assert Problem.objects.get(pk=problem.pk).reference_measurements == {}
    assert reference_measurement_keep(problem_id=problem.pk, gpu="H200", run_id=None, result=ok)
    # the first timing stays: a later one would move every feature of a run under way
    assert not reference_measurement_keep(problem_id=problem.pk, gpu="h200", run_id=None,
                                          result={**ok, "reference": {**timing, "median_ms": 3.0}})
    kept = reference_measurement(Problem.objects.get(pk=problem.pk), "h200")
    assert kept["timing"] == timing and kept["hardware"] == {"name": "NVIDIA H200"}
    # counters that come later are kept beside it, and end an earlier failure's count
    assert reference_measurement_keep(problem_id=problem.pk, gpu="h200", run_id=None,
                                      result={**ok, "observer_errors": {ERROR_KEY: "ncu not found"}})
    assert reference_measurement_keep(problem_id=problem.pk, gpu="h200", run_id=None,
                                      result={**ok, "reference_profiler": PROFILE})
    kept = reference_measurement(Problem.objects.get(pk=problem.pk), "h200")
    assert kept["profiler"] == PROFILE and "profiler_error" not in kept and kept["timing"] == timing


def test_a_bundled_problems_recording_comes_before_anything_a_run_measured(settings, workspace, members, tmp_path):
    from kernellab.services.run_context import RunContext

    settings.DATA_DIR = tmp_path
    problems = tmp_path / "problems"
    problem_with_reference_profile(RECORDED / "saxpy", problems, PROFILE)
    settings.KERNELLAB_PROBLEMS_DIR = str(problems)
    saxpy = next(p for p in problem_load_bundled(workspace=workspace) if p.name == "saxpy")
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", start=False)
    recorded = RunContext(run)
    assert recorded.reference_ms and recorded.reference_profile
    # a GPU worker measuring it does not profile a reference its recording has profiled
    from kernellab.services.measurement import _profile_reference_once

    class NoProfile:
        def profile_reference(self, *args, **kwargs):
            raise AssertionError("the recording's reference was profiled again")

    result = {"status": "ok", "backend": "cupy", "reference": {"median_ms": 99.0}}
    _profile_reference_once(NoProfile(), run, recorded.spec, result, 0)
    assert "reference_profiler" not in result and not result.get("observer_errors")
    reference_measurement_keep(problem_id=saxpy.pk, gpu="h200", run_id=run.pk,
                               result={"status": "ok", "backend": "cupy", "reference": {"median_ms": 99.0},
                                       "reference_profiler": {"l1tex__t_sector_hit_rate.pct": 1.0}})
    run.problem.refresh_from_db()
    again = RunContext(run)
    assert (again.reference_ms, again.reference_profile) == (recorded.reference_ms, recorded.reference_profile)


def test_a_profile_cut_by_the_workers_time_limit_keeps_the_candidates_measurement(gpu_worker, workspace, members,
                                                                                  monkeypatch):
    from celery.exceptions import SoftTimeLimitExceeded

    from gpu_runner import recorder

    def slow(runner, problem, pairs, *, seed):
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(recorder, "profile_batch", slow)
    problem = upload(workspace, members["engineer"])
    run = start(problem, members["engineer"])
    assert run.status == RunStatus.FINISHED, run.status_reason
    assert Measurement.objects.filter(problem=problem, status="ok").count() >= 2
    kept = reference_measurement(Problem.objects.get(pk=problem.pk), "h200")
    assert kept["timing"]["median_ms"] == 1.5 and "time limit" in kept["profiler_error"]


def test_a_pytorch_references_time_is_kept_and_it_is_never_profiled(workspace, members):
    from kernellab.services.problems import problem_create_pytorch
    from kernellab.services.run_context import RunContext
    from kernellab.services.reference_measurements import reference_profile_wanted

    source = (Path(__file__).resolve().parents[2] / "kernellab" / "problems" / "kb_layernorm" / "reference.py")
    problem = problem_create_pytorch(workspace=workspace, user=members["engineer"], program_source=source.read_text(),
                                     name="my_layernorm")
    assert not reference_profile_wanted(problem, "h200", recorded_profile=False)
    run = run_create(problem=problem, user=members["engineer"], generator="transform", surrogate="learned",
                     backend="replay", start=False)
    assert RunContext(run).reference_ms is None
    # the torch backend times the reference beside each KernelBench candidate; a counter would be no one kernel's
    assert reference_measurement_keep(problem_id=problem.pk, gpu="h200", run_id=run.pk, result={
        "status": "ok", "backend": "torch", "reference": {"median_ms": 0.8}, "reference_profiler": PROFILE,
        "observer_errors": {ERROR_KEY: "not asked"}})
    kept = reference_measurement(Problem.objects.get(pk=problem.pk), "h200")
    assert kept["timing"] == {"median_ms": 0.8} and set(kept) == {"timing", "hardware", "run_id", "measured_at"}
    run.refresh_from_db()
    assert RunContext(run).reference_ms == 0.8
