"""KernelBench solutions measured against their PyTorch reference, in a GPU worker's child process.

Needs torch (the `gpu` extra); imported only inside the sandbox child (`serve`) or by the recorder.
Builds run first, in parallel, each in its own compile-sandboxed subprocess (`build_solution`), cached by
source hash; the worker then imports the program with the same extension folder, so load_inline finds
the built module. The evidence is judged by gpu_runner.kernelbench_verdict (torch-free).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import math
import os
import site
import statistics
import subprocess
import sys
import time
import traceback
import types
from collections import Counter
from pathlib import Path
from typing import Any

from .compile_sandbox import sandboxed
from .kernelbench_verdict import (BUILD_FAILED_MARK, FALLBACK_MESSAGE, KERNEL_RULE, extension_refusal,
                                  split_kernels)
from .runtime_ops import derive_seed
from .settings import MeasureSettings
from .spec import MAX_PROBLEM_BYTES_VARIABLE, describe_bytes, max_problem_bytes
from .timing import Timer, summarize, time_sides

BUILT_MARK = "KL-EXTENSION-BUILT"
# The build imports the program with its extension builds watched, so that a solution that catches its own
# build failure (and would fall back to PyTorch) still fails its build. Self-contained: the compile sandbox
# need not see this package.
BUILD_SCRIPT = f"""
import os, runpy, sys
from torch.utils import cpp_extension
def watch(original):
    def watched(*args, **kwargs):
        name = kwargs.get('name', args[0] if args else '?')
        try:
            module = original(*args, **kwargs)
        except BaseException as exc:
            text = str(exc).splitlines()
            lines = ([l.strip() for l in text if 'error:' in l or '): error' in l] or
                     [l.strip() for l in text if 'error' in l.lower()] or [repr(exc)[-300:]])
            print({BUILD_FAILED_MARK!r}, name, lines[0][-300:], file=sys.stderr)
            raise
        print({BUILT_MARK!r}, name, file=sys.stderr)
        return module
    return watched
cpp_extension.load_inline = watch(cpp_extension.load_inline)
cpp_extension.load = watch(cpp_extension.load)
program = runpy.run_path(os.environ['KL_PROGRAM'], run_name='kernelbench_solution')
# Many solutions build in ModelNew.__init__: construct it too (on the CPU: the sandbox has no GPU), so those
# builds also happen here, in parallel, rather than in the GPU worker. Only build failures count.
try:
    program['ModelNew'](*program['get_init_inputs']())
except Exception:
    pass
