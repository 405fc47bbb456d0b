"""The ordinal speedup bins: one table, used by every surrogate, scoring rule and prompt.

Bins as published for GPU Forecasters; speedup S = T_ref / T_candidate. Bins are numbered 1..8
in every public API (as in the design); arrays of probabilities are indexed 0..7.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

DEFAULT_EDGES: tuple[float, ...] = (0.25, 0.5, 0.707, 1.0, 1.414, 2.0, 4.0)
DEFAULT_NAMES: tuple[str, ...] = (
    "severe slowdown",
    "significant slowdown",
    "moderate slowdown",
    "minor slowdown",
    "minor speedup",
    "significant speedup",
    "high speedup",
    "extreme speedup",
)


@dataclass(frozen=True)
class BinTable:
    """Edges e_1 < ... e_{K-1}; bin b (1-based) holds e_{b-1} <= S < e_b."""

    edges: tuple[float, ...] = DEFAULT_EDGES
    names: tuple[str, ...] = field(default=DEFAULT_NAMES)

    def __post_init__(self) -> None:
        edges = tuple(float(e) for e in self.edges)
        object.__setattr__(self, "edges", edges)
        if len(edges) < 1 or any(e <= 0 for e in edges):
            raise ValueError("Bin edges must be positive speedups.")
        if any(b <= a for a, b in zip(edges, edges[1:])):
            raise ValueError("Bin edges must be strictly increasing.")
        names = tuple(self.names)
        if len(names) != len(edges) + 1:
            names = tuple(f"bin {b}" for b in range(1, len(edges) + 2))
        object.__setattr__(self, "names", names)

    @property
    def n_bins(self) -> int:
        return len(self.edges) + 1

    def bin_of(self, speedup: float) -> int:
        """The 1-based bin of a speedup; raises on a non-positive or non-finite speedup."""
        s = float(speedup)
        if not math.isfinite(s) or s <= 0:
            raise ValueError(f"A speedup must be a positive finite number, got {speedup!r}.")
        b = 1
        for edge in self.edges:
            if s >= edge:
                b += 1
            else:
                break
        return b

    def lower(self, b: int) -> float:
        """Lower edge of bin b (0.0 for the first bin)."""
        self._check(b)
        return 0.0 if b == 1 else self.edges[b - 2]

    def upper(self, b: int) -> float:
        """Upper edge of bin b (inf for the last bin)."""
        self._check(b)
        return math.inf if b == self.n_bins else self.edges[b - 1]

    def representative(self, b: int) -> float:
        """A typical speedup of bin b: the geometric middle; open ends extend by the neighbour ratio."""
        self._check(b)
        if self.n_bins == 1:
            return 1.0
        if b == 1:
            ratio = self.edges[1] / self.edges[0] if len(self.edges) > 1 else 2.0
            return self.edges[0] / math.sqrt(ratio)
        if b == self.n_bins:
            ratio = self.edges[-1] / self.edges[-2] if len(self.edges) > 1 else 2.0
            return self.edges[-1] * math.sqrt(ratio)
        return math.sqrt(self.edges[b - 2] * self.edges[b - 1])

    def representatives(self) -> list[float]:
        return [self.representative(b) for b in range(1, self.n_bins + 1)]

    def range_text(self, b: int) -> str:
        lo, hi = self.lower(b), self.upper(b)
        if b == 1:
            return f"S < {hi:g}"
        if b == self.n_bins:
            return f"S >= {lo:g}"
        return f"{lo:g} <= S < {hi:g}"

    def table_text(self) -> str:
        """The table as plain text for prompts."""
        lines = ["bin | name | speedup S = T_ref / T_candidate"]
        for b in range(1, self.n_bins + 1):
            lines.append(f"{b} | {self.names[b - 1]} | {self.range_text(b)}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"edges": list(self.edges), "names": list(self.names)}

    @classmethod
    def from_dict(cls, data: dict | None) -> "BinTable":
        if not data:
            return cls()
        return cls(edges=tuple(data["edges"]), names=tuple(data.get("names") or ()))

    def _check(self, b: int) -> None:
        if not 1 <= int(b) <= self.n_bins:
            raise ValueError(f"Bin must be within 1..{self.n_bins}, got {b!r}.")


DEFAULT_BINS = BinTable()
