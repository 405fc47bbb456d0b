"""Occupancy: what limits resident warps (registers, shared memory, block size), and how the grid
fills the GPU (waves and the tail of a partial last wave)."""

from __future__ import annotations

import math

from . import wording
from .note import ExpertNote
from .profile import KernelProfile
from .roofline import Bound

NAME = "occupancy"

# Theoretical occupancy under 50% of the SM's warp slots leaves a latency-bound kernel too few warps
# to hide memory latency; 25% or less is critical when no unit is even 40% busy. Applied to
# latency-bound kernels only: compute- and memory-bound kernels often run best at low occupancy
# (V. Volkov, "Better Performance at Lower Occupancy", GTC 2010). Nsight Compute's
# TheoreticalOccupancy rule flags anything under 80%.
LOW_OCCUPANCY_PCT = 50.0
VERY_LOW_OCCUPANCY_PCT = 25.0
IDLE_UNITS_PCT = 40.0
# Achieved occupancy more than 10 points under theoretical: warps finish unevenly or the grid
# leaves SMs idle (Nsight Compute 2025.3, AchievedOccupancy.py: occupancy_difference_threshold = 10).
ACHIEVED_GAP_POINTS = 10.0
# The partial last wave idles this share of the SMs' block slots over the run or more (assuming
# equal block times): Nsight Compute's LaunchStatistics rule reports a tail effect at 20%.
TAIL_IDLE_SHARE = 0.2
# A grid under half a wave leaves most SMs without work.
UNDERFILLED_WAVES = 0.5

_LIMITS = {
    "registers": "launch__occupancy_limit_registers",
    "shared memory": "launch__occupancy_limit_shared_mem",
    "warps per block": "launch__occupancy_limit_warps",
    "blocks per SM": "launch__occupancy_limit_blocks",
    "barriers": "launch__occupancy_limit_barriers",
}


def examine(profile: KernelProfile, bound: Bound) -> list[ExpertNote]:
    notes = []
    if bound.kind == "latency":
        low = _low_occupancy(profile, bound)
        if low:
            notes.append(low)
        else:
            gap = _achieved_gap(profile)
            if gap:
                notes.append(gap)
    waves = _waves(profile)
    if waves:
        notes.append(waves)
    return notes


def limiter(profile: KernelProfile) -> tuple[list[str], dict[str, float]]:
    """The resources that allow the fewest blocks per SM, and every limit found."""
    limits = {name: profile.metrics[metric] for name, metric in _LIMITS.items() if metric in profile.metrics}
    if not limits:
        return [], {}
    fewest = min(limits.values())
    return [name for name, value in limits.items() if value == fewest], limits


def _low_occupancy(profile: KernelProfile, bound: Bound) -> ExpertNote | None:
    theoretical = profile.metric("sm__maximum_warps_per_active_cycle_pct")
    if theoretical is None or theoretical >= LOW_OCCUPANCY_PCT:
        return None
    achieved = profile.metric("sm__warps_active.avg.pct_of_peak_sustained_active")
    names, limits = limiter(profile)
    busiest = max(v for v in (bound.sm_pct, bound.memory_pct, 0.0) if v is not None)
    severity = "critical" if theoretical <= VERY_LOW_OCCUPANCY_PCT and busiest < IDLE_UNITS_PCT else "warning"
    regs = profile.metric("launch__registers_per_thread")
    block = profile.metric("launch__block_size")
    smem = sum(v for v in (profile.metric("launch__shared_mem_per_block_static"),
                           profile.metric("launch__shared_mem_per_block_dynamic")) if v)
    evidence = {"sm__maximum_warps_per_active_cycle_pct": theoretical,
                "sm__warps_active.avg.pct_of_peak_sustained_active": achieved,
                **{_LIMITS[n]: v for n, v in limits.items()},
                "launch__registers_per_thread": regs, "launch__block_size": block, "shared_bytes_per_block": smem,
                "low_occupancy_pct": LOW_OCCUPANCY_PCT, "very_low_occupancy_pct": VERY_LOW_OCCUPANCY_PCT}
    blocks = int(min(limits.values())) if limits else None
    limited_by = " and ".join(names) or "an unknown limit"
    finding = (f"Theoretical occupancy is {wording.percent(theoretical)} of the SM's warp slots, limited by "
               f"{limited_by} to {blocks} block(s) of {block:.0f} threads per SM" if blocks and block else
               f"Theoretical occupancy is {wording.percent(theoretical)}, limited by {limited_by}")
    finding += ", too few warps to hide latency in a latency-bound kernel."
    if "registers" in names and regs:
        advice = (f"Bring registers under {_registers_for(profile, blocks):.0f} per thread so one more block fits "
                  f"(now {regs:.0f}): __launch_bounds__(threads, minBlocks) or a smaller per-thread tile; check "
                  "that spills stay small.")
    elif "shared memory" in names:
        advice = (f"Use less shared memory per block (now {wording.size(smem)}): smaller tiles, or fewer stages, "
                  "so more blocks fit in the SM's 228 KB.")
    elif "blocks per SM" in names or "warps per block" in names:
        advice = ("Use blocks of 128-256 threads: the SM holds at most 32 blocks, so small blocks leave warp slots "
                  "empty.")
    else:
        advice = "Relax the limiting resource so that more blocks are resident per SM."
    return ExpertNote(NAME, severity, finding, evidence, advice)