"""

def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def build_dir(root: Path, source: str) -> Path:
    return root / source_digest(source)[:20]


def build_solution(source: str, root: Path, timeout_s: float = 600.0) -> dict:
    """Import the program once in a compile-sandboxed subprocess so that its load_inline builds land in
    its own folder (cached: a folder with a finished build is reused). Returns {ok, seconds, log, cached}."""
    folder = build_dir(root, source)
    done = folder / "built.ok"
    if done.exists():
        fields = done.read_text().split()
        return {"ok": True, "seconds": 0.0, "log": "", "cached": True,
                "extensions_built": int(fields[1]) if len(fields) > 1 else None}
    refusal = extension_refusal(source)
    if refusal:
        return {"ok": False, "seconds": 0.0, "log": refusal, "cached": False, "refused": True}
    folder.mkdir(parents=True, exist_ok=True)
    # HOME is the build folder: give it the folder torch's default builds leave in a user's home, which some
    # solutions name as their build_directory (load_inline does not create it; 2 CUDA-L1 builds failed so).
    (folder / ".cache" / "torch_extensions").mkdir(parents=True, exist_ok=True)
    program = folder / "solution.py"
    program.write_text(source)
    env_args = [f"KL_PROGRAM={program}", f"TORCH_EXTENSIONS_DIR={folder / 'ext'}", f"HOME={folder}",
                f"PATH={os.environ.get('PATH', '/usr/bin')}", f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}",
                f"MAX_JOBS=2", f"TORCH_CUDA_ARCH_LIST={os.environ.get('TORCH_CUDA_ARCH_LIST', '9.0')}",
                f"CUDA_HOME={os.environ.get('CUDA_HOME', '')}"]
    nvcc = next((str(Path(p) / "nvcc") for p in os.environ.get("PATH", "").split(":") if (Path(p) / "nvcc").exists()), "")
    # The interpreter's environment (a virtual environment's folder and its packages: torch, ninja) is
    # read-only inside; the interpreter itself comes with its toolkit root.
    python_dirs = [sys.prefix, *site.getsitepackages()]
    argv = sandboxed(["/usr/bin/env", *env_args, sys.executable, "-c", BUILD_SCRIPT], str(folder),
                     tools=[t for t in (nvcc, sys.executable) if t], read_only_dirs=python_dirs)
    started = time.perf_counter()
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        full, ok = run.stdout + run.stderr, run.returncode == 0
        # The compiler's error lines first (a build's tail is mostly its command lines), then the tail.
        errors = [line for line in full.splitlines() if "error" in line.lower() and len(line) < 600][:8]
        log = "\n".join(errors + ["..."] + [full[-3000:]]) if errors else full[-4000:]
    except subprocess.TimeoutExpired:
        full = log = f"the build did not finish within {timeout_s:g} s"
        ok = False
    seconds = time.perf_counter() - started
    if ok and (BUILD_FAILED_MARK in full or "Error building extension" in full):
        ok = False   # the program caught its own build failure (and would fall back to PyTorch)
    built = sum(1 for line in full.splitlines() if line.startswith(BUILT_MARK))
    if ok:
        done.write_text(f"{seconds:.2f} {built}\n")
    return {"ok": ok, "seconds": seconds, "log": log, "cached": False, "extensions_built": built}


def watch_extension_builds() -> list[dict]:
    """Record every torch.utils.cpp_extension.load_inline / load call from now on in this process:
    {name, ok, seconds, error}. Many LLM-written solutions build inside try/except (at import, in
    __init__ or in forward) and fall back to PyTorch on failure; the record is how the verdict sees it."""
    from torch.utils import cpp_extension

    builds: list[dict] = []
    for attribute in ("load_inline", "load"):
        original = getattr(cpp_extension, attribute)
        if getattr(original, "_kl_watched", None) is not None:
            original = original._kl_watched

        def watched(*args, _original=original, **kwargs):
            started = time.perf_counter()
            name = str(kwargs.get("name", args[0] if args else "?"))
            try:
                module = _original(*args, **kwargs)
            except BaseException as exc:
                builds.append({"name": name, "ok": False, "seconds": round(time.perf_counter() - started, 3),
                               "error": _build_error_line(exc)})
                raise
            builds.append({"name": name, "ok": True, "seconds": round(time.perf_counter() - started, 3), "error": "",
                           "path": str(getattr(module, "__file__", "") or "")})
            _count_calls(module, name)
            return module

        watched._kl_watched = original
        setattr(cpp_extension, attribute, watched)
    return builds


# Calls of the functions of the extensions built in this process, "<extension>.<function>" -> count; the
# worker empties it before the profiled call of ModelNew.forward (see measure_solution).
EXTENSION_CALLS: Counter = Counter()


def _count_calls(module, extension: str) -> None:
    """Wrap the extension module's functions so that each call is counted (the module's attributes are
    replaced before the program sees the module, so `ext.fn(...)` and `fn = ext.fn` both count)."""
    for attribute in dir(module):
        function = getattr(module, attribute, None)
        if attribute.startswith("_") or type(function).__name__ != "builtin_function_or_method":
            continue

        def counted(*args, _function=function, _key=f"{extension}.{attribute}", **kwargs):
            EXTENSION_CALLS[_key] += 1
            return _function(*args, **kwargs)

        counted.__name__ = attribute
        counted.__doc__ = function.__doc__
        try:
            setattr(module, attribute, counted)
        except (AttributeError, TypeError):
            pass


def extension_symbols(paths: list[str]) -> list[str]:
    """The demangled names of the functions defined in the built extension libraries: each kernel compiled
    into one has a host stub of its own name there (template instantiations, CUTLASS kernels included)."""
    names: list[str] = []
    for path in paths:
        try:
            run = subprocess.run(["nm", "-C", "--defined-only", path], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        for line in run.stdout.splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[1] in ("T", "t", "W", "w"):
                names.append(parts[2])
    return names


def _build_error_line(exc: BaseException) -> str:
    """The compiler's first error line where there is one, else the exception's last line."""
    text = str(exc)
    for line in text.splitlines():
        if "error" in line.lower() and ("error:" in line or "Error" in line) and not line.startswith("Error building"):
            return line.strip()[-400:]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f"{type(exc).__name__}: {(lines[-1] if lines else '')[-400:]}"


def _load_program(source: str, name: str, extensions: Path | None) -> tuple[types.ModuleType, str]:
    """Execute a program as a fresh module; returns it and what it printed."""
    if extensions is not None:
        os.environ["TORCH_EXTENSIONS_DIR"] = str(extensions)
        # The same arch list as the build: torch hashes it into the extension's version, and a mismatch rebuilds.
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    module = types.ModuleType(name)
    module.__file__ = f"<{name}>"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module, printed.getvalue()


# GPU time given to the host before each timed call of a PyTorch program (see _TorchDevice.head_start).
HEAD_START_US = 100.0


class _TorchDevice:
    """The part of gpu_runner's Device that timing.Timer needs, on torch's current stream."""

    def __init__(self, torch):
        self.torch = torch
        self.tensors: dict[int, Any] = {}

    def new_event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def record(self, event):
        event.record()

    def event_done(self, event):
        return event.query()

    def elapsed_ms(self, start, end):
        return start.elapsed_time(end)

    def synchronize(self):
        self.torch.cuda.synchronize()

    def memset(self, ptr, byte, nbytes):
        self.tensors[ptr].fill_(byte)

    def head_start(self) -> None:
        """Keep the GPU busy ~HEAD_START_US before the flush (timing.Timer), so that the host has enqueued the
        timed call before the start event fires. (Until 2026-12-02 it slept between the flush and the start
        event, so the timed call started 100 us after the flush rather than right after it, as a CUDA
        candidate's and do_bench's do; KernelBench 1:50, a 15 us conv, timed 4.1% under do_bench then, 2.8% and
        3.3% since.) A PyTorch call costs tens of microseconds of host time (a torch.compile'd one with
        its guards, more); when the queue ran dry, the events timed the host's launch: KernelBench 1:64 (a 25 us
        conv) timed 58 us, cv 0.72, interleaved with its baselines, and 24.6 us alone (do_bench: 24.5 us)."""
        if not hasattr(self, "_cycles"):
            rate_khz = getattr(self.torch.cuda.get_device_properties(0), "clock_rate", 0) or 1_980_000
            self._cycles = int(HEAD_START_US * rate_khz / 1e3)
        self.torch.cuda._sleep(self._cycles)


class _Flush:
    def __init__(self, device: _TorchDevice, nbytes: int):
        tensor = device.torch.empty(nbytes, dtype=device.torch.uint8, device="cuda")
        self.ptr, self.nbytes, self.handle = tensor.data_ptr(), nbytes, tensor
        device.tensors[self.ptr] = tensor


class _DrawInputs:
    """Fresh inputs for each timed call: the working tensors are refilled from one of the drawn sets."""

    def __init__(self, working: list, draws: list[list]):
        self.working, self.draws = working, draws

    def fill(self, seed: int) -> None:
        source = self.draws[seed % len(self.draws)]
        for target, value in zip(self.working, source):
            if hasattr(target, "copy_"):
                target.copy_(value)


# PyTorch settings a program can switch for the whole process, most often at import ("allow_tf32 = True" in 59
# of CUDA-L1's 203 solutions measured here). The worker serves many programs: before 2026-12-01 a setting one
# solution switched stayed on for every later reference and candidate (KernelBench 1:12, a matmul, timed 0.34 ms
# eager with TF32 left on by an earlier task's solution, 2.69 ms with PyTorch's defaults).
def _global_settings(torch) -> dict[str, Any]:
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    return {"float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cuda.matmul.allow_tf32": bool(matmul.allow_tf32),
            "cuda.matmul.allow_fp16_reduced_precision_reduction": bool(matmul.allow_fp16_reduced_precision_reduction),
            "cuda.matmul.allow_bf16_reduced_precision_reduction": bool(matmul.allow_bf16_reduced_precision_reduction),
            "cudnn.allow_tf32": bool(cudnn.allow_tf32), "cudnn.benchmark": bool(cudnn.benchmark),
            "cudnn.deterministic": bool(cudnn.deterministic),
            "default_dtype": str(torch.get_default_dtype()).replace("torch.", "")}


def _apply_settings(torch, settings: dict[str, Any]) -> None:
    import warnings

    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the precision first: it moves allow_tf32 with it, which is then set as recorded
        torch.set_float32_matmul_precision(settings["float32_matmul_precision"])
        matmul.allow_tf32 = settings["cuda.matmul.allow_tf32"]
        matmul.allow_fp16_reduced_precision_reduction = settings["cuda.matmul.allow_fp16_reduced_precision_reduction"]
        matmul.allow_bf16_reduced_precision_reduction = settings["cuda.matmul.allow_bf16_reduced_precision_reduction"]
        cudnn.allow_tf32 = settings["cudnn.allow_tf32"]
        cudnn.benchmark = settings["cudnn.benchmark"]
        cudnn.deterministic = settings["cudnn.deterministic"]
        torch.set_default_dtype(getattr(torch, settings["default_dtype"]))


_DEFAULT_SETTINGS: dict[str, Any] = {}


def _default_settings(torch) -> dict[str, Any]:
    """PyTorch's settings as this process started (read once, before any program ran)."""
    if not _DEFAULT_SETTINGS:
        _DEFAULT_SETTINGS.update(_global_settings(torch))
    return dict(_DEFAULT_SETTINGS)


