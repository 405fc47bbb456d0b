from __future__ import annotations

import logging

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from kernellab.models import RUN_TRANSITIONS, ApprovalMode, Problem, RunStatus, SearchRun
from kernellab.selectors.backends import BACKENDS, backend_choice, backend_resolve
from kernellab.services.access import access_require
from kernellab.services.changes import change_record
from kernellab.services.errors import IllegalTransition, ServiceError
from kernellab.services.run_context import GENERATOR_BUILDERS
from kernellab.services.surrogates import SURROGATE_BUILDERS

GENERATORS = tuple(GENERATOR_BUILDERS)
SURROGATES = tuple(SURROGATE_BUILDERS)
OBJECTIVES = ("time", "energy", "time-energy-cap")
FEEDBACK = ("notes", "raw", "none")
# A run's seed is stored in SearchRun.seed, a PositiveIntegerField: a 32-bit integer column on PostgreSQL (Django's
# range for it is 0..2**31 - 1; SQLite took 2**31 and 2**32 and overflowed only past 2**63). The search takes it as
# random.Random's seed (any integer) and draws its own seeds below 2**31 (the LLM's, the measurements'); numpy's
# RandomState and scikit-learn's random_state take < 2**32 and LightGBM's seed is a C int. 0..2**31 - 1 fits them all.
SEED_MAX = 2**31 - 1

log = logging.getLogger(__name__)

# What a run says while its first advance could not be sent: it stays running, and the beat's sweep of running runs
# without a lease advances it once the broker answers again.
BROKER_UNREACHABLE = "The worker queue could not be reached ({cause}); the run will start when it is back."


def _broker_errors() -> tuple[type[BaseException], ...]:
    """What publishing a task raises when the broker (Redis) cannot be reached."""
    from kombu.exceptions import OperationalError

    errors: list[type[BaseException]] = [OperationalError, OSError]
    try:
        from redis.exceptions import ConnectionError as RedisConnectionError, TimeoutError as RedisTimeoutError
    except ImportError:  # the embedded setup (filesystem broker) may run without the redis client
        pass
    else:
        errors += [RedisConnectionError, RedisTimeoutError]
    return tuple(errors)


def run_advance_publish(run: SearchRun) -> bool:
    """Send the task that advances `run`. Called after the commit that made it running, so a broker that cannot be
    reached must not fail the request (the run is running already): the run's status_reason says so instead, and
    the beat's sweep advances it later. False when nothing was sent."""
    from kernellab.tasks import search_run_advance

    try:
        search_run_advance.apply_async(args=[run.pk], queue="search")
    except _broker_errors() as exc:
        text = str(exc).strip()
        cause = text.splitlines()[0] if text else type(exc).__name__
        log.warning("Run %s is running but its advance could not be queued: %s", run.pk, cause)
        reason = BROKER_UNREACHABLE.format(cause=cause)[:2000]
        SearchRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(status_reason=reason,
                                                                            updated_at=timezone.now())
        run.status_reason = reason
        return False
    return True


# A CUDA kernel without knobs (a user's own) is searched by the recipes (the cures of the experts'
# diagnoses), with the step settings that benchmarks/own_kernels_h200.py measured on the H200: wide steps whose
# children are compile-checked in one batch, and more measurements where that batch is costly (nvcc). Four of
# five naive kernels reached 72-90% of their roofline within 150 measurements there (the column sum 61%, near
# the 63% its plain kernel shows); with the next step compiled while the GPU measures (the run form's default)
# the searches waited on compiling for 2-4% of their wall time, 17-43% without (docs/search.md, "Your own
# kernel on the H200").
OWN_KERNEL_DEFAULTS = {
    "generator": "recipes", "surrogate": "roofline", "children_per_step": 16, "screening_width": 32,
    "parents_per_step": 4, "min_children_per_step": 16, "max_gpu_per_step": 8, "compile_share_target": 0.25,
}


def template_run_defaults() -> dict:
    """A run of a problem with knobs: the template generator and the learned surrogate with the search settings the
    search benchmark measures (search_engine.search_settings.TEMPLATE_SEARCH), so that its figures describe the run.
    The screening width is the run form's (256, the benchmark's); ./kl search keeps run_create's 0, since there
    every screened candidate is a compile check on this machine."""
    from search_engine.search_settings import TEMPLATE_SEARCH as T

    return {"generator": "template", "surrogate": "learned", "confidence_threshold": T.threshold,
            "conformal_target": T.conformal_target, "children_per_step": T.children_per_expansion,
            "max_gpu_per_step": T.max_gpu_per_step, "retrain_every": T.retrain_every}


def run_defaults(*, problem: Problem) -> dict:
    """The settings a new run of `problem` starts from (the run form's initial values, ./kl search's defaults)
    where they differ from run_create's own: a kernel without knobs gets OWN_KERNEL_DEFAULTS."""
    from gpu_runner.spec import reference_kind

    if reference_kind(problem.spec_toml) == "pytorch":
        return {"generator": "replayed", "surrogate": "learned"}
    if problem.family_source:
        return template_run_defaults()
    return dict(OWN_KERNEL_DEFAULTS)


