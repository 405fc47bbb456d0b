"""Warps: divergence (lanes idle in executed instructions) and what stalled warps wait for."""

from __future__ import annotations

from . import wording
from .note import ExpertNote
from .profile import KernelProfile
from .roofline import Bound

NAME = "warps"

# Average active threads per executed warp instruction. Nsight Compute flags fewer than 24 of 32
# (2025.3, rule ThreadDivergence.py: threshold = 24); 40% or more of the lanes idle (under 19.2)
# means the divergent paths run one after another for most of the kernel (critical).
DIVERGENT_THREADS = 24.0
IDLE_LANES_CRITICAL = 0.4
# A stall reason that is more than 30% of the warp cycles per issued instruction, while the
# schedulers issue less than 80% of the time, names what the warps wait for; Nsight Compute rates
# it higher when an instruction waits more than 10 cycles on average (2025.3, rule CPIStall.py:
# ratio_threshold = 0.3, issue_active_threshold = 0.8, warp_cycles_per_issue > 10).
STALL_SHARE = 0.3
ISSUE_ACTIVE_PCT = 80.0
CYCLES_PER_ISSUE = 10.0

# What each stall reason means and what removes it (Nsight Compute Kernel Profiling Guide,
# "Warp Stall Reasons").
STALL_ADVICE = {
    "long_scoreboard": ("wait for global or local memory (L1TEX) results",
                        "issue several independent loads per thread before their first use (unroll, prefetch the "
                        "next tile into registers or shared memory) or keep more warps resident"),
    "short_scoreboard": ("wait for shared-memory or special-function (MUFU) results",
                         "remove shared-memory bank conflicts, read shared memory 16 bytes at a time, and "
                         "interleave independent arithmetic between the accesses"),
    "mio_throttle": ("wait for the memory-input/output queue (shared memory, atomics, special math) to drain",
                     "issue fewer, wider shared-memory instructions and privatise atomics per warp or block"),
    "lg_throttle": ("wait for the local/global memory queue, which is full",
                    "use 16-byte vector accesses so fewer memory instructions are issued, and remove local-memory "
                    "traffic"),
    "barrier": ("wait at __syncthreads for the slowest warp of the block",
                "balance the work between warps, use fewer barriers per tile (double-buffer the shared tiles) or "
                "smaller blocks"),
    "membar": ("wait on memory fences", "drop fences that are not needed, or use weaker (block-scope) ones"),
    "drain": ("wait at exit for their stores to drain to memory",
              "coalesce the stores (see the memory-access note) so fewer sectors are written"),
    "wait": ("wait on fixed-latency dependencies between instructions",
             "raise instruction-level parallelism: independent accumulators, unrolled loops"),
    "math_pipe_throttle": ("wait for a saturated math pipe",
                           "move work to an idle pipe (tensor cores, FP16x2) or cut instructions on the busy one"),
    "not_selected": ("are ready but another warp was picked", "cut the instruction count: the schedulers are busy"),
    "no_instruction": ("wait for instructions (instruction-cache misses or branch targets)",
                       "shrink the unrolled code or make branches more uniform"),
    "branch_resolving": ("wait for branch targets to resolve",
                         "make branches warp-uniform and replace short branches with selects"),
    "dispatch_stall": ("wait for the dispatcher", "cut register-bank conflicts with a different instruction mix"),
    "imc_miss": ("wait on constant-cache misses", "keep constants uniform across the warp or move them to registers"),
    "tex_throttle": ("wait for the texture pipe", "issue fewer texture or surface instructions"),
    "sleeping": ("are sleeping (nanosleep or a yield)", "avoid spinning on flags inside the kernel"),
    "gmma": ("wait on warpgroup matrix (wgmma) instructions", "overlap the wgmma with loads of the next stage"),
}


def examine(profile: KernelProfile, bound: Bound) -> list[ExpertNote]:
    notes = []
    if bound.kind in ("compute", "latency"):
        divergence = _divergence(profile)
        if divergence:
            notes.append(divergence)
    if bound.kind == "latency":
        stall = _stall(profile)
        if stall:
            notes.append(stall)
    return notes


