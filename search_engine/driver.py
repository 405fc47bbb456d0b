# Over 400 lines on purpose: the step loop and the outside callbacks are one state machine over one tree.
"""The search driver: select -> expand -> forecast -> decide -> measure -> back up -> publish.

The driver owns the tree, the search memory, the counters and the random state; it calls the
generator and the surrogate itself and talks to the outside world only through a small port, so it
runs the same in a Celery task, a benchmark and a unit test. Its whole state is a JSON-able dict
(saved_state.py): load it, step until blocked or out of budget, save it, and a later load continues
exactly there. What it learns from its own measurements is in learning.py; what it publishes, in
events.py.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable

from search_engine import learning, saved_state
from search_engine.bins import DEFAULT_BINS, BinTable
from search_engine.candidates import Candidate
from search_engine.counters import SearchCounters, SearchTimes
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
from search_engine.generators.base import Generator, ProposalContext
from search_engine.memory import SearchMemory
from search_engine.node_states import FAILED_STATES, PENDING_STATES, STATE_OF_MEASUREMENT_STATUS, NodeState
from search_engine.policy import Decision, SelectivePolicy, prob_above
from search_engine.port import SearchPort
from search_engine.search_settings import SearchSettings
from search_engine.surrogates.base import Forecast, ForecastRequest, surrogate_id
from search_engine.tree import Node, PUCTTree


@dataclass
class StepReport:
    step: int
    status: str  # expanded | prefetched | waiting | budget-exhausted | exhausted | stopped
    expanded: list[int] = field(default_factory=list)
    created: list[int] = field(default_factory=list)
    measured_requests: list[int] = field(default_factory=list)


@dataclass
class ExpansionBatch:
    """A step's first half: the parents expanded, the children they gave, those that compiled, and how long
    their compile checks took. Made by the step itself, or ahead of it while the GPU measures the step
    before (settings.prefetch_while_measuring)."""

    expanded: list[int] = field(default_factory=list)
    created: list[int] = field(default_factory=list)
    compiled: list[int] = field(default_factory=list)
    measure_first: list[int] = field(default_factory=list)
    parents_left: bool = False
    batch_s: float = 0.0

    def to_dict(self) -> dict:
        return {"expanded": self.expanded, "created": self.created, "compiled": self.compiled,
                "measure_first": self.measure_first, "parents_left": self.parents_left, "batch_s": self.batch_s}

    @classmethod
    def from_dict(cls, data: dict | None) -> "ExpansionBatch | None":
        return cls(**data) if data else None


class SearchDriver:
    MAX_EMPTY_EXPANSIONS = 64  # parents tried in one step while expansions create nothing

    def __init__(
        self,
        *,
        port: SearchPort,
        generator: Generator,
        surrogate,
        reference: Candidate,
        hardware: dict | None = None,
        problem: dict | None = None,
        settings: SearchSettings | None = None,
        bins: BinTable = DEFAULT_BINS,
        reference_ms: float | None = None,
        reference_compiler_facts: dict | None = None,
        reference_profile: dict | None = None,
        _state: dict | None = None,
    ) -> None:
        self.port = port
        self.generator = generator
        self.surrogate = surrogate
        self.settings = settings or SearchSettings()
        self.bins = bins
        self.policy = SelectivePolicy(self.settings.policy, bins, seed=self.settings.seed)
        self.reference = reference
        self.hardware = dict(hardware or {})
        self.problem = dict(problem or {})
        self.reference_ms = reference_ms
        self.reference_compiler_facts = reference_compiler_facts
        self.reference_profile = reference_profile  # the reference's Nsight Compute counters, where profiled
        self._measure_first: set[int] = set()  # this step's children whose generator asked the GPU first
        self.prefetched: ExpansionBatch | None = None  # the next step's children, compiled while the GPU measured
        if _state is not None:
            saved_state.restore(self, _state)
            learning.relearn(self)
            return
        self.tree = PUCTTree(self.settings.tree)
        self.memory = SearchMemory(cap=self.settings.memory_cap)
        self.rng = random.Random(self.settings.seed)
        self.step_count = 0
        self.event_count = 0
        self.counters = SearchCounters()
        self.times = SearchTimes()
        self.discoveries: list[dict] = []
        self.retrained_on: list[int] = []
        root = self.tree.add_root(reference, speedup=1.0)
        self.best_id: int | None = root.id
        self._publish(NodeCreated(type=EventKind.NODE_CREATED, node_id=root.id, parent_id=None, depth=0,
                                  rationale=root.rationale, candidate=reference,
                                  candidate_hash=root.candidate_hash, state=root.state))
        self._publish(Measured(type=EventKind.MEASURED, node_id=root.id, status="ok", speedup=1.0,
                               reason="the reference defines speedup 1", result=None))

    # ---- persistence ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return saved_state.state_of(self)

    @classmethod
    def from_state(cls, state: dict, *, port: SearchPort, generator: Generator, surrogate) -> "SearchDriver":
        saved_state.check_version(state)
        return cls(
            port=port, generator=generator, surrogate=surrogate, reference=state["reference"],
            hardware=state.get("hardware"), problem=state.get("problem"),
            settings=SearchSettings.from_dict(state.get("settings")), bins=BinTable.from_dict(state.get("bins")),
            reference_ms=state.get("reference_ms"), reference_compiler_facts=state.get("reference_compiler_facts"),
            reference_profile=state.get("reference_profile"), _state=state,
        )

    # ---- reading ----------------------------------------------------------------------------
    def budget_left(self) -> int:
        return max(0, self.settings.policy.gpu_budget - self.counters.measurements_requested)

    def best(self):
        """The best GPU-measured node (the kernel reported as best is always measured)."""
        return self.tree.best_measured()

    def pending(self) -> list[int]:
        return [n.id for n in self.tree.nodes.values() if n.state in PENDING_STATES]

    def awaiting_approval(self) -> list[int]:
        return [n.id for n in self.tree.nodes.values() if n.state == NodeState.AWAITING_APPROVAL]

    def node_state(self, node_id: int) -> NodeState | None:
        node = self.tree.nodes.get(node_id)
        return node.state if node is not None else None

    def node_states(self) -> dict[int, NodeState]:
        return {n.id: n.state for n in self.tree.nodes.values()}

    def discovery_stats(self) -> dict:
        """Precision/recall of the surrogate's forecast 'child >= ratio x parent' on measured children."""
        tp = sum(1 for d in self.discoveries if d["forecast_flag"] and d["flagged"])
        fp = sum(1 for d in self.discoveries if d["forecast_flag"] and not d["flagged"])
        fn = sum(1 for d in self.discoveries if not d["forecast_flag"] and d["flagged"])
        return {
            "measured_children": len(self.discoveries),
            "discoveries": sum(1 for d in self.discoveries if d["flagged"]),
            "precision": tp / (tp + fp) if tp + fp else None,
            "recall": tp / (tp + fn) if tp + fn else None,
        }

    def forecast_request(self, node_id: int) -> ForecastRequest:
        node = self.tree.nodes[node_id]
        parent = self.tree.nodes[node.parent_id] if node.parent_id is not None else None
        return ForecastRequest(
            reference=self.reference, candidate=node.candidate, hardware=self.hardware, problem=self.problem,
            parent=parent.candidate if parent else None,
            parent_speedup=(parent.speedup if parent and parent.speedup is not None
                            else (parent.provisional_speedup if parent else None)),
            compiler_facts=node.compiler_facts, reference_compiler_facts=self.reference_compiler_facts,
            reference_ms=self.reference_ms, reference_profile=self.reference_profile,
        )

    # ---- the loop ---------------------------------------------------------------------------
    def run(self, max_steps: int, should_stop: Callable[[], bool] | None = None) -> StepReport | None:
        """Step until max_steps, a stop request, or a step that cannot proceed; returns the last report."""
        report = None
        for _ in range(max_steps):
            if should_stop is not None and should_stop():
                return StepReport(step=self.step_count, status="stopped")
            report = self.step()
            if report.status != "expanded":
                break
        return report

    def step(self) -> StepReport:
        if self.settings.wait_for_measurements and self.pending():
            if self._may_prefetch():
                return self._prefetch()
            return StepReport(step=self.step_count, status="waiting")
        if self.budget_left() <= 0:
            return StepReport(step=self.step_count, status="budget-exhausted")
        batch, self.prefetched = self.prefetched or self._expand_and_compile(), None
        expanded, created, compiled = batch.expanded, batch.created, batch.compiled
        if not expanded or (not created and not batch.parents_left):
            # Nothing left to expand: the most promising of what is parked is measured, or the run ends.
            requested = self._apply(self.policy.decide(self.tree, [], self.budget_left(), stalled=True))
            if not requested and not expanded:
                return StepReport(step=self.step_count, status="exhausted")
            self.step_count += 1
            report = StepReport(step=self.step_count, status="expanded", expanded=expanded,
                                measured_requests=requested)
            self._publish_step(report)
            return report
        self.step_count += 1
        report = StepReport(step=self.step_count, status="expanded", expanded=expanded, created=created)
        self._forecast(compiled)
        first = set(batch.measure_first)
        minimum, why = self._measurements_for_compile_share(batch.batch_s)
        report.measured_requests = self._apply(self.policy.decide(self.tree, compiled, self.budget_left(),
                                                                  measure_first=first, minimum=minimum,
                                                                  minimum_reason=why))
        self._publish_step(report)
        return report

    def _may_prefetch(self) -> bool:
        """settings.prefetch_while_measuring: while the step before is on the GPU, the next step's parents (among
        the nodes already measured: one being measured is not expandable) are expanded and their children
        compile-checked, once; the step then forecasts and decides with that step's results in."""
        return (self.settings.prefetch_while_measuring and self.prefetched is None and self.budget_left() > 0
                and self.settings.policy.approval != "manual")

    def _prefetch(self) -> StepReport:
        batch = self._expand_and_compile()
        if not batch.created:
            return StepReport(step=self.step_count, status="waiting", expanded=batch.expanded)
        self.times.prefetched_batches += 1
        self.times.prefetched_compile_s += batch.batch_s
        self.prefetched = batch
        for nid in batch.compiled:   # what the explorer says of a compiled child that waits for its forecast
            self._set_state(self.tree.nodes[nid], NodeState.PROPOSED,
                            "compile-checked while the GPU measured the step before; forecast once its results are in")
        return StepReport(step=self.step_count, status="prefetched", expanded=batch.expanded, created=batch.created)

    def _expand_and_compile(self) -> ExpansionBatch:
        expanded: list[int] = []
        created: list[int] = []
        parents = self.tree.select(self.settings.parents_per_step)
        wanted = self.settings.min_children_per_step
        for round_ in range(self.MAX_EMPTY_EXPANSIONS):
            if not parents:
                break
            for parent_id in parents:
                # The parents beyond parents_per_step only fill the step up to min_children_per_step: more
                # would overflow the batch that fills the cores into a second compile round.
                room = wanted - len(created) if round_ > 0 and wanted > 0 else None
                if room is not None and room <= 0:
                    break
                created.extend(self._expand(parent_id, at_most=room))
                expanded.append(parent_id)
            # A parent whose generator has nothing new is marked exhausted and costs no step: the
            # next one is tried at once (a generator that failed is not retried in the same step).
            # With min_children_per_step, more parents are expanded until the step has that many children.
            if created and len(created) >= wanted:
                break
            if not created and not all(self.tree.nodes[p].exhausted for p in parents):
                break
            # the next parents: none on the line of a parent that gave children in this step
            parents = self.tree.select(self.settings.parents_per_step,
                                       taken=[p for p in expanded if not self.tree.nodes[p].exhausted])
        # Every parent's children in one batch: a compile check's time is mostly the compiler's fixed
        # start (nvcc ~0.4 s), so a step's checks cost one start on every core, not one per parent.
        started = time.perf_counter()
        compiled = self._compile(created)
        batch_s = time.perf_counter() - started
        if created:
            self.times.compile_batches += 1
            self.times.compile_s += batch_s
        first = [nid for nid in compiled if nid in self._measure_first]
        self._measure_first.clear()
        return ExpansionBatch(expanded=expanded, created=created, compiled=compiled, measure_first=first,
                              parents_left=bool(parents), batch_s=batch_s)

    def _measurements_for_compile_share(self, batch_s: float) -> tuple[int | None, str]:
        """The step's least number of measurements under settings.compile_share_target: enough that their
        wall time (the run's mean so far) is (1 - target) / target times the step's compile batch, so the
        batch's fixed cost is spread over more of what it compiled. (None, "") when it asks no more than
        policy.min_gpu_per_step, or before the first measurement's time is known."""
        target = self.settings.compile_share_target
        timed = self.times.measurements_timed
        if target <= 0 or batch_s <= 0 or timed == 0:
            return None, ""
        per = max(self.times.measure_s / timed, 1e-3)
        wanted = math.ceil(batch_s * (1 - target) / target / per)
        policy = self.settings.policy
        if wanted <= policy.min_gpu_per_step:
            return None, ""
        wanted = min(wanted, policy.max_gpu_per_step)
        return wanted, (f"the step's compile checks took {batch_s:.2f} s against {per:.2f} s a measurement, so it "
                        f"measures {wanted} to keep compiling near {target:.0%} of the wall time")

    def _expand(self, parent_id: int, at_most: int | None = None) -> list[int]:
        parent = self.tree.nodes[parent_id]
        context = ProposalContext(
            node_id=parent_id, parent=parent.candidate, reference=self.reference,
            parent_speedup=parent.speedup if parent.speedup is not None else parent.provisional_speedup,
            parent_measurement=parent.measurement, parent_expert_notes=list(parent.expert_notes),
            parent_forecast=parent.forecast, problem=self.problem, hardware=self.hardware,
            memory_text=self.memory.render(), known_hashes=set(self.tree.by_hash), rng=self.rng,
        )
        width = self.settings.children_per_expansion
        if parent.parent_id is None and self.settings.root_children > 0:
            width = self.settings.root_children
        if at_most is not None:
            width = max(1, min(width, at_most))
        proposals = self.generator.propose(context, width)
        self.tree.record_expansion(parent_id)
        created = []
        for proposal in proposals:
            self.counters.llm_tokens_in += proposal.tokens_in
            self.counters.llm_tokens_out += proposal.tokens_out
            if proposal.failed:
                self.counters.failed_proposals += 1
                parent.failed_proposals.append({"reason": proposal.failure or "no candidate",
                                                "excerpt": proposal.raw_excerpt[:500], "step": self.step_count})
                self.tree.record_failure(parent_id)
                self.memory.add("failed", f"proposal from node {parent_id}", proposal.failure or "no candidate",
                                "failure", parent_id)
                self._publish(ProposalFailed(type=EventKind.PROPOSAL_FAILED, node_id=parent_id,
                                             reason=proposal.failure, generator=getattr(self.generator, "name", ""),
                                             excerpt=proposal.raw_excerpt[:500], step=self.step_count))
                continue
            child = self.tree.add_child(parent_id, proposal.candidate, proposal.rationale, step=self.step_count)
            if child is None:
                self.counters.duplicates += 1
                continue
            created.append(child.id)
            if proposal.measure_first:
                self._measure_first.add(child.id)
            # A generator that only replays recorded solutions says so on every node it makes.
            origin = getattr(self.generator, "origin", None)
            self._publish_created(child, **({"origin": origin} if origin else {}))
        if not proposals:
            parent.exhausted = True
            self._publish_state(parent, parent.state, "the generator has nothing new for this node")
        return created

    def _compile(self, node_ids: list[int]) -> list[int]:
        ok = []
        # A port that can check several candidates at once (nvcc on every core) gets the step's whole batch.
        compile_many = getattr(self.port, "compile_many", None)
        if compile_many is not None and len(node_ids) > 1:
            outcomes = compile_many([(nid, self.tree.nodes[nid].candidate) for nid in node_ids])
        else:
            outcomes = [self.port.compile(nid, self.tree.nodes[nid].candidate) for nid in node_ids]
        for nid, outcome in zip(node_ids, outcomes):
            node = self.tree.nodes[nid]
            outcome = outcome or {"status": "ok"}
            node.compiler_facts = outcome.get("compiler")
            if outcome.get("status", "ok") != "ok":
                self.counters.compile_failures += 1
                self._fail(node, NodeState.FAILED_COMPILE, outcome.get("reason") or "the candidate did not compile")
            else:
                ok.append(nid)
        return ok

    def _forecast(self, node_ids: list[int]) -> None:
        if not node_ids or self.settings.policy.measure_all:
            for nid in node_ids:
                self._set_state(self.tree.nodes[nid], NodeState.FORECAST,
                                "no forecast needed: every candidate is measured")
            return
        forecasts = self.surrogate.forecast_many([self.forecast_request(nid) for nid in node_ids])
        for nid, forecast in zip(node_ids, forecasts):
            node = self.tree.nodes[nid]
            node.forecast = forecast.to_dict()
            self.counters.forecasts += 1
            self.counters.llm_tokens_in += forecast.tokens_in
            self.counters.llm_tokens_out += forecast.tokens_out
            self.counters.forecast_latency_s += forecast.latency_s
            if forecast.abstained:
                self.counters.abstentions += 1
                parent = self.tree.nodes[node.parent_id]
                self.tree.set_prior_score(nid, parent.reward)
            else:
                self.tree.set_prior_score(nid, self.tree.reward_of(forecast.expected_speedup(self.bins)))
            self._publish(ForecastMade(type=EventKind.FORECAST, node_id=nid, forecast=node.forecast,
                                       surrogate=surrogate_id(self.surrogate)))
            self._set_state(node, NodeState.FORECAST, forecast.abstain_reason if forecast.abstained else "")

    def _apply(self, decisions: list[Decision]) -> list[int]:
        """Accepts, prunes and parks first; then the measurements, the verification of a forecast-only
        best among them, in the policy's order (`SelectivePolicy.measurement_order`: by expected log
        improvement by default; under "verify-first" the verification ahead of the others)."""
        requested = []
        settled = [d for d in decisions if d.action != "measure"]
        for d in settled:
            node = self.tree.nodes[d.node_id]
            if d.action == "accept":
                self.counters.accepted_by_forecast += 1
                self.tree.set_provisional(node.id, d.provisional_speedup)
                self._set_state(node, NodeState.ACCEPTED_BY_FORECAST, d.reason)
                self._lesson_from_forecast(node)
            elif d.action == "prune":
                self.counters.pruned += 1
                node.pruned = True
                forecast = Forecast.from_dict(node.forecast)
                self.tree.set_provisional(node.id, forecast.expected_speedup(self.bins))
                self._set_state(node, NodeState.ACCEPTED_BY_FORECAST, "pruned: " + d.reason)
                self._lesson_from_forecast(node)
            elif d.action == "park":
                node.reason = d.reason
        verify = self.policy.verification_of_best(self.tree)
        measures = self.policy.measurement_order(self.tree, ([verify] if verify is not None else []) + [
            d for d in decisions if d.action == "measure" and (verify is None or d.node_id != verify.node_id)])
        displaced = self.policy.displaced_by_verification(self.tree, measures, verify)
        if displaced is not None:
            measures = [d for d in measures if d is not displaced]
            if displaced is not verify:  # it waits, parked, for a later step
                self.tree.nodes[displaced.node_id].reason = (
                    displaced.reason + "; waiting for a GPU slot (the verification of the forecast-only best took it)")
        prepare = getattr(self.port, "prepare_measurements", None)
        if prepare is not None and self.settings.policy.approval != "manual":
            planned = [d.node_id for d in measures][:max(0, self.budget_left())]
            if len(planned) > 1:
                started = time.perf_counter()
                prepare([(nid, self.tree.nodes[nid].candidate) for nid in planned])
                self.times.measure_s += time.perf_counter() - started  # part of what measuring costs
        for d in measures:
            if d.node_id not in requested and self._request_measurement(self.tree.nodes[d.node_id], d.reason):
                requested.append(d.node_id)
        return requested

    def _request_measurement(self, node: Node, reason: str) -> bool:
        if self.budget_left() <= 0:
            return False
        self.counters.measurements_requested += 1
        if self.settings.policy.approval == "manual":
            self._set_state(node, NodeState.AWAITING_APPROVAL, reason)
            return True
        self._enqueue(node, reason)
        return True

    def _enqueue(self, node: Node, reason: str) -> None:
        self._set_state(node, NodeState.QUEUED, reason)
        started = time.perf_counter()
        outcome = self.port.request_measurement(node.id, node.candidate)
        if outcome is not None:   # a port that measures at once: its wall time is what the measurement cost
            self._time_measurement(time.perf_counter() - started)
            self.on_measurement(node.id, outcome, _timed=True)

    # ---- callbacks from the outside -----------------------------------------------------------
    def approve(self, node_id: int) -> None:
        """An approver allowed the GPU verification of a node that awaits approval."""
        node = self.tree.nodes[node_id]
        if node.state != NodeState.AWAITING_APPROVAL:
            raise ValueError(f"Node {node_id} is {node.state}, not awaiting approval.")
        self._enqueue(node, "approved for GPU verification")

    def reject(self, node_id: int, reason: str = "an approver rejected the GPU verification") -> None:
        node = self.tree.nodes[node_id]
        if node.state != NodeState.AWAITING_APPROVAL:
            raise ValueError(f"Node {node_id} is {node.state}, not awaiting approval.")
        self.counters.measurements_requested -= 1  # the reserved budget goes back
        self.counters.rejected_approvals += 1
        if node.value_source == "forecast":
            # A forecast-accepted node keeps its provisional value; only the verification was refused.
            node.verification_refused = True
            self._set_state(node, NodeState.ACCEPTED_BY_FORECAST, reason)
            return
        self._set_state(node, NodeState.REJECTED, reason)

    def add_candidate(self, parent_id: int, candidate: Candidate, rationale: str, *, origin: str = "human",
                      author_id: int | None = None) -> int | None:
        """A candidate from outside the generator (a person's hand-written kernel): it is compiled,
        forecast and measured like any other. Returns its node id, or None for a duplicate."""
        child = self.tree.add_child(parent_id, candidate, rationale, step=self.step_count)
        if child is None:
            self.counters.duplicates += 1
            return None
        self._publish_created(child, origin=origin, author_id=author_id)
        compiled = self._compile([child.id])
        self._forecast(compiled)
        if compiled:
            # A person asked for this kernel: it is measured whatever the forecast or the budget says.
            self.counters.measurements_requested += 1
            reason = "hand-written candidate: always verified on the GPU"
            if self.settings.policy.approval == "manual":
                self._set_state(child, NodeState.AWAITING_APPROVAL, reason)
            else:
                self._enqueue(child, reason)
        return child.id

    def measure_outside(self, node_id: int, reason: str) -> None:
        """A person asked for a GPU measurement of a node the policy did not send; the result comes
        through on_measurement like any other. It counts against the budget."""
        node = self.tree.nodes[node_id]
        if node.state in PENDING_STATES or node.state == NodeState.MEASURED:
            return
        self.counters.measurements_requested += 1
        self._set_state(node, NodeState.QUEUED, reason)

    def on_measuring(self, node_id: int) -> None:
        node = self.tree.nodes[node_id]
        if node.state == NodeState.QUEUED:
            self._set_state(node, NodeState.MEASURING, "the GPU runner started")

    def on_measurement(self, node_id: int, result: dict, _timed: bool = False) -> bool:
        """A MeasurementResult dict for a queued node; returns False if the node was already done."""
        node = self.tree.nodes[node_id]
        if node.state not in (NodeState.QUEUED, NodeState.MEASURING):
            if node.state in (NodeState.MEASURED,) + FAILED_STATES:
                return False
            raise ValueError(f"Node {node_id} is {node.state}; it has no measurement requested.")
        total = (result.get("phase_s") or {}).get("total")
        if not _timed and isinstance(total, (int, float)) and total >= 0:
            self._time_measurement(float(total))   # a queued measurement: the worker's own time
        status = result.get("status", "ok")
        state = STATE_OF_MEASUREMENT_STATUS.get(status, NodeState.FAILED_CORRECTNESS)
        node.measurement = _summary(result)
        node.expert_notes = list(result.get("expert_notes") or [])
        if result.get("compiler"):
            node.compiler_facts = result["compiler"]
        self.counters.measurements_done += 1
        speedup = result.get("speedup")
        if state == NodeState.MEASURED and (speedup is None or not math.isfinite(speedup) or speedup <= 0):
            state, status = NodeState.FAILED_CORRECTNESS, "failed-runtime"
            result = {**result, "reason": "the measurement reported no valid speedup"}
        if state != NodeState.MEASURED:
            self.counters.measurement_failures += 1
            self._publish(Measured(type=EventKind.MEASURED, node_id=node_id, status=status, speedup=None,
                                   reason=result.get("reason", ""), result=result))
            self._fail(node, state, result.get("reason") or status)
            return True
        self.tree.set_measured(node_id, float(speedup))
        self._set_state(node, NodeState.MEASURED, result.get("reason") or "")
        self._publish(Measured(type=EventKind.MEASURED, node_id=node_id, status="ok", speedup=float(speedup),
                               reason=result.get("reason", ""), result=result))
        self._after_measured(node)
        return True

    # ---- internals --------------------------------------------------------------------------
    def _after_measured(self, node: Node) -> None:
        parent = self.tree.nodes[node.parent_id] if node.parent_id is not None else None
        if parent is not None and parent.speedup:
            ratio = node.speedup / parent.speedup
            kind = "improved" if ratio >= 1.05 else ("regressed" if ratio <= 0.95 else "neutral")
            self.memory.add(kind, node.rationale, f"measured {ratio:.2f}x vs parent ({node.speedup:.3g}x vs reference)",
                            "measured", node.id)
            self._record_discovery(node, parent, ratio)
        best = self.tree.best_measured()
        if best is not None and best.id != self.best_id:
            previous = self.tree.nodes[self.best_id] if self.best_id is not None else None
            self.best_id = best.id
            self._publish(BestChanged(type=EventKind.BEST_CHANGED, node_id=best.id, speedup=best.speedup,
                                      previous_node_id=previous.id if previous else None,
                                      previous_speedup=previous.speedup if previous else None))
        learning.retrain_if_due(self)

    def _record_discovery(self, node: Node, parent: Node, ratio: float) -> None:
        """Whether the child is a discovery (ratio x faster than its parent), and whether its forecast said so."""
        forecast_prob = None
        forecast_flag = None
        if node.forecast and not node.forecast.get("abstained"):
            threshold_speedup = self.settings.discovery_ratio * parent.speedup
            forecast_prob = prob_above(Forecast.from_dict(node.forecast), threshold_speedup, self.bins)
            forecast_flag = forecast_prob >= 0.5
        flagged = ratio >= self.settings.discovery_ratio
        self.discoveries.append({"node_id": node.id, "parent_id": parent.id, "ratio": ratio, "flagged": flagged,
                                 "forecast_prob": forecast_prob, "forecast_flag": bool(forecast_flag)})
        if flagged:
            node.discovery = True
            self._publish(Discovery(type=EventKind.DISCOVERY, node_id=node.id, parent_id=parent.id, ratio=ratio,
                                    threshold=self.settings.discovery_ratio, forecast_prob=forecast_prob,
                                    note=f"measured {ratio:.2f}x faster than its parent"))

    def _time_measurement(self, seconds: float) -> None:
        self.times.measurements_timed += 1
        self.times.measure_s += seconds

    def _fail(self, node: Node, state: NodeState, reason: str) -> None:
        if node.value_source is not None:
            self.tree.clear_value(node.id)
        self._set_state(node, state, reason)
        if node.parent_id is not None:
            self.tree.record_failure(node.parent_id)
        self.memory.add("failed", node.rationale, f"{state}: {reason}", "failure", node.id)

    def _lesson_from_forecast(self, node: Node) -> None:
        forecast = Forecast.from_dict(node.forecast)
        self.memory.add("forecast", node.rationale,
                        f"forecast bin {forecast.bin} ({self.bins.names[forecast.bin - 1]}, "
                        f"confidence {forecast.confidence:.2f})", "forecast", node.id)

    def _set_state(self, node: Node, state: NodeState, reason: str = "") -> None:
        previous = node.state
        node.state = state
        node.reason = reason
        self._publish_state(node, previous, reason)

    def _publish_state(self, node: Node, previous: NodeState, reason: str) -> None:
        self._publish(StateChanged(type=EventKind.STATE_CHANGED, node_id=node.id, state=node.state,
                                   previous=previous, reason=reason, pruned=node.pruned))

    def _publish_created(self, child: Node, **origin) -> None:
        self._publish(NodeCreated(type=EventKind.NODE_CREATED, node_id=child.id, parent_id=child.parent_id,
                                  depth=child.depth, rationale=child.rationale, candidate=child.candidate,
                                  candidate_hash=child.candidate_hash, state=child.state, **origin))

    def _publish_step(self, report: StepReport) -> None:
        best = self.tree.best_measured()
        self._publish(StepDone(type=EventKind.STEP, step=report.step, status=report.status,
                               expanded=report.expanded, created=report.created,
                               measured_requests=report.measured_requests, counters=self.counters.to_dict(),
                               best_node_id=best.id if best else None,
                               best_speedup=best.speedup if best else None,
                               threshold=self.policy.threshold(self.tree)))

    def _publish(self, event: SearchEvent) -> None:
        self.event_count += 1
        self.port.publish({"event": self.event_count, "step": getattr(self, "step_count", 0), **event})


def _summary(result: dict) -> dict:
    """What the tree keeps of a measurement (the full result goes out in the 'measured' event)."""
    keep = ("status", "reason", "speedup", "reference", "candidate", "energy", "compiler", "backend", "seed",
            "max_abs_error", "max_rel_error", "profiler")
    return {k: result[k] for k in keep if k in result}