def _require_measurable(run: SearchRun) -> None:
    choice = backend_choice(problem=run.problem, backend=run.backend, target_gpu=run.target_gpu)
    if not choice.available:
        raise ServiceError(f"The {run.backend} backend cannot measure {run.problem.title}: {choice.unavailable}. "
                           "Choose a backend that can, or start a worker for its queue.")


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ServiceError(f"The {name} must be one of {', '.join(allowed)}; {value!r} is not.")


@transaction.atomic
def run_create(
    *,
    problem: Problem,
    user,
    name: str = "",
    generator: str = "template",
    surrogate: str = "learned",
    confidence_threshold: float = 0.6,
    conformal_target: float | None = None,
    retrain_every: int = 10,
    gpu_budget: int = 40,
    children_per_step: int = 4,
    parents_per_step: int = 1,
    min_children_per_step: int = 0,
    compile_share_target: float = 0.0,
    prefetch_while_measuring: bool = False,
    screening_width: int | None = 0,
    max_gpu_per_step: int = 2,
    max_steps: int = 60,
    puct_c: float = 1.0,
    approval_mode: str = ApprovalMode.AUTO,
    target_gpu: str = "h200",
    backend: str = "auto",
    objective: str = "time",
    energy_cap_j: float | None = None,
    feedback: str = "notes",
    seed: int = 0,
    llm_call_budget: int | None = None,
    start: bool = True,
    submission: str = "",
) -> SearchRun:
    """Make a run (and start it unless start is False). ``submission`` is the run form's one-time token: a form sent
    twice (a double click, a browser retrying the post) gets the run its first sending made, started once."""
    access_require(user=user, workspace=problem.workspace, action="run")
    submission = (submission or "").strip()
    if submission:
        if len(submission) > 64 or not submission.isalnum():
            raise ServiceError("The form's token is not one this server gave out: reload the page and send it again.")
        earlier = run_for_submission(problem=problem, user=user, submission=submission)
        if earlier is not None:
            return earlier
    _check_choice("generator", generator, GENERATORS)
    _check_choice("surrogate", surrogate, SURROGATES)
    _check_choice("objective", objective, OBJECTIVES)
    _check_choice("feedback", feedback, FEEDBACK)
    _check_choice("backend", backend, BACKENDS)
    _check_choice("approval mode", approval_mode, tuple(ApprovalMode.values))
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        shown = f"{seed:,}" if isinstance(seed, int) and seed.bit_length() <= 100 else "that"
        raise ServiceError(f"The seed must be a whole number from 0 to {SEED_MAX:,} (2^31 - 1); {shown} is not.")
    if not 0.125 <= confidence_threshold <= 1.0:
        raise ServiceError("The confidence threshold must lie between 0.125 (uniform) and 1.0.")
    if conformal_target is not None and not 0.0 < conformal_target < 1.0:
        raise ServiceError("The trusted forecasts' error rate must lie strictly between 0 and 1 (or be left empty: the "
                           "fixed threshold throughout).")
    if not 1 <= retrain_every <= 1000:
        raise ServiceError("The surrogate must relearn every 1 to 1,000 measurements.")
    if not 1 <= gpu_budget <= 100000:
        raise ServiceError("The GPU budget must be between 1 and 100,000 measurements.")
    if not 1 <= children_per_step <= 64:
        raise ServiceError("Children per step must be between 1 and 64.")
    if not 1 <= parents_per_step <= 16:
        raise ServiceError("Parents per step must be between 1 and 16.")
    if not 0 <= min_children_per_step <= 256:
        raise ServiceError("The minimum children per step must be between 0 (off) and 256.")
    if not (compile_share_target == 0 or 0.05 <= compile_share_target <= 0.9):
        raise ServiceError("The compile share target must be 0 (off) or between 0.05 and 0.9 of a step's wall time.")
    if not 1 <= max_gpu_per_step <= 64:
        raise ServiceError("GPU measurements per step must be between 1 and 64.")
    screening_width = screening_width or 0
    if not 0 <= screening_width <= 4096:
        raise ServiceError("The screening width must be between 0 (off) and 4,096 candidates.")
    if (generator == "llm" or surrogate == "llm") and not settings.KERNELLAB_LLM.configured:
        # said first: a setting of the LLM's (the screening width below) is moot until there is one
        raise ServiceError("No LLM endpoint is configured: set OPENAI_BASE_URL (and OPENAI_API_KEY) to use an LLM generator or surrogate.")
    if generator == "llm" and screening_width > 64:
        raise ServiceError("With the LLM generator every screened candidate is an LLM call: keep the screening width at 64 or less.")
    if generator == "template" and not problem.family_source:
        from gpu_runner.spec import reference_kind

        instead = ("the replayed generator (LLM-written solutions of this task)" if reference_kind(problem.spec_toml) == "pytorch"
                   else "the transformation or LLM generator")
        raise ServiceError(f"The template generator needs a problem with knobs; {problem.title} has none. Use {instead}.")
    if objective == "time-energy-cap" and not energy_cap_j:
        raise ServiceError("An energy cap (joules per call) is needed for the time-with-energy-cap objective.")
    if generator == "llm" or surrogate == "llm":
        if not settings.KERNELLAB_LLM.configured:
            raise ServiceError("No LLM endpoint is configured: set OPENAI_BASE_URL (and OPENAI_API_KEY) to use an LLM generator or surrogate.")
        llm_call_budget = llm_call_budget or settings.KERNELLAB_LLM.call_budget
        if not 1 <= llm_call_budget <= 1_000_000:
            raise ServiceError("The LLM call budget must be between 1 and 1,000,000 calls.")
    backend = backend_resolve(backend)
    if not target_gpu.replace("-", "").replace("_", "").isalnum():
        raise ServiceError("The target GPU must be a model name such as h200 or a100.")
    fields = dict(
        problem=problem,
        created_by=user,
        submission=submission,
        name=name.strip()[:200],
        generator=generator,
        surrogate=surrogate,
        confidence_threshold=confidence_threshold,
        conformal_target=conformal_target,
        retrain_every=retrain_every,
        gpu_budget=gpu_budget,
        children_per_step=children_per_step,
        parents_per_step=parents_per_step,
        min_children_per_step=min_children_per_step,
        compile_share_target=compile_share_target,
        prefetch_while_measuring=bool(prefetch_while_measuring),
        max_gpu_per_step=max_gpu_per_step,
        max_steps=max_steps,
        puct_c=puct_c,
        approval_mode=approval_mode,
        target_gpu=target_gpu.lower(),
        backend=backend,
        objective=objective,
        energy_cap_j=energy_cap_j,
        feedback=feedback,
        seed=seed,
        screening_width=screening_width,
        llm_call_budget=llm_call_budget if generator == "llm" or surrogate == "llm" else None,
    )
    try:
        with transaction.atomic():  # a savepoint: the losing sending of a form sent twice at once reads the winner's run
            run = SearchRun.objects.create(**fields)
    except IntegrityError:
        earlier = run_for_submission(problem=problem, user=user, submission=submission) if submission else None
        if earlier is None:
            raise
        return earlier
    change_record(run=run, kind="run", payload={"status": run.status})
    if start:
        run_transition(run=run, user=user, action="start")
    return run


