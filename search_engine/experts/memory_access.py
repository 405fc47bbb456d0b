"""Global memory access: coalescing (bytes used per 32-byte sector) and access width per thread."""

from __future__ import annotations

from . import wording
from .note import ExpertNote
from .profile import KernelProfile
from .roofline import Bound

NAME = "memory_access"

# Share of each 32-byte sector a warp's access actually uses. Under 60% the access moves 1.7x or
# more the sectors it needs; under 30%, 3.3x or more. Nsight Compute's MemoryCacheAccessPattern
# rule reports any shortfall from 32 bytes per sector; these cut-offs keep the notes to shortfalls
# that cost bandwidth.
SECTOR_USE_WARN_PCT = 60.0
SECTOR_USE_CRITICAL_PCT = 30.0
# The wasted sectors of one direction (loads or stores) as a share of all global sectors: under
# 5% the pattern costs too little to mention, 10% makes it a warning, 25% critical.
WASTE_SHARE_INFO = 0.05
WASTE_SHARE_WARN = 0.10
WASTE_SHARE_CRITICAL = 0.25
# Bytes per thread per global access: under 8 (32-bit or narrower) a memory- or latency-bound kernel
# needs 2-4x the instructions of 16-byte vector accesses for the same bytes (NVIDIA, "CUDA Pro Tip:
# Increase Performance with Vectorized Memory Access"); under 4 (sub-word accesses) 4-16x.
NARROW_BYTES = 8.0
SUBWORD_BYTES = 4.0
# Only a direction that carries at least this share of the global bytes is worth widening.
WIDTH_TRAFFIC_SHARE = 0.2

_OPS = {"ld": ("loads", "LDG"), "st": ("stores", "STG")}


def examine(profile: KernelProfile, bound: Bound) -> list[ExpertNote]:
    notes = []
    coalescing = _coalescing(profile)
    if coalescing:
        notes.append(coalescing)
    if bound.kind in ("memory", "latency"):
        width = _width(profile)
        if width:
            notes.append(width)
    return notes


def _sectors(profile: KernelProfile, op: str) -> float | None:
    return profile.metric(f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum")


def _coalescing(profile: KernelProfile) -> ExpertNote | None:
    total = sum(s for s in (_sectors(profile, "ld"), _sectors(profile, "st")) if s)
    worst = None
    for op in ("ld", "st"):
        used = profile.metric(f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.pct")
        sectors = _sectors(profile, op)
        if used is None or not sectors or used <= 0 or not total:
            continue
        waste = sectors * (1 - used / 100) / total
        if used < SECTOR_USE_WARN_PCT and waste >= WASTE_SHARE_INFO:
            if worst is None or waste > worst[2]:
                worst = (op, used, waste, sectors)
    if worst is None:
        return None
    op, used, waste, sectors = worst
    if used < SECTOR_USE_CRITICAL_PCT and waste >= WASTE_SHARE_CRITICAL:
        severity = "critical"
    elif waste >= WASTE_SHARE_WARN:
        severity = "warning"
    else:
        severity = "info"
    requests = profile.metric(f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum")
    evidence = {
        f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.pct": used,
        f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum": sectors,
        "wasted_share_of_global_sectors": wording.rounded(waste),
        "sector_use_warn_pct": SECTOR_USE_WARN_PCT, "sector_use_critical_pct": SECTOR_USE_CRITICAL_PCT,
        "waste_share_warn": WASTE_SHARE_WARN, "waste_share_critical": WASTE_SHARE_CRITICAL,
    }
    if requests:
        evidence[f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum"] = requests
        evidence["sectors_per_request"] = wording.rounded(sectors / requests)
    what = _OPS[op][0]
    finding = (f"Global {what} use {wording.percent(used)} of each 32-byte sector they move "
               f"({used * 0.32:.3g} of 32 bytes), so {wording.percent(100 * waste)} of all global sectors carry "
               f"no useful data.")
    advice = (f"Map threadIdx.x to the contiguous dimension of the array the {what} touch, so a warp covers "
              "consecutive addresses; where the other side of the kernel needs the transposed order, stage a "
              "tile through shared memory and do both global accesses along rows.")
    return ExpertNote(NAME, severity, finding, evidence, advice)


def _width(profile: KernelProfile) -> ExpertNote | None:
    """Bytes per thread per global access. The SASS opcodes give each instruction's width; the
    measured bytes per instruction (sectors x bytes used per sector / instructions / 32) say which
    instructions ran, e.g. a vector path over a scalar tail. A direction is narrow when the measured
    width (the SASS width without a profile) is under NARROW_BYTES and its SASS has narrow accesses;
    broadcast loads (a warp reading one address) measure narrower than they are, hence both."""
    per_op: dict[str, dict] = {}
    for op, (_, opcode) in _OPS.items():
        widths = profile.sass_access_widths(opcode)
        static = sum(w * c for w, c in widths.items()) / sum(widths.values()) if widths else None
        sectors = _sectors(profile, op)
        used = profile.metric(f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.pct")
        inst = profile.metric(f"smsp__sass_inst_executed_op_global_{op}.sum",
                              "sass__inst_executed_global_loads" if op == "ld" else "sass__inst_executed_global_stores")
        measured = moved = None
        if sectors and used and inst:
            moved = sectors * 32 * used / 100
            measured = moved / inst / 32
        if static is None and measured is None:
            continue
        per_op[op] = {"static": static, "measured": measured, "moved": moved,
                      "narrowest": min(widths) if widths else None}
    total = sum(v["moved"] or 0.0 for v in per_op.values())
    narrow = []
    for op, v in per_op.items():
        width = v["measured"] if v["measured"] is not None else v["static"]
        has_narrow_sass = v["narrowest"] is None or v["narrowest"] < NARROW_BYTES
        share = v["moved"] / total if total and v["moved"] is not None else 1.0
        if width < NARROW_BYTES and has_narrow_sass and share >= WIDTH_TRAFFIC_SHARE:
            narrow.append(op)
    if not narrow:
        return None
    # The width a thread really uses: the measured one, but never under the SASS width of the
    # narrowest instruction (a broadcast load measures narrower than it is), and the SASS width
    # alone without a profile.
    shown = min(max(v for v in (per_op[op]["measured"], per_op[op]["narrowest"]) if v is not None) for op in narrow)
    severity = "critical" if shown < SUBWORD_BYTES else "warning"
    opcodes = {o: n for o, n in profile.sass.items() if o.split(".")[0] in ("LDG", "STG")}
    evidence = {}
    for op, v in per_op.items():
        if v["measured"] is not None:
            evidence[f"measured_bytes_per_thread_{op}"] = wording.rounded(v["measured"])
        if v["static"] is not None:
            evidence[f"sass_bytes_per_thread_{op}"] = wording.rounded(v["static"])
    evidence.update(sass_global_accesses=opcodes, narrow_bytes=NARROW_BYTES, subword_bytes=SUBWORD_BYTES)
    what = " and ".join(_OPS[o][0] for o in narrow)
    finding = (f"Global {what} are {shown:.3g} byte{'' if shown == 1 else 's'} per thread per instruction "
               f"({', '.join(sorted(opcodes)) or 'no global accesses in SASS'}), not 16.")
    advice = ("Load and store 16 bytes per thread (float4/int4 through reinterpret_cast on 16-byte-aligned "
              "addresses, a scalar loop for the tail) so each instruction moves 4x the bytes and more bytes "
              "are in flight per warp.")
    return ExpertNote(NAME, severity, finding, evidence, advice)
