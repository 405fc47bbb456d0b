"""One compile path (issue 21, part 4): every kernel a GPU backend measures, the reference included,
is the cubin that nvcc made in `GpuBackend.compile`, the same call the recorder's batches and the
search's compile checks make; the worker only loads it, and the measurement says how it was built."""
from __future__ import annotations

import pytest

from gpu_runner.backends.gpu import GpuBackend
from gpu_runner.compiler import CompileOutput
from gpu_runner.result import CompileDiagnostic, CompileReport, CompilerFacts
from gpu_runner.settings import MeasureSettings
from gpu_runner.worker import WorkerState
from gpu_runner.worker import run_job
from tests.gpu_runner.fake_device import FakeDevice, FakeKernel, saxpy_body
from tests.gpu_runner.helpers import candidate, saxpy_problem

SETTINGS = MeasureSettings(min_reps=6, max_reps=8, warmup=1, escape_runs=2)


class RecordingDevice(FakeDevice):
    """Refuses to compile source itself: only cubins the parent sent may run."""

    def __init__(self, kernels):
        super().__init__(kernels)
        self.compiled_sources = []
        self.cubins = []

    def compile(self, source, options, kernel_names):
        self.compiled_sources.append(source)
        return super().compile(source, options, kernel_names)

    def compiled_here(self, *sources) -> bool:
        return any(s in self.compiled_sources for s in sources)

    def load_cubin(self, cubin):
        self.cubins.append(cubin)
        return super().compile(cubin.decode(), [], [])


class InProcessBackend(GpuBackend):
    """The parent side as it is, with the worker run in this process on the stand-in device and a
    'nvcc' that writes the source as its cubin (so the stand-in can read which kernel it got)."""

    name = "fake"

    def __init__(self, device, *, fail: str | None = None):
        super().__init__(compile_workers=2)
        self.state = WorkerState(device)
        self.state.memory_limit = 1 << 30
        self.compiled: list[tuple[str, tuple, str]] = []
        self.fail = fail

    @property
    def arch(self) -> str:
        return "sm_90"

    def compile(self, source, options, arch, *, sass=True):
        self.compiled.append((source, tuple(options), arch, sass))
        if self.fail and self.fail in source:
            report = CompileReport(ok=False, diagnostics=[CompileDiagnostic(3, "identifier \"oops\" is undefined")],
                                   log="kernel.cu(3): error", facts=None, compile_s=0.1, compiler="nvcc 13.0.88")
            return CompileOutput(report, None)
        facts = CompilerFacts(registers=24, sass={"FFMA": 2, "LDG.E": 2} if sass else {})
        report = CompileReport(ok=True, diagnostics=[], log="", facts=facts, compile_s=0.1, compiler="nvcc 13.0.88")
        return CompileOutput(report, source.encode())

    def _request(self, job, timeout_s):
        return run_job(self.state, job)


def _device():
    return RecordingDevice({"saxpy": FakeKernel("saxpy", saxpy_body, 1.0), "cand": FakeKernel("cand", saxpy_body, 0.5)})


def test_a_measurement_runs_the_cubins_of_the_one_compile_path_for_candidate_and_reference():
    device = _device()
    backend = InProcessBackend(device)
    problem = saxpy_problem(n=4096, odd=1001)
    cand = candidate('extern "C" __global__ void cand()', "cand")
    result = backend.measure(problem, cand, seed=3, profile=False, energy=False, timeout_s=60, settings=SETTINGS)
    assert result.status == "ok", result.reason
    assert not device.compiled_here(cand.source, problem.reference.source)  # no NVRTC / SourceModule in the worker
    # The cubin is taken without SASS counts (a compile check cached it), the counts while the worker times it.
    assert backend.compiled[0] == (cand.source, (), "sm_90", False)
    assert sorted((c[0], c[3]) for c in backend.compiled[1:]) == sorted([(cand.source, True),
                                                                        (problem.reference.source, True)])
    assert device.cubins == [problem.reference.source.encode(), cand.source.encode()]
    assert result.compiler.compiled_with == {"compiler": "nvcc 13.0.88", "arch": "sm_90", "options": []}
    assert result.compiler.sass == {"FFMA": 2, "LDG.E": 2}
    assert result.phase_s["compile"] >= 0 and result.phase_s["sass_wait"] >= 0


