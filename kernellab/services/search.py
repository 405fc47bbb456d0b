"""Advancing a search run: the lease that says which worker advances it, feeding the driver what
happened outside, stepping, saving; and a person's hand-written child.

The driver's whole state lives in SearchRun.driver_state. One Celery task at a time advances a
run (a lease on the row says who); it feeds the driver what happened outside since the last
advance (approvals, rejections, finished measurements), steps until the driver must wait, and
saves. What the driver is built from is in run_context.py; how its events become rows, in
search_port.py."""
from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from datetime import timedelta

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.cache import cache
from django.db import OperationalError, connection, connections, transaction
from django.db.models import Q
from django.utils import timezone
from search_engine.llm_client import LLMUnreachable
from search_engine.node_states import PENDING_STATES, SETTLED_STATES
from search_engine.node_states import NodeState as SearchNodeState
from search_engine.saved_state import SavedSearch

from kernellab.models import Measurement, Node, RunStatus, SearchLesson, SearchRun, Verification, VerificationState
from kernellab.services.access import access_require
from kernellab.services.errors import IllegalTransition, ServiceError
from kernellab.services.changes import change_record
from kernellab.services.run_context import RunContext, llm_client
from kernellab.services.search_port import DatabasePort
from kernellab.services.verifications import (
    GPU_TAKEN_STATES,
    HAND_COUNTED_KEY,
    RUN_ENDED_STATES,
    SEARCHING_STATES,
    hand_requested,
    run_gpu_recount,
)

__all__ = ["DatabasePort", "RunContext", "llm_client", "measurement_as_result", "node_add_human_child",
           "objective_result", "reference_j_per_call", "run_advance", "run_pause_for_time_limit"]

log = logging.getLogger(__name__)

# An advance holds its run's lease; while it runs, a thread renews it every LEASE_RENEW_S (a step may wait minutes on
# compiles or a slow LLM). A worker process that dies holding it (killed, out of memory) blocks the run for at most
# LEASE_S: its redelivered message, and the beat's sweep of stuck runs, take the run over once the lease has passed.
LEASE_S = 120
LEASE_RENEW_S = 30
STEPS_PER_ADVANCE = 25
# A transient database error (deadlock, serialization failure, lost connection) rolls the step back and the advance
# is tried again after TRANSIENT_RETRY_S; only after TRANSIENT_DB_ERRORS_MAX of them in a row does the run fail.
TRANSIENT_DB_ERRORS_MAX = 5
TRANSIENT_RETRY_S = 2.0
TRANSIENT_OUTCOME = "retrying after a transient database error"
_SEARCHING = (RunStatus.RUNNING, RunStatus.WAITING)
# Saved beside the driver's state: what the run's LLM calls came to (LLMCallBudget.useful and .last_error), so that
# a run whose budget is spent says so when every call failed, and why the last one did.
LLM_OUTCOMES_KEY = "llm_outcomes"
# What to check for each way an LLM endpoint fails (LLMUnreachable.check), in the names a run's settings have.
LLM_SETTINGS_NAMES = {"base_url": "OPENAI_BASE_URL", "api_key": "OPENAI_API_KEY", "timeout": "KERNELLAB_LLM_TIMEOUT_S"}


# ---- advancing a run ------------------------------------------------------------------------
def _lease(run_id: int, wait_s: float = 0.0) -> bool:
    deadline = time.monotonic() + wait_s
    while True:
        now = timezone.now()
        taken = SearchRun.objects.filter(pk=run_id).filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now)).update(
            lease_until=now + timedelta(seconds=LEASE_S)
        )
        if taken == 1:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def _release(run_id: int) -> None:
    SearchRun.objects.filter(pk=run_id).update(lease_until=None)


def _renew(run_id: int) -> None:
    # A step that waits on a slow LLM may take minutes: the lease is held from step to step, not per advance.
    SearchRun.objects.filter(pk=run_id).update(lease_until=timezone.now() + timedelta(seconds=LEASE_S))