class _SettingsGuard:
    """Runs the reference under PyTorch's defaults and the solution under the settings it switched (at import,
    construction or in a call), restoring the defaults after each solution call; `changed` lists what the
    solution switched, as {name: [default, its value]}."""

    def __init__(self, torch, defaults: dict[str, Any]):
        self.torch, self.defaults = torch, defaults
        self.solution_settings = dict(defaults)

    def take(self) -> None:
        """Adopt what the process's settings are now as the solution's, and go back to the defaults."""
        self.solution_settings.update(_global_settings(self.torch))
        _apply_settings(self.torch, self.defaults)

    @property
    def changed(self) -> dict[str, list]:
        return {k: [self.defaults[k], v] for k, v in self.solution_settings.items() if v != self.defaults[k]}

    def solution(self, call):
        def run(*args):
            if self.changed:
                _apply_settings(self.torch, self.solution_settings)
            try:
                return call(*args)
            finally:
                now = _global_settings(self.torch)
                if now != self.defaults:
                    self.solution_settings.update(now)
                    _apply_settings(self.torch, self.defaults)
        return run


class _ModuleSide:
    owned = ()

    def __init__(self, label: str, call, inputs: list):
        self.label, self.call, self.inputs = label, call, inputs
        self.output = None
        self.launches = 1

    def run(self) -> None:
        self.output = self.call(*self.inputs)