def _registers_for(profile: KernelProfile, blocks: int | None) -> float:
    block = profile.metric("launch__block_size") or 256
    per_sm = profile.metric("device__attribute_max_registers_per_multiprocessor") or 65536
    target = (blocks or 1) + 1
    # Registers are allocated per warp in units of 256 (8 per thread).
    return math.floor(per_sm / (target * math.ceil(block / 32)) / 32 / 8) * 8


def _achieved_gap(profile: KernelProfile) -> ExpertNote | None:
    theoretical = profile.metric("sm__maximum_warps_per_active_cycle_pct")
    achieved = profile.metric("sm__warps_active.avg.pct_of_peak_sustained_active")
    if theoretical is None or achieved is None or theoretical - achieved <= ACHIEVED_GAP_POINTS:
        return None
    evidence = {"sm__maximum_warps_per_active_cycle_pct": theoretical,
                "sm__warps_active.avg.pct_of_peak_sustained_active": achieved,
                "achieved_gap_points": ACHIEVED_GAP_POINTS}
    finding = (f"Achieved occupancy is {wording.percent(achieved)} against a theoretical "
               f"{wording.percent(theoretical)}: warps finish unevenly or SMs wait for work.")
    advice = ("Balance the work per block (equal tiles, no long-running stragglers) and keep enough blocks "
              "queued that every SM refills its slots as blocks retire.")
    return ExpertNote(NAME, "info", finding, evidence, advice)


def _waves(profile: KernelProfile) -> ExpertNote | None:
    waves = profile.metric("launch__waves_per_multiprocessor")
    grid = profile.metric("launch__grid_size")
    sms = profile.metric("launch__sm_count", "device__attribute_multiprocessor_count")
    if waves is None or waves <= 0:
        return None
    evidence = {"launch__waves_per_multiprocessor": waves, "launch__grid_size": grid, "launch__sm_count": sms}
    if waves < UNDERFILLED_WAVES:
        evidence["underfilled_waves"] = UNDERFILLED_WAVES
        finding = (f"The grid of {grid:.0f} blocks fills {wording.percent(100 * waves)} of one wave of the "
                   f"GPU's block slots: most SMs have nothing to run." if grid else
                   f"The grid fills {wording.percent(100 * waves)} of one wave: most SMs are idle.")
        advice = ("Split the work into more blocks (at least two per SM) or give each thread less work, so every "
                  "SM has blocks to run.")
        return ExpertNote(NAME, "warning", finding, evidence, advice)
    full = math.ceil(waves - 1e-9)
    idle = (full - waves) / full
    if waves < 1 or idle < TAIL_IDLE_SHARE:
        return None
    evidence.update(tail_idle_share=wording.rounded(idle), tail_idle_share_threshold=TAIL_IDLE_SHARE)
    finding = (f"The grid is {waves:.3g} waves of blocks: the last, partial wave leaves about "
               f"{wording.percent(100 * (full - waves))} of the block slots idle, up to "
               f"{wording.percent(100 * idle)} of the run.")
    advice = ("Size the grid to a whole number of waves (blocks per SM x SMs), or use a persistent grid of exactly "
              "one wave that loops over the work.")
    return ExpertNote(NAME, "warning", finding, evidence, advice)
