"""The CUTLASS/CuTe headers of the nvidia-cutlass wheel: allowed, on the include path, indexed, compiled."""
from __future__ import annotations

import shutil

import pytest

from gpu_runner import compiler
from gpu_runner.cutlass_headers import cutlass_include_dir, cutlass_source_root, cutlass_version
from gpu_runner.cutlass_index import build_index, read_indexed_file, search_index
from gpu_runner.directives import allowed_include_dirs, check_directives

needs_cutlass = pytest.mark.skipif(cutlass_source_root() is None, reason="the nvidia-cutlass wheel is not installed")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not compiler._wheel_bins(),
                                reason="nvcc is not installed")

CUTE_KERNEL = """#include <cute/tensor.hpp>
using namespace cute;

extern "C" __global__ void scale_cute(const float* x, float* y, int n) {
    Tensor gx = make_tensor(make_gmem_ptr(x), make_shape(n));
    Tensor gy = make_tensor(make_gmem_ptr(y), make_shape(n));
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < size(gx)) gy(i) = 2.0f * gx(i);
}
"""


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    if cutlass_source_root() is None:
        pytest.skip("the nvidia-cutlass wheel is not installed")
    database = tmp_path_factory.mktemp("cutlass") / "index.sqlite3"
    build_index(cutlass_source_root(), database, version=cutlass_version() or "")
    return database


