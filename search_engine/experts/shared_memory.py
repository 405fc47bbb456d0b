"""Shared-memory bank conflicts: extra wavefronts over the ones the accesses need."""

from __future__ import annotations

from . import wording
from .note import ExpertNote
from .profile import KernelProfile
from .roofline import Bound

NAME = "shared_memory"

# Conflict wavefronts as a share of all shared-memory wavefronts of loads or stores. Nsight Compute
# reports conflicts from 10% (2025.3, rule SharedMemoryConflicts.py: bank_conflicts_threshold = 10);
# 25% (1.33 wavefronts per access) is a warning, 50% (2-way or worse on average) critical when
# shared-memory waits (short scoreboard and MIO throttle stalls) are 15% or more of the warps'
# stall cycles, else a warning: the conflicts are real but not what the kernel waits on.
CONFLICT_SHARE_INFO = 0.10
CONFLICT_SHARE_WARN = 0.25
CONFLICT_SHARE_CRITICAL = 0.50
SHARED_STALL_SHARE = 0.15

_WHAT = {"ld": "loads", "st": "stores"}


def examine(profile: KernelProfile, bound: Bound) -> list[ExpertNote]:
    shares = {}
    for op in ("ld", "st"):
        conflicts = profile.metric(f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum")
        wavefronts = profile.metric(f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum")
        if conflicts is not None and wavefronts:
            shares[op] = (conflicts / wavefronts, conflicts, wavefronts)
    if not shares:
        return []
    op, (share, conflicts, wavefronts) = max(shares.items(), key=lambda kv: kv[1][0])
    if share < CONFLICT_SHARE_INFO:
        return []
    stalls = profile.stall_cycles()
    total = sum(v for k, v in stalls.items() if k != "selected")
    shared_wait = (stalls.get("short_scoreboard", 0.0) + stalls.get("mio_throttle", 0.0)) / total if total else None
    if share >= CONFLICT_SHARE_CRITICAL and (shared_wait is None or shared_wait >= SHARED_STALL_SHARE):
        severity = "critical"
    elif share >= CONFLICT_SHARE_WARN:
        severity = "warning"
    else:
        severity = "info"
    ways = wavefronts / (wavefronts - conflicts) if wavefronts > conflicts else float("inf")
    evidence = {}
    for o, (s, c, w) in shares.items():
        evidence[f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{o}.sum"] = c
        evidence[f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{o}.sum"] = w
        evidence[f"conflict_share_{o}"] = wording.rounded(s)
    evidence.update(average_ways=wording.rounded(ways), shared_stall_share=(
        wording.rounded(shared_wait) if shared_wait is not None else None),
        conflict_share_info=CONFLICT_SHARE_INFO, conflict_share_warn=CONFLICT_SHARE_WARN,
        conflict_share_critical=CONFLICT_SHARE_CRITICAL, shared_stall_share_threshold=SHARED_STALL_SHARE)
    finding = (f"Shared-memory {_WHAT[op]} conflict on banks: {wording.percent(100 * share)} of their "
               f"{wording.count(wavefronts)} wavefronts are replays, {ways:.3g}-way on average.")
    advice = ("Give the 32 threads of a warp 32 different banks: pad each row of the shared array by one element "
              "(tile[32][33]) or XOR-swizzle the column index with the row, and for 8- or 16-byte accesses keep "
              "each group of 8 or 4 consecutive threads on distinct banks.")
    return [ExpertNote(NAME, severity, finding, evidence, advice)]