def run_for_submission(*, problem: Problem, user, submission: str) -> SearchRun | None:
    """The run that this run form's sending already made, if any. A token of someone else's form is refused: it is
    never shown to anyone but the person whose page holds it."""
    earlier = SearchRun.objects.filter(problem=problem, submission=submission).first() if submission else None
    if earlier is not None and earlier.created_by_id != getattr(user, "pk", None):
        raise ServiceError("This form was already sent by someone else: reload the page to start a run of your own.")
    return earlier


@transaction.atomic
def run_transition(*, run: SearchRun, action: str, user=None, reason: str = "") -> SearchRun:
    """start, pause, resume, cancel by a person; wait, wake, finish, fail by the search itself."""
    run = SearchRun.objects.select_for_update().select_related("problem__workspace").get(pk=run.pk)
    if user is not None:
        access_require(user=user, workspace=run.workspace, action="run")
    if action not in RUN_TRANSITIONS:
        raise ServiceError(f"Unknown run action {action!r}.")
    allowed, target = RUN_TRANSITIONS[action]
    if run.status not in allowed:
        raise IllegalTransition(f"The run is {run.get_status_display().lower()}, so it cannot {action}.")
    if action == "start":
        _require_measurable(run)  # otherwise every candidate would wait, or fail, and burn the budget
    if target == RunStatus.CANCELLED:
        from kernellab.services.verifications import verifications_cancel_for_run

        verifications_cancel_for_run(run=run)
    run.status = target
    run.status_reason = reason[:2000]
    run.save(update_fields=["status", "status_reason", "updated_at"])
    change_record(run=run, kind="run", payload={"status": run.status, "reason": run.status_reason})
    if target in (RunStatus.FINISHED, RunStatus.CANCELLED, RunStatus.FAILED):
        from kernellab.services.verifications import run_gpu_recount

        # The run is never advanced again: its count is stored now, by the ended run's rule (run_gpu_use), not when a
        # page reads it. The search cannot give back what its cancelled requests reserved (released here, so that
        # the run list, which reads gpu_used, shows what was measured, not what was only asked for), nor count
        # what people measured that it was never told of.
        run_gpu_recount(run=run)
    if target == RunStatus.RUNNING:
        transaction.on_commit(lambda: run_advance_publish(run))
    return run


def run_start(*, run: SearchRun, user) -> SearchRun:
    return run_transition(run=run, user=user, action="start")


def run_pause(*, run: SearchRun, user) -> SearchRun:
    return run_transition(run=run, user=user, action="pause")


def run_resume(*, run: SearchRun, user) -> SearchRun:
    return run_transition(run=run, user=user, action="resume")


def run_cancel(*, run: SearchRun, user) -> SearchRun:
    return run_transition(run=run, user=user, action="cancel")
