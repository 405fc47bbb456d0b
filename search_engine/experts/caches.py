"""Caches: DRAM bytes against the bytes the problem needs, with the L1 and L2 hit rates."""

from __future__ import annotations

from . import wording
from .note import ExpertNote
from .profile import KernelProfile
from .roofline import Bound

NAME = "caches"

# DRAM traffic over the problem's ideal bytes (each input read once, each output written once).
# 1.5x or more while DRAM is busy (30% of peak or more) costs time directly (warning), 3x or more
# is critical; 10x or more is critical whatever the bound: the kernel re-reads its data from DRAM
# instead of reusing it on chip. METHOD.md: "more bytes moved than you counted" is the first cause
# to look for when a kernel is far from its ceilings.
EXCESS_WARN = 1.5
EXCESS_CRITICAL = 3.0
EXCESS_ALWAYS = 10.0
DRAM_BUSY_PCT = 30.0


def dram_bytes(profile: KernelProfile) -> float | None:
    read = profile.metric("dram__bytes_read.sum")
    write = profile.metric("dram__bytes_write.sum")
    if read is not None and write is not None:
        return read + write
    per_second = profile.metric("dram__bytes.sum.per_second")
    ns = profile.metric("gpu__time_duration.sum")
    if per_second is not None and ns:
        return per_second * ns * 1e-9
    return None


def examine(profile: KernelProfile, bound: Bound) -> list[ExpertNote]:
    moved = dram_bytes(profile)
    if moved is None or not profile.bytes:
        return []
    ratio = moved / profile.bytes
    dram_pct = bound.dram_pct or 0.0
    if ratio >= EXCESS_ALWAYS:
        severity = "critical"
    elif dram_pct >= DRAM_BUSY_PCT and ratio >= EXCESS_CRITICAL:
        severity = "critical"
    elif dram_pct >= DRAM_BUSY_PCT and ratio >= EXCESS_WARN:
        severity = "warning"
    else:
        return []
    l1 = profile.metric("l1tex__t_sector_hit_rate.pct")
    l2 = profile.metric("lts__t_sector_hit_rate.pct")
    local = sum(v for v in (profile.metric("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum"),
                            profile.metric("l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum")) if v)
    evidence = {"dram_bytes": wording.rounded(moved), "ideal_bytes": profile.bytes,
                "dram_over_ideal": wording.rounded(ratio), "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed":
                bound.dram_pct, "excess_warn": EXCESS_WARN, "excess_critical": EXCESS_CRITICAL,
                "excess_always": EXCESS_ALWAYS, "dram_busy_pct": DRAM_BUSY_PCT}
    hits = []
    if l1 is not None:
        evidence["l1tex__t_sector_hit_rate.pct"] = l1
        hits.append(f"L1 hit rate {wording.percent(l1)}")
    if l2 is not None:
        evidence["lts__t_sector_hit_rate.pct"] = l2
        hits.append(f"L2 hit rate {wording.percent(l2)}")
    finding = (f"DRAM moved {wording.size(moved)}, {ratio:.3g}x the {wording.size(profile.bytes)} the problem "
               f"needs" + (f" ({', '.join(hits)})" if hits else "") + ".")
    if local:
        global_sectors = sum(v for v in (profile.metric("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
                                         profile.metric("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum")) if v)
        evidence["local_sectors"] = local
        if local > global_sectors:
            advice = ("Most of the traffic is local memory (a spilled or dynamically indexed array): keep the array "
                      "in registers with compile-time indices, or move it to shared memory.")
            return [ExpertNote(NAME, severity, finding, evidence, advice)]
    advice = ("Reuse each loaded value on chip: have a block load a tile once into shared memory (or registers) and "
              "use it for all the outputs that need it, sizing tiles so the working set of the resident blocks "
              "stays in the L2.")
    return [ExpertNote(NAME, severity, finding, evidence, advice)]