@needs_cutlass
def test_the_wheel_headers_are_allowed_and_on_the_include_path_with_a_version(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_INCLUDE_DIR", str(tmp_path))
    assert allowed_include_dirs() == [cutlass_include_dir(), tmp_path.resolve()]
    assert f"-I{cutlass_include_dir()}" in compiler.include_flags()
    assert check_directives(CUTE_KERNEL) is None
    assert cutlass_version() and cutlass_version().count(".") == 2
    from gpu_runner.compile_sandbox import sandbox_status, sandboxed

    if sandbox_status().mode == "bwrap":
        command = sandboxed(["/usr/bin/true"], str(tmp_path))
        assert command[command.index(str(cutlass_include_dir())) - 1] == "--ro-bind"
        assert str(cutlass_source_root() / "examples") not in command


@pytest.mark.parametrize("query, expected", [
    ("tiled copy", {"include/cute/atom/copy_atom.hpp", "examples/cute/tutorial/tiled_copy.cu"}),
    ("mma atom sm90", {"include/cute/atom/mma_traits_sm90_gmma.hpp", "include/cute/arch/mma_sm90_gmma.hpp",
                       "include/cute/arch/mma_sm90.hpp", "include/cute/atom/mma_traits_sm90.hpp"}),
    ("cp.async", {"include/cute/arch/copy_sm80.hpp", "include/cutlass/arch/memory_sm80.h"}),
])
def test_the_index_finds_the_files_that_define_a_building_block(index, query, expected):
    hits = search_index(index, query, limit=5)
    assert expected & {hit.path for hit in hits}, [hit.path for hit in hits]
    top = hits[0]
    assert top.line >= top.first_line >= 1 and top.snippet


def test_a_query_of_words_that_nothing_holds_finds_nothing(index):
    assert search_index(index, "zzqx qqzzy") == []
    assert search_index(index, "  ,, ") == []


@needs_cutlass
@pytest.mark.parametrize("path", ["../../../../etc/passwd", "/etc/passwd", "include/../../cutlass_library/__init__.py",
                                  "include/cute/../../../../../../etc/hostname", "tools/util/include/cutlass/util/host_tensor.h",
                                  ""])
def test_files_outside_the_indexed_headers_and_examples_are_refused(path):
    with pytest.raises(PermissionError):
        read_indexed_file(cutlass_source_root(), path)
    assert "cute" in read_indexed_file(cutlass_source_root(), "include/cute/tensor.hpp")


@needs_cutlass
@needs_nvcc
def test_a_cute_kernel_compiles_and_its_facts_name_the_cutlass_version():
    report = compiler.compile_cubin(CUTE_KERNEL, (), sass=False, use_cache=False).report
    assert report.ok, report.log[-2000:]
    assert report.facts.cutlass == cutlass_version()
    assert "scale_cute" in report.facts.kernels


def test_candidates_may_ask_for_sm90a_and_relaxed_constexpr_but_not_for_other_flags():
    from gpu_runner.candidate import arch_option, nvcc_options, nvrtc_options
    from gpu_runner.spec import SpecError

    options = ["-arch=sm_90a", "--expt-relaxed-constexpr", "-maxrregcount=128"]
    assert arch_option(options) == "sm_90a"
    assert nvcc_options(options) == ["--expt-relaxed-constexpr", "-maxrregcount=128"]
    assert "--gpu-architecture=sm_90a" in nvrtc_options(options)
    assert arch_option(["-maxrregcount=64"]) is None
    for refused in ("-arch=sm_90a -I/etc", "-I/etc", "--include-path=/etc", "-arch=compute_90a", "-arch=sm_90"):
        with pytest.raises(SpecError):
            nvrtc_options([refused])


@needs_cutlass
@needs_nvcc
def test_a_variant_of_the_bundled_cute_hgemm_family_builds_for_sm90a_with_warpgroup_mma():
    from pathlib import Path

    from gpu_runner import load_problem, render_variant

    problem = load_problem(Path(__file__).resolve().parents[2] / "kernellab" / "problems" / "hgemm")
    candidate = render_variant(problem, {"BM": 128, "BN": 256, "STAGES": 4, "WGM": 2, "GROUP": 8, "OVERLAP": 1})
    output = compiler.compile_cubin(candidate.source, candidate.compile_options, use_cache=False)
    assert output.report.ok, output.report.log[-2000:]
    facts = output.report.facts
    assert facts.cutlass == cutlass_version() and facts.spill_stores == 0 and facts.stack_bytes == 0
    if not facts.sass:
        pytest.skip("cuobjdump is not installed: no SASS to read")
    # wgmma fed by a cp.async producer through mbarriers, registers moved to the consumers (setmaxnreg).
    assert {"HGMMA.64", "WARPGROUP.ARRIVE", "LDGSTS.E.BYPASS.LTC128B.128", "ARRIVES.LDGSTSBAR.64.ARVCNT",
            "SYNCS.PHASECHK.TRANS64.TRYWAIT", "USETMAXREG.DEALLOC.CTAPOOL", "USETMAXREG.TRY_ALLOC.CTAPOOL",
            "STG.E"} <= set(facts.sass), sorted(facts.sass)
    assert "STG.E.U16" not in facts.sass   # C is written as half2
    assert not {"LDL", "STL"} & {op.split(".")[0] for op in facts.sass}   # nothing in local memory


def test_a_compile_carried_from_another_machine_is_taken_only_from_the_same_nvcc_and_cutlass(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(compiler, "nvcc_version", lambda: "13.0.88")
    monkeypatch.setattr(compiler, "cutlass_version", lambda: "4.2.0")
    # A CuTe source: nvcc compiles it (NVRTC compiles plain ones, test_nvrtc.py carries one of those).
    source = '#include <cute/tensor.hpp>\nextern "C" __global__ void k(float* y) { y[0] = 1.0f; }\n'
    report = {"ok": True, "diagnostics": [], "log": "", "compile_s": 31.0, "compiler": "nvcc 13.0.88",
              "facts": {"registers": 8, "cutlass": "4.2.0", "kernels": {"k": {"registers": 8}}}}
    assert not compiler.seed_cache(source, ["-arch=sm_90a"], "sm_90",
                                   report={**report, "compiler": "nvcc 13.1.0"}, cubin=b"ELF")
    assert not compiler.seed_cache(source, ["-arch=sm_90a"], "sm_90",
                                   report={**report, "facts": {**report["facts"], "cutlass": "4.1.0"}}, cubin=b"ELF")
    assert not compiler.seed_cache(source, ["-arch=sm_90a"], "sm_90", report={**report, "ok": False},
                                   cubin=b"ELF")
    assert compiler.cached_compile(source, ["-arch=sm_90a"], "sm_90") is None
    assert compiler.seed_cache(source, ["-arch=sm_90a"], "sm_90", report=report, cubin=b"ELF")
    # compile_cubin answers from the cache: no nvcc runs (a missing tool would fail the compile).
    monkeypatch.setattr(compiler, "find_tool", lambda name: (_ for _ in ()).throw(compiler.ToolMissing(name)))
    output = compiler.compile_cubin(source, ["-arch=sm_90a"], "sm_90")
    assert output.cubin == b"ELF" and output.report.ok and output.report.facts.registers == 8
    # Its SASS counts were asked for and cannot be taken here (no cuobjdump): said, and not retried.
    assert compiler.SASS_UNAVAILABLE in output.report.log and not output.report.facts.sass
    assert compiler.SASS_UNAVAILABLE in compiler.compile_cubin(source, ["-arch=sm_90a"], "sm_90").report.log
    # The SASS setting is not another compile; another architecture or another source is.
    assert compiler.cached_compile(source, ["-arch=sm_90a"], "sm_90", sass=False) is not None
    assert compiler.cached_compile(source, ["-arch=sm_100a"], "sm_90", sass=False) is None
    assert compiler.cached_compile(source.replace("1.0f", "2.0f"), ["-arch=sm_90a"], "sm_90") is None


@pytest.mark.gpu
@needs_cutlass
def test_on_the_h200_a_cute_hgemm_variant_is_correct_and_timed_beside_cublas():
    from pathlib import Path

    from gpu_runner import MeasureSettings, Runner, load_problem, render_variant

    problem = load_problem(Path(__file__).resolve().parents[2] / "kernellab" / "problems" / "hgemm")
    candidate = render_variant(problem, {"BM": 128, "BN": 256, "STAGES": 4, "WGM": 2, "GROUP": 8, "OVERLAP": 1})
    settings = MeasureSettings(validation_sets=2, min_reps=10, max_reps=30, target_timing_ms=50.0, kernel_timeout_s=10.0)
    with Runner("cupy", settings=settings) as runner:
        result = runner.measure(problem, candidate, seed=1)
        vendor = runner.measure_vendor(problem, seed=1)
    assert result.status == "ok", result.reason
    assert result.compiler.cutlass == cutlass_version()
    assert vendor.status == "ok" and vendor.candidate_name == "vendor:cublas_hgemm", vendor.reason
    # Both speedups are over the same reference: their ratio is the variant's share of cuBLAS's speed.
    print(f"hgemm {candidate.name}: {result.speedup / vendor.speedup:.2f} of cuBLAS")
    assert result.speedup > 10   # tensor cores against one scalar fp32 dot product per thread
