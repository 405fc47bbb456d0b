"""Selective policy: which forecast children are trusted, measured on the GPU, or pruned.

Every proposed child is forecast. A confident forecast (confidence >= the run's threshold) becomes
the child's provisional value; a confident slowdown against its parent is pruned. An uncertain child
(or an abstention) that could beat the current best goes to the GPU, at most k per step and within
the run's GPU budget. A forecast-only best is queued for GPU verification: in one of the step's slots
when it promises as much as the step's other measurements (verify_slot "shared", the default), else in a
later step; what a run reports as its best is always measured.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, fields

from search_engine.bins import DEFAULT_BINS, BinTable
from search_engine.surrogates.base import Forecast
from search_engine.node_states import NodeState
from search_engine.tree import Node, PUCTTree

ABSTENTION_PRIORITY = 0.5  # an abstention is deferred to the GPU ahead of weakly promising forecasts
MEASURE_FIRST_PRIORITY = 0.9  # a generator's measure-first child (a cure's start) goes ahead of most forecasts
MEASURE_ORDERS = ("verify-first", "improvement")
MEASURE_CHOICES = ("beat-probability", "improvement", "thompson")
VERIFY_SLOTS = ("extra", "shared")


@dataclass
class PolicySettings:
    threshold: float = 0.6
    gpu_budget: int = 50
    max_gpu_per_step: int = 2
    # Measurements a step makes even when no candidate clears min_beat_prob. The surrogate learns
    # only from measurements: a run whose forecasts all say "no better than the best" would
    # otherwise expand step after step on forecasts that nothing corrects.
    min_gpu_per_step: int = 1
    approval: str = "auto"  # "auto" | "manual"
    min_beat_prob: float = 0.15
    prune_slowdowns: bool = True
    verify_best: bool = True
    # The order of a step's measurements: "improvement" measures the most promising first by the
    # expected log improvement over the best measured speedup (the verification of a forecast-only best
    # among them), so that a run which reaches its goal in a step stops at that step's best candidate;
    # "verify-first" (the order before 2026-12-03) measures a forecast-only best before the others.
    # Chosen on validation families only: docs/search.md, "Sixteen families, and the order of a step's
    # measurements".
    measure_order: str = "improvement"
    # Which of the candidates that may beat the best (P >= min_beat_prob) take a step's GPU slots:
    # "improvement" the highest expected log improvement over the best measured speedup;
    # "beat-probability" (before the fifteenth session) the highest P(beats best), which saturates at a
    # run's start, when nearly every candidate beats the reference, so that the slots went by node id.
    # "thompson": as "improvement" until the run has measured a candidate; from then on each candidate claims a slot
    # with one draw of its log speedup from its forecast, less the log of the best (Thompson sampling: a candidate is
    # measured with the probability that it is the best under the forecasts, which after the run's first measurement
    # are calibrated), so that a model confidently wrong about a kind of kernel is not followed step after step. Tried
    # by protocol 29 and not kept: it made every validation family but spmv_ell worse (docs/search.md, "Thompson
    # sampling from a run's second measurement"). "improvement" was chosen on validation families only: docs/search.md,
    # "The choice of a step's measurements".
    measure_choice: str = "improvement"
    # The GPU slot of the verification of a forecast-only best: "shared", one of the step's slots, which it
    # takes only when its expected log improvement over the best measured speedup beats that of the step's
    # weakest measurement (the one it displaces waits, parked, for a later step; a verification that gives
    # way competes again in the next step); "extra" (before the eighteenth session), a measurement on top of the
    # step's, at most max_gpu_per_step + 1 in a step. Chosen on validation families only: docs/search.md,
    # "The verification's GPU slot".
    verify_slot: str = "shared"
    # How many knob values a step's measurements chosen by their forecasts must differ in, pairwise: a
    # candidate within fewer of one the step already measures gives its slot to the next that is not (it
    # keeps its place when no such candidate is left). Two near-identical kernels tend to miss together when
    # the forecast of one was wrong. 0: off; candidates without knob values (an LLM's) never give way.
    step_spread: int = 0
    measure_all: bool = False  # baseline: every compiled child is measured, forecasts are ignored
    conformal_target: float | None = None  # error rate of accepted forecasts to stay under
    conformal_min_samples: int = 10
    # The threshold while the run has fewer than conformal_min_samples measured forecasts to set the conformal one
    # from (with conformal_target only): None, the fixed threshold; 1.0 trusts no forecast until the run's own
    # measurements have shown at which confidence its forecasts are right (on a problem the surrogate never saw,
    # its confidence is not calibrated before then), so every candidate competes for the GPU by its forecast. Tried
    # at 1.0 by protocol 25 on eleven validation families and not kept (docs/search.md, "Trusting no forecast before
    # the conformal threshold").
    conformal_warmup: float | None = None
    conformal_tolerance_bins: int = 0  # a forecast counts as right within this many bins of the truth

    def __post_init__(self) -> None:
        if self.approval not in ("auto", "manual"):
            raise ValueError("Approval mode must be 'auto' or 'manual'.")
        if not 0 <= self.threshold <= 1:
            raise ValueError("The confidence threshold must be within [0, 1].")
        if self.gpu_budget < 0 or self.max_gpu_per_step < 1:
            raise ValueError("The GPU budget must be >= 0 and at least one measurement per step allowed.")
        if not 0 <= self.min_gpu_per_step <= self.max_gpu_per_step:
            raise ValueError("The measurements every step makes must lie between 0 and the most per step.")
        if self.measure_order not in MEASURE_ORDERS:
            raise ValueError(f"The order of a step's measurements must be one of {', '.join(MEASURE_ORDERS)}.")
        if self.measure_choice not in MEASURE_CHOICES:
            raise ValueError(f"The choice of a step's measurements must be one of {', '.join(MEASURE_CHOICES)}.")
        if self.verify_slot not in VERIFY_SLOTS:
            raise ValueError(f"The verification's GPU slot must be one of {', '.join(VERIFY_SLOTS)}.")
        if self.step_spread < 0:
            raise ValueError("The knob values a step's measurements differ in must be 0 or more.")
        if self.conformal_warmup is not None and not 0 <= self.conformal_warmup <= 1:
            raise ValueError("The threshold before the conformal one must be within [0, 1].")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> "PolicySettings":
        known = {f.name for f in fields(cls)}
        data = dict(data or {})
        if data and "verify_slot" not in data:
            data["verify_slot"] = "extra"  # a run saved before the setting goes on as it began
        if data and "step_spread" not in data:
            data["step_spread"] = 0  # likewise
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Decision:
    node_id: int
    action: str  # "accept" | "measure" | "prune" | "park"
    reason: str
    provisional_speedup: float | None = None
    priority: float = 0.0
    # Measured ahead of the forecasts whatever the step's order: no forecast to order it by (an
    # abstention, measure-all) or its generator asked the GPU first.
    ahead: bool = False


def prob_above(forecast: Forecast, speedup: float, bins: BinTable = DEFAULT_BINS) -> float:
    """P(S > speedup) under the forecast: from its continuous part where it has one (the mixture's
    components where it is a mixture), else spreading
    each bin's mass log-uniformly over the bin."""
    if forecast.log_mixture:
        t = math.log(max(speedup, 1e-12))
        return float(sum(w * 0.5 * math.erfc((t - mean) / sd / math.sqrt(2)) for w, mean, sd in forecast.log_mixture))
    if forecast.log_mean is not None and forecast.log_sd:
        z = (math.log(max(speedup, 1e-12)) - forecast.log_mean) / forecast.log_sd
        return float(0.5 * math.erfc(z / math.sqrt(2)))
    total = 0.0
    for b, p in enumerate(forecast.probabilities, start=1):
        lo, hi = bins.lower(b), bins.upper(b)
        if b == 1:
            lo = bins.representative(1) ** 2 / bins.upper(1)
        if b == bins.n_bins:
            hi = bins.representative(b) ** 2 / bins.lower(b)
        if speedup <= lo:
            total += p
        elif speedup < hi:
            total += p * (math.log(hi) - math.log(speedup)) / (math.log(hi) - math.log(lo))
    return float(min(1.0, max(0.0, total)))


