"""Value objects that leave the runner: MeasurementResult, CompileReport and their parts."""
from __future__ import annotations

import re
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


_MODEL_SKIP = {"nvidia", "tesla", "geforce", "quadro", "rtx", "gpu"}


def gpu_model_slug(name: str) -> str:
    """The GPU model as a run's target and a worker's queue name it: 'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3'
    -> 'h100', 'NVIDIA A100-SXM4-80GB' -> 'a100', 'NVIDIA GeForce RTX 4090' -> 'rtx4090'. Letters and digits only.
    (Hardware.slug keeps every word: a file name for one exact card, not a queue for a model.)"""
    tokens = [t for t in re.split(r"[\s\-_/]+", name.strip()) if t]
    words = [t for t in tokens if t.lower() not in _MODEL_SKIP]
    for token in words:
        if re.fullmatch(r"[A-Za-z]{1,3}\d{1,4}[A-Za-z]?", token):
            return token.lower()
    prefix = "rtx" if any(t.lower() == "rtx" for t in tokens) else ""
    for token in words:
        if re.fullmatch(r"\d{3,5}[A-Za-z]*", token):
            return (prefix + token).lower()
    slug = re.sub(r"[^a-z0-9]", "", name.lower().replace("nvidia", ""))
    return slug or "gpu"


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
        notes = dict(values.get("observer_errors") or {})
        for key, kind in (("reference", TimingStats), ("candidate", TimingStats)):
            if isinstance(values.get(key), dict):
                values[key] = _build(kind, values[key])
        values["energy"] = _energy(values.get("energy"), notes)
        if isinstance(values.get("hardware"), dict):
            hardware = values["hardware"]
            values["hardware"] = _build_or_none(Hardware, hardware)
            if values["hardware"] is None:
                notes["hardware"] = f"the record names only part of its GPU: {_short(hardware)}"
        if isinstance(values.get("compiler"), dict):
            values["compiler"] = _build(CompilerFacts, values["compiler"])
        if notes:
            values["observer_errors"] = notes
        return cls(**values)


def _build(kind, data: dict):
    names = {f.name for f in fields(kind)}
    return kind(**{k: v for k, v in data.items() if k in names})


def _build_or_none(kind, data: dict):
    try:
        return _build(kind, data)
    except (TypeError, ValueError):
        return None


def _short(value, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _energy(data, notes: dict[str, str]) -> Energy | None:
    """A recorded energy entry, in either shape: flat {j_per_call, mean_w, ...} (the runner's), or paired
    {"reference": {...}, "candidate": {...}} (a KernelBench record, pytorch_worker's evidence["energy"]),
    where the measurement's energy is the candidate's. An entry that cannot be read leaves no energy and a
    note in `notes["energy"]`; it never costs the result its timing."""
    if data is None or isinstance(data, Energy):
        return data
    entry = data
    if isinstance(data, dict) and ("candidate" in data or "reference" in data) and "j_per_call" not in data:
        entry = data.get("candidate")
        if entry is None:
            notes["energy"] = "the record has the reference's energy only, none of the candidate's"
            return None
    if isinstance(entry, dict) and "error" in entry and "j_per_call" not in entry:
        notes["energy"] = f"no energy reading: {str(entry['error'])[:200]}"
        return None
    energy = _build_or_none(Energy, entry) if isinstance(entry, dict) else None
    if energy is None or not all(isinstance(getattr(energy, k), (int, float)) and not isinstance(getattr(energy, k), bool)
                                 for k in ("j_per_call", "mean_w")):
        notes["energy"] = f"unreadable energy entry, left out: {_short(data)}"
        return None
    return energy
