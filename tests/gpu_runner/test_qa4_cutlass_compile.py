"""QA 4, CUTLASS/CuTe compiles: an nvcc that runs out of time or crashes is not cached as the source's
verdict and is ended with the tools it started; a CuTe kernel whose instructions CuTe replaced with a
run-time error is a failed compile that says what to add; a comment before an #include's header is
read as the preprocessor reads it."""
from __future__ import annotations

import os
import shutil
import signal
import stat
import time
from pathlib import Path

import pytest

from gpu_runner import compiler
from gpu_runner.cutlass_headers import cutlass_source_root
from gpu_runner.directives import find_forbidden_directive

needs_cutlass = pytest.mark.skipif(cutlass_source_root() is None, reason="the nvidia-cutlass wheel is not installed")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not compiler._wheel_bins(),
                                reason="nvcc is not installed")

KERNEL = 'extern "C" __global__ void k(float* y) { y[0] = 1.0f; }\n'


@pytest.fixture
def fake_nvcc(tmp_path, monkeypatch):
    """Installs a shell script as nvcc (unsandboxed, every source to nvcc) and returns a function that
    writes its body; the script appends a line to `runs` each time it starts."""
    script = tmp_path / "bin" / "nvcc"
    script.parent.mkdir()
    runs = tmp_path / "runs"
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("KERNELLAB_COMPILE_SANDBOX", "none")
    monkeypatch.setenv("KERNELLAB_COMPILE_ENGINE", "nvcc")
    monkeypatch.setattr(compiler, "nvcc_version", lambda: "13.0.88")

    def find(name):
        if name == "nvcc":
            return str(script)
        raise compiler.ToolMissing(name)

    monkeypatch.setattr(compiler, "find_tool", find)

    def install(body: str) -> Path:
        script.write_text(f"#!/bin/sh\necho run >> '{runs}'\n{body}\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        return runs

    return install


def _runs(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_an_nvcc_time_out_is_not_cached_and_says_the_time_limit_stopped_it(fake_nvcc):
    runs = fake_nvcc("exec sleep 20")
    first = compiler.compile_cubin(KERNEL, timeout_s=0.5, sass=False).report
    assert not first.ok
    assert first.summary() == ("does not compile: nvcc did not finish within 0.5 s: the compile's time limit "
                               "stopped it, not an error in the source.")
    second = compiler.compile_cubin(KERNEL, timeout_s=0.5, sass=False).report
    assert not second.ok and _runs(runs) == 2     # compiled again: the time-out was not remembered


@pytest.mark.parametrize("body, said", [
    ("echo \"nvcc error   : 'cicc' died due to signal 9 (Kill signal)\" >&2; exit 255",
     "cicc was ended by signal 9 (Kill signal)"),
    ("kill -SEGV $$", "nvcc was ended by SIGSEGV"),
])
def test_an_nvcc_crash_is_not_cached(fake_nvcc, body, said):
    runs = fake_nvcc(body)
    for _ in range(2):
        report = compiler.compile_cubin(KERNEL, sass=False).report
        assert not report.ok
        assert report.summary() == (f"does not compile: nvcc crashed while compiling this source ({said}): "
                                    "a crash, not an error in the source.")
    assert _runs(runs) == 2
    # An error in the source is still remembered: the next compile of the same source runs nothing.
    runs.unlink()
    fake_nvcc("echo 'kernel.cu(1): error: identifier \"q\" is undefined'; exit 1")
    for _ in range(2):
        report = compiler.compile_cubin(KERNEL + "// another source\n", sass=False).report
        assert report.summary() == 'does not compile: line 1: identifier "q" is undefined'
    assert _runs(runs) == 1


def test_a_timed_out_nvcc_is_ended_with_the_tools_it_started(fake_nvcc, tmp_path):
    child = tmp_path / "child"
    fake_nvcc(f"sleep 20 &\necho $! > '{child}'\nwait")
    started = time.monotonic()
    assert not compiler.compile_cubin(KERNEL, timeout_s=1, sass=False).report.ok
    assert time.monotonic() - started < 10
    pid = int(child.read_text())
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
        assert not _alive(pid), "the tool nvcc started (here a sleep, in life cicc) outlived the time-out"
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended and waiting for init to reap it, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# --- CuTe's run-time-error stand-ins ---------------------------------------------------------------

FALLBACK_CUBIN = (b"\x7fELF\x00\x00Attempting to use wgmma.fence without CUTE_ARCH_MMA_SM90A_ENABLED\x00"
                  b"0 && \"Attempting to use wgmma.fence without CUTE_ARCH_MMA_SM90A_ENABLED\"\x00"
                  b"Attempting to use MMA_64x64x16_F32F16F16_SS without CUTE_ARCH_MMA_SM90A_ENABLED\x00"
                  b"Trying to use tma without CUTE_ARCH_TMA_SM90_ENABLED.\x00\x00")


def test_cute_fallbacks_are_named_with_their_macro_and_what_enables_them():
    assert compiler.cute_fallbacks(FALLBACK_CUBIN) == {
        "CUTE_ARCH_MMA_SM90A_ENABLED": ["wgmma.fence", "MMA_64x64x16_F32F16F16_SS"],
        "CUTE_ARCH_TMA_SM90_ENABLED": ["tma"]}
    on_sm90 = compiler.cute_fallback(FALLBACK_CUBIN, "sm_90")
    assert on_sm90.startswith(
        "CuTe compiled wgmma.fence and MMA_64x64x16_F32F16F16_SS as a run-time error (a printf and a trap) because "
        "CUTE_ARCH_MMA_SM90A_ENABLED is not defined when compiling for sm_90; the architecture-specific target "
        "defines it: add \"-arch=sm_90a\" to compile_options.")
    # The same features compiled for an older GPU: no option brings them, so none is suggested.
    on_sm80 = compiler.cute_fallback(FALLBACK_CUBIN, "sm_80")
    assert "CuTe compiled tma as a run-time error (a printf and a trap) because CUTE_ARCH_TMA_SM90_ENABLED is not " \
           "defined when compiling for sm_80 (CuTe defines it only for the targets in <cute/arch/config.hpp>), " \
           "so this kernel cannot use it on sm_80." in on_sm80
    assert "-arch=" not in on_sm80
    assert compiler.cute_fallback(b"\x7fELF\x00printf text\x00", "sm_90") is None


def test_a_cached_or_carried_cubin_with_a_cute_fallback_is_a_failed_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(compiler, "nvcc_version", lambda: "13.0.88")
    monkeypatch.setattr(compiler, "cutlass_version", lambda: "4.2.0")
    source = '#include <cute/tensor.hpp>\nextern "C" __global__ void k(float* y) { y[0] = 1.0f; }\n'
    report = {"ok": True, "diagnostics": [], "log": "ptxas info    : Used 24 registers", "compile_s": 9.0,
              "compiler": "nvcc 13.0.88", "facts": {"registers": 24, "cutlass": "4.2.0", "sass": {"BPT.TRAP": 3},
                                                    "kernels": {"k": {"registers": 24}}}}
    # As carry_compiles.py packed it before the fallbacks were looked for.
    assert compiler.seed_cache(source, [], "sm_90", report=report, cubin=FALLBACK_CUBIN)
    monkeypatch.setattr(compiler, "find_tool", lambda name: (_ for _ in ()).throw(compiler.ToolMissing(name)))
    output = compiler.compile_cubin(source, [], "sm_90")
    assert not output.report.ok and output.cubin is None and output.report.facts is None
    assert "CUTE_ARCH_MMA_SM90A_ENABLED" in output.report.summary()
    assert 'add "-arch=sm_90a" to compile_options' in output.report.summary()
    assert compiler.cached_compile(source, [], "sm_90") is None


WGMMA_FENCE = """#include <cute/arch/mma_sm90_gmma.hpp>
extern "C" __global__ void wgmma_fence_kernel(float* out) {
    cute::warpgroup_arrive();
    cute::warpgroup_commit_batch();
    cute::warpgroup_wait<0>();
    out[threadIdx.x] = 1.0f;
}
"""

TMA_LOAD = """#include <cute/arch/copy_sm90_tma.hpp>
extern "C" __global__ void tma_kernel(const void* desc, float* out) {
    __shared__ alignas(128) float tile[32 * 32];
    __shared__ uint64_t barrier;
    if (threadIdx.x == 0) cute::SM90_TMA_LOAD_2D::copy(desc, &barrier, 0, tile, 0, 0);
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x];
}
"""


@needs_cutlass
@needs_nvcc
def test_cute_wgmma_for_sm90_fails_to_compile_and_names_sm90a_which_compiles_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path))
    plain = compiler.compile_cubin(WGMMA_FENCE, [], "sm_90", sass=False)
    assert not plain.report.ok and plain.cubin is None
    assert plain.report.summary() == (
        "does not compile: CuTe compiled wgmma.fence, wgmma.commit_group and wgmma.wait_group<N> as a run-time "
        "error (a printf and a trap) because CUTE_ARCH_MMA_SM90A_ENABLED is not defined when compiling for sm_90; "
        "the architecture-specific target defines it: add \"-arch=sm_90a\" to compile_options.")
    # Remembered like any other failed compile: the next check answers from the cache.
    assert compiler.compile_cubin(WGMMA_FENCE, [], "sm_90", sass=False).report.summary() == plain.report.summary()
    assert compiler.compile_cubin(WGMMA_FENCE, ["-arch=sm_90a"], "sm_90", sass=False).report.ok


