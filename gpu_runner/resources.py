"""Per-block resources a compiled kernel needs for one launch, against the H100's and H200's limits.

The spec's launch checks (spec.check_launch_limits) read only the launch: threads, grid and dynamic
shared memory. What a block needs besides comes from ptxas (CompilerFacts, per kernel): its registers
per thread and its static shared memory. A launch whose block needs more than a multiprocessor can give
one block fails at every launch ("too many resources requested for launch"), so it is refused before
anything runs: at upload for the reference's launch plan, before a measurement for a candidate's.

Pure functions of the facts and the resolved launch; nothing here compiles, nor imports Django.

The limits, compute capability 9.0 (H100 and H200; CUDA C++ Programming Guide, "Compute Capabilities"):

* 65,536 32-bit registers per block. Registers are allocated per warp, in units of 256 registers, so a
  warp of a kernel of R registers a thread holds ceil(R * 32 / 256) * 256 of them, and a block of T
  threads holds that times ceil(T / 32) warps: 1,024 threads fit at 64 registers a thread, not at 65
  (65 * 32 = 2,080 rounds up to 2,304 a warp, 73,728 for 32 warps).
* 232,448 bytes (227 KiB) of shared memory per block, static and dynamic together: the opt-in limit
  (cudaDevAttrMaxSharedMemoryPerBlockOptin; cudaFuncSetAttribute's MaxDynamicSharedMemorySize may not
  take the sum past it). The 1 KiB CUDA reserves for each block for system use is not added to the
  block's own: it is the difference between the 228 KiB a multiprocessor has and the 227 KiB a block
  may use ("the 1 KB of shared memory not made available to a thread block is reserved for system
  use"), so it is already outside the 227 KiB.

Both were measured on an H100 (driver 580): a kernel of 65 registers reports cudaFuncAttributes
maxThreadsPerBlock 896 and is refused at 897 and 992 threads ("too many resources requested for
launch"; 992 * 65 = 64,480 would fit without the rounding); 40,960 static bytes plus 191,488 dynamic
(232,448) launch, 4 bytes more do not (cudaFuncSetAttribute: invalid argument).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from .spec import GPU_LIMITS_NAME, MAX_DYNAMIC_SHARED_BYTES, KernelLaunch, SizeCase, describe_bytes

MAX_REGISTERS_PER_BLOCK = 65536
REGISTER_ALLOCATION_UNIT = 256      # registers, allocated per warp
WARP_SIZE = 32
MAX_SHARED_BYTES_PER_BLOCK = MAX_DYNAMIC_SHARED_BYTES   # static + dynamic, 227 KiB


@dataclass(frozen=True)
class BrokenLimit:
    """A per-block limit a launch breaks: `part` is the launch setting to change ("block" for
    registers, "shared" for shared memory), `sentence` says which limit and by how much."""
    part: str
    sentence: str

    def __str__(self) -> str:
        return self.sentence


def registers_per_block(registers_per_thread: int, threads: int) -> int:
    """Registers a block of `threads` holds: per warp, rounded up to the allocation unit of 256."""
    warps = -(-threads // WARP_SIZE)
    per_warp = -(-registers_per_thread * WARP_SIZE // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    return warps * per_warp


def per_block_limit(*, registers: int | None, static_shared: int | None, threads: int, dynamic_shared: int,
                    kernel: str = "the kernel", case: str | None = None) -> BrokenLimit | None:
    """The per-block limit a launch of `threads` threads and `dynamic_shared` bytes of dynamic shared
    memory breaks for a kernel of `registers` registers a thread and `static_shared` bytes of static
    shared memory (ptxas's facts; None where unknown), or None when the block fits."""
    where = f" for size case '{case}'" if case is not None else ""
    name = f"kernel '{kernel}'" if kernel != "the kernel" else kernel
    if registers and threads > 0:
        needed = registers_per_block(registers, threads)
        if needed > MAX_REGISTERS_PER_BLOCK:
            warps = -(-threads // WARP_SIZE)
            per_warp = needed // warps
            return BrokenLimit("block", (
                f"gives {threads} threads per block{where}, and {name} uses {registers} registers per thread "
                f"(ptxas): registers are allocated per warp in units of {REGISTER_ALLOCATION_UNIT}, so its "
                f"{warps} warps hold {per_warp} registers each, {needed} per block; the limit is "
                f"{MAX_REGISTERS_PER_BLOCK} registers per block on {GPU_LIMITS_NAME} (use fewer threads per block, "
                "or fewer registers: __launch_bounds__ or -maxrregcount)"))
    static = static_shared or 0
    total = static + max(0, dynamic_shared)
    if total > MAX_SHARED_BYTES_PER_BLOCK:
        return BrokenLimit("shared", (
            f"asks for {describe_bytes(dynamic_shared)} of dynamic shared memory{where}, and {name} has "
            f"{describe_bytes(static)} of static shared memory (ptxas): {describe_bytes(total)} per block in "
            f"all; the limit is {describe_bytes(MAX_SHARED_BYTES_PER_BLOCK)} of shared memory per block, static "
            f"and dynamic together, on {GPU_LIMITS_NAME}"))
    return None


def kernel_facts(facts: Any, kernel: str) -> Mapping[str, int] | None:
    """ptxas's facts of one kernel ({"registers": ..., "shared_bytes": ...}) from a CompilerFacts or
    its dict form, found by its name (or, for a kernel C++ mangled, the name's mangled form), or None."""
    kernels = facts.get("kernels") if isinstance(facts, Mapping) else getattr(facts, "kernels", None)
    if not kernels:
        return None
    if kernel in kernels:
        return kernels[kernel]
    mangled = [v for k, v in kernels.items() if k.startswith(f"_Z{len(kernel)}{kernel}")]
    if not mangled:
        return None
    return {"registers": max(v.get("registers", 0) for v in mangled),
            "shared_bytes": max(v.get("shared_bytes", 0) for v in mangled)}


def launch_broken_limit(facts: Any, step: KernelLaunch, block: Sequence[int], shared: int,
                        case: str | None = None) -> BrokenLimit | None:
    """per_block_limit for one resolved launch step (`block` its three dimensions, `shared` its dynamic
    shared bytes) of a kernel whose ptxas facts are in `facts`; None where the facts lack the kernel."""
    found = kernel_facts(facts, step.kernel)
    if found is None:
        return None
    threads = 1
    for extent in block:
        threads *= int(extent)
    return per_block_limit(registers=found.get("registers"), static_shared=found.get("shared_bytes"),
                           threads=threads, dynamic_shared=int(shared), kernel=step.kernel, case=case)


def plan_broken_limit(facts: Any, launch: Iterable[Any], cases: Iterable[SizeCase],
                      extra: Mapping[str, Any] | None = None) -> tuple[int, BrokenLimit] | None:
    """The first (step index, broken limit) of a launch plan over every size case, or None. Steps that
    do not resolve are left to the spec's own checks, which name their mistake."""
    steps = list(launch)
    for case in cases:
        env = {**case.sizes, **(extra or {})}
        for index, step in enumerate(steps):
            if not isinstance(step, KernelLaunch):
                continue
            try:
                _, block, shared = step.resolve(env)
            except Exception:   # noqa: BLE001 - an expression the spec checks refuse on their own
                continue
            broken = launch_broken_limit(facts, step, block, shared, case.name)
            if broken is not None:
                return index, broken
    return None
