"""Knob-space generator for templated problems: change one or two knobs or a structural choice.

The knob space and constraints are plain data (docs/contracts.md [family]); the caller supplies
render(knobs) -> Candidate. Proposals honour the constraints and are never duplicates.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from klexpr import ExpressionError, evaluate
from search_engine.candidates import Candidate, candidate_hash
from search_engine.generators.base import Proposal, ProposalContext


def _is_numeric(values: list) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


@dataclass
class KnobSpace:
    knobs: dict[str, list]
    constraints: list = field(default_factory=list)  # expression strings or callables(knobs) -> bool
    sizes: dict = field(default_factory=dict)  # sizes the constraint expressions may also use
    points: list[dict] | None = None  # the valid points, when the caller has them enumerated

    def __post_init__(self) -> None:
        if not self.knobs or any(not values for values in self.knobs.values()):
            raise ValueError("A knob space needs at least one knob, each with at least one allowed value.")
        self.knobs = {name: list(values) for name, values in self.knobs.items()}
        self._point_keys = None
        if self.points is not None:
            self.points = [dict(p) for p in self.points]
            self._point_keys = {self.key(p) for p in self.points}

    def key(self, knobs: Mapping) -> tuple:
        return tuple(knobs.get(name) for name in self.knobs)

    def valid(self, knobs: Mapping) -> bool:
        if set(knobs) != set(self.knobs) or any(knobs[k] not in self.knobs[k] for k in self.knobs):
            return False
        if self._point_keys is not None and self.key(knobs) not in self._point_keys:
            return False
        names = {**self.sizes, **knobs}
        for constraint in self.constraints:
            try:
                ok = constraint(dict(knobs)) if callable(constraint) else evaluate(constraint, names)
            except (ExpressionError, ZeroDivisionError, TypeError):
                return False
            if not ok:
                return False
        return True

    def moves(self, knobs: Mapping) -> list[tuple[str, object]]:
        """Single-knob changes: a numeric knob steps to a neighbouring value, a categorical one to any other."""
        out = []
        for name, values in self.knobs.items():
            current = knobs.get(name)
            if _is_numeric(values) and current in values:
                ordered = sorted(values)
                i = ordered.index(current)
                out.extend((name, ordered[j]) for j in (i - 1, i + 1) if 0 <= j < len(ordered))
            else:
                out.extend((name, v) for v in values if v != current)
        return out

    def size(self) -> int:
        return math.prod(len(v) for v in self.knobs.values())

    def random_config(self, rng) -> dict:
        if self.points:
            return dict(self.points[rng.randrange(len(self.points))])
        return {name: values[rng.randrange(len(values))] for name, values in self.knobs.items()}

    def nearest(self, knobs: Mapping, rng) -> list[dict]:
        """Enumerated valid points ordered by how many knobs differ (ties in random order)."""
        if not self.points:
            return []
        order = list(range(len(self.points)))
        rng.shuffle(order)
        distance = lambda p: sum(1 for k in self.knobs if p[k] != knobs.get(k))
        return sorted((self.points[i] for i in order), key=distance)

    def all_valid(self, limit: int = 200_000) -> list[dict]:
        if self.size() > limit:
            raise ValueError(f"The knob space has {self.size()} points, more than {limit} to enumerate.")
        names = list(self.knobs)
        out = []
        for combo in itertools.product(*(self.knobs[n] for n in names)):
            knobs = dict(zip(names, combo))
            if self.valid(knobs):
                out.append(knobs)
        return out


def _describe(old: Mapping | None, new: Mapping) -> str:
    if not old:
        return "start point: " + ", ".join(f"{k}={v}" for k, v in new.items())
    changes = [f"{k} {old.get(k)} -> {v}" for k, v in new.items() if old.get(k) != v]
    return "change " + ", ".join(changes)


class TemplateGenerator:
    name = "template"

    def __init__(self, space: KnobSpace, render: Callable[[dict], Candidate], *, max_changes: int = 2,
                 random_tries: int = 200) -> None:
        if max_changes not in (1, 2):
            raise ValueError("A template proposal changes one or two knobs.")
        self.space = space
        self.render = render
        self.max_changes = max_changes
        self.random_tries = random_tries
        self._hashes: dict[tuple, str] = {}  # knob point -> candidate hash: a cache, never state

    def propose(self, context: ProposalContext, n: int) -> list[Proposal]:
        parent_knobs = context.parent.get("knobs")
        known = set(context.known_hashes)
        rng = context.rng
        proposals: list[Proposal] = []
        if not parent_knobs or not self.space.valid(parent_knobs):
            # The reference has no knobs: start from random points of the family, each at most once
            # (drawing with replacement gave ~175 distinct points where a screening width asked 256).
            if self.space.points:
                order = list(range(len(self.space.points)))
                rng.shuffle(order)
                for i in order:
                    if len(proposals) >= n:
                        break
                    if self.space.valid(self.space.points[i]):  # points and constraints may both be given
                        self._take(dict(self.space.points[i]), None, known, proposals)
                return proposals
            for _ in range(max(self.random_tries, 4 * n)):
                if len(proposals) >= n:
                    break
                knobs = self.space.random_config(rng)
                if self.space.valid(knobs):
                    self._take(knobs, None, known, proposals)
            return proposals
        singles = self.space.moves(parent_knobs)
        options: list[dict] = []
        for name, value in singles:
            options.append({**parent_knobs, name: value})
        if self.max_changes == 2:
            for (n1, v1), (n2, v2) in itertools.combinations(singles, 2):
                if n1 != n2:
                    options.append({**parent_knobs, n1: v1, n2: v2})
        rng.shuffle(options)
        # One-knob changes first, then pairs: small steps are the usual local search.
        options.sort(key=lambda k: sum(1 for name in k if k[name] != parent_knobs[name]))
        for knobs in options:
            if len(proposals) >= n:
                break
            if self.space.valid(knobs):
                self._take(knobs, parent_knobs, known, proposals)
        if len(proposals) < n and self.space.points:
            # A sparse space (few valid neighbours): the closest valid points, changing more knobs.
            for knobs in self.space.nearest(parent_knobs, rng):
                if len(proposals) >= n:
                    break
                if knobs != parent_knobs:
                    self._take(knobs, parent_knobs, known, proposals)
        return proposals

    def _take(self, knobs: dict, parent_knobs, known: set, proposals: list[Proposal]) -> None:
        point = self.space.key(knobs)
        if self._hashes.get(point) in known:
            return  # rendering and hashing a large source again only to find it known is the slow part
        candidate = self.render(dict(knobs))
        digest = candidate_hash(candidate)
        self._hashes[point] = digest
        if digest in known:
            return
        known.add(digest)
        proposals.append(Proposal(candidate=candidate, rationale=_describe(parent_knobs, knobs)))
