"""Vendor baselines named by a problem's `[vendor] kind`, timed like any candidate (CuPy only).

- cublas_sgemm: C = A @ B (row-major, fp32) through cuBLAS (cupy.matmul).
- cublas_hgemm: C = A @ B (row-major, fp16, fp32 accumulation) through cuBLAS (cupy.matmul).
- cublas_sgemv: y = A @ x (A row-major fp32, x a vector) through cuBLAS (cupy.matmul).
- cupy_sum: out[0] = sum(x).
- cupy_transpose: out = x.T materialised (cupy.copyto).
- cupy_softmax: row-wise softmax over the last axis, unfused (max, exp, sum, divide) as CuPy does it.
- cupy_dot: out[0] = x . y (two fp32 vectors) through cuBLAS sdot (cupy.cublas.dot, which writes the
  result straight into out with the device pointer mode; cupy.dot of two vectors is CuPy's own
  reduction kernel, not cuBLAS).
"""
from __future__ import annotations

from typing import Any, Callable

from .backends.base import DeviceError
from .candidate import Candidate
from .plan import Inputs, Side
from .runtime_ops import RuntimeOps
from .spec import Problem, SizeCase, SpecError


def vendor_candidate(problem: Problem) -> Candidate:
    if problem.vendor is None:
        raise SpecError("vendor", f"problem '{problem.name}' names no [vendor] baseline")
    label = f"vendor:{problem.vendor.kind}"
    return Candidate(source=label, launch=(), name=label)


def _operation(kind: str, cp: Any, ins: list, out: Any) -> Callable[[], None]:
    if kind in ("cublas_sgemm", "cublas_hgemm", "cublas_sgemv"):
        a, b = ins
        return lambda: cp.matmul(a, b, out=out)
    if kind == "cupy_dot":
        from cupy import cublas  # the cupy backend only: imported where the baseline is built
        x, y = ins
        return lambda: cublas.dot(x, y, out=out)
    x = ins[0]
    if kind == "cupy_sum":
        target = out.reshape(())
        return lambda: cp.sum(x, out=target)
    if kind == "cupy_transpose":
        return lambda: cp.copyto(out, x.T)
    if kind == "cupy_softmax":
        def softmax() -> None:
            peak = x.max(axis=-1, keepdims=True)
            e = cp.exp(x - peak)
            cp.divide(e, e.sum(axis=-1, keepdims=True), out=out)
        return softmax
    raise SpecError("vendor.kind", f"unknown vendor kind {kind!r}")


def vendor_side(device, ops: RuntimeOps, problem: Problem, case: SizeCase, inputs: Inputs) -> Side:
    if not hasattr(device, "array"):
        raise DeviceError("vendor", f"vendor baselines need the cupy backend, not {device.name}", False)
    vendor = problem.vendor
    side = Side("vendor", device, ops, problem, case.sizes, (), {}, (), inputs.buffers)
    env = case.sizes

    def array(name: str):
        arg = problem.arg(name)
        shape = tuple(d.evaluate_int(env) for d in arg.shape)
        return device.array(side.buffers[name], shape, arg.dtype)

    op = _operation(vendor.kind, device.cp, [array(n) for n in vendor.inputs], array(vendor.output))
    side.calls = [op]
    side.launches = 1
    return side
