"""What the LLM generator reads about a measured parent: the expert notes, or the raw numbers.

KernelPro found that a generator given raw profiler numbers does worse than one given short expert
findings; the run's settings pick one of the two, or neither.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from .ncu_metrics import FOR_PROMPT
from .note import ExpertNote


def notes_for_prompt(notes: Iterable[ExpertNote | Mapping[str, Any]], *, include_info: bool = True,
                     max_notes: int = 8) -> str:
    """Numbered findings with advice and their main evidence, most severe first; "" if none."""
    items = [n if isinstance(n, ExpertNote) else ExpertNote.from_dict(n) for n in notes]
    if not include_info:
        items = [n for n in items if n.severity != "info"]
    items = sorted(items, key=lambda n: (n.expert != "roofline", -n.rank))[:max_notes]
    if not items:
        return ""
    lines = ["Profiler findings on the parent kernel (most important first):"]
    for i, note in enumerate(items, 1):
        lines.append(f"{i}. [{note.severity}] {note.expert}: {note.finding}")
        if note.advice:
            lines.append(f"   Advice: {note.advice}")
        shown = _evidence_line(note.evidence)
        if shown:
            lines.append(f"   Evidence: {shown}")
    return "\n".join(lines)


def _evidence_line(evidence: Mapping[str, Any], limit: int = 5) -> str:
    parts = []
    for key, value in evidence.items():
        if isinstance(value, bool) or value is None or isinstance(value, (dict, list)):
            continue
        if key.endswith(("_threshold", "_warn", "_critical", "_info", "_pct_threshold")) or key in _THRESHOLD_KEYS:
            continue
        parts.append(f"{key}={_number(value)}")
        if len(parts) == limit:
            break
    return ", ".join(parts)


_THRESHOLD_KEYS = {"busy_pct_threshold", "launch_bound_s", "near_floor", "far_from_floor", "narrow_bytes",
                   "subword_bytes", "excess_always", "dram_busy_pct", "low_occupancy_pct", "very_low_occupancy_pct",
                   "achieved_gap_points", "underfilled_waves", "divergent_threads", "idle_lanes_critical",
                   "over_limit", "near_limit", "low_power", "local_share_critical", "shared_stall_share_threshold"}


def raw_metrics_for_prompt(measurement: Mapping[str, Any], *, max_sass_opcodes: int = 12) -> str:
    """The measured numbers a tuning engineer would look at first, without interpretation."""
    lines = []
    candidate = measurement.get("candidate") or {}
    if candidate.get("median_ms") is not None:
        lines.append(f"time: median {_number(candidate['median_ms'])} ms"
                     + (f", speedup over the reference {_number(measurement['speedup'])}"
                        if measurement.get("speedup") else ""))
    compiler = measurement.get("compiler") or {}
    if compiler:
        facts = ", ".join(f"{k} {compiler[k]}" for k in ("registers", "shared_bytes", "spill_stores", "spill_loads",
                                                         "stack_bytes") if compiler.get(k) is not None)
        lines.append(f"ptxas: {facts}")
        sass = compiler.get("sass") or {}
        if sass:
            ranked = sorted(sass.items(), key=lambda kv: -kv[1])
            memory = [(op, n) for op, n in ranked if op.split(".")[0] in _MEMORY_AND_MATRIX]
            other = [(op, n) for op, n in ranked if op.split(".")[0] not in _MEMORY_AND_MATRIX | {"NOP"}]
            lines.append("SASS memory and matrix opcodes (static count): "
                         + (", ".join(f"{op} {n}" for op, n in memory) or "none"))
            lines.append("SASS other opcodes (static count): "
                         + ", ".join(f"{op} {n}" for op, n in other[:max_sass_opcodes]))
    energy = measurement.get("energy") or {}
    if energy.get("j_per_call") is not None:
        lines.append(f"energy: {_number(energy['j_per_call'])} J per call at {_number(energy.get('mean_w'))} W")
    profiler = measurement.get("profiler") or {}
    for group, names in FOR_PROMPT:
        present = [f"{name} = {_number(profiler[name])}" for name in names if name in profiler]
        if present:
            lines.append(f"ncu {group}: " + "; ".join(present))
    stalls = sorted(((k, v) for k, v in profiler.items()
                     if k.startswith("smsp__average_warps_issue_stalled_") and v), key=lambda kv: -kv[1])[:5]
    if stalls:
        lines.append("ncu top stall reasons (cycles per issued instruction): "
                     + "; ".join(f"{k} = {_number(v)}" for k, v in stalls))
    return "\n".join(lines)


_MEMORY_AND_MATRIX = {"LDG", "STG", "LDS", "STS", "LDL", "STL", "LD", "ST", "LDSM", "LDGSTS", "LDGDEPBAR", "UBLKCP",
                      "UTMALDG", "UTMASTG", "ATOM", "ATOMG", "ATOMS", "RED", "REDG", "HMMA", "HGMMA", "IMMA", "IGMMA",
                      "DMMA", "QGMMA", "BMMA", "BGMMA"}


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
