"""Turn a claimed Verification into a runner measurement (and expert notes) — no database writes."""
from __future__ import annotations

import logging
import random

from django.conf import settings

from kernellab.models import Verification
from kernellab.selectors.problems import problem_records_root
from kernellab.services.problems import problem_spec

log = logging.getLogger(__name__)


def runner_backend(run) -> str:
    if run.backend != "auto":
        return run.backend
    return settings.KERNELLAB_RUNNER_BACKEND


def records_root_for(problem) -> str | None:
    root = problem_records_root(problem)
    return str(root) if problem.bundled or (root / problem.name / "records").is_dir() else None


def measure_for_verification(verification: Verification) -> tuple[dict, list[dict]]:
    from gpu_runner import Candidate

    node = verification.node
    run = node.run
    problem = run.problem
    spec = problem_spec(problem)
    candidate = Candidate.from_dict(node.kernel.as_candidate(), spec)
    runner = _runner(runner_backend(run), records_root_for(problem), run.target_gpu)
    seed = random.SystemRandom().randrange(2**31)
    result = runner.measure(
        spec,
        candidate,
        seed=seed,
        profile=True,
        energy=True,
        timeout_s=min(settings.KERNELLAB_VERIFY_TIME_LIMIT_S - 5, 300),
    ).to_dict()
    _profile_reference_once(runner, run, spec, result, seed)
    notes = expert_notes_for(spec, result)
    label_recorded_answer(result, queue=verification.queue)
    return result, notes


# What a replayed answer's hardware name gets on a gpu.* queue, after the recording's GPU name.
RECORDED_SUFFIX = " (recorded data, not measured by this worker)"


def label_recorded_answer(result: dict, *, queue: str) -> dict:
    """A verification sent to a GPU queue (gpu.h200) that the worker answered from recorded data (a run set to
    "auto" on a worker with KERNELLAB_RUNNER_BACKEND=replay) carries the recording's hardware, "NVIDIA H200", as
    if this worker had measured it live: its stored hardware says it was recorded (`recorded`: true, and the
    name). The GPU's name stays first, so what reads the GPU's figures by name (gpu_key) reads the same GPU. A
    replay run's answers (the replay queue) are labelled replay everywhere already and are left as they are."""
    if not queue.startswith("gpu.") or result.get("backend") != "replay" or not result.get("hardware"):
        return result
    hardware = dict(result["hardware"])
    name = str(hardware.get("name") or "a GPU")
    if not name.endswith(RECORDED_SUFFIX):
        hardware["name"] = name + RECORDED_SUFFIX
    hardware["recorded"] = True
    result["hardware"] = hardware
    return result


def _profile_reference_once(runner, run, spec, result: dict, seed: int) -> None:
    """After a measurement on a GPU, the reference's counters where no recording holds them (an uploaded problem):
    added to `result` for verification_finish to keep on the problem (services.reference_measurements), with
    why not where they cannot be read. Once per problem and GPU: an ncu start costs seconds."""
    from kernellab.selectors.problems import recorded_reference_record
    from kernellab.services.reference_measurements import (ERROR_KEY, GPU_BACKENDS, RESULT_KEY,
                                                           reference_profile_wanted)

    if result.get("status") != "ok" or result.get("backend") not in GPU_BACKENDS:
        return
    try:
        recorded = bool((recorded_reference_record(run.problem, run.target_gpu) or {}).get("profiler"))
    except (OSError, EOFError, ValueError):  # a damaged recording holds no counters a run could read
        recorded = False
    if not reference_profile_wanted(run.problem, run.target_gpu, recorded_profile=recorded):
        return
    from celery.exceptions import SoftTimeLimitExceeded

    try:
        counters, why_not = runner.profile_reference(spec, seed=seed)
    except SoftTimeLimitExceeded:  # the candidate's measurement is kept all the same (the hard limit is a minute on)
        counters, why_not = {}, "the worker's time limit came before the reference's profile ended"
    if counters:
        result[RESULT_KEY] = counters
    else:
        result.setdefault("observer_errors", {})[ERROR_KEY] = why_not


def expert_notes_for(spec, result: dict) -> list[dict]:
    if result.get("status") != "ok":
        return []
    from search_engine.experts import analyse

    from kernellab.datasets import problem_numbers

    numbers = problem_numbers(spec)
    return [note.to_dict() for note in analyse(result, flops=numbers["flops"], bytes=numbers["bytes"], hardware=result.get("hardware"))]


_runners: dict[tuple, object] = {}


def _runner(backend: str, records_root: str | None, gpu: str):
    """One runner per worker process and setting: its isolated GPU process stays up between
    verifications (starting one costs seconds), and is replaced by the runner after a fault."""
    from gpu_runner import Runner

    key = (backend, records_root, gpu)
    if key not in _runners:
        _runners[key] = Runner(backend=backend, records_root=records_root, gpu=gpu)
    return _runners[key]
