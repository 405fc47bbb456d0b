"""The search driver's window on the database: compile with nvcc (or the recorded facts), measure
through a Verification row, and turn every event the driver publishes into rows and a numbered
change for the live tree.

While a step runs the port holds its writes in memory (`holding_writes`); `flush` applies them in the
short transaction that also saves the driver's state, so a step that thinks for minutes (LLM calls,
nvcc, forecasts) holds no database lock meanwhile, and a step that dies leaves nothing behind."""
from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import asdict
from typing import Callable

from django.db.models import F
from search_engine.events import (
    BestChanged,
    Discovery,
    EventKind,
    ForecastMade,
    Measured,
    NodeCreated,
    ProposalFailed,
    SearchEvent,
    StateChanged,
    StepDone,
)
from search_engine.node_states import NodeState as SearchNodeState

from kernellab.models import Forecast, Node, NodeState, SearchRun
from kernellab.services.changes import change_record, node_changed
from kernellab.services.kernels import kernel_get_or_create
from kernellab.services.run_context import RunContext

FAILED_PROPOSALS_KEPT = 200  # the newest; a generator that keeps failing on one node says the same thing

# The one table from the driver's node states to the database's; a pruned node (accepted on a
# forecast that it is slower than its parent) is shown as pruned.
DB_STATE: dict[SearchNodeState, NodeState] = {
    SearchNodeState.PROPOSED: NodeState.PROPOSED,
    SearchNodeState.FORECAST: NodeState.FORECAST,
    SearchNodeState.ACCEPTED_BY_FORECAST: NodeState.ACCEPTED,
    SearchNodeState.AWAITING_APPROVAL: NodeState.AWAITING_APPROVAL,
    SearchNodeState.QUEUED: NodeState.QUEUED,
    SearchNodeState.MEASURING: NodeState.MEASURING,
    SearchNodeState.MEASURED: NodeState.MEASURED,
    SearchNodeState.FAILED_COMPILE: NodeState.FAILED_COMPILE,
    SearchNodeState.FAILED_CORRECTNESS: NodeState.FAILED_CORRECTNESS,
    SearchNodeState.REJECTED: NodeState.REJECTED,
}


def db_state(state: SearchNodeState | str, *, pruned: bool = False) -> NodeState:
    state = SearchNodeState(state)
    if pruned and state == SearchNodeState.ACCEPTED_BY_FORECAST:
        return NodeState.PRUNED
    return DB_STATE[state]


# Verifications move these states themselves; the driver's word on them only updates the reason.
_MOVED_BY_VERIFICATIONS = (NodeState.QUEUED, NodeState.MEASURING, NodeState.MEASURED)