def _to_cuda(values, torch):
    return [v.cuda() if isinstance(v, torch.Tensor) else v for v in values]


def _draw_inputs(reference, seed: int, torch):
    torch.manual_seed(seed)
    return _to_cuda(reference.get_inputs(), torch)


def _outputs(value, torch) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def _poison_cache(byte_sizes: list[int], torch) -> None:
    """Fill the caching allocator's free blocks of the output sizes with NaN bytes, so that an output
    the solution allocates and leaves unwritten reads as poison rather than the reference's result."""
    blocks = [torch.full((max(1, n),), 0xFF, dtype=torch.uint8, device="cuda") for n in byte_sizes for _ in range(3)]
    del blocks


def _compare(cand, ref, tolerance: float, torch) -> dict:
    cands, refs = _outputs(cand, torch), _outputs(ref, torch)
    if len(cands) != len(refs):
        return {"ok": False, "shape_error": f"ModelNew returned {len(cands)} tensor(s), the reference {len(refs)}."}
    bad = numel = poison = 0
    max_abs = 0.0
    for c, r in zip(cands, refs):
        if tuple(c.shape) != tuple(r.shape):
            return {"ok": False, "shape_error": f"output shape {tuple(c.shape)} is not the reference's {tuple(r.shape)}."}
        c, r = c.float(), r.float()
        diff = (c - r).abs()
        wrong = ~(diff <= tolerance + tolerance * r.abs())
        bad += int(wrong.sum())
        numel += r.numel()
        poison += int((c.isnan() & ~r.isnan()).sum())
        finite = diff[diff.isfinite()]
        max_abs = max(max_abs, float(finite.max()) if finite.numel() else 0.0)
    return {"ok": bad == 0, "bad": bad, "numel": numel, "poison": poison, "max_abs": max_abs}