def expected_log_improvement(forecast: Forecast, speedup: float, bins: BinTable = DEFAULT_BINS) -> float:
    """E[max(0, log S - log speedup)] under the forecast: the expected improvement over `speedup` in log
    space (the acquisition of Bayesian optimisation, which unlike P(S > speedup) does not saturate when
    most candidates beat it). From the forecast's continuous part where it has one (the mixture's components
    where it is a mixture), else each bin's mass
    spread log-uniformly over the bin, as in prob_above."""
    t = math.log(max(speedup, 1e-12))
    if forecast.log_mixture:
        return float(sum(w * _normal_improvement(mean - t, sd) for w, mean, sd in forecast.log_mixture))
    if forecast.log_mean is not None and forecast.log_sd:
        return _normal_improvement(forecast.log_mean - t, forecast.log_sd)
    total = 0.0
    for b, p in enumerate(forecast.probabilities, start=1):
        lo, hi = bins.lower(b), bins.upper(b)
        if b == 1:
            lo = bins.representative(1) ** 2 / bins.upper(1)
        if b == bins.n_bins:
            hi = bins.representative(b) ** 2 / bins.lower(b)
        a, c = math.log(lo), math.log(hi)
        if t <= a:
            total += p * ((a + c) / 2 - t)
        elif t < c:
            total += p * (c - t) ** 2 / (2 * (c - a))
    return float(total)