def test_the_recorders_batches_compile_through_the_same_call_and_record_the_same_facts():
    device = _device()
    backend = InProcessBackend(device)
    problem = saxpy_problem(n=4096, odd=1001)
    cand = candidate('extern "C" __global__ void cand()', "cand")
    [batched] = backend.measure_many(problem, [cand], seed=3, profile=False, energy=False, timeout_s=60,
                                     settings=SETTINGS)
    single = backend.measure(problem, cand, seed=3, profile=False, energy=False, timeout_s=60, settings=SETTINGS)
    assert batched.status == single.status == "ok"
    assert batched.compiler.compiled_with == single.compiler.compiled_with
    assert not device.compiled_here(cand.source, problem.reference.source)
    assert {c[0] for c in backend.compiled} == {cand.source, problem.reference.source}
    assert batched.compiler.sass == single.compiler.sass == {"FFMA": 2, "LDG.E": 2}


def test_a_candidate_nvcc_refuses_fails_to_compile_with_its_line_and_never_reaches_the_worker():
    device = _device()
    backend = InProcessBackend(device, fail="oops")
    problem = saxpy_problem(n=4096, odd=1001)
    cand = candidate('extern "C" __global__ void cand(const float* x, const float* y, float* out, float a, int n) {\n'
                     '    oops;\n}', "cand")
    result = backend.measure(problem, cand, seed=3, profile=False, energy=False, timeout_s=60, settings=SETTINGS)
    assert result.status == "failed-compile" and "line 3" in result.reason
    assert device.cubins == [] and not device.compiled_here(cand.source)


def _tools_here() -> bool:
    from gpu_runner.compiler import ToolMissing, find_tool

    try:
        find_tool("nvcc"), find_tool("cuobjdump")
        return True
    except ToolMissing:
        return False


@pytest.mark.skipif(not _tools_here(), reason="nvcc or cuobjdump is not installed here")
@pytest.mark.parametrize("engine", ["nvrtc", "nvcc"])
def test_a_check_without_sass_counts_and_the_measurement_after_it_share_one_compile(engine, tmp_path, monkeypatch):
    """The search's check asks no SASS counts and the measured child asks them: the second finds the
    first's cubin in the cache and only counts its opcodes, once; nothing compiles the source again."""
    from gpu_runner import compiler

    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path))
    if engine == "nvcc":
        monkeypatch.setenv("KERNELLAB_COMPILE_ENGINE", "nvcc")
    source = 'extern "C" __global__ void k(const float* x, float* y, int n) {\n' \
             '    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = 2.0f * x[i] + 1.0f;\n}\n'
    check = compiler.compile_cubin(source, sass=False)
    assert check.report.ok and not check.report.facts.sass

    def no_second_compile(*args, **kwargs):
        raise AssertionError("the source was compiled again")

    monkeypatch.setattr(compiler, "_run_nvcc", no_second_compile)
    monkeypatch.setattr(compiler, "server_pool", no_second_compile)
    counted = compiler.compile_cubin(source, sass=True)
    assert counted.cubin == check.cubin and counted.report.compiler == check.report.compiler
    assert any(op.startswith("FFMA") for op in counted.report.facts.sass), counted.report.facts.sass
    assert any(op.startswith("LDG") for op in counted.report.facts.sass)
    monkeypatch.setattr(compiler, "sass_counts", no_second_compile)     # counted once, kept in the cache
    assert compiler.compile_cubin(source, sass=True).report.facts.sass == counted.report.facts.sass
    assert compiler.compile_cubin(source, sass=False).report.facts.sass == counted.report.facts.sass