def _kernels_of(call, torch) -> Counter:
    """CUDA kernels one call launches, by full name (split into the solution's own and the rest by
    kernelbench_verdict.split_kernels)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    kernels = Counter()
    for event in prof.events():
        if getattr(event, "device_type", None) is not None and "CUDA" in str(event.device_type):
            name = event.name
            if name.startswith(("cudaLaunch", "cuLaunch", "Memcpy", "Memset", "cudaMemcpy", "cudaMemset")):
                continue
            kernels[name] += 1
    return kernels


def _aten_ops(call, torch) -> Counter:
    from torch.utils._python_dispatch import TorchDispatchMode

    ops = Counter()

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops[str(func.overloadpacket.__name__)] += 1
            return func(*args, **(kwargs or {}))

    with Count():
        call()
    return ops


@dataclasses.dataclass(frozen=True)
class MemoryNeed:
    """What a PyTorch problem keeps on the GPU before any output is made (see memory_need)."""
    total: int
    inputs: int              # one draw of get_inputs()
    parameters: int          # one model's parameters and buffers
    input_copies: int
    model_copies: int
    largest: str             # the largest single tensor: its name, shape and bytes
    largest_shape: tuple[int, ...]
    largest_bytes: int


def tensor_bytes(items: list) -> list[tuple[str, tuple[int, ...], int]]:
    """(name, shape, bytes) of each item: a (name, shape, element_size) triple, a (name, tensor) pair or a bare
    tensor (anything with numel() and element_size(), named by its position). Torch-free, so that the
    arithmetic of the memory precheck is tested without a GPU."""
    return [_item_bytes(index, item) for index, item in enumerate(items)]


def _item_bytes(index: int, item) -> tuple[str, tuple[int, ...], int]:
    if isinstance(item, tuple) and len(item) == 3 and isinstance(item[0], str):
        name, shape, element_size = item
        shape = tuple(int(dim) for dim in shape)
        return name, shape, math.prod(shape) * int(element_size)
    name, tensor = item if isinstance(item, tuple) and len(item) == 2 else (f"#{index}", item)
    shape = tuple(int(dim) for dim in getattr(tensor, "shape", ()))
    return name, shape, int(tensor.numel()) * int(tensor.element_size())


def memory_need(inputs: list, parameters: list, *, input_copies: int = 1, model_copies: int = 1) -> MemoryNeed:
    """The bytes a problem needs at once: one draw of inputs times the copies the worker keeps alive, plus
    one model's parameters and buffers times the models it holds (items as tensor_bytes takes them)."""
    drawn, held = tensor_bytes(inputs), tensor_bytes(parameters)
    one_draw, one_model = sum(b for _, _, b in drawn), sum(b for _, _, b in held)
    name, shape, largest = max(drawn + held, key=lambda entry: entry[2], default=("none", (), 0))
    return MemoryNeed(total=one_draw * input_copies + one_model * model_copies, inputs=one_draw,
                      parameters=one_model, input_copies=input_copies, model_copies=model_copies,
                      largest=name, largest_shape=shape, largest_bytes=largest)


def memory_refusal(need: MemoryNeed, cap: int) -> str | None:
    """The sentence a user reads when the problem needs more than the cap, naming what takes the memory;
    None when it fits."""
    if need.total <= cap:
        return None
    models = "Model and ModelNew" if need.model_copies == 2 else \
        f"{need.model_copies} models" if need.model_copies != 1 else "Model"
    return (f"The problem needs {describe_bytes(need.total)} of GPU memory before any output is made: get_inputs() "
            f"gives {describe_bytes(need.inputs)}, kept {need.input_copies} times (the validation draws and a "
            f"working copy), and the parameters and buffers of {models} take {describe_bytes(need.parameters)}"
            f"{' each' if need.model_copies > 1 else ''}; the largest tensor is {need.largest} of shape "
            f"{list(need.largest_shape)} ({describe_bytes(need.largest_bytes)}). That is more than the per-problem "
            f"memory cap of {describe_bytes(cap)} ({MAX_PROBLEM_BYTES_VARIABLE}), so nothing was measured.")


def _memory_precheck(reference, seed: int, settings: MeasureSettings, has_solution: bool, cap: int, torch) -> dict:
    """Evidence on the memory the reference asks for, found on the meta device (no allocation), so that a
    get_inputs() of 200 GB is refused with a sentence rather than met by an out-of-memory error on the GPU.
    A program that cannot run on meta (.item(), numpy, an op meta lacks) is measured as before; the
    evidence only says the precheck was not done."""
    try:
        inputs, parameters = _meta_tensors(reference, seed, torch)
    except Exception as exc:  # noqa: BLE001 - the real run reports the program's own errors
        return {"memory_precheck": {"skipped": f"{type(exc).__name__}: {str(exc).strip()[:200]}"}}
    # Alive at once in _measure_solution: every validation draw, plus the inputs' clone before the
    # solution's call (validation) or the working copy (timing); the reference's model and the solution's.
    need = memory_need(inputs, parameters, input_copies=settings.validation_sets + 1,
                       model_copies=2 if has_solution else 1)
    evidence: dict[str, Any] = {"memory_precheck": {**dataclasses.asdict(need), "cap": cap}}
    refusal = memory_refusal(need, cap)
    if refusal:
        evidence["memory_refusal"] = refusal
    return evidence


def _meta_tensors(reference, seed: int, torch) -> tuple[list, list]:
    """(name, tensor) pairs of one draw of inputs and of the model's parameters and buffers, made under the
    meta device (shapes and dtypes only), seeded as the measured ones are."""
    with torch.device("meta"):
        torch.manual_seed(derive_seed(seed, "draw", 0))
        inputs = _named_tensors("get_inputs()", reference.get_inputs(), torch)
        torch.manual_seed(seed)
        model = reference.Model(*reference.get_init_inputs())
    held = [(f"Model.{name}", t) for name, t in [*model.named_parameters(), *model.named_buffers()]]
    return inputs, held