def sample_log_speedup(forecast: Forecast, rng: random.Random, bins: BinTable = DEFAULT_BINS) -> float:
    """One draw of log S from the forecast, read as prob_above reads it: its mixture's components where it has
    them, else its normal, else its bins, each bin's mass spread log-uniformly over the bin."""
    if forecast.log_mixture:
        u, total = rng.random() * sum(w for w, _, _ in forecast.log_mixture), 0.0
        for w, mean, sd in forecast.log_mixture:
            total += w
            if u <= total:
                return rng.gauss(mean, sd)
        _, mean, sd = forecast.log_mixture[-1]
        return rng.gauss(mean, sd)
    if forecast.log_mean is not None and forecast.log_sd:
        return rng.gauss(forecast.log_mean, forecast.log_sd)
    probabilities = list(forecast.probabilities)
    b = rng.choices(range(1, len(probabilities) + 1), weights=probabilities)[0] if sum(probabilities) > 0 else 1
    lo, hi = bins.lower(b), bins.upper(b)
    if b == 1:
        lo = bins.representative(1) ** 2 / bins.upper(1)
    if b == bins.n_bins:
        hi = bins.representative(b) ** 2 / bins.lower(b)
    return rng.uniform(math.log(lo), math.log(hi))


def _normal_improvement(d: float, sd: float) -> float:
    """E[max(0, X)] for X normal with mean d and standard deviation sd."""
    z = d / sd
    pdf = math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return float(d * 0.5 * math.erfc(-z / math.sqrt(2)) + sd * pdf)


