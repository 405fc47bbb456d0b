"""Roofline heuristic surrogate: a baseline that knows the roofline and a few rules of thumb, no data.

The candidate's time is the roofline bound divided by an efficiency guessed from the launch plan
and the source (occupancy, wave tail, vector loads, on-chip reuse for compute-bound problems,
tensor cores); the speedup is the reference's time (or its guessed efficiency) over that. The
forecast spreads log-normally around the guess, so its confidence stays low.
"""

from __future__ import annotations

import math
import time

import numpy as np

from search_engine.bins import DEFAULT_BINS, BinTable
from search_engine.surrogates.base import Forecast, ForecastRequest
from search_engine.surrogates.features import (compiler_features, launch_features, problem_features,
                                               source_features, SOURCE_FEATURES)

_SRC = {name: i for i, name in enumerate(SOURCE_FEATURES)}


def efficiency(candidate: dict, request: ForecastRequest, facts: dict | None) -> float:
    """Guessed fraction of the roofline a kernel reaches, in (0, 1]."""
    problem = problem_features(request.problem or {}, request.hardware, None)
    sizes = (request.problem or {}).get("sizes") or {}
    flops = math.exp(problem["log_flops"]) if not math.isnan(problem["log_flops"]) else None
    launch = launch_features(candidate, sizes, request.hardware, flops)
    comp = compiler_features(facts, candidate, launch["threads_per_block"], launch["dyn_shared_bytes"],
                             request.hardware)
    src = source_features(candidate.get("source", ""))
    eff = 0.5
    occupancy = comp["occupancy"]
    if not math.isnan(occupancy):
        eff *= min(1.0, 0.4 + occupancy)
    tail = launch["tail_efficiency"]
    if not math.isnan(tail) and launch["waves"] < 4:
        eff *= tail
    if src[_SRC["vector4"]] > 0:
        eff *= 1.3
    compute_bound = not math.isnan(problem["log_intensity"]) and problem["log_intensity"] > math.log(10)
    if compute_bound:
        reuse = src[_SRC["shared_decl"]] > 0
        eff *= 1.0 if reuse else 0.15
        if src[_SRC["literal_loops"]] > 0 and src[_SRC["max_trip"]] >= 4:
            eff *= 1.5  # register blocking
        if src[_SRC["tensor_core"]] > 0:
            eff *= 2.0
    spills = comp["spill_stores"]
    if not math.isnan(spills) and spills > 0:
        eff *= 0.7
    return float(min(1.0, max(1e-3, eff)))


class RooflineSurrogate:
    name = "roofline"
    version = "1"

    def __init__(self, *, bins: BinTable = DEFAULT_BINS, sigma: float = 0.8) -> None:
        self.bins = bins
        self.sigma = sigma

    @property
    def id(self) -> str:
        return f"{self.name}@{self.version}"

    def estimate_speedup(self, request: ForecastRequest) -> float:
        cand = efficiency(request.candidate, request, request.compiler_facts)
        problem = problem_features(request.problem or {}, request.hardware, request.reference_ms)
        headroom = problem["log_reference_headroom"]
        if not math.isnan(headroom):
            # Measured reference time over the candidate's guessed time on the roofline.
            return math.exp(headroom) * cand
        ref = efficiency(request.reference, request, request.reference_compiler_facts)
        return cand / ref

    def forecast(self, request: ForecastRequest) -> Forecast:
        return self.forecast_many([request])[0]

    def forecast_many(self, requests: list[ForecastRequest]) -> list[Forecast]:
        out = []
        for request in requests:
            started = time.perf_counter()
            guess = max(1e-6, self.estimate_speedup(request))
            probabilities = self._lognormal(math.log(guess))
            out.append(Forecast.from_probabilities(probabilities, surrogate=self.id, latency_s=time.perf_counter() - started,
                                           reasoning=f"roofline heuristic: about {guess:.3g}x"))
        return out

    def _lognormal(self, mu: float) -> list[float]:
        edges = [math.log(e) for e in self.bins.edges]
        cdf = [0.0] + [0.5 * (1 + math.erf((e - mu) / (self.sigma * math.sqrt(2)))) for e in edges] + [1.0]
        probabilities = np.diff(cdf) + 1e-6
        return list(probabilities / probabilities.sum())