def _named_tensors(name: str, value, torch, depth: int = 0) -> list[tuple[str, Any]]:
    """The tensors in an input value, inside lists, tuples and dicts too, named by where they are."""
    if isinstance(value, torch.Tensor):
        return [(name, value)]
    if depth >= 4:
        return []
    if isinstance(value, (list, tuple)):
        return [pair for i, v in enumerate(value) for pair in _named_tensors(f"{name}[{i}]", v, torch, depth + 1)]
    if isinstance(value, dict):
        return [pair for k, v in value.items() for pair in _named_tensors(f"{name}[{k!r}]", v, torch, depth + 1)]
    return []


def measure_solution(reference_source: str, solution_source: str | None, *, extensions: Path | None, seed: int = 0,
                     settings: MeasureSettings, tolerance: float = 1e-2, baselines: tuple[str, ...] = ()) -> dict:
    """Evidence for one solution (None: the reference and its baselines alone). Plain dict, see
    kernelbench_verdict.judge_solution. The reference runs under PyTorch's default settings, the solution under
    those it switched ("global_settings_changed"), and the defaults are back when it returns."""
    import torch

    defaults = _default_settings(torch)
    _apply_settings(torch, defaults)     # whatever an earlier program left switched
    guard = _SettingsGuard(torch, defaults)
    try:
        evidence = _measure_solution(guard, reference_source, solution_source, extensions=extensions, seed=seed,
                                     settings=settings, tolerance=tolerance, baselines=baselines)
    finally:
        _apply_settings(torch, defaults)
    if guard.changed:
        evidence["global_settings_changed"] = guard.changed
    return evidence


