"""The run objective: how the search turns a measurement into a reward, and the time/energy front.

Every objective is a factor where higher is better and 1.0 is the reference, like the speedup the
tree already uses, so the tree's log option and its reward scaling apply unchanged.
"""

from __future__ import annotations

import math
from typing import Any, Hashable, Iterable, Mapping, Sequence

OBJECTIVES = ("time", "energy", "time-energy-cap")
# Over the cap, a candidate's speedup is multiplied by (cap / J)^2: 10% over costs 17% of the
# value, twice the cap costs 75%. A smooth penalty rather than a wall, so that a search that starts
# above the cap still sees which way is down.
CAP_PENALTY_EXPONENT = 2.0


def pareto_front(points: Iterable[Sequence[Any]]) -> list[Hashable]:
    """Ids of the points (runtime_ms, j_per_call, id) that no other point beats on both time and
    energy (at least as good on both, better on one), fastest first. Points with a missing or
    non-finite runtime or energy are left out; exact ties are all kept."""
    clean = [(float(t), float(j), pid) for t, j, pid in points if _finite(t) and _finite(j)]
    front = [(t, j, pid) for t, j, pid in clean
             if not any(t2 <= t and j2 <= j and (t2 < t or j2 < j) for t2, j2, _ in clean)]
    front.sort(key=lambda p: (p[0], p[1]))
    return [pid for _, _, pid in front]


def objective_value(measurement: Mapping[str, Any], objective: str = "time", *, cap_j: float | None = None,
                    reference_j_per_call: float | None = None) -> float | None:
    """The reward factor of one measurement, or None when it cannot be valued under `objective`
    (a failed candidate, no speedup, or no energy reading where energy is needed).

    time:            speedup = T_ref / T_candidate.
    energy:          J_ref / J_candidate; the reference's J per call comes from
                     `reference_j_per_call` or measurement["energy"]["reference_j_per_call"].
    time-energy-cap: the speedup while J per call <= cap_j, times (cap_j / J)^2 above it.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"Unknown objective {objective!r}; use one of {', '.join(OBJECTIVES)}.")
    if measurement.get("status", "ok") != "ok":
        return None
    energy = measurement.get("energy") or {}
    joules = energy.get("j_per_call")
    if objective == "energy":
        reference = reference_j_per_call if reference_j_per_call is not None else energy.get("reference_j_per_call")
        if not (_finite(joules) and joules > 0 and _finite(reference) and reference > 0):
            return None
        return float(reference) / float(joules)
    speedup = _speedup(measurement)
    if speedup is None:
        return None
    if objective == "time":
        return speedup
    if not (_finite(cap_j) and cap_j > 0):
        raise ValueError("The time-energy-cap objective needs a positive cap in joules per call.")
    if not (_finite(joules) and joules > 0):
        return None
    if joules <= cap_j:
        return speedup
    return speedup * (cap_j / joules) ** CAP_PENALTY_EXPONENT


def _speedup(measurement: Mapping[str, Any]) -> float | None:
    speedup = measurement.get("speedup")
    if _finite(speedup) and speedup > 0:
        return float(speedup)
    ref = (measurement.get("reference") or {}).get("median_ms")
    cand = (measurement.get("candidate") or {}).get("median_ms")
    if _finite(ref) and _finite(cand) and ref > 0 and cand > 0:
        return float(ref) / float(cand)
    return None


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
