"""Glue between the search driver (search_engine) and the database.

The driver's whole state lives in SearchRun.driver_state. One Celery task at a time advances a
run (a lease on the row says who); it feeds the driver what happened outside since the last
advance (approvals, rejections, finished measurements), steps until the driver must wait, and
saves. Every event the driver publishes becomes rows and a numbered change for the live tree."""
from __future__ import annotations

import copy
import logging
import time
from contextlib import contextmanager
from datetime import timedelta
from functools import cached_property
from typing import Callable

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from kernellab.models import (
    ApprovalMode,
    Forecast,
    Measurement,
    Node,
    NodeState,
    RunStatus,
    SearchLesson,
    SearchRun,
    Verification,
    VerificationState,
)
from kernellab.services.access import access_require
from kernellab.services.changes import change_record, node_changed
from kernellab.services.errors import ServiceError
from kernellab.services.kernels import kernel_get_or_create
from kernellab.services.problems import bundled_dir, problem_spec

log = logging.getLogger(__name__)

LEASE_S = 15 * 60
STEPS_PER_ADVANCE = 25

# Driver node states that the database mirrors one to one.
_STATE = {
    "proposed": NodeState.PROPOSED,
    "forecast": NodeState.FORECAST,
    "accepted-by-forecast": NodeState.ACCEPTED,
    "awaiting-approval": NodeState.AWAITING_APPROVAL,
    "queued": NodeState.QUEUED,
    "measuring": NodeState.MEASURING,
    "measured": NodeState.MEASURED,
    "failed-compile": NodeState.FAILED_COMPILE,
    "failed-correctness": NodeState.FAILED_CORRECTNESS,
    "rejected": NodeState.REJECTED,
}


# ---- building the driver's parts ---------------------------------------------------------------
class RunContext:
    """What a run's driver needs from the problem: spec, records, hardware, generator, surrogate."""

    def __init__(self, run: SearchRun):
        self.run = run
        self.problem = run.problem
        self.spec = problem_spec(run.problem)

    @cached_property
    def replay_records(self) -> dict[str, dict]:
        """Recorded measurements of this problem by source hash (bundled problems only)."""
        if not self.problem.bundled:
            return {}
        from gpu_runner.backends.replay import read_records

        folder = bundled_dir() / self.problem.name / "records"
        path = folder / f"{self.run.target_gpu}.jsonl.gz"
        table: dict[str, dict] = {}
        if path.exists():
            for record in read_records(path):
                if "source_hash" in record:
                    table.setdefault(record["source_hash"], record)
        return table

    @cached_property
    def llm_budget(self):
        """The LLM calls this run may still make, shared by its generator and surrogate (None without an LLM)."""
        from search_engine.llm_client import LLMCallBudget

        extra = self.run.extra or {}
        if "llm_call_budget" not in extra:
            return None
        return LLMCallBudget(limit=int(extra["llm_call_budget"]), used=int(extra.get("llm_calls") or 0))

    @cached_property
    def hardware(self) -> dict:
        for record in self.replay_records.values():
            if record.get("hardware"):
                return dict(record["hardware"])
        return {"name": self.run.target_gpu.upper()}

    @cached_property
    def reference_ms(self) -> float | None:
        for record in self.replay_records.values():
            reference = record.get("reference") or {}
            if reference.get("median_ms"):
                return float(reference["median_ms"])
        return None

    def problem_dict(self) -> dict:
        """The same problem description the learned surrogate was trained with (sizes, roofline)."""
        from kernellab.datasets import problem_numbers

        return {**problem_numbers(self.spec), "tolerance_allows_fast_math": False}

    def render(self, knobs: dict) -> dict:
        from gpu_runner import render_variant

        return render_variant(self.spec, knobs).to_dict()

    def generator(self):
        run = self.run
        if run.generator == "template":
            from search_engine.generators.template import KnobSpace, TemplateGenerator

            family = self.spec.family
            if family is None:
                raise ServiceError("The template generator needs a problem with knobs.")
            from gpu_runner.family import valid_variants  # the runner's family knows the constraints

            space = KnobSpace(
                knobs={name: list(values) for name, values in family.knobs.items()},
                points=valid_variants(self.spec),
            )
            return TemplateGenerator(space, self.render)
        if run.generator == "transform":
            from search_engine.generators.transform import TransformGenerator

            return TransformGenerator()
        from search_engine.generators.llm import LLMGenerator

        return LLMGenerator(llm_client("generator", budget=self.llm_budget), feedback=run.feedback)

    def surrogate(self):
        from kernellab.services.surrogates import surrogate_for_run

        return surrogate_for_run(self.run, llm_budget=self.llm_budget)

    def search_settings(self):
        from search_engine.driver import SearchSettings
        from search_engine.policy import PolicySettings
        from search_engine.tree import TreeOptions

        run = self.run
        extra = run.extra or {}
        return SearchSettings(
            policy=PolicySettings(
                threshold=run.confidence_threshold,
                gpu_budget=run.gpu_budget,
                max_gpu_per_step=run.max_gpu_per_step,
                approval="manual" if run.approval_mode == ApprovalMode.MANUAL else "auto",
                measure_all=run.surrogate == "none",
                conformal_target=extra.get("conformal_target"),
            ),
            tree=TreeOptions(c=run.puct_c, log_rewards=bool(extra.get("log_rewards", True))),
            children_per_expansion=run.children_per_step,
            root_children=int(extra.get("root_children") or 0),
            discovery_ratio=run.discovery_threshold,
            seed=run.seed,
        )