class SelectivePolicy:
    def __init__(self, settings: PolicySettings | None = None, bins: BinTable = DEFAULT_BINS, seed: int = 0) -> None:
        self.settings = settings or PolicySettings()
        self.bins = bins
        self.seed = seed  # the run's: it seeds measure_choice "thompson"'s draws

    # ---- threshold --------------------------------------------------------------------------
    def threshold(self, tree: PUCTTree) -> float:
        """The run's confidence threshold, or the conformal one once enough nodes were measured (before then, under
        conformal_warmup, that threshold)."""
        s = self.settings
        if s.conformal_target is None:
            return s.threshold
        pairs = calibration_pairs(tree, self.bins, s.conformal_tolerance_bins)
        if len(pairs) < s.conformal_min_samples:
            return s.threshold if s.conformal_warmup is None else s.conformal_warmup
        return conformal_threshold(pairs, s.conformal_target)

    # ---- decisions --------------------------------------------------------------------------
    def decide(self, tree: PUCTTree, new_ids: list[int], budget_left: int, stalled: bool = False,
               measure_first: set[int] | frozenset[int] = frozenset(), minimum: int | None = None,
               minimum_reason: str = "") -> list[Decision]:
        """Decisions for newly forecast children and for parked ones that may now be measured.

        stalled: no node can be expanded; then, rather than end with GPU budget left, the most
        promising parked children are measured even when they look unlikely to beat the best.
        minimum (min_gpu_per_step unless given; the driver raises it when the step's compile checks were
        costly, and says why in minimum_reason): a step that would measure fewer tops up with the most
        promising parked children.
        """
        s = self.settings
        minimum = s.min_gpu_per_step if minimum is None else max(0, min(minimum, s.max_gpu_per_step))
        best = tree.best_measured()
        best_speedup = best.speedup if best is not None else 1.0
        threshold = self.threshold(tree)
        # By expected improvement, priorities are log gains, on another scale than an abstention's or a
        # measure-first child's: those go first, as the step's order measures them first anyway.
        by_gain = s.measure_choice in ("improvement", "thompson")
        drawing = self.drawing(tree)

        def slot_order(d: Decision) -> tuple:
            return (not d.ahead, -d.priority, d.node_id) if by_gain else (-d.priority, d.node_id)

        decisions: list[Decision] = []
        to_measure: list[Decision] = []
        for nid in new_ids:
            node = tree.nodes[nid]
            forecast = Forecast.from_dict(node.forecast) if node.forecast else None
            if s.measure_all or forecast is None:
                to_measure.append(Decision(nid, "measure", "every candidate is measured", priority=1.0, ahead=True))
                continue
            if nid in measure_first:
                to_measure.append(Decision(nid, "measure", "its generator asked the GPU first (a cure's start "
                                           "point, a kind of kernel the surrogate has not seen)",
                                           priority=MEASURE_FIRST_PRIORITY, ahead=True))
                continue
            if forecast.abstained:
                to_measure.append(Decision(
                    nid, "measure", f"the surrogate abstained ({forecast.abstain_reason}); deferred to the GPU",
                    priority=ABSTENTION_PRIORITY, ahead=True))
                continue
            parent_value = self.parent_speedup(tree, node)
            if forecast.confidence >= threshold:
                if s.prune_slowdowns and parent_value is not None and self.bins.upper(forecast.bin) <= parent_value:
                    decisions.append(Decision(
                        nid, "prune",
                        f"confidently slower than its parent (bin {forecast.bin}, confidence "
                        f"{forecast.confidence:.2f} >= {threshold:.2f})"))
                else:
                    decisions.append(Decision(
                        nid, "accept",
                        f"confident forecast (bin {forecast.bin}, confidence {forecast.confidence:.2f} >= "
                        f"{threshold:.2f}) taken as the provisional value",
                        provisional_speedup=forecast.expected_speedup(self.bins)))
                continue
            p_beat = prob_above(forecast, best_speedup, self.bins)
            if p_beat >= s.min_beat_prob:
                claim = self._claim(forecast, best_speedup, p_beat, drawing, tree, nid)
                to_measure.append(Decision(
                    nid, "measure",
                    f"uncertain (confidence {forecast.confidence:.2f} < {threshold:.2f}) and "
                    f"{self._claim_text(best_speedup, p_beat, claim, drawing)}",
                    priority=claim))
            else:
                decisions.append(Decision(
                    nid, "park", f"uncertain and unlikely to beat the best (P = {p_beat:.2f})", priority=p_beat))
        # Parked children of earlier steps compete for the GPU slots too.
        new = set(new_ids)
        if not s.measure_all:
            for node in tree.nodes.values():
                if node.id in new or node.state != NodeState.FORECAST or not node.forecast:
                    continue
                forecast = Forecast.from_dict(node.forecast)
                p_beat = ABSTENTION_PRIORITY if forecast.abstained else prob_above(forecast, best_speedup, self.bins)
                if p_beat >= s.min_beat_prob:
                    first = forecast.abstained and by_gain
                    claim = None if forecast.abstained else self._claim(forecast, best_speedup, p_beat, drawing,
                                                                        tree, node.id)
                    to_measure.append(Decision(
                        node.id, "measure", "parked earlier; " + (
                            "the surrogate abstained" if claim is None
                            else self._claim_text(best_speedup, p_beat, claim, drawing)),
                        priority=p_beat if claim is None else claim,
                        ahead=first))
        short = minimum - len(to_measure) if not s.measure_all else 0
        if (stalled and not to_measure) or short > 0:
            # This step's children just accepted or pruned are still "forecast" on the tree.
            settled = {d.node_id for d in decisions if d.action in ("accept", "prune")}
            settled |= {d.node_id for d in to_measure}
            parked = []
            for node in tree.nodes.values():
                if node.id in settled:
                    continue
                # Parked children first; forecast-accepted ones too, since their forecasts may be wrong
                # (not the pruned ones: they were confidently slower than their parents).
                unverified = node.state == NodeState.ACCEPTED_BY_FORECAST and not node.verification_refused \
                    and not node.pruned
                if not (node.state == NodeState.FORECAST or unverified) or not node.forecast:
                    continue
                forecast = Forecast.from_dict(node.forecast)
                p_beat = ABSTENTION_PRIORITY if forecast.abstained else prob_above(forecast, best_speedup, self.bins)
                expected = 0.0 if forecast.abstained else forecast.expected_log_speedup(self.bins)
                claim = math.inf if forecast.abstained else self._claim(forecast, best_speedup, p_beat, drawing,
                                                                        tree, node.id)
                parked.append((p_beat, expected, node.id, claim))
            if by_gain:
                parked.sort(key=lambda t: (-t[3], -t[1], t[2]))
            else:
                parked.sort(key=lambda t: (-t[0], -t[1], t[2]))
            if stalled and not to_measure:
                why = "nothing left to expand"
            else:
                if minimum_reason:
                    why = minimum_reason
                elif to_measure:
                    why = f"every step measures at least {minimum}"
                else:
                    why = f"no candidate has P(beats best) >= {s.min_beat_prob:.2f}, and every step measures at least one"
                parked = parked[:short]
            topped = [Decision(nid, "measure", f"{why}; the most promising parked candidate "
                               f"(P(beats best) = {p:.2f}"
                               f"{self._gain_words(claim, drawing) if by_gain and math.isfinite(claim) else ''}"
                               f") is measured",
                               priority=p if not by_gain or math.isinf(claim) else claim,
                               ahead=by_gain and math.isinf(claim)) for p, _, nid, claim in parked]
            chosen = {d.node_id for d in topped}
            decisions = [d for d in decisions if d.node_id not in chosen]  # parked a moment ago
            # the step's own choices keep their places ahead of a top-up (which keeps the order of parked)
            ahead = sorted(to_measure, key=slot_order)
            to_measure = ahead + topped if ahead else topped
            settled_order = bool(ahead)
        else:
            settled_order = False
        if not settled_order:
            to_measure.sort(key=slot_order)
        slots = budget_left if s.measure_all else min(budget_left, s.max_gpu_per_step)
        to_measure = self.spread(tree, to_measure, slots)
        for d in to_measure:
            if slots > 0:
                decisions.append(d)
                slots -= 1
            elif d.node_id in new:
                decisions.append(Decision(d.node_id, "park", d.reason + "; waiting for a GPU slot",
                                          priority=d.priority))
        return decisions

    def spread(self, tree: PUCTTree, ordered: list[Decision], slots: int) -> list[Decision]:
        """`ordered` with the first `slots` chosen so that, under step_spread k > 0, no two measurements chosen
        by their forecasts share all but fewer than k knob values: one that does waits behind the next that
        does not. Measurements made ahead whatever the order are neither moved nor compared. When too few
        candidates differ enough, the waiting ones fill the slots left, in their order."""
        k = self.settings.step_spread
        if k <= 0 or slots < 2 or len(ordered) < 2:
            return ordered
        chosen: list[Decision] = []
        for d in ordered:
            if len(chosen) == slots:
                break
            if d.ahead or all(c.ahead or knobs_differ(tree.nodes[d.node_id], tree.nodes[c.node_id]) >= k
                              for c in chosen):
                chosen.append(d)
        picked = {id(d) for d in chosen}
        return chosen + [d for d in ordered if id(d) not in picked]

    def drawing(self, tree: PUCTTree) -> bool:
        """Whether a step's slots go by draws from the forecasts (measure_choice "thompson", once the run has measured
        a candidate: before that, on a problem the surrogate has never seen, its spread is not calibrated)."""
        if self.settings.measure_choice != "thompson":
            return False
        root = tree.nodes.get(0)
        return any(n.state == NodeState.MEASURED and n is not root for n in tree.nodes.values())

    def draw(self, tree: PUCTTree, node_id: int, forecast: Forecast) -> float:
        """One draw of the node's log speedup from its forecast. Reproducible: seeded by the run's seed, the node and
        the number of candidates measured so far, so that every reading within a step sees the same draw and each
        measurement brings fresh ones."""
        measured = sum(1 for n in tree.nodes.values() if n.state == NodeState.MEASURED)
        return sample_log_speedup(forecast, random.Random(f"{self.seed}:{node_id}:{measured}"), self.bins)

    def _claim(self, forecast: Forecast, best_speedup: float, p_beat: float, drawing: bool = False,
               tree: PUCTTree | None = None, node_id: int | None = None) -> float:
        """A forecast's claim on a GPU slot under measure_choice: a log gain over the best (expected, or drawn)."""
        if drawing and tree is not None and node_id is not None:
            return self.draw(tree, node_id, forecast) - math.log(max(best_speedup, 1e-12))
        if self.settings.measure_choice in ("improvement", "thompson"):
            return expected_log_improvement(forecast, best_speedup, self.bins)
        return p_beat

    def _claim_text(self, best_speedup: float, p_beat: float, claim: float, drawing: bool) -> str:
        """Why a forecast claims a slot, in words (`claim` is _claim's)."""
        text = f"P(beats best {best_speedup:.3g}x) = {p_beat:.2f}"
        if self.settings.measure_choice in ("improvement", "thompson"):
            text += self._gain_words(claim, drawing)
        return text

    @staticmethod
    def _gain_words(claim: float, drawing: bool) -> str:
        if drawing:
            return f", a draw from its forecast x{math.exp(claim):.3g} the best"
        return f", expected gain x{math.exp(claim):.3g}"

    def verification_of_best(self, tree: PUCTTree) -> Decision | None:
        """A measure decision for the best-valued node when its value is forecast-only."""
        if not self.settings.verify_best:
            return None
        best = tree.best_valued()
        if best is None or best.value_source != "forecast" or best.state != NodeState.ACCEPTED_BY_FORECAST:
            return None
        if best.verification_refused:
            return None
        measured = tree.best_measured()
        if measured is not None and measured.reward is not None and measured.reward >= best.reward:
            return None
        return Decision(best.id, "measure", "the best value is forecast-only; verifying it on the GPU",
                        priority=2.0)

    def measurement_order(self, tree: PUCTTree, measures: list[Decision]) -> list[Decision]:
        """A step's measurements in the order they go to the GPU (the verification of a forecast-only best
        first among them: the caller puts it there). Under measure_order "improvement", those with a
        forecast are ordered by their expected log improvement over the best measured speedup, behind
        the ones measured ahead whatever the order (stable: ties keep the step's order)."""
        if self.settings.measure_order != "improvement":
            return measures
        return sorted(measures, key=lambda d: -self._gain(tree, d))

    def _gain(self, tree: PUCTTree, d: Decision) -> float:
        """A measurement's expected log improvement over the best measured speedup, or its drawn one while
        measure_choice "thompson" draws (infinite for one measured ahead whatever the order, or without a forecast
        to order it by)."""
        node = tree.nodes[d.node_id]
        if d.ahead or not node.forecast:
            return math.inf
        forecast = Forecast.from_dict(node.forecast)
        if forecast.abstained:
            return math.inf
        best = tree.best_measured()
        best_speedup = best.speedup if best is not None else 1.0
        if self.drawing(tree):
            return self.draw(tree, d.node_id, forecast) - math.log(max(best_speedup, 1e-12))
        return expected_log_improvement(forecast, best_speedup, self.bins)

    def displaced_by_verification(self, tree: PUCTTree, measures: list[Decision],
                                  verify: Decision | None) -> Decision | None:
        """Under verify_slot "shared", the measurement of the step that the verification of a forecast-only
        best does not add to but takes the place of: the one with the lowest expected log improvement among
        the verification and the step's others (the verification itself when it is the weakest), or None
        (no verification, verify_slot "extra", or a step with a slot to spare)."""
        if verify is None or self.settings.verify_slot != "shared":
            return None
        if len(measures) <= self.settings.max_gpu_per_step:
            return None
        weakest = min(reversed(measures), key=lambda d: self._gain(tree, d))  # a tie drops the later one
        return None if math.isinf(self._gain(tree, weakest)) else weakest

    @staticmethod
    def parent_speedup(tree: PUCTTree, node: Node) -> float | None:
        if node.parent_id is None:
            return None
        parent = tree.nodes[node.parent_id]
        if parent.speedup is not None:
            return parent.speedup
        return parent.provisional_speedup


