"""The search driver: select -> expand -> forecast -> decide -> measure -> back up -> publish.

The driver owns the tree, the search memory, the counters and the random state; it calls the
generator and the surrogate itself and talks to the outside world only through a small port, so it
runs the same in a Celery task, a benchmark and a unit test. Its whole state is a JSON-able dict:
load it, step until blocked or out of budget, save it, and a later load continues exactly there.
"""

from __future__ import annotations

import base64
import json
import math
import random
import zlib
from dataclasses import asdict, dataclass, field, fields
from typing import Callable, Protocol, runtime_checkable

from search_engine.bins import DEFAULT_BINS, BinTable
from search_engine.candidates import Candidate
from search_engine.generators.base import Generator, ProposalContext
from search_engine.memory import SearchMemory
from search_engine.policy import Decision, PolicySettings, SelectivePolicy, prob_above
from search_engine.surrogates.base import Forecast, ForecastRequest, surrogate_id
from search_engine.tree import FAILED_STATES, PENDING_STATES, PUCTTree, TreeOptions

STATE_VERSION = 2
# Version 1 kept every node's source inline; it still loads.
_READABLE_VERSIONS = (1, STATE_VERSION)

# MeasurementResult statuses (docs/contracts.md) -> node states (DESIGN.md). Runtime faults and
# time-outs are wrong results as far as the tree is concerned; the raw status stays on the node.
_STATUS_TO_STATE = {
    "ok": "measured",
    "failed-compile": "failed-compile",
    "failed-correctness": "failed-correctness",
    "failed-runtime": "failed-correctness",
    "failed-timeout": "failed-correctness",
    "rejected-guard": "rejected",
}


@runtime_checkable
class SearchPort(Protocol):
    """What the driver needs from the outside world."""

    def compile(self, node_id: int, candidate: Candidate) -> dict:
        """Static check: {"status": "ok" | "failed-compile", "reason": str, "compiler": {facts} | None}."""
        ...

    def request_measurement(self, node_id: int, candidate: Candidate) -> dict | None:
        """Measure on the GPU: a MeasurementResult.to_dict() now, or None when it will arrive later
        through driver.on_measurement(node_id, result)."""
        ...

    def publish(self, event: dict) -> None:
        """Every change of the tree (see the event types in the module's README / report)."""
        ...


@dataclass
class SearchSettings:
    policy: PolicySettings = field(default_factory=PolicySettings)
    tree: TreeOptions = field(default_factory=TreeOptions)
    children_per_expansion: int = 4
    root_children: int = 0  # children per expansion of the root (the reference); 0: children_per_expansion
    parents_per_step: int = 1
    discovery_ratio: float = math.sqrt(2)
    seed: int = 0
    wait_for_measurements: bool = True
    retrain_every: int = 10
    memory_cap: int = 40

    def to_dict(self) -> dict:
        data = asdict(self)
        data["policy"] = self.policy.to_dict()
        data["tree"] = self.tree.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict | None) -> "SearchSettings":
        data = dict(data or {})
        policy = PolicySettings.from_dict(data.pop("policy", None))
        tree = TreeOptions.from_dict(data.pop("tree", None))
        known = {f.name for f in fields(cls)}
        return cls(policy=policy, tree=tree, **{k: v for k, v in data.items() if k in known})


