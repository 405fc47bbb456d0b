"""What counts as correct: fresh seeded inputs, poisoned outputs, every element written, tolerance
per dtype, several input sets on every size case. Decisions about cheating live in guards.py."""
from __future__ import annotations

import time

from .backends.base import Device, DeviceError
from .dtypes import DTYPES
from .evidence import Evidence, InputChange, OutputCheck
from .plan import Inputs, Side
from .runtime_ops import RuntimeOps, derive_seed
from .spec import Problem, SizeCase

# Float outputs are poisoned with all-ones bytes (a NaN in every float format); integer outputs
# with a byte that changes between input sets, so that no value can pass for written by chance.
INT_POISON = (0xFF, 0xA5, 0x5A, 0xC3)
FLOAT_POISON = 0xFF


def poison_byte(dtype: str, set_index: int) -> int:
    return FLOAT_POISON if DTYPES[dtype].is_float else INT_POISON[set_index % len(INT_POISON)]


def wait_for(device: Device, timeout_s: float) -> None:
    """Wait for the stream to drain; a run that outlasts `timeout_s` is a hang (sticky)."""
    event = device.new_event()
    device.record(event)
    started = time.perf_counter()
    pause = 0.00005
    while not device.event_done(event):
        if time.perf_counter() - started > timeout_s:
            raise DeviceError("timeout", f"the kernel did not finish within {timeout_s:g} s", sticky=True)
        time.sleep(pause)
        pause = min(pause * 2, 0.005)
    device.synchronize()


def prepare_side(side: Side, set_index: int, seed: int) -> None:
    for arg in side.owned:
        buffer = side.buffers[arg.name]
        if arg.role == "inout":
            side.ops.fill(buffer, arg.numel(side.env), arg.dtype, arg.init or "normal", derive_seed(seed, arg.name))
        else:
            side.device.memset(buffer.ptr, poison_byte(arg.dtype, set_index), arg.nbytes(side.env))


def compare_outputs(ops: RuntimeOps, problem: Problem, case: SizeCase, set_index: int, ref: Side,
                    cand: Side) -> list[OutputCheck]:
    checks = []
    for arg in ref.outputs():
        tolerance = problem.tolerance_for(arg.dtype)
        numel = arg.numel(ref.env)
        poison = poison_byte(arg.dtype, set_index) if arg.role == "output" else -1
        c = ops.compare(cand.buffers[arg.name], ref.buffers[arg.name], numel, arg.dtype, tolerance.rtol,
                        tolerance.atol, poison if poison >= 0 else 0x00)
        if poison < 0:   # an inout holds input values, never poison: count nothing as unwritten
            c.bad += c.unwritten
            c.unwritten = 0
        checks.append(OutputCheck(case.name, set_index, arg.name, c.numel, c.bad, c.unwritten, c.nan, c.max_abs,
                                  c.max_rel, c.first_bad, c.cand_value, c.ref_value))
    return checks


def validate_case(device: Device, ops: RuntimeOps, problem: Problem, case: SizeCase, inputs: Inputs,
                  ref: Side, cand: Side, *, seed: int, sets: int, timeout_s: float, evidence: Evidence,
                  check_memoisation: bool = True) -> bool:
    """Run both sides on `sets` fresh input sets; stop at the first failing set. True if all pass."""
    for set_index in range(sets):
        set_seed = derive_seed(seed, case.name, set_index)
        inputs.fill(set_seed)
        before = inputs.checksums()
        evidence.phase = f"reference:{case.name}:{set_index}"
        prepare_side(ref, set_index, set_seed)
        ref.run()
        wait_for(device, timeout_s)
        middle = inputs.checksums()
        for name in [n for n in before if before[n] != middle[n]]:
            evidence.input_changes.append(InputChange(case.name, set_index, name, "reference"))
        if evidence.input_changes:
            return False
        prepare_side(cand, set_index, set_seed)
        evidence.phase = f"validate:{case.name}:{set_index}"
        cand.run()
        wait_for(device, timeout_s)
        after = inputs.checksums()
        for name in [n for n in middle if middle[n] != after[n]]:
            evidence.input_changes.append(InputChange(case.name, set_index, name, "candidate"))
        checks = compare_outputs(ops, problem, case, set_index, ref, cand)
        evidence.checks.extend(checks)
        if evidence.input_changes:
            return False
        failing = [c for c in checks if not c.passed]
        if failing:
            if check_memoisation and set_index > 0 and any(c.unwritten == 0 for c in failing):
                _check_earlier_sets(ops, problem, case, inputs, ref, cand, seed, set_index, timeout_s,
                                    device, evidence, failing)
            return False
    return True


def _check_earlier_sets(ops, problem, case, inputs, ref, cand, seed, set_index, timeout_s, device, evidence,
                        failing) -> None:
    """Does the candidate's wrong output equal the reference's output for an earlier input set?"""
    names = {c.arg for c in failing}
    for earlier in range(set_index):
        earlier_seed = derive_seed(seed, case.name, earlier)
        inputs.fill(earlier_seed)
        prepare_side(ref, earlier, earlier_seed)
        ref.run()
        wait_for(device, timeout_s)
        for check in compare_outputs(ops, problem, case, set_index, ref, cand):
            if check.arg in names and check.passed:
                evidence.memoised.append(f"{check.arg}:{earlier}")
        if evidence.memoised:
            return
