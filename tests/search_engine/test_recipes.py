"""Recipes (issue 21): the vectorise cure written into the user's elementwise kernel with tree-sitter,
its knobs explored like a template's, and a plain reason on the node where it cannot apply."""
import random
import re
from pathlib import Path

import numpy as np
import pytest

from gpu_runner import Candidate as RunnerCandidate
from gpu_runner import MeasureSettings, Runner, reference_candidate
from gpu_runner.compiler import ToolMissing, find_tool
from gpu_runner.runner import gpu_present
from gpu_runner.spec import load_problem
from search_engine.candidates import candidate_hash
from search_engine.generators.base import ProposalContext
from search_engine.generators.recipes import (CannotApply, RecipeGenerator, column_tile_family, grid_stride_family,
                                             halo_tile_family, read_only_family, row_cache_family, unroll_family,
                                             vectorise_family, warp_per_row_family)

TESTS = Path(__file__).resolve().parents[1] / "gpu_runner"
GELU = TESTS / "own_kernels" / "gelu"
SAXPY = TESTS / "problems" / "saxpy"
SOFTMAX = TESTS / "own_kernels" / "row_softmax"

try:
    find_tool("nvcc")
    HAVE_NVCC = True
except ToolMissing:
    HAVE_NVCC = False
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="nvcc is not installed here")


def _reference(folder: Path) -> tuple[object, dict]:
    spec = load_problem(folder)
    return spec, reference_candidate(spec).to_dict()


def _changed(folder: Path, *edits: str) -> dict:
    """The folder's reference kernel with each (before, after) pair of `edits` replaced; each before must be there."""
    _, reference = _reference(folder)
    for before, after in zip(edits[::2], edits[1::2]):
        assert before in reference["source"]
        reference["source"] = reference["source"].replace(before, after)
    return reference


def _context(reference: dict, parent: dict | None = None, known: set | None = None, notes=None) -> ProposalContext:
    return ProposalContext(node_id=0, parent=parent or reference, reference=reference,
                           parent_expert_notes=notes or [], known_hashes=known or set(), rng=random.Random(0))


def test_the_vectorised_gelu_reads_and_writes_16_bytes_per_thread_with_a_scalar_tail():
    _, reference = _reference(GELU)
    family = vectorise_family(reference)
    variant = family.render({"VEC": 4, "BLOCK": 256})
    source = variant["source"]
    assert source.startswith("#define VEC 4\n#define BLOCK 256\n")
    assert "kl_load<VEC>(x_lanes, x + kl_first);" in source and "kl_store<VEC>(out + kl_first, out_lanes);" in source
    assert "out_lanes[kl_lane] = 0.5f * v" in source            # the user's own arithmetic, per lane
    assert "for (long long kl_element = kl_first; kl_element < kl_end; ++kl_element)" in source  # the tail
    assert variant["launch"][0]["grid"] == ["ceil_div(N, 256 * 4)"] and variant["launch"][0]["block"] == ["256"]
    assert family.knobs["VEC"] == [1, 2, 4, 8] and 1024 in family.knobs["BLOCK"]


@pytest.mark.parametrize("folder, why", [
    ("row_rmsnorm", "x is used other than as x[row]"),
    ("column_sum", "x is indexed by (long long)(r + k) * cols + col, not by the element index col (line 10)"),
    ("stencil3x3", "not followed by a bounds check"),
])
def test_kernels_that_are_not_elementwise_are_refused_with_the_reason(folder, why):
    _, reference = _reference(TESTS / "own_kernels" / folder)
    with pytest.raises(CannotApply, match=re.escape(why)):
        vectorise_family(reference)


def test_a_kernel_with_an_early_exit_per_element_is_refused():
    _, reference = _reference(GELU)
    reference["source"] = reference["source"].replace("float v = x[i];", "float v = x[i];\n        if (v == 0.0f) return;")
    with pytest.raises(CannotApply, match="per-element code has a return"):
        vectorise_family(reference)


@needs_nvcc
@pytest.mark.parametrize("folder", [GELU, SAXPY])
def test_every_vector_width_compiles_with_nvcc_and_fits_the_problems_signature(folder):
    spec, reference = _reference(folder)
    family = vectorise_family(reference)
    runner = Runner(backend="static")
    for width in family.knobs["VEC"]:
        candidate = RunnerCandidate.from_dict(family.render({"VEC": width, "BLOCK": 256}), spec)
        report = runner.check(spec, candidate)
        assert report.ok, (width, report.summary())


def test_the_generator_starts_the_cure_at_the_root_and_explores_its_knobs_below_it():
    _, reference = _reference(GELU)
    generator = RecipeGenerator()
    notes = [{"expert": "memory_access", "finding": "Global loads are 4 bytes per thread per instruction (LDG.E), not 16.",
              "evidence": {"narrow_bytes": 16}}]
    proposals = generator.propose(_context(reference, notes=notes), 4)
    first = [p for p in proposals if not p.failed]
    assert len(first) == 4
    assert [p.failure.split(":")[0] for p in proposals if p.failed] == [
        "The warp-per-row recipe (for one thread per row) cannot apply",
        "The column-tile recipe (for one thread per column) cannot apply",
        "The halo-tile recipe (for no reuse of a stencil's loads) cannot apply",
        "The row-window recipe (for many loads per output of a stencil's neighbourhood sum) cannot apply",
        "The row-block recipe (for one pixel per thread) cannot apply",
        "The row-cache recipe (for passes that read the same row again) cannot apply",
        "The unroll recipe (for loops without unrolling) cannot apply"]
    # Every cure that applies starts at once (the diagnosed one first), then the knobs' neighbours.
    assert [p.candidate["name"].split(":")[0] for p in first] == [
        "recipe vectorise", "recipe grid-stride", "recipe read-only-path", "recipe vectorise"]
    assert first[0].candidate["knobs"] == {"VEC": 4, "BLOCK": 256}
    assert first[0].rationale.startswith('vectorise: cures the memory_access diagnosis "Global loads are 4 bytes')
    child = first[0].candidate
    below = generator.propose(_context(reference, parent=child, known={candidate_hash(p.candidate) for p in first}), 3)
    assert below and all(p.candidate["name"].startswith("recipe vectorise") for p in below)
    around = [p for p in below if p.candidate["name"].startswith("recipe vectorise: ")]
    assert around and all(sum(p.candidate["knobs"][k] != child["knobs"][k] for k in child["knobs"]) in (1, 2)
                          for p in around)