def llm_client(role: str, *, budget=None):
    from search_engine.llm_client import LLMClient

    endpoint = settings.KERNELLAB_LLM
    model = endpoint.generator_model if role == "generator" else endpoint.surrogate_model
    if not endpoint.configured or not model:
        raise ServiceError(f"No LLM {role} is configured: set OPENAI_BASE_URL and KERNELLAB_{role.upper()}_MODEL.")
    return LLMClient(base_url=endpoint.base_url, api_key=endpoint.api_key or "none", model=model,
                     timeout_s=endpoint.timeout_s, max_retries=endpoint.max_retries,
                     max_answer_chars=endpoint.max_answer_chars, budget=budget)


# ---- the port --------------------------------------------------------------------------------
class DatabasePort:
    """The driver's window on the world: compile with nvcc (or the recorded facts), measure through
    a Verification row, and turn every published event into rows and a numbered change."""

    def __init__(self, context: RunContext):
        self.context = context
        self.run = context.run
        self._nodes: dict[str, Node] = {}
        self._held: list[Callable[[], None]] | None = None

    @contextmanager
    def holding_writes(self):
        """While the driver thinks (LLM calls, nvcc, forecasts), its writes wait in memory; `flush`
        then applies them in the short transaction that also saves its state. A step thus holds no
        database lock while it runs (SQLite has one writer), and a step that dies leaves nothing."""
        self._held = []
        try:
            yield self
        except BaseException:
            self._held = None
            raise

    def flush(self) -> None:
        held, self._held = self._held or [], None
        for write in held:
            write()

    def _write(self, write: Callable, *args) -> None:
        if self._held is None:
            write(*args)
        else:
            frozen = copy.deepcopy(args)  # the driver may reuse its dicts after publishing them
            self._held.append(lambda: write(*frozen))

    def node(self, node_id: int) -> Node:
        key = str(node_id)
        if key not in self._nodes:
            self._nodes[key] = Node.objects.select_related("parent", "kernel").get(run=self.run, key=key)
        return self._nodes[key]

    def compile(self, node_id: int, candidate: dict) -> dict:
        from gpu_runner import Candidate, source_hash

        record = self.context.replay_records.get(source_hash(candidate["source"]))
        if record is not None and record.get("compiler"):
            facts = record["compiler"]
            self._write(self._store_facts, node_id, facts, [])
            return {"status": "ok", "reason": "", "compiler": facts}
        try:
            parsed = Candidate.from_dict(candidate, self.context.spec)
        except Exception as exc:
            reason = f"The candidate does not fit the problem: {exc}"
            self._write(self._store_facts, node_id, {}, [{"line": None, "message": reason}])
            return {"status": "failed-compile", "reason": reason, "compiler": None}
        from dataclasses import asdict

        from gpu_runner import Runner

        report = Runner(backend="static").check(self.context.spec, parsed)
        facts = asdict(report.facts) if report.facts else {}
        errors = [{"line": e.line, "message": e.message} for e in report.errors]
        self._write(self._store_facts, node_id, facts, errors)
        if not report.ok:
            return {"status": "failed-compile", "reason": report.summary(), "compiler": facts or None}
        return {"status": "ok", "reason": "", "compiler": facts}

    def _store_facts(self, node_id: int, facts: dict, errors: list) -> None:
        kernel = self.node(node_id).kernel
        if kernel is not None and (facts or errors):
            kernel.compiler_facts = facts or kernel.compiler_facts
            kernel.compile_errors = errors
            kernel.save(update_fields=["compiler_facts", "compile_errors"])

    def request_measurement(self, node_id: int, candidate: dict) -> None:
        self._write(self._enqueue_verification, node_id)
        return None  # the result arrives through run_advance

    def _enqueue_verification(self, node_id: int) -> None:
        from kernellab.services.verifications import verification_enqueue_for_policy

        node = self.node(node_id)
        verification_enqueue_for_policy(node=node, reason=node.state_reason or "the search policy asked")

    def publish(self, event: dict) -> None:
        handler = getattr(self, "_on_" + event["type"].replace("-", "_"), None)
        if handler is not None:
            self._write(handler, event)

    # event handlers
    def _on_node_created(self, event: dict) -> None:
        candidate = event["candidate"]
        parent = self.node(event["parent_id"]) if event["parent_id"] is not None else None
        kernel = self.run.problem.reference if parent is None else kernel_get_or_create(candidate=candidate)
        origin = "root" if parent is None else event.get("origin", "generator")
        node, _ = Node.objects.update_or_create(
            run=self.run,
            key=str(event["node_id"]),
            defaults=dict(parent=parent,
            kernel=kernel,
            rationale=(event.get("rationale") or "")[:4000],
            origin=origin,
            author_id=event.get("author_id"),
            depth=event.get("depth", 0),
            state=NodeState.MEASURED if parent is None else _STATE.get(event.get("state"), NodeState.PROPOSED),
            speedup=1.0 if parent is None else None,
            value=1.0 if parent is None else None,
        ))
        self._nodes[node.key] = node
        SearchRun.objects.filter(pk=self.run.pk).update(nodes_count=Node.objects.filter(run=self.run).count())
        node_changed(node=node)

    def _on_forecast(self, event: dict) -> None:
        node = self.node(event["node_id"])
        forecast = event["forecast"]
        Forecast.objects.create(
            node=node,
            surrogate=event.get("surrogate") or forecast.get("surrogate", ""),
            probabilities=list(forecast.get("probs") or []),
            predicted_bin=forecast.get("bin"),
            confidence=forecast.get("confidence"),
            reasoning=(forecast.get("reasoning") or "")[:20000],
            abstained=bool(forecast.get("abstained")),
            abstain_reason=forecast.get("abstain_reason") or "",
            raw_sum=forecast.get("raw_sum"),
            latency_s=forecast.get("latency_s") or 0.0,
            tokens_in=forecast.get("tokens_in") or 0,
            tokens_out=forecast.get("tokens_out") or 0,
        )
        node.forecast_bin = forecast.get("bin")
        node.forecast_confidence = forecast.get("confidence") if not forecast.get("abstained") else None
        node.save(update_fields=["forecast_bin", "forecast_confidence", "updated_at"])
        node_changed(node=node, kind="forecast")

    def _on_state_changed(self, event: dict) -> None:
        node = self.node(event["node_id"])
        state = _STATE.get(event["state"])
        if state is None:
            return
        if event["state"] == "accepted-by-forecast" and (event.get("reason") or "").startswith("pruned"):
            state = NodeState.PRUNED
        if event["state"] == "awaiting-approval":
            from kernellab.services.verifications import verification_pending_for_policy

            node.state_reason = (event.get("reason") or "")[:2000]
            verification_pending_for_policy(node=node, reason=event.get("reason") or "the search policy asked")
            return
        if state in (NodeState.QUEUED, NodeState.MEASURING, NodeState.MEASURED) and node.state in (
            NodeState.QUEUED, NodeState.MEASURING, NodeState.MEASURED
        ):
            node.state_reason = (event.get("reason") or "")[:2000]
            return  # the verification's own services move these states
        if state == NodeState.FAILED_CORRECTNESS and Node.objects.filter(pk=node.pk, state=NodeState.NOT_RECORDED).exists():
            return  # a replay miss says nothing about the kernel; the verification labelled it already
        node.state = state
        node.state_reason = (event.get("reason") or "")[:2000]
        node.save(update_fields=["state", "state_reason", "updated_at"])
        node_changed(node=node)

    def _on_measured(self, event: dict) -> None:
        # The measured speedup itself was stored by the verification; this is the objective's value.
        node = self.node(event["node_id"])
        if event.get("status") == "ok" and event.get("speedup") is not None:
            node.value = event["speedup"]
            if node.parent_id is None:
                node.speedup = event["speedup"]
            node.save(update_fields=["speedup", "value", "updated_at"])

    def _on_discovery(self, event: dict) -> None:
        from kernellab.services.discoveries import discovery_mark

        node = self.node(event["node_id"])
        if not node.is_discovery:
            forecast = node.forecasts.order_by("-pk").first()
            discovery_mark(
                node=node,
                auto=True,
                note=event.get("note", ""),
                forecast={"bin": forecast.predicted_bin, "probabilities": forecast.probabilities} if forecast else None,
            )

    def _on_best_changed(self, event: dict) -> None:
        node = self.node(event["node_id"])
        SearchRun.objects.filter(pk=self.run.pk).update(best_node=node, best_speedup=event.get("speedup"))
        change_record(run=self.run, kind="best", payload={"node": node.key, "speedup": event.get("speedup")})

    def _on_step(self, event: dict) -> None:
        counters = event.get("counters") or {}
        SearchRun.objects.filter(pk=self.run.pk).update(
            gpu_used=counters.get("measurements_requested", 0),
            forecasts_count=counters.get("forecasts", 0),
        )
        change_record(
            run=self.run,
            kind="step",
            payload={k: event.get(k) for k in ("step", "status", "best_speedup", "threshold")} | {"counters": counters},
        )


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