@dataclass
class StepReport:
    step: int
    status: str  # expanded | waiting | budget-exhausted | exhausted | stopped
    expanded: list[int] = field(default_factory=list)
    created: list[int] = field(default_factory=list)
    measured_requests: list[int] = field(default_factory=list)


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
        _state: dict | None = None,
    ) -> None:
        self.port = port
        self.generator = generator
        self.surrogate = surrogate
        self.settings = settings or SearchSettings()
        self.bins = bins
        self.policy = SelectivePolicy(self.settings.policy, bins)
        self.reference = reference
        self.hardware = dict(hardware or {})
        self.problem = dict(problem or {})
        self.reference_ms = reference_ms
        self.reference_compiler_facts = reference_compiler_facts
        if _state is None:
            self.tree = PUCTTree(self.settings.tree)
            self.memory = SearchMemory(cap=self.settings.memory_cap)
            self.rng = random.Random(self.settings.seed)
            self.step_count = 0
            self.event_count = 0
            self.counters = {"measurements_requested": 0, "measurements_done": 0, "forecasts": 0,
                             "abstentions": 0, "accepted_by_forecast": 0, "pruned": 0, "failed_proposals": 0,
                             "duplicates": 0, "compile_failures": 0, "measurement_failures": 0,
                             "rejected_approvals": 0, "llm_tokens_in": 0, "llm_tokens_out": 0,
                             "forecast_latency_s": 0.0}
            self.best_id: int | None = None
            self.discoveries: list[dict] = []
            self.retrained_on: list[int] = []
            root = self.tree.add_root(reference, speedup=1.0)
            self.best_id = root.id
            self._publish({"type": "node-created", "node_id": root.id, "parent_id": None, "depth": 0,
                           "rationale": root.rationale, "candidate": reference,
                           "candidate_hash": root.candidate_hash, "state": root.state})
            self._publish({"type": "measured", "node_id": root.id, "status": "ok", "speedup": 1.0,
                           "reason": "the reference defines speedup 1", "result": None})
        else:
            self._load(_state)

    # ---- persistence ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        version, internal, gauss = self.rng.getstate()
        return {
            "version": STATE_VERSION,
            "settings": self.settings.to_dict(),
            "bins": self.bins.to_dict(),
            "reference": self.reference,
            "hardware": self.hardware,
            "problem": self.problem,
            "reference_ms": self.reference_ms,
            "reference_compiler_facts": self.reference_compiler_facts,
            **_pack_sources(self.tree.to_dict()),
            "memory": self.memory.to_dict(),
            "rng": [version, list(internal), gauss],
            "step": self.step_count,
            "event_count": self.event_count,
            "counters": dict(self.counters),
            "best_id": self.best_id,
            "discoveries": list(self.discoveries),
            "retrained_on": list(self.retrained_on),
        }

    @classmethod
    def from_state(cls, state: dict, *, port: SearchPort, generator: Generator, surrogate) -> "SearchDriver":
        if state.get("version") not in _READABLE_VERSIONS:
            raise ValueError(f"Search state version {state.get('version')!r} is not one this driver reads "
                             f"({', '.join(map(str, _READABLE_VERSIONS))}).")
        return cls(
            port=port, generator=generator, surrogate=surrogate, reference=state["reference"],
            hardware=state.get("hardware"), problem=state.get("problem"),
            settings=SearchSettings.from_dict(state.get("settings")), bins=BinTable.from_dict(state.get("bins")),
            reference_ms=state.get("reference_ms"), reference_compiler_facts=state.get("reference_compiler_facts"),
            _state=state,
        )

    def _load(self, state: dict) -> None:
        self.tree = PUCTTree.from_dict(_unpack_sources(state))
        self.memory = SearchMemory.from_dict(state.get("memory"))
        version, internal, gauss = state["rng"]
        self.rng = random.Random()
        self.rng.setstate((version, tuple(internal), gauss))
        self.step_count = state["step"]
        self.event_count = state["event_count"]
        self.counters = dict(state["counters"])
        self.best_id = state.get("best_id")
        self.discoveries = list(state.get("discoveries", []))
        self.retrained_on = list(state.get("retrained_on", []))
        if self.retrained_on and hasattr(self.surrogate, "learn"):
            # An online-trained surrogate is rebuilt from the same rows, so a resumed run forecasts alike.
            self.surrogate.learn([self._training_row(nid) for nid in self.retrained_on])

    # ---- reading ----------------------------------------------------------------------------
    def budget_left(self) -> int:
        return max(0, self.settings.policy.gpu_budget - self.counters["measurements_requested"])

    def best(self):
        """The best GPU-measured node (the kernel reported as best is always measured)."""
        return self.tree.best_measured()

    def pending(self) -> list[int]:
        return [n.id for n in self.tree.nodes.values() if n.state in PENDING_STATES]

    def awaiting_approval(self) -> list[int]:
        return [n.id for n in self.tree.nodes.values() if n.state == "awaiting-approval"]

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
            return StepReport(step=self.step_count, status="waiting")
        if self.budget_left() <= 0:
            return StepReport(step=self.step_count, status="budget-exhausted")
        expanded: list[int] = []
        created: list[int] = []
        compiled: list[int] = []
        parents = self.tree.select(self.settings.parents_per_step)
        for _ in range(self.MAX_EMPTY_EXPANSIONS):
            if not parents:
                break
            for parent_id in parents:
                new = self._expand(parent_id)
                expanded.append(parent_id)
                created.extend(new)
                compiled.extend(self._compile(new))
            # A parent whose generator has nothing new is marked exhausted and costs no step: the
            # next one is tried at once (a generator that failed is not retried in the same step).
            if created or not all(self.tree.nodes[p].exhausted for p in parents):
                break
            parents = self.tree.select(self.settings.parents_per_step)
        if not expanded or (not created and not parents):
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
        report.measured_requests = self._apply(self.policy.decide(self.tree, compiled, self.budget_left()))
        self._publish_step(report)
        return report

    def _expand(self, parent_id: int) -> list[int]:
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
        proposals = self.generator.propose(context, width)
        self.tree.record_expansion(parent_id)
        created = []
        for proposal in proposals:
            self.counters["llm_tokens_in"] += proposal.tokens_in
            self.counters["llm_tokens_out"] += proposal.tokens_out
            if proposal.failed:
                self.counters["failed_proposals"] += 1
                parent.failed_proposals.append({"reason": proposal.failure or "no candidate",
                                                "excerpt": proposal.raw_excerpt[:500], "step": self.step_count})
                self.tree.record_failure(parent_id)
                self.memory.add("failed", f"proposal from node {parent_id}", proposal.failure or "no candidate",
                                "failure", parent_id)
                self._publish({"type": "proposal-failed", "node_id": parent_id, "reason": proposal.failure,
                               "generator": getattr(self.generator, "name", "")})
                continue
            child = self.tree.add_child(parent_id, proposal.candidate, proposal.rationale, step=self.step_count)
            if child is None:
                self.counters["duplicates"] += 1
                continue
            created.append(child.id)
            self._publish({"type": "node-created", "node_id": child.id, "parent_id": parent_id,
                           "depth": child.depth, "rationale": child.rationale, "candidate": child.candidate,
                           "candidate_hash": child.candidate_hash, "state": child.state})
        if not proposals:
            parent.exhausted = True
            self._publish({"type": "state-changed", "node_id": parent_id, "state": parent.state,
                           "previous": parent.state, "reason": "the generator has nothing new for this node"})
        return created

    def _compile(self, node_ids: list[int]) -> list[int]:
        ok = []
        for nid in node_ids:
            node = self.tree.nodes[nid]
            outcome = self.port.compile(nid, node.candidate) or {"status": "ok"}
            node.compiler_facts = outcome.get("compiler")
            if outcome.get("status", "ok") != "ok":
                self.counters["compile_failures"] += 1
                self._fail(node, "failed-compile", outcome.get("reason") or "the candidate did not compile")
            else:
                ok.append(nid)
        return ok

    def _request(self, nid: int) -> ForecastRequest:
        node = self.tree.nodes[nid]
        parent = self.tree.nodes[node.parent_id] if node.parent_id is not None else None
        return ForecastRequest(
            reference=self.reference, candidate=node.candidate, hardware=self.hardware, problem=self.problem,
            parent=parent.candidate if parent else None,
            parent_speedup=(parent.speedup if parent and parent.speedup is not None
                            else (parent.provisional_speedup if parent else None)),
            compiler_facts=node.compiler_facts, reference_compiler_facts=self.reference_compiler_facts,
            reference_ms=self.reference_ms,
        )

    def _forecast(self, node_ids: list[int]) -> None:
        if not node_ids or self.settings.policy.measure_all:
            for nid in node_ids:
                self._set_state(self.tree.nodes[nid], "forecast", "no forecast needed: every candidate is measured")
            return
        forecasts = self.surrogate.forecast_many([self._request(nid) for nid in node_ids])
        for nid, forecast in zip(node_ids, forecasts):
            node = self.tree.nodes[nid]
            node.forecast = forecast.to_dict()
            self.counters["forecasts"] += 1
            self.counters["llm_tokens_in"] += forecast.tokens_in
            self.counters["llm_tokens_out"] += forecast.tokens_out
            self.counters["forecast_latency_s"] += forecast.latency_s
            if forecast.abstained:
                self.counters["abstentions"] += 1
                parent = self.tree.nodes[node.parent_id]
                self.tree.set_prior_score(nid, parent.reward)
            else:
                self.tree.set_prior_score(nid, self.tree.reward_of(forecast.expected_speedup(self.bins)))
            self._publish({"type": "forecast", "node_id": nid, "forecast": node.forecast,
                           "surrogate": surrogate_id(self.surrogate)})
            self._set_state(node, "forecast", forecast.abstain_reason if forecast.abstained else "")

    def _apply(self, decisions: list[Decision]) -> list[int]:
        """Accepts, prunes and parks first; then the verification of a forecast-only best, ahead of
        the step's other measurements (its priority is above theirs); then those."""
        requested = []
        settled = [d for d in decisions if d.action != "measure"]
        for d in settled:
            node = self.tree.nodes[d.node_id]
            if d.action == "accept":
                self.counters["accepted_by_forecast"] += 1
                self.tree.set_provisional(node.id, d.provisional_speedup)
                self._set_state(node, "accepted-by-forecast", d.reason)
                self._lesson_from_forecast(node)
            elif d.action == "prune":
                self.counters["pruned"] += 1
                node.pruned = True
                forecast = Forecast.from_dict(node.forecast)
                self.tree.set_provisional(node.id, forecast.expected_speedup(self.bins))
                self._set_state(node, "accepted-by-forecast", "pruned: " + d.reason)
                self._lesson_from_forecast(node)
            elif d.action == "park":
                node.reason = d.reason
        verify = self.policy.verification_of_best(self.tree)
        if verify is not None and self._request_measurement(self.tree.nodes[verify.node_id], verify.reason):
            requested.append(verify.node_id)
        for d in decisions:
            if d.action == "measure" and d.node_id not in requested \
                    and self._request_measurement(self.tree.nodes[d.node_id], d.reason):
                requested.append(d.node_id)
        return requested

    def _request_measurement(self, node, reason: str) -> bool:
        if self.budget_left() <= 0:
            return False
        self.counters["measurements_requested"] += 1
        if self.settings.policy.approval == "manual":
            self._set_state(node, "awaiting-approval", reason)
            return True
        self._enqueue(node, reason)
        return True

    def _enqueue(self, node, reason: str) -> None:
        self._set_state(node, "queued", reason)
        outcome = self.port.request_measurement(node.id, node.candidate)
        if outcome is not None:
            self.on_measurement(node.id, outcome)

    # ---- callbacks from the outside -----------------------------------------------------------
    def approve(self, node_id: int) -> None:
        """An approver allowed the GPU verification of a node that awaits approval."""
        node = self.tree.nodes[node_id]
        if node.state != "awaiting-approval":
            raise ValueError(f"Node {node_id} is {node.state}, not awaiting approval.")
        self._enqueue(node, "approved for GPU verification")

    def reject(self, node_id: int, reason: str = "an approver rejected the GPU verification") -> None:
        node = self.tree.nodes[node_id]
        if node.state != "awaiting-approval":
            raise ValueError(f"Node {node_id} is {node.state}, not awaiting approval.")
        self.counters["measurements_requested"] -= 1  # the reserved budget goes back
        self.counters["rejected_approvals"] += 1
        if node.value_source == "forecast":
            # A forecast-accepted node keeps its provisional value; only the verification was refused.
            node.verification_refused = True
            self._set_state(node, "accepted-by-forecast", reason)
            return
        self._set_state(node, "rejected", reason)

    def add_candidate(self, parent_id: int, candidate: Candidate, rationale: str, **origin) -> int | None:
        """A candidate from outside the generator (a person's hand-written kernel): it is compiled,
        forecast and measured like any other. Returns its node id, or None for a duplicate."""
        child = self.tree.add_child(parent_id, candidate, rationale, step=self.step_count)
        if child is None:
            self.counters["duplicates"] += 1
            return None
        self._publish({"type": "node-created", "node_id": child.id, "parent_id": parent_id, "depth": child.depth,
                       "rationale": child.rationale, "candidate": child.candidate,
                       "candidate_hash": child.candidate_hash, "state": child.state, **origin})
        compiled = self._compile([child.id])
        self._forecast(compiled)
        if compiled:
            # A person asked for this kernel: it is measured whatever the forecast or the budget says.
            self.counters["measurements_requested"] += 1
            reason = "hand-written candidate: always verified on the GPU"
            if self.settings.policy.approval == "manual":
                self._set_state(child, "awaiting-approval", reason)
            else:
                self._enqueue(child, reason)
        return child.id

    def measure_outside(self, node_id: int, reason: str) -> None:
        """A person asked for a GPU measurement of a node the policy did not send; the result comes
        through on_measurement like any other. It counts against the budget."""
        node = self.tree.nodes[node_id]
        if node.state in PENDING_STATES or node.state == "measured":
            return
        self.counters["measurements_requested"] += 1
        self._set_state(node, "queued", reason)

    def on_measuring(self, node_id: int) -> None:
        node = self.tree.nodes[node_id]
        if node.state == "queued":
            self._set_state(node, "measuring", "the GPU runner started")

    def on_measurement(self, node_id: int, result: dict) -> bool:
        """A MeasurementResult dict for a queued node; returns False if the node was already done."""
        node = self.tree.nodes[node_id]
        if node.state not in ("queued", "measuring"):
            if node.state in ("measured",) + FAILED_STATES:
                return False
            raise ValueError(f"Node {node_id} is {node.state}; it has no measurement requested.")
        status = result.get("status", "ok")
        state = _STATUS_TO_STATE.get(status, "failed-correctness")
        node.measurement = _summary(result)
        node.expert_notes = list(result.get("expert_notes") or [])
        if result.get("compiler"):
            node.compiler_facts = result["compiler"]
        self.counters["measurements_done"] += 1
        speedup = result.get("speedup")
        if state == "measured" and (speedup is None or not math.isfinite(speedup) or speedup <= 0):
            state, status = "failed-correctness", "failed-runtime"
            result = {**result, "reason": "the measurement reported no valid speedup"}
        if state != "measured":
            self.counters["measurement_failures"] += 1
            self._publish({"type": "measured", "node_id": node_id, "status": status, "speedup": None,
                           "reason": result.get("reason", ""), "result": result})
            self._fail(node, state, result.get("reason") or status)
            return True
        self.tree.set_measured(node_id, float(speedup))
        self._set_state(node, "measured", result.get("reason") or "")
        self._publish({"type": "measured", "node_id": node_id, "status": "ok", "speedup": float(speedup),
                       "reason": result.get("reason", ""), "result": result})
        self._after_measured(node)
        return True

    # ---- internals --------------------------------------------------------------------------
    def _after_measured(self, node) -> None:
        parent = self.tree.nodes[node.parent_id] if node.parent_id is not None else None
        if parent is not None and parent.speedup:
            ratio = node.speedup / parent.speedup
            kind = "improved" if ratio >= 1.05 else ("regressed" if ratio <= 0.95 else "neutral")
            self.memory.add(kind, node.rationale, f"measured {ratio:.2f}x vs parent ({node.speedup:.3g}x vs reference)",
                            "measured", node.id)
            forecast_prob = None
            forecast_flag = None
            if node.forecast and not node.forecast.get("abstained"):
                threshold_speedup = self.settings.discovery_ratio * parent.speedup
                forecast_prob = prob_above(Forecast.from_dict(node.forecast), threshold_speedup, self.bins)
                forecast_flag = forecast_prob >= 0.5
            flagged = ratio >= self.settings.discovery_ratio
            record = {"node_id": node.id, "parent_id": parent.id, "ratio": ratio, "flagged": flagged,
                      "forecast_prob": forecast_prob, "forecast_flag": bool(forecast_flag)}
            self.discoveries.append(record)
            if flagged:
                node.discovery = True
                self._publish({"type": "discovery", "node_id": node.id, "parent_id": parent.id, "ratio": ratio,
                               "threshold": self.settings.discovery_ratio, "forecast_prob": forecast_prob,
                               "note": f"measured {ratio:.2f}x faster than its parent"})
        best = self.tree.best_measured()
        if best is not None and best.id != self.best_id:
            previous = self.tree.nodes[self.best_id] if self.best_id is not None else None
            self.best_id = best.id
            self._publish({"type": "best-changed", "node_id": best.id, "speedup": best.speedup,
                           "previous_node_id": previous.id if previous else None,
                           "previous_speedup": previous.speedup if previous else None})
        self._maybe_retrain()

    def _maybe_retrain(self) -> None:
        if not hasattr(self.surrogate, "learn") or self.settings.retrain_every <= 0:
            return
        measured = sorted(n.id for n in self.tree.nodes.values()
                          if n.state == "measured" and n.speedup is not None and n.parent_id is not None)
        # Early rows teach the most: retrain after 1, 2, 4, 8 ... measured rows, then every retrain_every.
        due = min(self.settings.retrain_every, max(1, len(self.retrained_on)))
        if len(measured) - len(self.retrained_on) >= due:
            self.retrained_on = measured
            self.surrogate.learn([self._training_row(nid) for nid in measured])
            self._revise_forecasts(len(measured))

    def _revise_forecasts(self, rows: int) -> None:
        """After the surrogate learned from this run, the children that still stand on a forecast
        (parked, or accepted without a measurement) are forecast again, so that the policy, the
        tree's priors and provisional values use what was learned. A revision that moves the
        forecast is published like any forecast, marked revised."""
        ids = [n.id for n in self.tree.nodes.values()
               if n.state in ("forecast", "accepted-by-forecast") and n.forecast]
        if not ids:
            return
        forecasts = self.surrogate.forecast_many([self._request(nid) for nid in ids])
        self.counters["forecast_revisions"] = self.counters.get("forecast_revisions", 0) + len(ids)
        threshold = self.policy.threshold(self.tree)
        for nid, forecast in zip(ids, forecasts):
            node = self.tree.nodes[nid]
            old = Forecast.from_dict(node.forecast)
            node.forecast = forecast.to_dict()
            if forecast.abstained:
                continue
            expected = forecast.expected_speedup(self.bins)
            self.tree.set_prior_score(nid, self.tree.reward_of(expected))
            if node.state == "accepted-by-forecast":
                self.tree.set_provisional(nid, expected)
            moved = old.abstained or old.bin != forecast.bin or \
                max(abs(a - b) for a, b in zip(old.probs, forecast.probs)) >= 0.05
            if moved:
                self._publish({"type": "forecast", "node_id": nid, "forecast": node.forecast,
                               "surrogate": surrogate_id(self.surrogate), "revised": True,
                               "reason": f"revised after learning from {rows} of this run's measurements"})
            if node.pruned:
                parent = self.policy.parent_speedup(self.tree, node)
                still = forecast.confidence >= threshold and parent is not None and \
                    self.bins.upper(forecast.bin) <= parent
                if not still:
                    # The forecast that pruned it has changed: its branch may be searched again.
                    node.pruned = False
                    self.counters["unpruned"] = self.counters.get("unpruned", 0) + 1
                    self._set_state(node, "accepted-by-forecast",
                                    f"no longer pruned: the forecast revised after {rows} measurements is bin "
                                    f"{forecast.bin} with confidence {forecast.confidence:.2f}")

    def _training_row(self, node_id: int) -> dict:
        request = self._request(node_id)
        return {"request": request, "speedup": self.tree.nodes[node_id].speedup}

    def _fail(self, node, state: str, reason: str) -> None:
        if node.value_source is not None:
            self.tree.clear_value(node.id)
        self._set_state(node, state, reason)
        if node.parent_id is not None:
            self.tree.record_failure(node.parent_id)
        self.memory.add("failed", node.rationale, f"{state}: {reason}", "failure", node.id)

    def _lesson_from_forecast(self, node) -> None:
        forecast = Forecast.from_dict(node.forecast)
        self.memory.add("forecast", node.rationale,
                        f"forecast bin {forecast.bin} ({self.bins.names[forecast.bin - 1]}, "
                        f"confidence {forecast.confidence:.2f})", "forecast", node.id)

    def _set_state(self, node, state: str, reason: str = "") -> None:
        previous = node.state
        node.state = state
        node.reason = reason
        self._publish({"type": "state-changed", "node_id": node.id, "state": state, "previous": previous,
                       "reason": reason})

    def _publish_step(self, report: StepReport) -> None:
        best = self.tree.best_measured()
        self._publish({"type": "step", "step": report.step, "status": report.status,
                       "expanded": report.expanded, "created": report.created,
                       "measured_requests": report.measured_requests, "counters": dict(self.counters),
                       "best_node_id": best.id if best else None, "best_speedup": best.speedup if best else None,
                       "threshold": self.policy.threshold(self.tree)})

    def _publish(self, event: dict) -> None:
        self.event_count += 1
        event = {"event": self.event_count, "step": getattr(self, "step_count", 0), **event}
        self.port.publish(event)