def test_a_recipe_that_cannot_apply_says_why_once_on_the_root():
    _, reference = _reference(TESTS / "own_kernels" / "row_rmsnorm")
    reference["source"] = ("extern \"C\" __global__ void row_rmsnorm(const float* x, float* out, int rows, int cols) {\n"
                           "    if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = 1.0f;\n}\n")
    generator = RecipeGenerator()
    first = generator.propose(_context(reference), 4)
    assert [p.failure for p in first] == [
        "The vectorise recipe (for 4-byte global loads and stores) cannot apply: the kernel does not begin by computing "
        "its element index from blockIdx, blockDim and threadIdx.",
        "The warp-per-row recipe (for one thread per row) cannot apply: the kernel does not begin by computing its row "
        "from blockIdx, blockDim and threadIdx.",
        "The column-tile recipe (for one thread per column) cannot apply: the kernel does not begin by computing its "
        "column from blockIdx, blockDim and threadIdx.",
        "The halo-tile recipe (for no reuse of a stencil's loads) cannot apply: the kernel does not begin by computing "
        "x and y from blockIdx, blockDim and threadIdx.",
        "The row-window recipe (for many loads per output of a stencil's neighbourhood sum) cannot apply: the kernel "
        "does not begin by computing x and y from blockIdx, blockDim and threadIdx.",
        "The row-block recipe (for one pixel per thread) cannot apply: the kernel does not begin by computing x and y "
        "from blockIdx, blockDim and threadIdx.",
        "The grid-stride recipe (for one element per thread over a grid of many waves) cannot apply: the kernel does "
        "not begin by computing its element index from blockIdx, blockDim and threadIdx.",
        "The row-cache recipe (for passes that read the same row again) cannot apply: no two loops at the kernel's "
        "top level walk the same columns, so nothing is read twice.",
        "The unroll recipe (for loops without unrolling) cannot apply: the kernel has no for loop to unroll.",
        "The read-only-path recipe (for loads outside the read-only path) cannot apply: the kernel reads no buffer it "
        "does not also write."]
    assert generator.propose(_context(reference), 4) == first  # nothing applies: the same sentence, no candidate


def test_the_refusal_is_not_repeated_when_the_root_is_expanded_again():
    _, gelu = _reference(GELU)
    generator = RecipeGenerator()
    first = generator.propose(_context(gelu), 2)
    assert any(p.failed for p in first)
    started = {candidate_hash(p.candidate) for p in first if not p.failed}
    again = generator.propose(_context(gelu, known=started), 2)
    assert again and not any(p.failed for p in again)
    assert {candidate_hash(p.candidate) for p in again}.isdisjoint(started)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_present(), reason="no NVIDIA GPU here; run `pytest -m gpu` on a GPU machine")
def test_on_the_gpu_the_vectorised_gelu_is_correct_at_an_odd_size():
    spec, reference = _reference(GELU)
    family = vectorise_family(reference)
    settings = MeasureSettings(validation_sets=2, min_reps=5, max_reps=10, target_timing_ms=10.0, kernel_timeout_s=5.0)
    with Runner("cupy", settings=settings) as runner:
        for width in (2, 4, 8):
            result = runner.measure(spec, RunnerCandidate.from_dict(family.render({"VEC": width, "BLOCK": 128}), spec))
            assert result.status == "ok", (width, result.reason)


def test_a_row_softmax_gets_a_warp_per_row_with_its_max_and_sum_combined_by_shuffles():
    _, reference = _reference(SOFTMAX)
    family = warp_per_row_family(reference)
    variant = family.render({"WARPS": 8})
    source = variant["source"]
    assert "int row = (int)(kl_thread / 32);" in source
    assert source.count("for (int c = kl_lane + (0); c < cols; c += 32)") == 3
    assert "largest = kl_warp_max(largest);" in source and "total = kl_warp_sum(total);" in source
    assert variant["launch"][0]["grid"] == ["ceil_div(ROWS, 8)"] and variant["launch"][0]["block"] == ["8 * 32"]


@pytest.mark.parametrize("change", [
    ("for (int c = 0; c < cols; ++c) total += ", "for (int c = 1; c < cols; c *= 2) total += ", "steps by c *= 2"),
    ("for (int c = 0; c < cols; ++c) total += ", "for (int c = 0; c < cols; c += c) total += ", "steps by c += c"),
    ("total += __expf(in[c] - largest);", "total = total * 0.5f + __expf(in[c] - largest);",
     "updates total by total = total * 0.5f"),
    ("float* result", "if (threadIdx.x == 0) out[0] = 0.0f;\n    float* result", "reads threadIdx.x"),
])
def test_a_row_loop_the_warp_cannot_share_is_refused_with_the_reason(change):
    before, after, reason = change
    with pytest.raises(CannotApply, match=re.escape(reason)):
        warp_per_row_family(_changed(SOFTMAX, before, after))


@needs_nvcc
def test_every_warp_count_of_the_row_softmax_compiles_and_fits_the_signature():
    spec, reference = _reference(SOFTMAX)
    family = warp_per_row_family(reference)
    runner = Runner(backend="static")
    for warps in family.knobs["WARPS"]:
        report = runner.check(spec, RunnerCandidate.from_dict(family.render({"WARPS": warps}), spec))
        assert report.ok, (warps, report.summary())
        assert any(op.startswith("SHFL.BFLY") for op in report.facts.sass)


def test_at_the_root_of_a_row_softmax_the_warp_cure_starts_and_the_vector_cure_says_why_not():
    _, reference = _reference(SOFTMAX)
    notes = [{"expert": "warps", "finding": "The kernel runs one thread per row.", "advice": "Use a warp per row."}]
    proposals = RecipeGenerator().propose(_context(reference, notes=notes), 3)
    started = [p for p in proposals if not p.failed]
    assert started[0].candidate["knobs"] == {"WARPS": 4}
    assert started[0].rationale.startswith('warp-per-row: cures the warps diagnosis "The kernel runs one thread per row."')
    assert [p.failure for p in proposals if p.failed] == [
        "The vectorise recipe (for 4-byte global loads and stores) cannot apply: x is used other than as x[row] (line 4).",
        "The column-tile recipe (for one thread per column) cannot apply: code at line 6-10 sits between the row loops, "
        "so they cannot be split as one reduction.",
        "The halo-tile recipe (for no reuse of a stencil's loads) cannot apply: the kernel does not begin by computing "
        "x and y from blockIdx, blockDim and threadIdx.",
        "The row-window recipe (for many loads per output of a stencil's neighbourhood sum) cannot apply: the kernel "
        "does not begin by computing x and y from blockIdx, blockDim and threadIdx.",
        "The row-block recipe (for one pixel per thread) cannot apply: the kernel does not begin by computing x and y "
        "from blockIdx, blockDim and threadIdx.",
        "The row-cache recipe (for passes that read the same row again) cannot apply: the loops step one column at a "
        "time, so one thread would hold the whole row in registers; the cache pays where a row's columns are split "
        "over lanes (on top of warp-per-row)."]


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_present(), reason="no NVIDIA GPU here; run `pytest -m gpu` on a GPU machine")
def test_on_the_gpu_the_warp_per_row_softmax_is_correct_in_every_size_case():
    spec, reference = _reference(SOFTMAX)
    family = warp_per_row_family(reference)
    settings = MeasureSettings(validation_sets=2, min_reps=5, max_reps=10, target_timing_ms=10.0, kernel_timeout_s=5.0)
    with Runner("cupy", settings=settings) as runner:
        for warps in (1, 4, 32):
            result = runner.measure(spec, RunnerCandidate.from_dict(family.render({"WARPS": warps}), spec))
            assert result.status == "ok", (warps, result.reason)