def _load_driver(run: SearchRun, port: DatabasePort):
    from search_engine.driver import SearchDriver

    context = port.context
    if run.driver_state:
        return SearchDriver.from_state(run.driver_state, port=port, generator=context.generator(), surrogate=context.surrogate())
    reference = run.problem.reference.as_candidate()
    return SearchDriver(
        port=port,
        generator=context.generator(),
        surrogate=context.surrogate(),
        reference={**reference, "name": reference.get("name") or "reference"},
        hardware=context.hardware,
        problem=context.problem_dict(),
        settings=context.search_settings(),
        reference_ms=context.reference_ms,
        reference_compiler_facts=run.problem.reference.compiler_facts or None,
    )


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


_PENDING = ("awaiting-approval", "queued", "measuring")
_SETTLED = ("measured", "failed-compile", "failed-correctness", "rejected")


def _outside_event(driver_state: str, verification_state: str) -> bool:
    """Whether a verification row says something the driver does not know yet."""
    if driver_state in _SETTLED:
        return False
    if verification_state in (VerificationState.DONE, VerificationState.FAILED):
        return True
    if driver_state == "awaiting-approval":
        return verification_state != VerificationState.PENDING
    return False


def _feed_outside_events(driver, run: SearchRun) -> int:
    """Tell the driver about approvals, rejections, finished measurements and measurements that
    people asked for themselves. Returns how many events were fed."""
    fed = 0
    rows = Verification.objects.filter(node__run=run).select_related("node", "measurement").order_by("pk")
    for verification in rows:
        node_id = int(verification.node.key)
        node = driver.tree.nodes.get(node_id)
        if node is None or not _outside_event(node.state, verification.state):
            continue
        if node.state == "awaiting-approval":
            if verification.state == VerificationState.REJECTED:
                driver.reject(node_id, verification.reason or "an approver rejected the GPU verification")
                fed += 1
                continue
            driver.approve(node_id)
        elif node.state not in _PENDING:
            driver.measure_outside(node_id, "a person asked for GPU verification")
        if verification.state == VerificationState.DONE and verification.measurement is not None:
            driver.on_measurement(node_id, objective_result(run, measurement_as_result(verification.measurement)))
        elif verification.state == VerificationState.FAILED:
            driver.on_measurement(node_id, {"status": "failed-runtime", "reason": verification.reason or "the GPU worker failed"})
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
    state = SearchRun.objects.filter(pk=run.pk).values_list("driver_state", flat=True).first() or {}
    driver_states = {str(n["id"]): n.get("state") for n in (state.get("tree") or {}).get("nodes") or []}
    rows = Verification.objects.filter(node__run=run).values_list("node__key", "state")
    return any(_outside_event(driver_states.get(key, "measured"), vstate) for key, vstate in rows)