def _summary(result: dict) -> dict:
    """What the tree keeps of a measurement (the full result goes out in the 'measured' event)."""
    keep = ("status", "reason", "speedup", "reference", "candidate", "energy", "compiler", "backend", "seed",
            "max_abs_error", "max_rel_error", "profiler")
    return {k: result[k] for k in keep if k in result}


# ---- compact state ---------------------------------------------------------------------------
# Sources are most of a state (a template variant is ~10 KB, and a run screening 256 candidates at
# the root holds hundreds of them) and nearly alike, so they are kept apart from the nodes, once
# each, compressed: an sgemm run of 638 nodes saves 1.8 MB per step instead of 8.4 MB. Everything
# else stays plain JSON that the app (and a person in the admin) can read.

def _pack_sources(tree: dict) -> dict:
    sources: list[str] = []
    index: dict[str, int] = {}
    for node in tree["nodes"]:
        candidate = node.get("candidate") or {}
        if isinstance(candidate.get("source"), str):
            source = candidate.pop("source")  # tree.to_dict() made these dicts; the tree keeps its own
            if source not in index:
                index[source] = len(sources)
                sources.append(source)
            candidate["source_ref"] = index[source]
    data = zlib.compress(json.dumps(sources).encode(), 6)
    return {"tree": tree, "sources": {"encoding": "zlib+base64+json", "count": len(sources),
                                      "data": base64.b64encode(data).decode("ascii")}}