# ---- the other cures (issue 21, part 1): chunked rows, column tiles, halo tiles, grid-stride, unroll, read-only ----
OWN = TESTS / "own_kernels"


def test_a_chunked_row_loop_is_split_by_chunks_and_its_scalar_tail_is_left_to_the_one_lane_that_needs_it():
    _, reference = _reference(OWN / "row_rmsnorm")
    source = warp_per_row_family(reference).render({"WARPS": 4})["source"]
    assert "for (c += kl_lane * (CHUNK); c + CHUNK <= cols; c += 32 * (CHUNK))" in source
    assert "    for (; c < cols; ++c) sum += in[c] * in[c];\n    sum = kl_warp_sum(sum);" in source  # tail, then combine
    assert source.count("kl_warp_sum(sum)") == 1
    assert "for (int j = kl_lane + (0); j < cols; j += 32)" in source


def test_a_column_sum_gets_column_tiles_with_rows_split_over_threadidx_y_and_combined_in_shared_memory():
    _, reference = _reference(OWN / "column_sum")
    family = column_tile_family(reference)
    variant = family.render({"TILE_C": 32, "TILE_R": 8, "SPLIT": 1})
    source = variant["source"]
    body = source[source.index("extern \"C\""):]
    assert "const int kl_lane = blockIdx.y * TILE_R + threadIdx.y;" in body
    assert "const bool kl_active = col < (cols);" in body
    assert ("for (r += kl_lane * (ROWS_PER_STEP); r + ROWS_PER_STEP <= rows; r += (TILE_R * SPLIT) * (ROWS_PER_STEP))"
            in body)
    # Every thread reaches the combine; the bounds check moves below it, before the write.
    assert body.index("if (kl_active) {") < body.index("sum = kl_tile_sum(sum);") < body.index("if (col >= cols) return;") \
        < body.index("out[col] = sum;")
    assert variant["launch"] == [{**reference["launch"][0], "grid": ["ceil_div(COLS, 32)", "1"], "block": ["32", "8"]}]
    assert family.constraints == ["TILE_C * TILE_R <= 1024"]


def test_a_stored_column_sum_may_also_split_its_rows_over_blocks_adding_into_an_output_zeroed_first():
    _, reference = _reference(OWN / "column_sum")
    family = column_tile_family(reference)
    assert family.knobs["SPLIT"] == [1, 2, 4, 8, 16]
    variant = family.render({"TILE_C": 64, "TILE_R": 4, "SPLIT": 8})
    assert variant["launch"][0] == {"memset": "out", "value": 0}
    assert variant["launch"][1]["grid"] == ["ceil_div(COLS, 64)", "8"]
    assert "if (threadIdx.y == 0) atomicAdd(&out[col], sum);" in variant["source"]
    # A column that stores anything but the sum keeps one block per column tile.
    reference["source"] = reference["source"].replace("out[col] = sum;", "out[col] = sum * 0.5f;")
    assert column_tile_family(reference).knobs["SPLIT"] == [1]


@pytest.mark.parametrize("folder, why", [
    ("row_rmsnorm", "code at line 9-15 sits between the row loops"),
    ("gelu", "the column's code has no loop over its rows"),
    ("stencil3x3", "not followed by a bounds check"),
])
def test_a_kernel_that_is_not_one_thread_per_column_gets_no_column_tiles_with_the_reason(folder, why):
    _, reference = _reference(OWN / folder)
    with pytest.raises(CannotApply, match=re.escape(why)):
        column_tile_family(reference)


def test_the_stencil_loads_its_tile_and_halo_once_before_the_bounds_check_and_reads_the_tile_where_it_can():
    _, reference = _reference(OWN / "stencil3x3")
    family = halo_tile_family(reference)
    variant = family.render({"BX": 64, "BY": 4})
    source = variant["source"]
    assert "#define KL_HALO 1\n" in source  # the loops' radius
    assert source.index("__syncthreads();") < source.index("if (x >= w || y >= h) return;")
    assert "kl_tile[kl_i][kl_j] = img[(kl_gy) * (w) + (kl_gx)];" in source
    # A read outside the tile falls back to the image, so the radius only matters for speed.
    assert ("sum += (kl_in_tile((yy) - kl_y0, (xx) - kl_x0, (yy), (xx), h, w) ? kl_tile[(yy) - kl_y0][(xx) - kl_x0] "
            ": img[yy * w + xx]);") in source
    assert variant["launch"][0]["grid"] == ["ceil_div(W, 64)", "ceil_div(H, 4)"]
    assert variant["launch"][0]["block"] == ["64", "4"]


@pytest.mark.parametrize("change, why", [
    (("if (x >= w || y >= h) return;", "if (x >= w) return;"), "the bounds check does not bound both x and y"),
    (("sum += img[yy * w + xx];", "sum += img[yy * h + xx];"), "the image's row length h is not the bound w of x"),
    (("sum += img[yy * w + xx];", "sum += img[yy + xx];"), "is not indexed as ROW * W + COL with W a parameter"),
])
def test_a_stencil_the_halo_tile_cannot_copy_safely_is_refused_with_the_reason(change, why):
    with pytest.raises(CannotApply, match=re.escape(why)):
        halo_tile_family(_changed(OWN / "stencil3x3", *change))


def test_grid_stride_gives_each_thread_items_a_grid_apart():
    _, reference = _reference(GELU)
    variant = grid_stride_family(reference).render({"ITEMS": 8, "BLOCK": 128})
    source = variant["source"]
    assert "kl_element += kl_stride" in source and "const int i = (int)kl_element;" in source
    assert "out[i] = 0.5f * v" in source
    assert variant["launch"][0]["grid"] == ["ceil_div(N, 128 * 8)"] and variant["launch"][0]["block"] == ["128"]


def test_unroll_puts_a_pragma_with_the_knobs_factor_on_each_loop_that_has_none():
    _, reference = _reference(OWN / "column_sum")
    source = unroll_family(reference).render({"UNROLL": 2})["source"]
    assert "constexpr int kl_unroll = UNROLL;" in source
    assert source.count("#pragma unroll kl_unroll") == 2   # the two row loops; the inner one keeps its own 8
    assert source.count("#pragma unroll 8") == 1


def test_unroll_never_nests_two_unrolled_loops():
    _, reference = _reference(OWN / "row_softmax")
    strided = {**reference, **grid_stride_family(reference).render({"ITEMS": 4, "BLOCK": 128})}
    source = unroll_family(strided).render({"UNROLL": 16})["source"]
    # the three column loops are unrolled, not the grid-stride loop around them (16 x 16 copies: NVRTC
    # took 4.5 s on that softmax on the H200 host)
    assert source.count("#pragma unroll kl_unroll") == 3
    assert "#pragma unroll kl_unroll\n    for (long long kl_element" not in source
    # a loop inside a loop that is unrolled already is left alone
    inner = reference["source"].replace("for (int c = 0; c < cols; ++c) largest",
                                        "#pragma unroll 4\n    for (int c = 0; c < cols; ++c) largest")
    outer = {**reference, "source": inner.replace(
        "    float total = 0.0f;", "    float total = 0.0f;\n#pragma unroll 2\n    for (int t = 0; t < 1; ++t)")}
    source = unroll_family(outer).render({"UNROLL": 8})["source"]
    assert source.count("#pragma unroll kl_unroll") == 1          # only the write loop
    assert "#pragma unroll kl_unroll\n    for (int c = 0; c < cols; ++c) result[c]" in source
    # and where every bare loop sits inside an unrolled one, the recipe says so
    only = {**reference, "source": "extern \"C\" __global__ void k(float* y, int n) {\n#pragma unroll\n"
                                   "    for (int i = 0; i < 4; ++i) {\n        for (int j = 0; j < n; ++j) y[j] += i;\n    }\n}\n",
            "launch": [{**reference["launch"][0], "kernel": "k"}]}
    with pytest.raises(CannotApply, match="inside a loop that is unrolled already"):
        unroll_family(only)