@needs_cutlass
@needs_nvcc
def test_plain_tma_compiles_for_sm90_as_the_generator_is_told(tmp_path, monkeypatch):
    from search_engine.prompts import code_search_note

    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path))
    output = compiler.compile_cubin(TMA_LOAD, [], "sm_90", sass=False)
    assert output.report.ok, output.report.summary()
    assert compiler.cute_fallbacks(output.cubin) == {}
    note = code_search_note()
    assert "TMA copies (SM90_TMA_LOAD, SM90_TMA_STORE) work with the default sm_90." in note
    assert "wgmma (CuTe's SM90 GMMA MMA atoms, warpgroup_arrive) and setmaxnreg" in note
    assert "TMA need -arch=sm_90a" not in note


# --- a comment between #include and its header ------------------------------------------------------

def test_a_comment_before_an_included_header_is_read_as_a_space():
    source = '#include /* CuTe */ <cute/tensor.hpp>\n#include/**/<cstdint>\n' + KERNEL
    assert find_forbidden_directive(source) is None
    # It is a CuTe source all the same: compiled with what CuTe needs.
    assert compiler.cutlass_flags(source) == ["--expt-relaxed-constexpr"]
    # What stands after the comment is judged as before.
    assert find_forbidden_directive('#include /* x */ "secret.h"\n' + KERNEL).reason == (
        "The source includes a file by a quoted path (only <...> headers from the allow-list are allowed) at line 1.")
    assert find_forbidden_directive("#include /* x */ HEADER\n" + KERNEL).reason == (
        "The source includes a file named by a macro (only a literal <header> is allowed) at line 1.")
    assert find_forbidden_directive("#include /* x */ <../../etc/passwd>\n" + KERNEL) is not None


@pytest.mark.parametrize("source, reason", [
    # nvcc's C++17 preprocessor leaves ??/ alone, this check makes it a backslash: where the comment ends
    # is not certain, so it is refused, saying what is there.
    ('#include /* ??/\n*/ <cstdio> */ "secret.h"\n',
     "The source has a comment between #include and its header name that cannot be read safely (one that goes "
     "on past the line, or a source with trigraphs such as ??/): write the <header> right after #include at "
     "line 1."),
    ('#include /* a comment\n that goes on */ <cstdio>\n',
     "The source has a comment between #include and its header name that cannot be read safely (one that goes "
     "on past the line, or a source with trigraphs such as ??/): write the <header> right after #include at "
     "line 1."),
    ('#include (cstdio)\n',
     "The source has an #include whose argument, '(cstdio)', is not a <header> name (only a literal <header> is "
     "allowed) at line 1."),
])
def test_what_stands_after_include_is_named_when_it_is_refused(source, reason):
    refusal = find_forbidden_directive(source + KERNEL)
    assert refusal is not None and refusal.reason == reason
