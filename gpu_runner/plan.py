"""Buffers of one size case and the launch plans that run over them."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .backends.base import Buffer, Device
from .dtypes import DTYPES, scalar_bits
from .runtime_ops import INIT_CODES, RuntimeOps, derive_seed
from .spec import ArgSpec, KernelLaunch, LaunchStep, MemsetStep, Problem


def buffer_bytes(args: Sequence[ArgSpec], env: Mapping[str, Any]) -> int:
    return sum(a.nbytes(env) for a in args if a.role != "scalar")


def scalar_param(arg: ArgSpec, env: Mapping[str, Any]) -> Any:
    spec = DTYPES[arg.dtype]
    value = scalar_bits(spec, arg.value.evaluate(env))  # type: ignore[union-attr]
    return np.dtype(spec.numpy).type(value)


class Side:
    """The reference or the candidate on one size case: its own outputs, inouts and temporaries."""

    def __init__(self, label: str, device: Device, ops: RuntimeOps, problem: Problem, env: Mapping[str, Any],
                 steps: Sequence[LaunchStep], functions: Mapping[str, Any], extra_temps: Sequence[ArgSpec],
                 inputs: Mapping[str, Buffer]):
        self.label = label
        self.device = device
        self.ops = ops
        self.env = dict(env)
        self.owned: list[ArgSpec] = [a for a in problem.args if a.role in ("output", "inout", "temp")]
        self.owned += list(extra_temps)
        self.args: dict[str, ArgSpec] = {a.name: a for a in problem.args} | {t.name: t for t in extra_temps}
        self.buffers: dict[str, Buffer] = dict(inputs)
        self._allocated: list[Buffer] = []
        try:
            for arg in self.owned:
                buffer = device.alloc(max(1, arg.nbytes(env)))
                self._allocated.append(buffer)
                self.buffers[arg.name] = buffer
            self.calls: list[Callable[[], None]] = [self._step(step, functions) for step in steps]
        except BaseException:
            self.release()
            raise
        self.launches = sum(1 for s in steps if isinstance(s, KernelLaunch))

    def _step(self, step: LaunchStep, functions: Mapping[str, Any]) -> Callable[[], None]:
        device = self.device
        if isinstance(step, MemsetStep):
            arg = self.args[step.arg]
            buffer = self.buffers[step.arg]
            nbytes = arg.nbytes(self.env)
            if step.value == 0:
                return lambda: device.memset(buffer.ptr, 0, nbytes)
            numel = arg.numel(self.env)
            code = INIT_CODES["const"]
            return lambda: self.ops.fill_value(buffer.ptr, numel, arg.dtype, code, float(step.value),
                                               float(step.value), 0)
        grid, block, shared = step.resolve(self.env)
        function = functions[step.kernel]
        if shared > 0:
            # CUDA's default cap on dynamic shared memory is 48 KiB less the kernel's static shared memory, so a
            # kernel of 40 KiB static arrays fails with 16 KiB dynamic unless the cap is raised: raise it to what
            # the step asks (the runner has checked static + dynamic against the card's 227 KiB).
            device.set_max_dynamic_shared(function, shared)
        params = []
        for name in step.args:
            arg = self.args[name]
            if arg.role == "scalar":
                params.append(scalar_param(arg, self.env))
            else:
                params.append(np.uint64(self.buffers[name].ptr))
        return lambda: device.launch(function, grid, block, shared, params)

    def run(self) -> None:
        for call in self.calls:
            call()

    def outputs(self) -> list[ArgSpec]:
        return [a for a in self.owned if a.role in ("output", "inout")]

    def release(self) -> None:
        for buffer in self._allocated:
            self.device.free(buffer)
        self._allocated = []


class Inputs:
    """The problem's inputs for one size case, shared read-only by both sides."""

    def __init__(self, device: Device, ops: RuntimeOps, problem: Problem, env: Mapping[str, Any]):
        self.device = device
        self.ops = ops
        self.env = dict(env)
        self.args = [a for a in problem.args if a.role == "input"]
        self.buffers: dict[str, Buffer] = {}
        try:
            for arg in self.args:
                self.buffers[arg.name] = device.alloc(max(1, arg.nbytes(env)))
        except BaseException:
            self.release()
            raise

    def fill(self, seed: int) -> None:
        for arg in self.args:
            self.ops.fill(self.buffers[arg.name], arg.numel(self.env), arg.dtype, arg.init or "normal",
                          derive_seed(seed, arg.name))

    def checksums(self) -> dict[str, int]:
        return {a.name: self.ops.checksum(self.buffers[a.name], a.nbytes(self.env)) for a in self.args}

    def release(self) -> None:
        for buffer in self.buffers.values():
            self.device.free(buffer)
        self.buffers = {}