def test_the_read_only_path_marks_buffers_restrict_and_reads_the_unwritten_ones_through_ldg():
    _, reference = _reference(OWN / "row_softmax")
    family = read_only_family(reference)
    source = family.render({"RESTRICT": 1, "LDG": 1, "MINB": 2})["source"]
    assert "__global__ KL_BOUNDS void row_softmax(const float* KL_RESTRICT x, float* KL_RESTRICT out" in source
    assert "fmaxf(largest, KL_READ(in[c]))" in source            # through the local pointer made from x
    assert "result[c] = __expf(KL_READ(in[c]) - largest) / total;" in source   # a write is left alone
    assert "#define KL_BOUNDS __launch_bounds__(128, MINB)" in source
    reference["source"] = reference["source"].replace("const float* x", "const float* __restrict__ x")
    with pytest.raises(CannotApply, match="already states __launch_bounds__ or __restrict__"):
        read_only_family(reference)


def _corners(family) -> list[dict]:
    import itertools

    names = list(family.knobs)
    points = [dict(zip(names, combo)) for combo in itertools.product(*family.knobs.values())]
    from klexpr import evaluate

    valid = [p for p in points if all(evaluate(c, p) for c in family.constraints)]
    return [family.start, valid[0], valid[-1]]


@needs_nvcc
@pytest.mark.parametrize("folder, derive", [
    ("column_sum", column_tile_family), ("stencil3x3", halo_tile_family), ("gelu", grid_stride_family),
    ("row_rmsnorm", warp_per_row_family), ("column_sum", unroll_family), ("stencil3x3", unroll_family),
    ("row_softmax", read_only_family), ("stencil3x3", read_only_family),
])
def test_each_cure_compiles_with_nvcc_at_its_start_and_its_corners_and_fits_the_signature(folder, derive):
    spec, reference = _reference(OWN / folder)
    family = derive(reference)
    runner = Runner(backend="static")
    for knobs in _corners(family):
        report = runner.check(spec, RunnerCandidate.from_dict(family.render(knobs), spec))
        assert report.ok, (knobs, report.summary())


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_present(), reason="no NVIDIA GPU here; run `pytest -m gpu` on a GPU machine")
@pytest.mark.parametrize("folder, derive", [
    ("column_sum", column_tile_family), ("stencil3x3", halo_tile_family), ("gelu", grid_stride_family),
    ("row_rmsnorm", warp_per_row_family), ("column_sum", unroll_family), ("row_softmax", read_only_family),
    ("row_softmax", lambda reference: row_cache_family(warp_per_row_family(reference).render({"WARPS": 4}))),
])
def test_on_the_gpu_each_cure_is_correct_in_every_size_case(folder, derive):
    spec, reference = _reference(OWN / folder)
    family = derive(reference)
    settings = MeasureSettings(validation_sets=2, min_reps=5, max_reps=10, target_timing_ms=10.0, kernel_timeout_s=5.0)
    with Runner("cupy", settings=settings) as runner:
        for knobs in _corners(family):
            result = runner.measure(spec, RunnerCandidate.from_dict(family.render(knobs), spec))
            assert result.status == "ok", (knobs, result.reason)


def _below(generator, reference, parent, n=6, known=None):
    return generator.propose(_context(reference, parent=parent, known=known), n)


def test_below_a_cure_the_modifiers_start_on_top_of_that_very_variant_and_are_explored_there():
    _, reference = _reference(SOFTMAX)
    generator = RecipeGenerator()
    cure = warp_per_row_family(reference).render({"WARPS": 8})
    below = _below(generator, reference, cure)
    names = [p.candidate["name"] for p in below]
    assert names[:3] == ["recipe warp-per-row[WARPS=8]+row-cache: CACHE=32, RECIP=1",
                         "recipe warp-per-row[WARPS=8]+unroll: UNROLL=4",
                         "recipe warp-per-row[WARPS=8]+read-only-path: RESTRICT=1, LDG=1, MINB=0"]
    assert {"recipe warp-per-row: WARPS=4", "recipe warp-per-row: WARPS=16"} <= set(names)
    stacked = below[1].candidate
    assert "#define WARPS 8\n" in stacked["source"] and "#pragma unroll kl_unroll" in stacked["source"]
    assert stacked["launch"][0]["block"] == ["8 * 32"]              # the cure's launch, kept
    deeper = _below(generator, reference, stacked, 3)
    assert deeper and all(p.candidate["name"].startswith("recipe warp-per-row[WARPS=8]+unroll: UNROLL=")
                          for p in deeper)
    assert not any("+" in p.candidate["name"].split(":")[0].split("+", 1)[1] for p in deeper)  # no third layer


@needs_nvcc
@pytest.mark.parametrize("folder, derive, knobs", [
    ("row_softmax", warp_per_row_family, {"WARPS": 4}), ("row_rmsnorm", warp_per_row_family, {"WARPS": 8}),
    ("column_sum", column_tile_family, {"TILE_C": 32, "TILE_R": 16, "SPLIT": 4}),
    ("stencil3x3", halo_tile_family, {"BX": 32, "BY": 8}), ("gelu", vectorise_family, {"VEC": 4, "BLOCK": 256}),
])
def test_the_modifiers_on_top_of_each_cure_compile_with_nvcc(folder, derive, knobs):
    spec, reference = _reference(OWN / folder)
    cure = derive(reference).render(knobs)
    stacked = [p.candidate for p in _below(RecipeGenerator(), reference, cure, 6) if "+" in p.candidate["name"]]
    # the row cache goes only on the cures whose passes walk the same columns twice (the softmax's three)
    assert [c["name"].split(":")[0].rsplit("+", 1)[1] for c in stacked] == \
        (["row-cache"] if folder == "row_softmax" else []) + ["unroll", "read-only-path"]
    runner = Runner(backend="static")
    for candidate in stacked:
        report = runner.check(spec, RunnerCandidate.from_dict(candidate, spec))
        assert report.ok, (candidate["name"], report.summary())


# ---- row-block and row-window (issue 21: the 3x3 stencil at 45% of its roofline) ------------------------
from klexpr import evaluate  # noqa: E402

from search_engine.generators.recipes import row_block_family, row_window_family  # noqa: E402

from . import host_cuda  # noqa: E402

