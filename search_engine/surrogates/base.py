"""The one surrogate interface: a request in, a Forecast over the ordinal bins out."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from search_engine.bins import DEFAULT_BINS, BinTable
from search_engine.candidates import Candidate, normalise_source


@dataclass
class ForecastRequest:
    """What a surrogate sees: the reference, the candidate, the hardware, and optional context.

    reference / candidate / parent are Candidate dicts (docs/contracts.md). compiler_facts are the
    candidate's static facts (registers, shared_bytes, spill_stores, spill_loads, sass) when the caller
    compiled it; problem holds sizes ({name: int}), roofline ({flops, bytes} expressions), tolerance.
    """

    reference: Candidate
    candidate: Candidate
    hardware: dict = field(default_factory=dict)
    problem: dict = field(default_factory=dict)
    parent: Candidate | None = None
    parent_speedup: float | None = None
    compiler_facts: dict | None = None
    reference_compiler_facts: dict | None = None
    reference_ms: float | None = None
    # the reference's Nsight Compute counters ({metric: number}) where it was profiled on this hardware
    reference_profile: dict | None = None

    def cache_key(self, surrogate_id: str) -> str:
        """Hash of (surrogate, reference, candidate, hardware) as the brief of the cache asks."""
        key = {
            "surrogate": surrogate_id,
            "reference": _candidate_key(self.reference),
            "candidate": _candidate_key(self.candidate),
            "hardware": self.hardware,
        }
        return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def _candidate_key(candidate: Candidate | None) -> dict:
    if not candidate:
        return {}
    return {
        "source": normalise_source(candidate.get("source", "")),
        "launch": candidate.get("launch") or [],
        "compile_options": sorted(candidate.get("compile_options") or []),
    }


@dataclass
class Forecast:
    """A forecast over the bins. An abstention has no probabilities and defers the decision to the GPU."""

    probabilities: tuple[float, ...]
    bin: int | None
    confidence: float
    reasoning: str = ""
    surrogate: str = ""
    latency_s: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    abstained: bool = False
    abstain_reason: str = ""
    raw_sum: float | None = None
    cached: bool = False
    # A continuous forecast of log speedup (mean, standard deviation), where the surrogate has one
    # (the learned surrogate once it has learned from the run). The bins stay the forecast that is
    # scored; these rank candidates that share a bin (every variant in "extreme speedup", >= 4x).
    log_mean: float | None = None
    log_sd: float | None = None
    # Where the continuous forecast is a mixture of normals over log speedup (the learned surrogate's
    # recorded-data and run-local models, each with its weight): ((weight, mean, sd), ...). log_mean and
    # log_sd are then its moments; the probability of beating a speedup and the expected improvement over
    # it are read from the components (search_engine.policy), which a single normal of the same moments
    # would give to candidates the two models disagree on.
    log_mixture: tuple | None = None

    @classmethod
    def from_probabilities(
        cls, probabilities, *, surrogate: str = "", reasoning: str = "", raw_sum: float | None = None, **cost: Any
    ) -> "Forecast":
        p = [max(0.0, float(x)) for x in probabilities]
        total = sum(p)
        if total <= 0 or not math.isfinite(total):
            raise ValueError("A forecast needs a positive, finite probability mass.")
        p = [x / total for x in p]
        best = max(range(len(p)), key=lambda i: (p[i], -i))
        return cls(
            probabilities=tuple(p),
            bin=best + 1,
            confidence=p[best],
            reasoning=reasoning,
            surrogate=surrogate,
            raw_sum=total if raw_sum is None else raw_sum,
            **cost,
        )

    @classmethod
    def abstention(cls, reason: str, *, surrogate: str = "", reasoning: str = "", **cost: Any) -> "Forecast":
        return cls(
            probabilities=(),
            bin=None,
            confidence=0.0,
            reasoning=reasoning,
            surrogate=surrogate,
            abstained=True,
            abstain_reason=reason,
            **cost,
        )

    def expected_log_speedup(self, bins: BinTable = DEFAULT_BINS) -> float | None:
        if self.abstained or not self.probabilities:
            return None
        if self.log_mean is not None:
            return float(self.log_mean)
        return sum(p * math.log(r) for p, r in zip(self.probabilities, bins.representatives()))

    def expected_speedup(self, bins: BinTable = DEFAULT_BINS) -> float | None:
        """Geometric expectation of the speedup under the forecast (bin representatives)."""
        value = self.expected_log_speedup(bins)
        return None if value is None else math.exp(value)

    def prob_at_least(self, speedup: float, bins: BinTable = DEFAULT_BINS) -> float | None:
        """Probability mass of the bins that reach at least the given speedup (upper edge above it)."""
        if self.abstained or not self.probabilities:
            return None
        return float(sum(p for b, p in enumerate(self.probabilities, start=1) if bins.upper(b) > speedup))

    def prob_beyond(self, speedup: float, bins: BinTable = DEFAULT_BINS) -> float | None:
        """Probability mass of the bins lying wholly at or above the given speedup (lower edge >= it)."""
        if self.abstained or not self.probabilities:
            return None
        return float(sum(p for b, p in enumerate(self.probabilities, start=1) if bins.lower(b) >= speedup))

    def to_dict(self) -> dict:
        data = asdict(self)
        data["probabilities"] = list(self.probabilities)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Forecast":
        fields = dict(data)
        # Saved searches and forecast caches written before the field's rename call it "probs".
        fields["probabilities"] = tuple(fields.get("probabilities") or fields.pop("probs", None) or ())
        if fields.get("log_mixture") is not None:
            fields["log_mixture"] = tuple(tuple(float(x) for x in c) for c in fields["log_mixture"])
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in fields.items() if k in known})


@runtime_checkable
class Surrogate(Protocol):
    """Every surrogate: a name+version, one forecast, many forecasts."""

    name: str
    version: str

    def forecast(self, request: ForecastRequest) -> Forecast: ...

    def forecast_many(self, requests: list[ForecastRequest]) -> list[Forecast]: ...


def surrogate_id(surrogate) -> str:
    return f"{surrogate.name}@{surrogate.version}"
