"""Recipes (issue 21): the vectorise cure written into the user's elementwise kernel with tree-sitter,
its knobs explored like a template's, and a plain reason on the node where it cannot apply."""
import random
import re
from pathlib import Path

import pytest

from gpu_runner import Candidate as RunnerCandidate
from gpu_runner import MeasureSettings, Runner, reference_candidate
from gpu_runner.compiler import ToolMissing, find_tool
from gpu_runner.runner import gpu_present
from gpu_runner.spec import load_problem
from search_engine.candidates import candidate_hash
from search_engine.generators.base import ProposalContext
from search_engine.generators.recipes import CannotApply, RecipeGenerator, vectorise_family, warp_per_row_family

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
    assert [p.failure for p in proposals if p.failed] == [
        "The warp-per-row recipe (for one thread per row) cannot apply: the row's code has no loop over its columns "
        "at its top level."]
    assert first[0].candidate["knobs"] == {"VEC": 4, "BLOCK": 256}
    assert first[0].rationale.startswith('vectorise: cures the memory_access diagnosis "Global loads are 4 bytes')
    child = first[0].candidate
    below = generator.propose(_context(reference, parent=child, known={candidate_hash(p.candidate) for p in first}), 3)
    assert below and all(p.candidate["name"].startswith("recipe vectorise: ") for p in below)
    assert all(sum(p.candidate["knobs"][k] != child["knobs"][k] for k in child["knobs"]) in (1, 2) for p in below)


def test_a_recipe_that_cannot_apply_says_why_once_on_the_root():
    _, reference = _reference(TESTS / "own_kernels" / "row_rmsnorm")
    generator = RecipeGenerator()
    first = generator.propose(_context(reference), 4)
    assert [p.failure for p in first] == [
        "The vectorise recipe (for 4-byte global loads and stores) cannot apply: x is used other than as x[row] (line 6).",
        "The warp-per-row recipe (for one thread per row) cannot apply: the loop at line 9 does not declare its own "
        "column counter."]
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
    ("for (int c = 0; c < cols; ++c) total += ", "for (int c = 0; c < cols; c += 2) total += ", "steps by c += 2"),
    ("total += __expf(in[c] - largest);", "total = total * 0.5f + __expf(in[c] - largest);",
     "updates total by total = total * 0.5f"),
    ("float* result", "if (threadIdx.x == 0) out[0] = 0.0f;\n    float* result", "reads threadIdx.x"),
])
def test_a_row_loop_the_warp_cannot_share_is_refused_with_the_reason(change):
    before, after, reason = change
    _, reference = _reference(SOFTMAX)
    assert before in reference["source"]
    reference["source"] = reference["source"].replace(before, after)
    with pytest.raises(CannotApply, match=re.escape(reason)):
        warp_per_row_family(reference)


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
        "The vectorise recipe (for 4-byte global loads and stores) cannot apply: x is used other than as x[row] (line 4)."]


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