def run_advance(*, run_id: int) -> str:
    """Advance a run as far as it can go now. Safe to call any number of times, from anywhere."""
    if not _lease(run_id):
        _advance_later(run_id)
        return "another worker is advancing this run"
    try:
        outcome = _advance_leased(run_id)
    finally:
        _release(run_id)
    run = SearchRun.objects.get(pk=run_id)
    # Enqueued only once the lease is let go: a follow-up that started while it was held would find
    # it taken and stop, leaving the run in "running" with nobody advancing it.
    if run.status in (RunStatus.RUNNING, RunStatus.WAITING) and (outcome == "stepped" or _outside_events_waiting(run)):
        from kernellab.tasks import search_run_advance

        search_run_advance.apply_async(args=[run_id], queue="search")
    return outcome


def _running(run_id: int) -> bool:
    return SearchRun.objects.filter(pk=run_id).values_list("status", flat=True).get() in (RunStatus.RUNNING, RunStatus.WAITING)


def _advance_leased(run_id: int) -> str:
    """Each step commits together with the driver's saved state, so a worker that dies between
    steps loses nothing and a restarted one continues exactly there."""
    from kernellab.services.runs import run_transition

    run = SearchRun.objects.select_related("problem__reference", "problem__workspace").get(pk=run_id)
    if run.status not in (RunStatus.RUNNING, RunStatus.WAITING):
        return f"run is {run.status}"
    report = None
    try:
        port = DatabasePort(RunContext(run))
        with port.holding_writes():
            driver = _load_driver(run, port)
            _feed_outside_events(driver, run)
        with transaction.atomic():
            port.flush()
            _save(run, driver, port.context.llm_budget)
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
                port.flush()
                _save(run, driver, budget)
            _renew(run_id)
            if report.status != "expanded":
                break
            if budget is not None and budget.spent:
                return _llm_budget_spent(run, driver, budget)
    except ServiceError as exc:
        run_transition(run=run, action="fail", reason=str(exc))
        return "failed"
    except Exception as exc:
        log.exception("run %s failed", run_id)
        run_transition(run=run, action="fail", reason=f"The search stopped on an internal error: {exc}")
        return "failed"
    status = report.status if report else "expanded"
    run.refresh_from_db()
    if run.status not in (RunStatus.RUNNING, RunStatus.WAITING):
        return f"run is {run.status}"
    if status == "expanded":
        return "stepped"  # run_advance enqueues the next advance once the lease is let go
    if status == "waiting":
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