STENCIL = OWN / "stencil3x3"
needs_gxx = pytest.mark.skipif(host_cuda.compiler() is None, reason="g++ is not installed here")
_HEAD = ("extern \"C\" __global__ void box3x3(const float* img, float* out, int h, int w) {\n"
         "    int x = blockIdx.x * blockDim.x + threadIdx.x;\n"
         "    int y = blockIdx.y * blockDim.y + threadIdx.y;\n"
         "    if (x >= w || y >= h) return;\n")
# The same neighbourhood sums written other ways: (source, radius, edge rule, scale of the sum, then a function of it).
ZERO_5X5 = (_HEAD + "    float acc = 0.0f;\n"
            "    for (int dy = -2; dy <= 2; ++dy)\n"
            "        for (int dx = -2; dx <= 2; ++dx) {\n"
            "            int yy = y + dy, xx = x + dx;\n"
            "            if (yy >= 0 && yy < h && xx >= 0 && xx < w) acc += img[yy * w + xx];\n"
            "        }\n"
            "    out[y * w + x] = acc / 25.0f;\n}\n")
ONE_LOOP = (_HEAD + "    float sum = 0.0f;\n"
            "    for (int k = 0; k < 9; ++k)\n"
            "        sum += img[min(max(y + k / 3 - 1, 0), h - 1) * w + min(max(x + k % 3 - 1, 0), w - 1)];\n"
            "    out[y * w + x] = sum * (1.0f / 9.0f);\n}\n")
WRITTEN_OUT = (_HEAD + "    int xl = max(x - 1, 0), xr = min(x + 1, w - 1), yu = max(y - 1, 0), yd = min(y + 1, h - 1);\n"
               "    float s = img[yu * w + xl] + img[yu * w + x] + img[yu * w + xr];\n"
               "    s += img[y * w + xl] + img[y * w + x] + img[y * w + xr];\n"
               "    s = s + (img[yd * w + xl] + img[yd * w + x]) + img[yd * w + xr];\n"
               "    out[y * w + x] = fmaxf(s - 1.0f, 0.0f);\n}\n")
WRAPPED = (_HEAD.replace("    if (x >= w || y >= h) return;\n", "    if (x < w && y < h) {\n")
           + "        float sum = 0.0f;\n"
           "        for (int dy = -1; dy <= 1; ++dy)\n"
           "            for (int dx = -1; dx <= 1; ++dx) sum += img[min(max(y + dy, 0), h - 1) * w + min(max(x + dx, 0), w - 1)];\n"
           "        out[y * w + x] = sum * (1.0f / 9.0f);\n    }\n}\n")
MACRO_7X7 = ("#define RADIUS 3\n" + _HEAD + "    float total = 0.0f;\n"
             "    for (int dy = -RADIUS; dy <= RADIUS; dy++) {\n"
             "        const int row = min(max(y + dy, 0), h - 1);\n"
             "        for (int dx = -RADIUS; dx <= RADIUS; dx++) total += img[row * w + min(max(x + dx, 0), w - 1)];\n"
             "    }\n"
             "    out[y * w + x] = total * (1.0f / 49.0f) + 0.5f * (float)x / (float)w;\n}\n")
STENCILS = {  # name: (source or None for the problem's own, radius, edge, the stored value from the sum)
    "own 3x3 clamped": (None, 1, "edge", lambda s: s * np.float32(1.0 / 9.0)),
    "5x5 zero-padded": (ZERO_5X5, 2, "constant", lambda s: s / 25.0),
    "3x3 in one loop": (ONE_LOOP, 1, "edge", lambda s: s * np.float32(1.0 / 9.0)),
    "3x3 written out": (WRITTEN_OUT, 1, "edge", lambda s: np.maximum(s - 1.0, 0.0)),
    "3x3 inside if (x < w && y < h)": (WRAPPED, 1, "edge", lambda s: s * np.float32(1.0 / 9.0)),
    "7x7 radius macro": (MACRO_7X7, 3, "edge",
                         lambda s: s * np.float32(1.0 / 49.0) + 0.5 * np.arange(s.shape[1]) / s.shape[1]),
}
# (H, W): the problem's small size (67 x 129), widths VEC divides and does not, narrower than the stencil.
CPU_SIZES = [(67, 129), (33, 64), (9, 18), (5, 3), (1, 1)]


def _stencil(name: str) -> tuple[object, dict]:
    spec, reference = _reference(STENCIL)
    source = STENCILS[name][0]
    if source is not None:
        reference["source"] = source
    return spec, reference


def _expected(image: np.ndarray, name: str) -> np.ndarray:
    _, radius, edge, value = STENCILS[name]
    h, w = image.shape
    padded = np.pad(image.astype(np.float64), radius, mode=edge)
    total = sum(padded[radius + dy:radius + dy + h, radius + dx:radius + dx + w]
                for dy in range(-radius, radius + 1) for dx in range(-radius, radius + 1))
    return value(total)


def _launch_on_cpu(variant: dict, h: int, w: int) -> tuple[tuple[int, int], tuple[int, int]]:
    step = variant["launch"][0]
    sizes = {"H": h, "W": w}
    return (tuple(int(evaluate(e, sizes)) for e in step["grid"]), tuple(int(evaluate(e, sizes)) for e in step["block"]))


def test_the_stencil_gets_a_rolling_window_of_row_sums_with_vector_loads_and_its_own_edge_rule():
    _, reference = _reference(STENCIL)
    family = row_window_family(reference)
    assert family.knobs["VEC"] == [1, 2, 4] and family.knobs["ROWS"] == [1, 2, 4, 8]
    assert family.start == {"VEC": 4, "ROWS": 2, "BX": 64, "BY": 4}
    variant = family.render({"VEC": 4, "ROWS": 2, "BX": 64, "BY": 4})
    source = variant["source"]
    assert "#define KL_R 1\n#define KL_CLAMP 1\n" in source
    assert "__ldg(reinterpret_cast<const float4*>(p + x0))" in source
    assert "*reinterpret_cast<float4*>(kl_to) = make_float4(" in source
    assert "const bool kl_vector = VEC > 1 && kl_x0 + VEC <= (w) && (w) % VEC == 0" in source   # else the scalar path
    assert "kl_out[kl_k] = sum * (1.0f / 9.0f);" in source   # the user's own stored value, per pixel
    assert variant["launch"][0]["grid"] == ["ceil_div(W, 64 * 4)", "ceil_div(H, 4 * 2)"]
    assert variant["launch"][0]["block"] == ["64", "4"]
    zero = row_window_family(_stencil("5x5 zero-padded")[1]).render({"VEC": 2, "ROWS": 4, "BX": 32, "BY": 8})["source"]
    assert "#define KL_R 2\n#define KL_CLAMP 0\n" in zero and "kl_out[kl_k] = acc / 25.0f;" in zero