def _divergence(profile: KernelProfile) -> ExpertNote | None:
    threads = profile.metric("smsp__thread_inst_executed_per_inst_executed.ratio")
    if threads is None or threads >= DIVERGENT_THREADS:
        return None
    idle = 1 - threads / 32
    evidence = {"smsp__thread_inst_executed_per_inst_executed.ratio": threads,
                "smsp__thread_inst_executed_pred_on_per_inst_executed.ratio":
                    profile.metric("smsp__thread_inst_executed_pred_on_per_inst_executed.ratio"),
                "divergent_threads": DIVERGENT_THREADS, "idle_lanes_critical": IDLE_LANES_CRITICAL}
    divergent = profile.metric("smsp__sass_branch_targets_threads_divergent.sum")
    if divergent is not None:
        evidence["smsp__sass_branch_targets_threads_divergent.sum"] = divergent
        evidence["smsp__sass_branch_targets.sum"] = profile.metric("smsp__sass_branch_targets.sum")
    severity = "critical" if idle >= IDLE_LANES_CRITICAL else "warning"
    finding = (f"Warps execute with {threads:.3g} of 32 lanes active on average: {wording.percent(100 * idle)} of "
               f"the issue slots do no work because the lanes of a warp take different paths.")
    advice = ("Make the branch condition uniform within each warp (decide per warp, threadIdx.x / 32, or reorder "
              "the work so neighbouring lanes take the same path), or compute short branches without branching.")
    return ExpertNote(NAME, severity, finding, evidence, advice)


# Memory-queue waits that contended global atomics cause (Nsight Compute Kernel Profiling Guide).
ATOMIC_WAITS = ("long_scoreboard", "lg_throttle", "mio_throttle")


def _stall(profile: KernelProfile) -> ExpertNote | None:
    stalls = profile.stall_cycles()
    cpi = profile.metric("smsp__average_warp_latency_per_inst_issued.ratio")
    issue = profile.metric("smsp__issue_active.avg.pct_of_peak_sustained_active")
    if not stalls or not cpi or (issue is not None and issue >= ISSUE_ACTIVE_PCT):
        return None
    reason, cycles = max(((k, v) for k, v in stalls.items() if k != "selected"), key=lambda kv: kv[1],
                         default=(None, 0.0))
    if reason is None:
        return None
    atomics = _atomic_heavy(profile)
    atomic_wait = sum(stalls.get(k, 0.0) for k in ATOMIC_WAITS)
    if atomics and atomic_wait / cpi > STALL_SHARE:
        meaning = "wait on the memory queues (" + ", ".join(
            f"{k.replace('_', ' ')} {stalls.get(k, 0.0):.3g}" for k in ATOMIC_WAITS) + ") behind global atomics"
        remedy = ("accumulate into a private copy per warp or block in shared memory and add it to global memory "
                  "once, instead of contending global atomics")
        cycles = atomic_wait
    elif cycles / cpi > STALL_SHARE:
        meaning, remedy = STALL_ADVICE.get(reason, (f"stall on {reason.replace('_', ' ')}", "remove the cause"))
    else:
        return None
    severity = "warning" if cpi > CYCLES_PER_ISSUE else "info"
    top = sorted(stalls.items(), key=lambda kv: -kv[1])[:4]
    evidence = {"smsp__average_warp_latency_per_inst_issued.ratio": cpi,
                "smsp__issue_active.avg.pct_of_peak_sustained_active": issue,
                **{f"smsp__average_warps_issue_stalled_{k}_per_issue_active.ratio": v for k, v in top},
                "stall_share": wording.rounded(cycles / cpi), "stall_share_threshold": STALL_SHARE,
                "issue_active_pct_threshold": ISSUE_ACTIVE_PCT, "cycles_per_issue_threshold": CYCLES_PER_ISSUE,
                "global_atomics_heavy": atomics}
    finding = (f"Each instruction waits {cpi:.3g} cycles on average, {cycles:.3g} of them "
               f"({wording.percent(100 * cycles / cpi)}) because warps {meaning}.")
    advice = remedy[0].upper() + remedy[1:] + "."
    return ExpertNote(NAME, severity, finding, evidence, advice)


# Global atomics are a large part of the kernel's global memory instructions: measured when the
# profile counts them, else from the SASS, where an atomic site per load site (and at least two)
# marks a loop that updates global memory atomically rather than a final per-block update.
ATOMIC_SHARE = 0.25


def _atomic_heavy(profile: KernelProfile) -> bool:
    red = profile.metric("smsp__sass_inst_executed_op_global_red.sum")
    atom = profile.metric("smsp__sass_inst_executed_op_global_atom.sum")
    if red is not None and atom is not None:
        loads = profile.metric("smsp__sass_inst_executed_op_global_ld.sum", "sass__inst_executed_global_loads") or 0
        stores = profile.metric("smsp__sass_inst_executed_op_global_st.sum", "sass__inst_executed_global_stores") or 0
        total = red + atom + loads + stores
        return total > 0 and (red + atom) / total >= ATOMIC_SHARE
    sites = profile.sass_count("ATOMG", "REDG")
    return sites >= 2 and sites >= profile.sass_count("LDG")