def _llm_budget_spent(run: SearchRun, driver, budget) -> str:
    """No LLM call is left: the run waits for what is already on the GPU, then finishes, saying why."""
    from kernellab.services.runs import run_transition

    run.refresh_from_db()
    spent = f"the budget of {budget.limit} LLM calls is spent"
    if driver.pending():
        if run.status == RunStatus.RUNNING:
            run_transition(run=run, action="wait", reason=f"waiting for the last GPU measurements; {spent}")
        return "waiting"
    run_transition(run=run, action="finish", reason=spent)
    return "finished"


def _save(run: SearchRun, driver, budget=None) -> None:
    best = driver.best()
    updates = {"driver_state": driver.state_dict()}
    if budget is not None and (run.extra or {}).get("llm_calls") != budget.used:
        run.extra = {**(run.extra or {}), "llm_calls": budget.used}
        updates["extra"] = run.extra
    if best is not None:
        updates["best_speedup"] = best.speedup
    SearchRun.objects.filter(pk=run.pk).update(**updates)
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
        run = SearchRun.objects.select_related("problem__reference", "problem__workspace").get(pk=run.pk)
        port = DatabasePort(context)
        with port.holding_writes():
            driver = _load_driver(run, port)
            child_id = driver.add_candidate(int(node.key), candidate, rationale or f"hand-written by {user.get_username()}",
                                            origin="human", author_id=user.pk)
        if child_id is None:
            raise ServiceError("This candidate is already in the tree.")
        with transaction.atomic():
            port.flush()
            _save(run, driver, context.llm_budget)
            child = Node.objects.get(run=run, key=str(child_id))
    finally:
        _release(run.pk)
    return child
