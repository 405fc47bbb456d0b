"""Register spills and local memory: ptxas facts, LDL/STL in the SASS, and the local traffic measured."""

from __future__ import annotations

from . import wording
from .note import ExpertNote
from .profile import KernelProfile
from .roofline import Bound

NAME = "spills"

# Local-memory sectors as a share of all global plus local sectors through L1. Half or more makes
# local memory the kernel's main traffic (critical); any spill or local array is a warning, since
# local memory lives in DRAM behind the caches (CUDA C++ Best Practices Guide, "Local Memory").
LOCAL_SHARE_CRITICAL = 0.5


def examine(profile: KernelProfile, bound: Bound) -> list[ExpertNote]:
    c = profile.compiler
    spill_stores = int(c.get("spill_stores") or 0)
    spill_loads = int(c.get("spill_loads") or 0)
    stack = int(c.get("stack_bytes") or 0)
    local_sass = profile.sass_count("LDL", "STL")
    local = [profile.metric("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum"),
             profile.metric("l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum")]
    local_sectors = sum(v for v in local if v) if any(v is not None for v in local) else None
    if not (spill_stores or spill_loads) and not (stack and (local_sass or local_sectors)):
        return []
    glob = sum(v for v in (profile.metric("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
                           profile.metric("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum")) if v)
    share = local_sectors / (local_sectors + glob) if local_sectors is not None and local_sectors + glob else None
    evidence = {"registers": c.get("registers"), "spill_stores": spill_stores, "spill_loads": spill_loads,
                "stack_bytes": stack, "sass_local_accesses": {o: n for o, n in profile.sass.items()
                                                               if o.split(".")[0] in ("LDL", "STL")},
                "local_share_critical": LOCAL_SHARE_CRITICAL}
    if local_sectors is not None:
        evidence["local_sectors"] = local_sectors
        evidence["local_share_of_l1_sectors"] = wording.rounded(share) if share is not None else None
    spilled = profile.metric("sass__inst_executed_register_spilling")
    if spilled is not None:
        evidence["sass__inst_executed_register_spilling"] = spilled
    severity = "critical" if share is not None and share >= LOCAL_SHARE_CRITICAL else "warning"
    traffic = (f"; local memory is {wording.percent(100 * share)} of the L1 traffic" if share is not None else "")
    if spill_stores or spill_loads:
        finding = (f"ptxas spills registers at {c.get('registers')} registers per thread ({spill_stores} bytes "
                   f"stored, {spill_loads} bytes loaded per thread){traffic}.")
        advice = ("Lower register pressure (a smaller per-thread tile, fewer live values across the loop) or allow "
                  "more registers (__launch_bounds__ with a smaller minBlocks); keep the capped version only if it "
                  "is measured faster, since the cap may have bought occupancy.")
    else:
        finding = (f"A {stack}-byte stack frame lives in local memory ({local_sass} LDL/STL in the SASS): an array "
                   f"indexed at run time cannot stay in registers{traffic}.")
        advice = ("Index the array only with compile-time constants (fully unrolled loops) so it stays in registers, "
                  "or put it in shared memory when the index depends on data.")
    return [ExpertNote(NAME, severity, finding, evidence, advice)]