@contextmanager
def _lease_kept(run_id: int):
    """Keep a taken lease alive while the body runs, from a thread with its own database connection."""
    stop = threading.Event()

    def renew() -> None:
        try:
            while not stop.wait(LEASE_RENEW_S):
                try:
                    _renew(run_id)
                except Exception as exc:  # tried again next period; the lease lasts LEASE_S meanwhile
                    log.warning("could not renew the lease of run %s: %s", run_id, exc)
        finally:
            connections.close_all()  # this thread's connections only

    keeper = threading.Thread(target=renew, name=f"run-{run_id}-lease", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join(timeout=5)


def _advance_later(run_id: int) -> None:
    """Another worker holds the lease: try again when it must have let go (it also enqueues a
    follow-up itself on release; this one covers a worker that died holding the lease)."""
    from kernellab.celery import app

    if app.conf.task_always_eager:
        return  # one process: the holder is up the call stack and continues the run itself
    lease_until = SearchRun.objects.filter(pk=run_id).values_list("lease_until", flat=True).first()
    if lease_until is None:
        delay = 1.0
    else:
        delay = max(1.0, (lease_until - timezone.now()).total_seconds() + 1.0)
    from kernellab.tasks import search_run_advance

    search_run_advance.apply_async(args=[run_id], queue="search", countdown=delay)


class _StoppedMeanwhile(Exception):
    """The run was paused, cancelled or ended by someone else while this advance stepped it."""

    def __init__(self, status: str):
        super().__init__(status)
        self.status = status


def _status_now(run_id: int) -> str:
    return SearchRun.objects.filter(pk=run_id).values_list("status", flat=True).get()


def _still_searching(run_id: int) -> None:
    """Inside the transaction that applies a step's held writes: lock the run row (a person's pause or cancel,
    run_transition, locks it too, so it waits for this commit or this waits for it) and re-read its status.

    Where the run is no longer running or waiting, the step is not saved at all: raising here rolls the
    transaction back before any held write (nodes, the verifications that would go to the GPU, the driver's state)
    is applied. Discarding only the measurement requests would leave a saved driver state claiming it asked for
    them, and a resumed run would wait forever for measurements nobody queued; not saving the step leaves the saved
    state where it was, so a resumed run redoes the step and asks again, and a cancelled run queues nothing."""
    status = SearchRun.objects.select_for_update().filter(pk=run_id).values_list("status", flat=True).get()
    if status not in _SEARCHING:
        raise _StoppedMeanwhile(status)


def _transient_key(run_id: int) -> str:
    return f"kernellab:search:transient-db-errors:{run_id}"


_transient_here: dict[int, int] = {}  # this process's count, in case the shared cache is unreachable or a dummy


def _count_transient_error(run_id: int) -> int:
    here = _transient_here[run_id] = _transient_here.get(run_id, 0) + 1
    try:
        cache.add(_transient_key(run_id), 0, timeout=3600)
        shared = cache.incr(_transient_key(run_id))
    except Exception:  # noqa: BLE001 - the cache is an aid to the count, never a reason to stop
        shared = 0
    return max(here, shared)


def _clear_transient_errors(run_id: int) -> None:
    _transient_here.pop(run_id, None)
    try:
        cache.delete(_transient_key(run_id))
    except Exception:  # noqa: BLE001
        pass


def _retry_later(run_id: int) -> None:
    """After a transient database error, once the lease is let go (so the retry finds it free)."""
    from kernellab.tasks import search_run_advance

    search_run_advance.apply_async(args=[run_id], queue="search", countdown=TRANSIENT_RETRY_S)


def _load_driver(run: SearchRun, port: DatabasePort):
    from search_engine.driver import SearchDriver

    context = port.context
    if run.driver_state:
        return SearchDriver.from_state(_reference_taken_up(run.driver_state, context), port=port,
                                       generator=context.generator(), surrogate=context.surrogate())
    reference = run.problem.reference.as_candidate()
    return SearchDriver(
        port=port,
        generator=context.generator(),
        surrogate=context.surrogate(),
        reference={**reference, "name": f"{run.problem.name} reference"},  # not the shared Kernel row's name
        hardware=context.hardware,
        problem=context.problem_dict(),
        settings=context.search_settings(),
        reference_ms=context.reference_ms,
        reference_compiler_facts=context.reference_compiler_facts,
        reference_profile=context.reference_profile,
    )


def _reference_taken_up(state: dict, context) -> dict:
    """A run that started without its reference's time or counters (an uploaded problem, which no recording
    holds) takes them up once its GPU worker has measured them (services.reference_measurements): before the
    driver relearns from the run's rows, so that the rows it learns from and the candidates it forecasts read the
    same features, and the surrogate built for it (RunContext.surrogate) reads the counters too."""
    taken = dict(state)
    if taken.get("reference_ms") is None and context.reference_ms is not None:
        taken["reference_ms"] = context.reference_ms
    if not taken.get("reference_profile") and context.reference_profile:
        taken["reference_profile"] = context.reference_profile
    return taken


def measurement_as_result(measurement: Measurement) -> dict:
    return {
        "status": measurement.status,
        "reason": measurement.reason,
        "speedup": measurement.speedup,
        "reference": measurement.reference_stats,
        "candidate": measurement.candidate_stats,
        "energy": measurement.energy,
        "compiler": measurement.compiler_facts,
        "profiler": measurement.profiler_metrics,
        "backend": measurement.backend,
        "seed": measurement.seed,
        "max_abs_error": measurement.max_abs_error,
        "max_rel_error": measurement.max_rel_error,
        "hardware": measurement.hardware,
        "expert_notes": [
            {"expert": n.expert, "severity": n.severity, "finding": n.finding, "evidence": n.evidence, "advice": n.advice}
            for n in measurement.expert_notes.all()
        ],
    }


def _outside_event(node_state: SearchNodeState, verification_state: str) -> bool:
    """Whether a verification row says something the driver does not know yet."""
    if node_state in SETTLED_STATES:
        return False
    if verification_state in (VerificationState.DONE, VerificationState.FAILED):
        return True
    if node_state == SearchNodeState.AWAITING_APPROVAL:
        return verification_state != VerificationState.PENDING
    return False


def _hand_counted(run: SearchRun, driver) -> set[int]:
    """The verifications people asked for that the search has counted (HAND_COUNTED_KEY, saved beside its state).
    A state saved before the search kept that record: the measurements people asked for that the driver already
    took in (their node is settled for it) are taken as counted, as they were then, and are not counted again."""
    state = run.driver_state or {}
    record = state.get(HAND_COUNTED_KEY)
    if isinstance(record, list):
        return {int(pk) for pk in record}
    if not state:
        return set()
    taken = hand_requested(Verification.objects.filter(node__run=run, state__in=GPU_TAKEN_STATES))
    return {pk for pk, key in taken.values_list("pk", "node__key") if driver.node_state(int(key)) in SETTLED_STATES}


def _measured_again(node_state: SearchNodeState | None, verification_state: str, by_hand: bool) -> bool:
    """Whether a verification is a person's measurement, done or failed (it took the GPU), of a node the search had
    settled: the search learns nothing from it (the node keeps what it has), but it counts against the budget."""
    return by_hand and node_state in SETTLED_STATES and verification_state in GPU_TAKEN_STATES


def _feed_outside_events(driver, run: SearchRun, counted: set[int] | None = None) -> int:
    """Tell the driver about approvals, rejections, finished measurements and measurements that
    people asked for themselves. Returns how many events were fed.

    Each measurement a person asked for is counted in the search's budget use once, when it has taken the GPU:
    of a node the search had not measured through SearchDriver.measure_outside, again of one it had settled here.
    `counted` (from _hand_counted; saved with the state by _save) says which are counted already, and takes the
    new ones in."""
    if counted is None:
        counted = _hand_counted(run, driver)
    fed = 0
    rows = Verification.objects.filter(node__run=run).select_related("node", "measurement").order_by("pk")
    for verification in rows:
        node_id = int(verification.node.key)
        state = driver.node_state(node_id)
        by_hand = not verification.requested_by_policy
        if by_hand and verification.pk in counted:
            continue
        if _measured_again(state, verification.state, by_hand):
            driver.counters.measurements_requested += 1
            counted.add(verification.pk)
            fed += 1
            continue
        if state is None or not _outside_event(state, verification.state):
            continue
        if state == SearchNodeState.AWAITING_APPROVAL:
            if verification.state == VerificationState.REJECTED:
                driver.reject(node_id, verification.reason or "an approver rejected the GPU verification")
                fed += 1
                continue
            driver.approve(node_id)
        elif state not in PENDING_STATES:
            driver.measure_outside(node_id, "a person asked for GPU verification")
        if verification.state == VerificationState.DONE and verification.measurement is not None:
            driver.on_measurement(node_id, objective_result(run, measurement_as_result(verification.measurement)))
        elif verification.state == VerificationState.FAILED:
            driver.on_measurement(node_id, {"status": "failed-runtime", "reason": verification.reason or "the GPU worker failed"})
        if by_hand:  # measure_outside counted it (or, the node awaiting the search's own request, that one did)
            counted.add(verification.pk)
        fed += 1
    return fed


def reference_j_per_call(run: SearchRun) -> float | None:
    """The reference's energy per call: from a measurement of the reference kernel, else the
    recorded reference line."""
    measurement = (
        Measurement.objects.filter(problem=run.problem, kernel=run.problem.reference, status="ok", energy__isnull=False)
        .order_by("-created_at").first()
    )
    if measurement is not None and measurement.energy_j_per_call:
        return measurement.energy_j_per_call
    for record in RunContext(run).replay_records.values():
        if record.get("variant") == "reference" and (record.get("energy") or {}).get("j_per_call"):
            return record["energy"]["j_per_call"]
    return None


def objective_result(run: SearchRun, result: dict) -> dict:
    """What the tree optimises: the speedup (time), the energy ratio (energy), or the speedup
    penalised above an energy cap. Where the energy needed is unknown, the time speedup stands
    and the reason says so; the node's measured speedup in the database is never changed."""
    if run.objective == "time" or result.get("status") != "ok":
        return result
    from search_engine.experts import objective_value

    value = objective_value(result, run.objective, cap_j=run.energy_cap_j, reference_j_per_call=reference_j_per_call(run))
    if value is None:
        return {**result, "reason": (result.get("reason") or "") + f" (no energy reading: ranked by time, not {run.objective})"}
    return {**result, "speedup": value, "time_speedup": result.get("speedup"), "objective": run.objective}


def _outside_events_waiting(run: SearchRun) -> bool:
    saved_state = SearchRun.objects.filter(pk=run.pk).values_list("driver_state", flat=True).first()
    saved = SavedSearch(saved_state)
    node_states = {str(node_id): state for node_id, state in saved.node_states().items()}
    record = (saved_state or {}).get(HAND_COUNTED_KEY)
    counted = set(record) if isinstance(record, list) else None
    rows = Verification.objects.filter(node__run=run).values_list("pk", "node__key", "state", "requested_by_policy")
    for pk, key, vstate, policy in rows:
        if _outside_event(node_states.get(key, SearchNodeState.MEASURED), vstate):
            return True
        if counted is not None and pk not in counted and _measured_again(node_states.get(key), vstate, not policy):
            return True  # a person's measurement again of a settled node, not counted yet
    return False


def run_advance(*, run_id: int) -> str:
    """Advance a run as far as it can go now. Safe to call any number of times, from anywhere."""
    if not _lease(run_id):
        _advance_later(run_id)
        return "another worker is advancing this run"
    try:
        with _lease_kept(run_id):
            outcome = _advance_leased(run_id)
    finally:
        _release(run_id)
    if outcome == TRANSIENT_OUTCOME:
        _retry_later(run_id)
        return outcome
    _clear_transient_errors(run_id)
    run = SearchRun.objects.get(pk=run_id)
    if run.status in RUN_ENDED_STATES:
        # The run ended (in this advance, or beside it: cancelled while it stepped): its count is the ended run's,
        # over whatever this advance saved of the search's own.
        run_gpu_recount(run=run)
    # Enqueued only once the lease is let go: a follow-up that started while it was held would find
    # it taken and stop, leaving the run in "running" with nobody advancing it.
    if run.status in (RunStatus.RUNNING, RunStatus.WAITING) and (outcome == "stepped" or _outside_events_waiting(run)):
        from kernellab.tasks import search_run_advance

        search_run_advance.apply_async(args=[run_id], queue="search")
    return outcome


def _running(run_id: int) -> bool:
    return _status_now(run_id) in _SEARCHING


def _advance_leased(run_id: int) -> str:
    """Each step commits together with the driver's saved state, so a worker that dies between
    steps loses nothing and a restarted one continues exactly there."""
    from kernellab.services.runs import run_transition

    run = SearchRun.objects.select_related("problem__reference", "problem__workspace").get(pk=run_id)
    if run.status not in (RunStatus.RUNNING, RunStatus.WAITING):
        return f"run is {run.status}"
    report = None
    budget = None
    try:
        port = DatabasePort(RunContext(run))
        with port.holding_writes():
            driver = _load_driver(run, port)
            _llm_outcomes_restore(port.context.llm_budget, run)
            counted = _hand_counted(run, driver)
            _feed_outside_events(driver, run, counted)
        with transaction.atomic():
            _still_searching(run_id)
            port.flush()
            _save(run, driver, port.context.llm_budget, counted)
        budget = port.context.llm_budget
        if budget is not None and budget.spent:
            return _llm_budget_spent(run, driver, budget)
        if run.status == RunStatus.WAITING:
            run = run_transition(run=run, action="wake")
        for _ in range(STEPS_PER_ADVANCE):
            if not _running(run_id):
                return "stopped"
            with port.holding_writes():
                report = driver.step()
            with transaction.atomic():
                _still_searching(run_id)
                port.flush()
                _save(run, driver, budget, counted)
            _renew(run_id)
            if report.status != "expanded":
                break
            if budget is not None and budget.spent:
                return _llm_budget_spent(run, driver, budget)
        # Within the try: a person may pause or cancel between this read and the transition (IllegalTransition).
        status = report.status if report else "expanded"
        run.refresh_from_db()
        if run.status not in _SEARCHING:
            return f"run is {run.status}"
        if status == "expanded":
            return "stepped"  # run_advance enqueues the next advance once the lease is let go
        if status in ("waiting", "prefetched"):   # prefetched: the next step is compiled, its measurements are out
            if run.status == RunStatus.RUNNING:
                run_transition(run=run, action="wait", reason="waiting for GPU measurements or approvals")
            return "waiting"
        if not driver.pending():
            reason = "the GPU budget is spent" if status == "budget-exhausted" else "the search has nothing left to try"
            run_transition(run=run, action="finish", reason=reason)
            return "finished"
        if run.status == RunStatus.RUNNING:
            run_transition(run=run, action="wait", reason="waiting for the last GPU measurements")
        return status
    except _StoppedMeanwhile as stopped:
        # Paused, cancelled or ended by someone else while stepping: the step is not saved (_still_searching says
        # why), the status stays as they set it. The LLM calls the abandoned step made still count, as in _pause.
        spent = budget if budget is not None else port.context.llm_budget
        if spent is not None:
            SearchRun.objects.filter(pk=run_id).update(llm_calls=spent.used)
        return f"run is {stopped.status}"
    except SoftTimeLimitExceeded as exc:
        # Before `except Exception` (it is one): the step is abandoned where it waited and the run paused, saying
        # on what, so that it never stays "running" with nobody advancing it once the hard limit kills the task.
        return run_pause_for_time_limit(run_id=run_id, exc=exc, budget=budget)
    except LLMUnreachable as exc:
        # Retrying would only spend the LLM budget on the same error: paused, to resume once the endpoint is fixed.
        return _pause(run_id, llm_unreachable_reason(exc), budget)
    except ServiceError as exc:
        if isinstance(exc, IllegalTransition) and (status_now := _status_now(run_id)) not in _SEARCHING:
            return f"run is {status_now}"  # a person paused or cancelled it meanwhile (the wake, wait or finish lost)
        return _fail(run_id, str(exc))
    except OperationalError as exc:
        # Deadlock, serialization failure, lost connection: the step's transaction rolled back and the saved state is
        # the last step's, so the advance is simply tried again (run_advance enqueues it once the lease is let go).
        log.warning("run %s: transient database error, advancing again shortly: %s", run_id, exc)
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()  # a lost connection reconnects at the next query
        errors = _count_transient_error(run_id)
        if errors < TRANSIENT_DB_ERRORS_MAX:
            return TRANSIENT_OUTCOME
        _clear_transient_errors(run_id)
        return _fail(run_id, f"The search stopped after {errors} database errors in a row: {exc}")
    except Exception as exc:
        log.exception("run %s failed", run_id)
        return _fail(run_id, f"The search stopped on an internal error: {exc}")


def _fail(run_id: int, reason: str) -> str:
    """Fail a run that is still running or waiting; never one a person paused or cancelled meanwhile."""
    from kernellab.services.runs import run_transition

    run = SearchRun.objects.get(pk=run_id)
    if run.status not in _SEARCHING:
        return f"run is {run.status}"
    try:
        run_transition(run=run, action="fail", reason=reason)
    except IllegalTransition:
        return f"run is {_status_now(run_id)}"
    return "failed"


def run_pause_for_time_limit(*, run_id: int, exc: BaseException | None = None, budget=None) -> str:
    """The advance hit the worker's soft time limit: the run is paused with what the step was waiting for."""
    waiting = getattr(exc, "waiting_for", None) or "the search step (generator, surrogate or database)"
    log.warning("run %s: a step ran past its time limit waiting for %s", run_id, waiting)
    return _pause(run_id, f"a step ran past its time limit: {waiting}", budget)


def _pause(run_id: int, reason: str, budget=None) -> str:
    """Pause a running or waiting run with `reason`, keeping count of the LLM calls the abandoned step made."""
    from kernellab.services.runs import run_transition

    if budget is not None:
        SearchRun.objects.filter(pk=run_id).update(llm_calls=budget.used)
    run = SearchRun.objects.get(pk=run_id)
    if run.status not in (RunStatus.RUNNING, RunStatus.WAITING):
        return f"run is {run.status}"
    run_transition(run=run, action="pause", reason=reason)
    return "paused"


def llm_unreachable_reason(exc: LLMUnreachable) -> str:
    """The status reason of a run paused because its LLM endpoint failed: what happened and what to check, one
    clause ("the LLM endpoint http://host/v1 did not answer: Connection error; check OPENAI_BASE_URL and that the
    server runs"), short enough for the run's status line (160 characters) with an address of common length; the
    address is shown without credentials (redact_url). The run's page offers to resume it."""
    endpoint = settings.KERNELLAB_LLM
    roles = (("KERNELLAB_GENERATOR_MODEL", endpoint.generator_model), ("KERNELLAB_SURROGATE_MODEL", endpoint.surrogate_model))
    model = " and ".join([name for name, value in roles if value == exc.model] or [name for name, _ in roles])
    return f"{exc.problem}; {exc.check(model=model, **LLM_SETTINGS_NAMES)}"


def _llm_outcomes_restore(budget, run: SearchRun) -> None:
    """What the run's earlier LLM calls came to, from its saved state, onto this advance's budget."""
    if budget is None:
        return
    state = run.driver_state or {}
    saved = state.get(LLM_OUTCOMES_KEY)
    if isinstance(saved, dict):
        budget.useful = int(saved.get("useful") or 0)
        budget.last_error = saved.get("last_error") or None
    elif run.llm_calls:
        budget.useful = 1  # saved before outcomes were kept: not said to have failed every call


def _llm_budget_spent(run: SearchRun, driver, budget) -> str:
    """No LLM call is left: the run waits for what is already on the GPU, then finishes, saying why (and, when
    no call gave the search anything, the last call's error)."""
    from search_engine.llm_client import as_clause

    from kernellab.services.runs import run_transition

    run.refresh_from_db()
    spent = f"the budget of {budget.limit} LLM calls is spent"
    if budget.every_call_failed:
        spent += f" and every call failed, the last because {as_clause(budget.last_error)}"
    if driver.pending():
        if run.status == RunStatus.RUNNING:
            run_transition(run=run, action="wait", reason=f"waiting for the last GPU measurements; {spent}")
        return "waiting"
    run_transition(run=run, action="finish", reason=spent)
    return "finished"


def _save(run: SearchRun, driver, budget=None, counted: set[int] | None = None) -> None:
    """The driver's state, with the search's record of the measurements people asked for that it counted
    (`counted`, HAND_COUNTED_KEY); while the search advances the run, its count is the run's gpu_used."""
    best = driver.best()
    state = driver.state_dict()
    state[HAND_COUNTED_KEY] = sorted(counted if counted is not None else _hand_counted(run, driver))
    if budget is not None:
        state[LLM_OUTCOMES_KEY] = {"useful": budget.useful, "last_error": budget.last_error}
    updates = {"driver_state": state}
    if budget is not None and run.llm_calls != budget.used:
        run.llm_calls = updates["llm_calls"] = budget.used
    if best is not None:
        updates["best_speedup"] = best.speedup
    SearchRun.objects.filter(pk=run.pk).update(**updates)
    # A count the feed changed (a person's measurement) shows now, not at the next step that publishes its counters;
    # an ended run's count is run_gpu_recount's.
    used = driver.counters.measurements_requested
    if SearchRun.objects.filter(pk=run.pk, status__in=SEARCHING_STATES).exclude(gpu_used=used).update(gpu_used=used):
        change_record(run=run, kind="gpu", payload={"used": used})  # a step publishes its counters; this did not step
    existing = set(run.lessons.values_list("text", flat=True))
    for lesson in driver.memory.lessons:
        text = f"[{lesson.kind}] {lesson.change} → {lesson.effect}"
        if text not in existing:
            SearchLesson.objects.create(run=run, text=text[:2000])
            existing.add(text)


def node_add_human_child(*, node: Node, user, source: str, launch: list | None = None, compile_options: list | None = None, rationale: str = "") -> Node:
    """A hand-written candidate as a child of `node`: checked, forecast and verified like any other."""
    run = node.run
    access_require(user=user, workspace=run.workspace, action="run")
    if not (source or "").strip():
        raise ServiceError("The candidate source is empty.")
    if len(source.encode()) > settings.KERNELLAB_UPLOAD_MAX_BYTES:
        raise ServiceError(f"The candidate is larger than the {settings.KERNELLAB_UPLOAD_MAX_BYTES // 1024} KiB limit.")
    from gpu_runner.directives import check_directives

    refused = check_directives(source)
    if refused:
        raise ServiceError(refused)
    if run.status in (RunStatus.CANCELLED, RunStatus.FAILED):
        raise ServiceError(f"The run is {run.get_status_display().lower()}; start a new run to add candidates.")
    parent_kernel = node.kernel.as_candidate() if node.kernel else run.problem.reference.as_candidate()
    candidate = {
        "source": source,
        "launch": launch or parent_kernel["launch"],
        "temps": parent_kernel.get("temps") or [],
        "compile_options": compile_options if compile_options is not None else parent_kernel.get("compile_options") or [],
        "knobs": None,
        "name": f"by {user.get_username()}",
    }
    from gpu_runner import Candidate

    context = RunContext(run)
    try:
        Candidate.from_dict(candidate, context.spec)
    except Exception as exc:
        raise ServiceError(f"The candidate does not fit the problem: {exc}") from None
    if not _lease(run.pk, wait_s=30):
        raise ServiceError("The search is busy with this run; try again in a moment.")
    try:
        with _lease_kept(run.pk):
            run = SearchRun.objects.select_related("problem__reference", "problem__workspace").get(pk=run.pk)
            port = DatabasePort(context)
            with port.holding_writes():
                driver = _load_driver(run, port)
                _llm_outcomes_restore(context.llm_budget, run)
                child_id = driver.add_candidate(int(node.key), candidate, rationale or f"hand-written by {user.get_username()}",
                                                origin="human", author_id=user.pk)
            if child_id is None:
                raise ServiceError("This candidate is already in the tree.")
            with transaction.atomic():
                port.flush()
                _save(run, driver, context.llm_budget, _hand_counted(run, driver))
                child = Node.objects.get(run=run, key=str(child_id))
    finally:
        _release(run.pk)
    run_gpu_recount(run=run)  # a finished run's count takes the child's request in now (a running one's is the search's)
    return child
