"""The expert note: one finding about one measured kernel, with its evidence and one piece of advice."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("info", "warning", "critical")


@dataclass(frozen=True)
class ExpertNote:
    expert: str
    severity: str  # "info" | "warning" | "critical"
    finding: str  # one sentence
    evidence: dict[str, Any] = field(default_factory=dict)  # metric or fact -> value, and the thresholds used
    advice: str = ""  # one concrete sentence

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"Severity must be one of {', '.join(SEVERITIES)}, not {self.severity!r}.")

    @property
    def rank(self) -> int:
        """2 for critical, 1 for warning, 0 for info."""
        return SEVERITIES.index(self.severity)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ExpertNote":
        return cls(expert=data["expert"], severity=data["severity"], finding=data["finding"],
                   evidence=dict(data.get("evidence") or {}), advice=data.get("advice", ""))
