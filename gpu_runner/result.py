"""Value objects that leave the runner: MeasurementResult, CompileReport and their parts."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

STATUSES = ("ok", "failed-compile", "failed-correctness", "failed-runtime", "failed-timeout",
            "rejected-guard", "unavailable")


@dataclass
class TimingStats:
    median_ms: float
    iqr_ms: float
    n: int
    cv: float
    min_ms: float = 0.0


@dataclass
class Energy:
    j_per_call: float
    mean_w: float
    window_s: float = 0.0
    launches: int = 0


@dataclass
class Hardware:
    name: str
    sm_count: int
    memory_bytes: int
    memory_bandwidth_gbs: float
    sm_clock_mhz: float
    mem_clock_mhz: float
    compute_capability: str
    driver: str
    l2_bytes: int = 0

    @property
    def slug(self) -> str:
        """A short file-name form of the GPU ('NVIDIA H200' -> 'h200')."""
        words = [w for w in self.name.lower().replace("nvidia", "").split() if w]
        return "-".join(words).replace("/", "-") or "gpu"


@dataclass
class CompilerFacts:
    registers: int | None = None
    shared_bytes: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    stack_bytes: int | None = None
    sass: dict[str, int] = field(default_factory=dict)
    kernels: dict[str, dict[str, int]] = field(default_factory=dict)
    cutlass: str | None = None      # the CUTLASS/CuTe headers' version on the include path, if any
    # How the measured cubin was built: {"compiler": "nvcc 13.0.88", "arch": "sm_90", "options": [...]}
    # (the candidate's own options; the rest of nvcc's command line is compile_cubin's, the one compile path).
    compiled_with: dict = field(default_factory=dict)


@dataclass
class CompileDiagnostic:
    line: int | None
    message: str
    severity: str = "error"


@dataclass
class CompileReport:
    ok: bool
    diagnostics: list[CompileDiagnostic]
    log: str
    facts: CompilerFacts | None
    compile_s: float
    compiler: str = "nvcc"

    @property
    def errors(self) -> list[CompileDiagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    def summary(self) -> str:
        if self.ok:
            return "compiles"
        errors = self.errors[:3]
        if not errors:
            return "does not compile: " + (self.log.strip().splitlines() or ["(no log)"])[-1]
        return "does not compile: " + "; ".join(
            (f"line {d.line}: " if d.line else "") + d.message for d in errors)


@dataclass
class MeasurementResult:
    status: str
    reason: str = ""
    speedup: float | None = None
    reference: TimingStats | None = None
    candidate: TimingStats | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    energy: Energy | None = None
    compiler: CompilerFacts | None = None
    profiler: dict[str, float] = field(default_factory=dict)
    hardware: Hardware | None = None
    backend: str = ""
    seed: int = 0
    observer_errors: dict[str, str] = field(default_factory=dict)
    problem: str = ""
    candidate_name: str = ""
    source_hash: str = ""
    size_case: str = ""
    wall_s: float = 0.0
    phase_s: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MeasurementResult":
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for key, kind in (("reference", TimingStats), ("candidate", TimingStats), ("energy", Energy),
                          ("hardware", Hardware)):
            if isinstance(values.get(key), dict):
                values[key] = _build(kind, values[key])
        if isinstance(values.get("compiler"), dict):
            values["compiler"] = _build(CompilerFacts, values["compiler"])
        return cls(**values)


def _build(kind, data: dict):
    names = {f.name for f in fields(kind)}
    return kind(**{k: v for k, v in data.items() if k in names})