def _measure_solution(guard: "_SettingsGuard", reference_source: str, solution_source: str | None, *,
                      extensions: Path | None, seed: int, settings: MeasureSettings, tolerance: float,
                      baselines: tuple[str, ...]) -> dict:
    import torch

    evidence: dict[str, Any] = {"tolerance": tolerance, "draws": [], "phase_s": {}}
    started = time.perf_counter()
    cap = max_problem_bytes()   # a malformed KERNELLAB_MAX_PROBLEM_BYTES is the worker's error, not the reference's
    try:
        reference_module, _ = _load_program(reference_source, "kernelbench_reference", None)
        evidence.update(_memory_precheck(reference_module, seed, settings, solution_source is not None, cap, torch))
        if evidence.get("memory_refusal"):
            return evidence
        torch.manual_seed(seed)
        model = reference_module.Model(*reference_module.get_init_inputs()).cuda().eval()
    except Exception:  # noqa: BLE001 - the reference's own failure: nothing to say about the solution
        evidence["reference_error"] = traceback.format_exc()[-1500:]
        return evidence
    solution = None
    if solution_source is not None:
        evidence["extension_builds"] = watch_extension_builds()
        try:
            solution_module, printed = _load_program(solution_source, "kernelbench_solution", extensions)
            torch.manual_seed(seed)
            constructed = io.StringIO()
            with contextlib.redirect_stdout(constructed), contextlib.redirect_stderr(constructed):
                solution = solution_module.ModelNew(*reference_module.get_init_inputs()).cuda().eval()
            printed += constructed.getvalue()
        except Exception:  # noqa: BLE001
            evidence["runtime_error"] = traceback.format_exc()[-1500:]
            return evidence
        guard.take()
        solution = guard.solution(solution)
        if FALLBACK_MESSAGE.search(printed):
            evidence["fallback_message"] = next(l for l in printed.splitlines() if FALLBACK_MESSAGE.search(l)).strip()
    evidence["phase_s"]["load"] = time.perf_counter() - started
    with torch.no_grad():
        draws = [_draw_inputs(reference_module, derive_seed(seed, "draw", k), torch)
                 for k in range(settings.validation_sets)]
        reference_outputs = []
        for index, inputs in enumerate(draws):
            ref = model(*inputs)
            reference_outputs.append(ref)
            if solution is None:
                continue
            before = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
            _poison_cache([t.numel() * t.element_size() for t in _outputs(ref, torch)], torch)
            buffer = io.StringIO()
            try:
                with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
                    cand = solution(*inputs)
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                evidence["runtime_error"] = traceback.format_exc()[-1500:]
                return evidence
            if FALLBACK_MESSAGE.search(buffer.getvalue()) and not evidence.get("fallback_message"):
                evidence["fallback_message"] = next(l for l in buffer.getvalue().splitlines()
                                                    if FALLBACK_MESSAGE.search(l)).strip()
            changed = [f"#{i}" for i, (a, b) in enumerate(zip(before, inputs))
                       if isinstance(a, torch.Tensor) and not torch.equal(a, b)]
            if changed:
                evidence["inputs_modified"] = changed
                return evidence
            check = {"index": index, **_compare(cand, ref, tolerance, torch)}
            if not check["ok"] and settings.check_memoisation:
                for earlier in range(index):
                    if _compare(cand, reference_outputs[earlier], tolerance, torch)["ok"]:
                        check["memoised_from"] = earlier
                        break
            evidence["draws"].append(check)
            if not check["ok"]:
                return evidence
        evidence["phase_s"]["validate"] = time.perf_counter() - started
        working = [t.clone() if isinstance(t, torch.Tensor) else t for t in draws[0]]
        if solution is not None:
            call = lambda: solution(*working)  # noqa: E731
            EXTENSION_CALLS.clear()
            kernels = _kernels_of(call, torch)
            if evidence["extension_builds"]:
                evidence["extension_calls"] = dict(EXTENSION_CALLS)
            symbols = extension_symbols([b["path"] for b in evidence["extension_builds"] if b.get("path")])
            own, other = split_kernels(dict(kernels), solution_source, symbols)
            evidence["custom_kernels"] = {k[:200]: n for k, n in own.items()}
            evidence["library_kernels"] = {k[:200]: n for k, n in other.items()}
            evidence["kernel_rule"] = KERNEL_RULE
            evidence["kernels_seen"] = True
            evidence["aten_ops"] = dict(_aten_ops(call, torch))
            evidence["reference_aten_ops"] = dict(_aten_ops(lambda: model(*working), torch))
        device = _TorchDevice(torch)
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
        flush = _Flush(device, settings.flush_bytes or max(256 << 20, 4 * l2))
        timer = Timer(device, _DrawInputs(working, draws), flush, derive_seed(seed, "timing"), settings.kernel_timeout_s)
        sides = [_ModuleSide("reference", model, working)]
        if solution is not None:
            sides.append(_ModuleSide("candidate", solution, working))
        for name in baselines:
            side = _baseline_side(name, model, working, torch, evidence)
            if side is not None:
                sides.append(side)
        samples = time_sides(timer, sides, warmup=settings.warmup, min_reps=settings.min_reps,
                             max_reps=settings.max_reps, target_ms=settings.target_timing_ms)
        evidence["reference_ms"] = samples[0]
        if solution is not None:
            evidence["candidate_ms"] = samples[1]
            last = len(samples[1]) - 1
            timer.run_untimed(sides[0], last)
            timer.run_untimed(sides[1], last)
            evidence["post_timing_ok"] = _compare(sides[1].output, sides[0].output, tolerance, torch)["ok"]
            evidence["escape"] = _escape_probe(solution, working, torch, settings.escape_runs)
        if solution is None and "do_bench" in baselines:
            try:
                from triton.testing import do_bench

                # Every sample, so that the statistic compared is the same as ours (the median); do_bench's
                # default return is the mean, which on a launch-bound op carries its outliers.
                times = do_bench(lambda: model(*working), warmup=25, rep=200, return_mode="all")
                times = sorted(float(t) for t in times)
                evidence["do_bench"] = {"median_ms": statistics.median(times), "mean_ms": statistics.fmean(times),
                                        "min_ms": times[0], "n": len(times)}
                evidence["do_bench_ms"] = evidence["do_bench"]["median_ms"]
                # Alternating rounds of both timers on the reference alone: on an op of a few microseconds one
                # do_bench call's median moves by more than the 3% compared (5.02 / 5.65 / 5.02 us in three
                # calls of one process on the H200, 2026-12-01), so the comparison is also made between the
                # medians of DO_BENCH_ROUNDS rounds of each, with each timer's spread beside it.
                reps = len(samples[0])
                rounds = []
                k = 0
                while k < DO_BENCH_ROUNDS or (k < DO_BENCH_MAX_ROUNDS and _rounds_spread(rounds) > DO_BENCH_SPREAD):
                    ours = timer.run(sides[:1], reps, first_rep=2_000_000 + k * reps)[0]
                    theirs = do_bench(lambda: model(*working), warmup=25, rep=200, return_mode="all")
                    rounds.append({"ours_median_ms": statistics.median(ours), "ours_n": len(ours),
                                   "do_bench_median_ms": statistics.median(float(t) for t in theirs),
                                   "do_bench_n": len(theirs)})
                    k += 1
                evidence["do_bench_rounds"] = rounds
            except Exception as exc:  # noqa: BLE001
                evidence.setdefault("baseline_errors", {})["do_bench"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        if "energy" in baselines or (solution is not None and settings.energy_window_s > 0 and
                                     all(d.get("ok") for d in evidence["draws"])):
            evidence["energy"] = {"reference": _energy(lambda: model(*working), torch, settings.energy_window_s)}
            if solution is not None:
                evidence["energy"]["candidate"] = _energy(lambda: solution(*working), torch, settings.energy_window_s)
        evidence["baselines_ms"] = {s.label: samples[i] for i, s in enumerate(sides) if s.label.startswith("baseline:")}
        evidence["phase_s"]["total"] = time.perf_counter() - started
        evidence["timing"] = {s.label: dataclasses.asdict(summarize(samples[i])) for i, s in enumerate(sides)}
    return evidence


# Rounds of our timer and of do_bench, alternating, when the reference is timed beside do_bench: at least
# DO_BENCH_ROUNDS; while either timer's own rounds spread by more than DO_BENCH_SPREAD (max - min over the
# median), up to DO_BENCH_MAX_ROUNDS, so that a few-microsecond op's medians of rounds are compared on
# enough rounds. The rule reads each timer's spread alone, never how far the two are apart.
DO_BENCH_ROUNDS = 5
DO_BENCH_MAX_ROUNDS = 25
DO_BENCH_SPREAD = 0.03


def _rounds_spread(rounds: list[dict]) -> float:
    """The larger of the two timers' round spreads, (max - min) / median of their round medians."""
    spreads = []
    for key in ("ours_median_ms", "do_bench_median_ms"):
        values = [r[key] for r in rounds]
        middle = statistics.median(values) if values else 0.0
        spreads.append((max(values) - min(values)) / middle if middle > 0 else 0.0)
    return max(spreads)


def _baseline_side(name: str, model, working: list, torch, evidence: dict) -> _ModuleSide | None:
    try:
        if name == "torch_compile":
            t0 = time.perf_counter()
            compiled = torch.compile(model)
            compiled(*working)
            torch.cuda.synchronize()
            evidence["phase_s"]["torch_compile"] = time.perf_counter() - t0
            return _ModuleSide("baseline:torch_compile", compiled, working)
        if name == "cuda_graph":
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    model(*working)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                model(*working)
            return _ModuleSide("baseline:cuda_graph", lambda *a: graph.replay(), working)
    except Exception as exc:  # noqa: BLE001 - a baseline that cannot be made is reported, not fatal
        evidence.setdefault("baseline_errors", {})[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return None


def _energy(call, torch, window_s: float) -> dict:
    """NVML's energy counter over repeated calls for at least `window_s` (the counter moves in steps):
    {j_per_call, mean_w, window_s, calls}, or {error}."""
    from .observers import ObserverUnavailable
    from .observers.nvml import NvmlEnergyObserver

    try:
        observer = NvmlEnergyObserver(torch.cuda.current_device())
        call()
        torch.cuda.synchronize()
        observer.before_start()
        started, calls = time.perf_counter(), 0
        while True:
            for _ in range(8):
                call()
            calls += 8
            torch.cuda.synchronize()
            if time.perf_counter() - started >= window_s:
                break
        observer.after_finish()
        energy = observer.get_results(calls)
        return {"j_per_call": energy.j_per_call, "mean_w": energy.mean_w, "window_s": energy.window_s, "calls": calls}
    except ObserverUnavailable as exc:
        return {"error": str(exc)}


def _escape_probe(solution, working: list, torch, runs: int) -> dict:
    def probe(call) -> tuple[float, float]:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end), (time.perf_counter() - t0) * 1e3

    noop_tensor = torch.empty(1, device="cuda")
    cand = [probe(lambda: solution(*working)) for _ in range(runs)]
    noop = [probe(lambda: noop_tensor.add_(0)) for _ in range(runs)]
    median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {"event_ms": median([c[0] for c in cand]), "wall_ms": median([c[1] for c in cand]),
            "noop_event_ms": median([n[0] for n in noop]), "noop_wall_ms": median([n[1] for n in noop]), "runs": runs}


def serve(conn, *args) -> None:
    """The sandbox child's loop: ("measure", job) -> ("evidence", dict)."""
    import torch

    conn.send(("hello", {"pid": os.getpid(), "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}))
    while True:
        try:
            kind, job = conn.recv()
        except EOFError:
            return
        if kind == "exit":
            return
        try:
            evidence = measure_solution(job["reference"], job.get("solution"), extensions=job.get("extensions"),
                                        seed=job.get("seed", 0), settings=job["settings"],
                                        baselines=tuple(job.get("baselines", ())))
        except Exception:  # noqa: BLE001 - a CUDA error or a bug: report it, the parent restarts the child
            evidence = {"runtime_error": traceback.format_exc()[-1500:], "sticky": True}
        conn.send(("evidence", evidence))
        if evidence.get("sticky") or "illegal" in str(evidence.get("runtime_error", "")).lower():
            conn.close()
            os._exit(0)