@needs_nvcc
@pytest.mark.parametrize("name", list(STENCILS))
def test_every_row_window_knob_point_compiles_with_nvcc_and_fits_the_signature(name):
    spec, reference = _stencil(name)
    family = row_window_family(reference)
    candidates = [RunnerCandidate.from_dict(family.render({"VEC": vec, "ROWS": rows, "BX": 64, "BY": 4}), spec)
                  for vec in family.knobs["VEC"] for rows in family.knobs["ROWS"]]
    for candidate, report in zip(candidates, Runner(backend="static").check_many(spec, candidates)):
        assert report.ok, (candidate.name, report.summary())


@needs_gxx
@pytest.mark.parametrize("name", list(STENCILS))
def test_on_the_cpu_every_row_window_knob_point_equals_numpy_at_every_size_inside_the_buffers(name, tmp_path):
    """Thread by thread on the CPU (g++ with AddressSanitizer): equal to NumPy's sum with the same edge
    rule at sizes VEC divides and does not, and no load or store outside the image."""
    _, reference = _stencil(name)
    family = row_window_family(reference)
    rng = np.random.default_rng(0)
    for vec in family.knobs["VEC"]:
        for rows in family.knobs["ROWS"]:
            for bx, by in ((64, 4), (32, 1)) if rows in (1, 8) else ((64, 4),):
                variant = family.render({"VEC": vec, "ROWS": rows, "BX": bx, "BY": by})
                executable = host_cuda.build(variant["source"], "box3x3", ["in", "out", "int", "int"], tmp_path)
                for h, w in CPU_SIZES:
                    image = rng.standard_normal((h, w)).astype(np.float32)
                    grid, block = _launch_on_cpu(variant, h, w)
                    (out,) = host_cuda.run(executable, [image, ("out", (h, w)), h, w], grid, block, tmp_path)
                    np.testing.assert_allclose(out, _expected(image, name), rtol=1e-5, atol=1e-5,
                                               err_msg=f"{name} VEC={vec} ROWS={rows} {bx}x{by} at {h}x{w}")


@needs_gxx
def test_the_cpu_check_catches_a_window_that_reads_past_the_image(tmp_path):
    """The check itself can fail: the window with its edge rule removed reads outside the buffer."""
    _, reference = _reference(STENCIL)
    variant = row_window_family(reference).render({"VEC": 4, "ROWS": 2, "BX": 64, "BY": 4})
    broken = variant["source"].replace("row = min(max(row, 0), h - 1);", "")
    assert broken != variant["source"]
    executable = host_cuda.build(broken, "box3x3", ["in", "out", "int", "int"], tmp_path)
    image = np.ones((9, 18), np.float32)
    grid, block = _launch_on_cpu(variant, 9, 18)
    with pytest.raises(AssertionError, match="AddressSanitizer"):
        host_cuda.run(executable, [image, ("out", (9, 18)), 9, 18], grid, block, tmp_path)


_LOOP = ("    for (int dy = -1; dy <= 1; ++dy) {\n        for (int dx = -1; dx <= 1; ++dx) {\n"
         "            int yy = min(max(y + dy, 0), h - 1);\n            int xx = min(max(x + dx, 0), w - 1);\n"
         "            sum += img[yy * w + xx];\n")


@pytest.mark.parametrize("change, why", [
    (("sum += img[yy * w + xx];", "sum += 0.5f * img[yy * w + xx];"),
     "0.5f * img[yy * w + xx] is not a sum of the image's pixels: a weight per tap"),
    (("sum += img[yy * w + xx];", "if (dx == 0 || dy == 0) sum += img[yy * w + xx];"),
     "the sum at an inner pixel reads 5 taps at offsets {(-1, +0), (+0, -1), (+0, +0), (+0, +1), (+1, +0)}, not each of"),
    (("const float* img", "const int* img"), "img holds int, and the recipe sums float images only"),
    (("float* out", "double* out"), "out holds double, and the recipe writes float images only"),
    (("int h, int w) {", "int h, int w, int r) {"), None),   # a parameter that is not used changes nothing
    (("for (int dy = -1; dy <= 1; ++dy)", "for (int dy = -h; dy <= 1; ++dy)"),
     "the sum at an inner pixel reads"),
    (("int h, int w) {", "int h, int w, int r) {", "for (int dy = -1; dy <= 1; ++dy)", "for (int dy = -r; dy <= r; ++dy)"),
     "the taps depend on r, which is not x, y, the image's width or height"),
    (("int yy = min(max(y + dy, 0), h - 1);", "int yy = y + dy < 0 ? -(y + dy) : y + dy;"),
     "which is neither clamped rows and columns (min/max into the image) nor the taps inside the image"),
    (("out[y * w + x] = sum * (1.0f / 9.0f);", "out[x * w + y] = sum * (1.0f / 9.0f);"),
     "the store out[x * w + y] (line 13) is not at [y * w + x]"),
    (("out[y * w + x] = sum * (1.0f / 9.0f);", "out[y * w + x] = sum * img[y * w + x];"),
     "reads memory or has a side effect"),
    (("if (x >= w || y >= h) return;", "if (x >= w) return;"), "the bounds check does not bound both x and y"),
])
def test_a_kernel_that_is_not_an_unweighted_neighbourhood_sum_gets_no_row_window_with_the_reason(change, why):
    reference = _changed(STENCIL, *change)
    if why is None:
        assert row_window_family(reference).knobs["VEC"] == [1, 2, 4]
        return
    with pytest.raises(CannotApply, match=re.escape(why)):
        row_window_family(reference)


@pytest.mark.parametrize("folder", ["gelu", "row_rmsnorm", "column_sum"])
def test_kernels_that_are_not_stencils_get_no_row_window(folder):
    _, reference = _reference(OWN / folder)
    with pytest.raises(CannotApply, match="does not begin by computing x and y"):
        row_window_family(reference)


def test_row_block_gives_each_thread_rows_consecutive_rows_each_with_the_original_bounds_check():
    _, reference = _reference(STENCIL)
    family = row_block_family(reference)
    assert family.knobs == {"ROWS": [2, 4, 8], "BX": [16, 32, 64, 128, 256], "BY": [1, 2, 4, 8, 16]}
    variant = family.render({"ROWS": 4, "BX": 64, "BY": 4})
    source = variant["source"]
    assert "const int kl_y0 = (blockIdx.y * blockDim.y + threadIdx.y) * ROWS;" in source
    assert "for (int kl_r = 0; kl_r < ROWS; ++kl_r) {\n        int y = kl_y0 + kl_r;\n" in source
    assert "if (x >= w || y >= h) continue;" in source and "return" not in source
    assert variant["launch"][0]["grid"] == ["ceil_div(W, 64)", "ceil_div(H, 4 * 4)"]


@pytest.mark.parametrize("change, why", [
    (("if (x >= w || y >= h) return;", "if (x >= w) return;"), "no if compares y with the image's height"),
    (("float sum = 0.0f;", "float sum = threadIdx.y * 0.0f;"), "reads threadIdx.y outside y's declaration"),
    (("sum += img[yy * w + xx];", "if (img[yy * w + xx] < -100.0f) return;\n            sum += img[yy * w + xx];"),
     "is inside a loop or switch, so it cannot become a continue"),
])
def test_a_kernel_whose_rows_cannot_be_repeated_per_thread_gets_no_row_block_with_the_reason(change, why):
    with pytest.raises(CannotApply, match=re.escape(why)):
        row_block_family(_changed(STENCIL, *change))


