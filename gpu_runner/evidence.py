"""What the worker saw while measuring one candidate; the verdict is drawn from it in the parent."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .result import Energy, Hardware


@dataclass
class OutputCheck:
    case: str
    set_index: int          # -1: after the timing runs
    arg: str
    numel: int
    bad: int
    unwritten: int
    nan: int
    max_abs: float
    max_rel: float
    first_bad: int | None = None
    cand_value: float | None = None
    ref_value: float | None = None

    @property
    def passed(self) -> bool:
        return self.bad == 0 and self.unwritten == 0


@dataclass
class InputChange:
    case: str
    set_index: int
    arg: str
    by: str                 # "candidate" | "reference"


@dataclass
class Evidence:
    phase: str = "start"
    error_kind: str | None = None
    error_message: str | None = None
    sticky: bool = False
    compile_log: str | None = None
    checks: list[OutputCheck] = field(default_factory=list)
    input_changes: list[InputChange] = field(default_factory=list)
    memoised: list[str] = field(default_factory=list)
    reference_ms: list[float] = field(default_factory=list)
    candidate_ms: list[float] = field(default_factory=list)
    post_checks: list[OutputCheck] = field(default_factory=list)
    escape: dict[str, Any] | None = None
    energy: Energy | None = None
    energy_error: str | None = None
    hardware: Hardware | None = None
    memory_bytes: int = 0
    phase_s: dict[str, float] = field(default_factory=dict)
    kernel_attributes: dict[str, dict[str, int]] = field(default_factory=dict)