def _unpack_sources(state: dict) -> dict:
    """The tree's dict with every node's source back in its candidate (the state is left unchanged)."""
    tree = state["tree"]
    packed = state.get("sources")
    if not packed:
        return tree
    if packed.get("encoding") != "zlib+base64+json":
        raise ValueError(f"Search state sources are in an unknown encoding {packed.get('encoding')!r}.")
    try:
        sources = json.loads(zlib.decompress(base64.b64decode(packed["data"])))
    except (KeyError, TypeError, ValueError, zlib.error) as exc:
        raise ValueError(f"Search state sources are damaged: {exc!r}") from None
    if len(sources) != packed.get("count"):
        raise ValueError(f"Search state holds {len(sources)} sources where it says {packed.get('count')}.")
    nodes = []
    for raw in tree["nodes"]:
        candidate = raw.get("candidate") or {}
        if "source_ref" in candidate:
            ref = candidate["source_ref"]
            if not isinstance(ref, int) or not 0 <= ref < len(sources):
                raise ValueError(f"Search state node {raw.get('id')} points at source {ref!r}, which is not there.")
            candidate = {k: v for k, v in candidate.items() if k != "source_ref"}
            candidate["source"] = sources[ref]
            raw = {**raw, "candidate": candidate}
        nodes.append(raw)
    return {**tree, "nodes": nodes}