def test_a_kernel_with_shared_memory_and_barriers_gets_no_row_block():
    _, reference = _reference(STENCIL)
    tiled = halo_tile_family(reference).render({"BX": 32, "BY": 8})
    with pytest.raises(CannotApply, match="threads that share memory or meet at barriers cannot each take several rows"):
        row_block_family(tiled)


@needs_nvcc
def test_every_row_block_knob_point_and_the_read_only_path_on_top_compile_with_nvcc():
    spec, reference = _reference(STENCIL)
    family = row_block_family(reference)
    variants = [family.render({"ROWS": rows, "BX": 64, "BY": 4}) for rows in family.knobs["ROWS"]]
    stacked = [p.candidate for p in _below(RecipeGenerator(), reference, variants[1], 4) if "+" in p.candidate["name"]]
    # no unroll on top: the stencil's loops sit inside the unrolled loop over the thread's rows
    assert [c["name"].split(":")[0] for c in stacked] == ["recipe row-block[ROWS=4,BX=64,BY=4]+read-only-path"]
    with pytest.raises(CannotApply, match="inside a loop that is unrolled already"):
        unroll_family(variants[1])
    assert "__ldg(&(value))" in stacked[0]["source"] and "for (int kl_r = 0; kl_r < ROWS; ++kl_r)" in stacked[0]["source"]
    candidates = [RunnerCandidate.from_dict(c, spec) for c in variants + stacked]
    for candidate, report in zip(candidates, Runner(backend="static").check_many(spec, candidates)):
        assert report.ok, (candidate.name, report.summary())


@needs_gxx
@pytest.mark.parametrize("source", [None, WRAPPED], ids=["return guard", "if-wrapped body"])
def test_on_the_cpu_the_row_block_stencil_and_the_read_only_path_on_top_equal_numpy(source, tmp_path):
    _, reference = _reference(STENCIL)
    if source is not None:
        reference["source"] = source
    family = row_block_family(reference)
    rng = np.random.default_rng(1)
    for rows in family.knobs["ROWS"]:
        variant = family.render({"ROWS": rows, "BX": 32, "BY": 2})
        on_top = read_only_family(variant).render({"RESTRICT": 1, "LDG": 1, "MINB": 0})
        for candidate in (variant, on_top):
            executable = host_cuda.build(candidate["source"], "box3x3", ["in", "out", "int", "int"], tmp_path)
            for h, w in CPU_SIZES:
                image = rng.standard_normal((h, w)).astype(np.float32)
                grid, block = _launch_on_cpu(candidate, h, w)
                (out,) = host_cuda.run(executable, [image, ("out", (h, w)), h, w], grid, block, tmp_path)
                np.testing.assert_allclose(out, _expected(image, "own 3x3 clamped"), rtol=1e-5, atol=1e-5,
                                           err_msg=f"ROWS={rows} at {h}x{w}")


def test_at_the_root_of_the_stencil_the_row_window_and_row_block_start_for_the_reuse_diagnosis():
    _, reference = _reference(STENCIL)
    notes = [{"expert": "roofline", "finding": "Memory-bound at 45% of the copy bandwidth.",
              "advice": "Cut the bytes that cross the busiest memory level: coalesce and vectorise accesses, reuse data"}]
    proposals = RecipeGenerator().propose(_context(reference, notes=notes), 6)
    names = [p.candidate["name"] for p in proposals if not p.failed]
    assert names[:3] == ["recipe halo-tile: BX=32, BY=8", "recipe row-window: VEC=4, ROWS=2, BX=64, BY=4",
                         "recipe row-block: ROWS=4, BX=64, BY=4"]
    window = next(p for p in proposals if not p.failed and p.candidate["name"].startswith("recipe row-window"))
    assert window.rationale.startswith('row-window: cures the roofline diagnosis "Memory-bound at 45%')


def _problem_with_reference(tmp_path: Path, source: str) -> tuple[object, dict]:
    folder = tmp_path / "stencil"
    folder.mkdir()
    (folder / "problem.toml").write_text((STENCIL / "problem.toml").read_text())
    (folder / "reference.cu").write_text(source)
    return _reference(folder)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_present(), reason="no NVIDIA GPU here; run `pytest -m gpu` on a GPU machine")
@pytest.mark.parametrize("name", list(STENCILS))
def test_on_the_gpu_the_row_window_equals_the_reference_kernel_at_the_small_and_default_sizes(name, tmp_path):
    source = STENCILS[name][0]
    spec, reference = _reference(STENCIL) if source is None else _problem_with_reference(tmp_path, source)
    family = row_window_family(reference)
    settings = MeasureSettings(validation_sets=2, min_reps=5, max_reps=10, target_timing_ms=10.0, kernel_timeout_s=5.0)
    with Runner("cupy", settings=settings) as runner:
        for knobs in ({"VEC": 4, "ROWS": 2, "BX": 64, "BY": 4}, {"VEC": 2, "ROWS": 8, "BX": 32, "BY": 1},
                      {"VEC": 1, "ROWS": 1, "BX": 256, "BY": 4}, {"VEC": 4, "ROWS": 4, "BX": 128, "BY": 2}):
            result = runner.measure(spec, RunnerCandidate.from_dict(family.render(knobs), spec))
            assert result.status == "ok", (name, knobs, result.reason)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_present(), reason="no NVIDIA GPU here; run `pytest -m gpu` on a GPU machine")
def test_on_the_gpu_the_row_block_stencil_equals_the_reference_kernel_at_the_small_and_default_sizes():
    spec, reference = _reference(STENCIL)
    family = row_block_family(reference)
    settings = MeasureSettings(validation_sets=2, min_reps=5, max_reps=10, target_timing_ms=10.0, kernel_timeout_s=5.0)
    with Runner("cupy", settings=settings) as runner:
        for knobs in ({"ROWS": 2, "BX": 16, "BY": 16}, {"ROWS": 4, "BX": 64, "BY": 4}, {"ROWS": 8, "BX": 256, "BY": 1}):
            variant = family.render(knobs)
            for candidate in (variant, read_only_family(variant).render({"RESTRICT": 1, "LDG": 1, "MINB": 0})):
                result = runner.measure(spec, RunnerCandidate.from_dict(candidate, spec))
                assert result.status == "ok", (knobs, candidate["name"], result.reason)


# ---- row cache: the passes of a row read once (issue 21: the softmax at 52% of its roofline) ----------
STRIDED = """extern "C" __global__ void strided(const float* x, float* out, int rows, int cols) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int row = t / 4, lane = t % 4;
    if (row >= rows) return;
    const float* in = x + (long long)row * cols;
    float top = -1e30f;
    for (int c = lane; c < cols; c += 4) top = fmaxf(top, in[c]);
    float total = 0.0f;
    for (int c = lane; c < cols; c += 4) total += in[c] - top;
    for (int c = lane; c < cols; c += 4) out[(long long)row * cols + c] = (in[c] - top) / (1.0f - total);
}
"""