class DatabasePort:
    """The driver's SearchPort over the database, one per run and advance."""

    def __init__(self, context: RunContext):
        self.context = context
        self.run = context.run
        self._nodes: dict[str, Node] = {}
        self._held: list[Callable[[], None]] | None = None
        # Nodes made while a flush applies its writes: the run's nodes_count grows by them once, at its end.
        self._flushing = False
        self._nodes_made = 0
        self._handlers: dict[EventKind, Callable[[SearchEvent], None]] = {
            EventKind.NODE_CREATED: self._node_created,
            EventKind.FORECAST: self._forecast_made,
            EventKind.STATE_CHANGED: self._state_changed,
            EventKind.MEASURED: self._measured,
            EventKind.DISCOVERY: self._discovery,
            EventKind.BEST_CHANGED: self._best_changed,
            EventKind.STEP: self._step_done,
            EventKind.PROPOSAL_FAILED: self._proposal_failed,
        }

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
        self._flushing, self._nodes_made = True, 0
        try:
            for write in held:
                write()
            self._count_nodes(self._nodes_made)
        finally:
            self._flushing, self._nodes_made = False, 0

    def _count_nodes(self, made: int) -> None:
        """The run's nodes_count grows by the nodes just made: one UPDATE, never a count of all the run's nodes (a
        large run made each of its 20,000 nodes counting the ones before it)."""
        if made:
            SearchRun.objects.filter(pk=self.run.pk).update(nodes_count=F("nodes_count") + made)

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

    # ---- the SearchPort ----------------------------------------------------------------------
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
        from gpu_runner import Runner

        # No SASS counts: forecasts read none, and a measured child's facts (SASS included) come with
        # its measurement; cuobjdump would cost ten times the NVRTC compile (gpu_runner/README.md).
        report = Runner(backend="static").check(self.context.spec, parsed, sass=False)
        facts = asdict(report.facts) if report.facts else {}
        errors = [{"line": e.line, "message": e.message} for e in report.errors]
        self._write(self._store_facts, node_id, facts, errors)
        if not report.ok:
            return {"status": "failed-compile", "reason": report.summary(), "compiler": facts or None}
        return {"status": "ok", "reason": "", "compiler": facts}

    def compile_many(self, items: list[tuple[int, dict]]) -> list[dict]:
        """The compile checks of a step's children: all of them compile at once (one NVRTC server or
        nvcc process per core, each in the compile sandbox, cached), then each answer is stored as
        `compile` stores it."""
        from gpu_runner import Candidate, Runner, source_hash

        parsed = []
        for _, candidate in items:
            if self.context.replay_records.get(source_hash(candidate["source"])) is not None:
                continue
            try:
                parsed.append(Candidate.from_dict(candidate, self.context.spec))
            except Exception:  # noqa: BLE001 - compile() below says why, on the node
                continue
        Runner(backend="static").check_many(self.context.spec, parsed, sass=False)  # fills the cache in parallel
        return [self.compile(node_id, candidate) for node_id, candidate in items]

    def request_measurement(self, node_id: int, candidate: dict) -> None:
        self._write(self._enqueue_verification, node_id)
        return None  # the result arrives through run_advance

    def publish(self, event: SearchEvent) -> None:
        kind = EventKind(event["type"])  # an event kind this table does not know is a programming error
        handler = self._handlers[kind]
        if handler is not None:
            self._write(handler, event)

    # ---- writes --------------------------------------------------------------------------------
    def _store_facts(self, node_id: int, facts: dict, errors: list) -> None:
        kernel = self.node(node_id).kernel
        if kernel is not None and (facts or errors):
            kernel.compiler_facts = facts or kernel.compiler_facts
            kernel.compile_errors = errors
            kernel.save(update_fields=["compiler_facts", "compile_errors"])

    def _enqueue_verification(self, node_id: int) -> None:
        from kernellab.services.verifications import verification_enqueue_for_policy

        node = self.node(node_id)
        verification_enqueue_for_policy(node=node, reason=node.state_reason or "the search policy asked")

    def _node_created(self, event: NodeCreated) -> None:
        candidate = event["candidate"]
        parent = self.node(event["parent_id"]) if event["parent_id"] is not None else None
        kernel = self.run.problem.reference if parent is None else kernel_get_or_create(candidate=candidate)
        origin = "root" if parent is None else event.get("origin", "generator")
        node, made = Node.objects.update_or_create(
            run=self.run,
            key=str(event["node_id"]),
            defaults=dict(
                parent=parent,
                kernel=kernel,
                rationale=(event.get("rationale") or "")[:4000],
                origin=origin,
                author_id=event.get("author_id"),
                # the node's own name (the shared Kernel row keeps whichever workspace's name stored it first)
                name=(f"{self.run.problem.name} reference" if parent is None else candidate.get("name") or "")[:200],
                depth=event.get("depth", 0),
                state=NodeState.MEASURED if parent is None else db_state(event["state"]),
                speedup=1.0 if parent is None else None,
                value=1.0 if parent is None else None,
            ),
        )
        self._nodes[node.key] = node
        if made and self._flushing:
            self._nodes_made += 1  # counted once at the end of the flush
        elif made:
            self._count_nodes(1)
        node_changed(node=node)

    def _forecast_made(self, event: ForecastMade) -> None:
        node = self.node(event["node_id"])
        forecast = event["forecast"]
        Forecast.objects.create(
            node=node,
            surrogate=event.get("surrogate") or forecast.get("surrogate", ""),
            probabilities=list(forecast.get("probabilities") or []),
            bin=forecast.get("bin"),
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

    def _state_changed(self, event: StateChanged) -> None:
        node = self.node(event["node_id"])
        reason = event.get("reason") or ""
        state = db_state(event["state"], pruned=bool(event.get("pruned")))
        if state == NodeState.AWAITING_APPROVAL:
            from kernellab.services.verifications import verification_pending_for_policy

            node.state_reason = reason[:2000]
            verification_pending_for_policy(node=node, reason=reason or "the search policy asked")
            return
        if state in _MOVED_BY_VERIFICATIONS and node.state in _MOVED_BY_VERIFICATIONS:
            node.state_reason = reason[:2000]
            return
        if state == NodeState.FAILED_CORRECTNESS and Node.objects.filter(pk=node.pk, state=NodeState.NOT_RECORDED).exists():
            return  # a replay miss says nothing about the kernel; the verification labelled it already
        node.state = state
        node.state_reason = reason[:2000]
        node.save(update_fields=["state", "state_reason", "updated_at"])
        node_changed(node=node)

    def _measured(self, event: Measured) -> None:
        # The measured speedup itself was stored by the verification; this is the objective's value.
        node = self.node(event["node_id"])
        if event.get("status") == "ok" and event.get("speedup") is not None:
            node.value = event["speedup"]
            if node.parent_id is None:
                node.speedup = event["speedup"]
            node.save(update_fields=["speedup", "value", "updated_at"])

    def _discovery(self, event: Discovery) -> None:
        from kernellab.services.discoveries import discovery_mark

        node = self.node(event["node_id"])
        if not node.is_discovery:
            forecast = node.forecasts.order_by("-pk").first()
            discovery_mark(
                node=node,
                auto=True,
                note=event.get("note", ""),
                forecast={"bin": forecast.bin, "probabilities": forecast.probabilities} if forecast else None,
            )

    def _best_changed(self, event: BestChanged) -> None:
        node = self.node(event["node_id"])
        SearchRun.objects.filter(pk=self.run.pk).update(best_node=node, best_speedup=event.get("speedup"))
        change_record(run=self.run, kind="best", payload={"node": node.key, "speedup": event.get("speedup")})

    def _proposal_failed(self, event: ProposalFailed) -> None:
        node = self.node(event["node_id"])
        failure = {"reason": event.get("reason") or "no candidate", "excerpt": event.get("excerpt") or "",
                   "step": event.get("step")}
        node.failed_proposals = [*(node.failed_proposals or []), failure][-FAILED_PROPOSALS_KEPT:]
        node.save(update_fields=["failed_proposals", "updated_at"])
        node_changed(node=node)

    def _step_done(self, event: StepDone) -> None:
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