_MISSING = object()  # a knob one candidate lacks: unequal to any value of the other's


def knobs_differ(a: Node, b: Node) -> float:
    """How many knob values two nodes' candidates differ in (a knob only one of them has counts); infinite
    when either has none, as an LLM's candidates: they are never too close to each other."""
    ka, kb = (a.candidate or {}).get("knobs"), (b.candidate or {}).get("knobs")
    if not ka or not kb:
        return math.inf
    return sum(1 for name in set(ka) | set(kb) if ka.get(name, _MISSING) != kb.get(name, _MISSING))


def calibration_pairs(tree: PUCTTree, bins: BinTable = DEFAULT_BINS, tolerance_bins: int = 0) -> list[tuple[float, bool]]:
    """(confidence, forecast bin was right) for every measured node that had a real forecast."""
    pairs = []
    for node in tree.nodes.values():
        if node.state != NodeState.MEASURED or node.speedup is None or not node.forecast:
            continue
        forecast = Forecast.from_dict(node.forecast)
        if forecast.abstained:
            continue
        pairs.append((forecast.confidence, abs(forecast.bin - bins.bin_of(node.speedup)) <= tolerance_bins))
    return pairs


def conformal_threshold(pairs: list[tuple[float, bool]], target_error: float) -> float:
    """Smallest threshold whose accepted forecasts have (errors + 1) / (n + 1) <= target.

    The +1 is the finite-sample correction of conformal risk control; with no such threshold,
    nothing is accepted (the threshold is above 1).
    """
    for t in sorted({c for c, _ in pairs}):
        accepted = [ok for c, ok in pairs if c >= t]
        errors = sum(1 for ok in accepted if not ok)
        if (errors + 1) / (len(accepted) + 1) <= target_error:
            return t
    return 1.0 + 1e-9