# the same, dividing by a float fixed during the last pass (the reciprocal knob's case)
SCALED = STRIDED.replace("    for (int c = lane; c < cols; c += 4) out[(long long)row * cols + c] = (in[c] - top) / (1.0f - total);",
                         "    float scale = 1.0f - total;\n"
                         "    for (int c = lane; c < cols; c += 4) out[(long long)row * cols + c] = (in[c] - top) / scale;")


def _strided_expected(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    for lane in range(4):
        part = x[:, lane::4]
        if part.shape[1] == 0:
            continue
        top = part.max(axis=1, keepdims=True)
        total = (part - top).sum(axis=1, keepdims=True)
        out[:, lane::4] = (part - top) / (1.0 - total)
    return out


def test_the_softmax_passes_read_the_row_once_into_registers_and_keep_the_loop_for_longer_rows():
    _, reference = _reference(SOFTMAX)
    family = row_cache_family(warp_per_row_family(reference).render({"WARPS": 4}))
    assert family.knobs == {"CACHE": [4, 8, 16, 32, 64], "RECIP": [0, 1]} and family.start == {"CACHE": 32, "RECIP": 1}
    source = family.render({"CACHE": 32, "RECIP": 1})["source"]
    assert "float kl_row_in[CACHE];" in source
    assert "const bool kl_fits = (cols) <= (kl_lane + (0)) + CACHE * (32);" in source
    assert source.count("kl_row_in[kl_k] = in[c];") == 1                  # loaded by the first pass only
    # the sum's exponentials are kept in the row's slots and the write pass reads them, once per row a division
    assert "total += (kl_row_in[kl_k] = (__expf(kl_row_in[kl_k] - largest)));" in source
    assert "const float kl_inv_total = 1.0f / (total);" in source
    assert "result[c] = KL_DIV(kl_row_in[kl_k], total);" in source
    assert "#if RECIP\n#define KL_DIV(x, d) ((x) * kl_inv_##d)\n#else\n#define KL_DIV(x, d) ((x) / (d))" in source
    assert source.count("} else for (int c = kl_lane + (0); c < cols; c += 32)") == 3
    assert source.count("in[c]") == 4                                      # the load and the three fallbacks


@needs_gxx
def test_on_the_cpu_the_row_cache_equals_numpy_where_the_row_fits_and_where_it_does_not(tmp_path):
    """Every CACHE, rows of 1 to 70 columns over 4 lanes: both the cached passes and the loops kept
    for rows longer than 4 * CACHE give NumPy's result, with no access outside the buffers."""
    kept = row_cache_family(_strided(STRIDED))
    # the sum pass keeps in[c] - top in the row's slot, the write pass reads it (no raw value is needed again)
    assert "total += (kl_row_in[kl_k] = (kl_row_in[kl_k] - top));" in kept.template
    assert "out[(long long)row * cols + c] = (kl_row_in[kl_k]) / (1.0f - total);" in kept.template
    divided = row_cache_family(_strided(SCALED))
    assert divided.knobs["RECIP"] == [0, 1] and "KL_DIV(" in divided.template
    rng = np.random.default_rng(2)
    points = [(kept, {"CACHE": c}) for c in kept.knobs["CACHE"]] + \
        [(divided, {"CACHE": c, "RECIP": r}) for c in divided.knobs["CACHE"] for r in (0, 1)]
    for family, knobs in points:
        cache = knobs["CACHE"]
        executable = host_cuda.build(family.render(knobs)["source"], "strided",
                                     ["in", "out", "int", "int"], tmp_path)
        for rows, cols in ((3, 1), (5, 7), (9, 16), (17, 33), (4, 70)):
            x = rng.standard_normal((rows, cols)).astype(np.float32)
            (out,) = host_cuda.run(executable, [x, ("out", (rows, cols)), rows, cols], ((rows * 4 + 63) // 64, 1),
                                   (64, 1), tmp_path)
            np.testing.assert_allclose(out, _strided_expected(x), rtol=1e-5, atol=1e-5,
                                       err_msg=f"{knobs} at {rows}x{cols}")


def _strided(source: str) -> dict:
    return {"source": source, "launch": [{"kernel": "strided", "grid": ["1"], "block": [64],
                                          "args": ["x", "out", "rows", "cols"]}]}


def test_a_kernel_whose_passes_do_not_share_a_split_row_gets_no_row_cache_with_the_reason():
    with pytest.raises(CannotApply, match="the loops step one column at a time, so one thread would hold the whole row"):
        row_cache_family(_reference(SOFTMAX)[1])          # one thread per row: its row does not fit in registers
    renamed = STRIDED.replace("for (int c = lane; c < cols; c += 4) total += in[c]",
                              "for (int k = lane; k < cols; k += 4) total += in[k]")
    renamed = renamed.replace("for (int c = lane; c < cols; c += 4) out[(long long)row * cols + c] = (in[c]",
                              "for (int j = lane; j < cols; j += 4) out[(long long)row * cols + j] = (in[j]")
    assert renamed.count("int c = lane") == 1
    with pytest.raises(CannotApply, match="no two loops at the kernel's top level walk the same columns"):
        row_cache_family(_strided(renamed))
    moved = STRIDED.replace("float total = 0.0f;", "float total = 0.0f; cols -= 1;")
    with pytest.raises(CannotApply, match="cols changes between the loops"):
        row_cache_family(_strided(moved))


def test_a_buffer_the_kernel_writes_is_not_cached():
    in_place = STRIDED.replace("const float* in = x", "float* in = out").replace("out[(long long)row * cols + c] =",
                                                                             "in[c] =")
    with pytest.raises(CannotApply, match="read no buffer the kernel never writes"):
        row_cache_family(_strided(in_place))


@needs_nvcc
def test_every_row_cache_knob_point_on_the_warp_per_row_softmax_compiles_with_nvcc():
    spec, reference = _reference(SOFTMAX)
    family = row_cache_family(warp_per_row_family(reference).render({"WARPS": 8}))
    runner = Runner(backend="static")
    for cache in family.knobs["CACHE"]:
        for recip in family.knobs["RECIP"]:
            report = runner.check(spec, RunnerCandidate.from_dict(family.render({"CACHE": cache, "RECIP": recip}), spec))
            assert report.ok, (cache, recip, report.summary())
            assert report.facts.spill_stores == 0, (cache, recip, report.facts)


def test_a_value_is_kept_only_where_no_later_pass_needs_the_raw_element_and_nothing_it_reads_changes():
    raw_again = STRIDED.replace("/ (1.0f - total);", "/ (1.0f - total) + in[c];")
    family = row_cache_family(_strided(raw_again))
    assert "(kl_row_in[kl_k] = (" not in family.template                 # the raw row stays in the slots
    assert "(kl_row_in[kl_k] - top) / (1.0f - total) + kl_row_in[kl_k];" in family.template
    moved = STRIDED.replace("    for (int c = lane; c < cols; c += 4) out", "    top = top * 0.5f;\n"
                            "    for (int c = lane; c < cols; c += 4) out")
    assert "(kl_row_in[kl_k] = (" not in row_cache_family(_strided(moved)).template   # top changed in between
