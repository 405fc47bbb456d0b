"""Template, transform and LLM-answer parsing for generators."""

from __future__ import annotations

import random

import pytest

from search_engine.candidates import candidate_hash, kernel_signatures, make_candidate
from search_engine.generators.base import ProposalContext
from search_engine.generators.template import KnobSpace, TemplateGenerator
from search_engine.generators.transform import TransformGenerator, fast_math_allowed
from search_engine.prompts import AnswerError, parse_generated
from tests.search_engine.fakes import REFERENCE, render, space


def context(parent, known=(), seed=0, problem=None, hardware=None):
    return ProposalContext(node_id=1, parent=parent, reference=REFERENCE, known_hashes=set(known),
                           rng=random.Random(seed), problem=problem or {}, hardware=hardware or {"sm_count": 132})


def test_template_proposals_change_one_or_two_knobs_and_honour_constraints():
    parent = render({"BLOCK": 256, "ITEMS": 2, "VEC": 2, "ALGO": "naive"})
    proposals = TemplateGenerator(space(), render).propose(context(parent), 40)
    assert len(proposals) >= 10
    sp = space()
    for p in proposals:
        knobs = p.candidate["knobs"]
        changed = [k for k in knobs if knobs[k] != parent["knobs"][k]]
        assert 1 <= len(changed) <= 2
        assert sp.valid(knobs)
        for k in changed:  # numeric knobs move to a neighbouring value
            if k != "ALGO":
                values = sorted(sp.knobs[k])
                assert abs(values.index(knobs[k]) - values.index(parent["knobs"][k])) == 1
        assert p.rationale.startswith("change ")


def test_template_never_proposes_a_duplicate():
    parent = render({"BLOCK": 256, "ITEMS": 2, "VEC": 2, "ALGO": "naive"})
    generator = TemplateGenerator(space(), render)
    first = generator.propose(context(parent), 5)
    known = {candidate_hash(p.candidate) for p in first}
    second = generator.propose(context(parent, known=known, seed=1), 50)
    assert not known & {candidate_hash(p.candidate) for p in second}
    assert len({candidate_hash(p.candidate) for p in second}) == len(second)


def test_template_starts_from_valid_random_points_when_the_parent_has_no_knobs():
    proposals = TemplateGenerator(space(), render).propose(context(REFERENCE), 4)
    assert len(proposals) == 4 and all(space().valid(p.candidate["knobs"]) for p in proposals)


def test_a_wide_start_screens_as_many_distinct_points_as_it_asks_for():
    # 300 valid points; drawing with replacement used to stop near 200 tries with ~150 distinct.
    knobs = {"A": list(range(30)), "B": list(range(10))}
    sp = KnobSpace(knobs, points=[{"A": a, "B": b} for a in range(30) for b in range(10)])

    def render_point(k):
        return make_candidate(f"#define A {k['A']}\n#define B {k['B']}\n__global__ void k() {{}}",
                              [{"kernel": "k", "grid": ["1"], "block": [1], "shared": "0", "args": []}], knobs=k)

    generator = TemplateGenerator(sp, render_point)
    wide = generator.propose(context(REFERENCE), 256)
    assert len(wide) == 256 and len({candidate_hash(p.candidate) for p in wide}) == 256
    known = {candidate_hash(p.candidate) for p in wide}
    rest = generator.propose(context(REFERENCE, known=known, seed=1), 256)
    assert len(rest) == 44 and not known & {candidate_hash(p.candidate) for p in rest}  # the family's other 44
    assert generator.propose(context(REFERENCE, known=known | {candidate_hash(p.candidate) for p in rest}), 8) == []
    # The same seed draws the same start points.
    again = TemplateGenerator(sp, render_point).propose(context(REFERENCE), 256)
    assert [p.candidate["knobs"] for p in again] == [p.candidate["knobs"] for p in wide]


def test_a_knob_space_rejects_configurations_that_break_a_constraint():
    sp = KnobSpace({"A": [1, 2], "B": ["x", "y"]}, ["A == 1 or B == 'y'", lambda k: k["A"] < 3])
    assert sp.valid({"A": 1, "B": "x"})
    assert not sp.valid({"A": 2, "B": "x"})
    assert not sp.valid({"A": 3, "B": "x"})
    assert len(sp.all_valid()) == 3


SAXPY = """
__global__ void saxpy(float a, const float* x, float* y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        y[i] = a * x[i] + y[i];
    }
}
__global__ void rowsum(float* in, float* out, int cols) {
    float acc = 0.f;
    for (int j = 0; j < cols; ++j) acc += in[blockIdx.x * cols + j];
    out[blockIdx.x] = acc;
}
"""
UPLOADED = make_candidate(SAXPY, [
    {"kernel": "saxpy", "grid": ["ceil_div(N, 256)"], "block": [256], "shared": "0", "args": ["a", "x", "y", "n"]},
    {"kernel": "rowsum", "grid": ["R"], "block": [1], "shared": "0", "args": ["in", "out", "cols"]}])


def by_rationale(proposals, prefix):
    return [p for p in proposals if p.rationale.startswith(prefix)]


def test_transforms_cover_launch_source_and_compiler_changes():
    loose = {"tolerance": {"float32": {"rtol": 1e-4, "atol": 1e-5}}}
    proposals = TransformGenerator().propose(context(UPLOADED, problem=loose), 100)
    restrict = by_rationale(proposals, "add __restrict__")[0].candidate["source"]
    assert "const float* __restrict__ x" in restrict and "float* __restrict__ y" in restrict
    assert "const float* __restrict__ in" in restrict  # only read: gains const
    assert "const float* __restrict__ out" not in restrict  # written: no const
    ldg = by_rationale(proposals, "read read-only data through __ldg")[0].candidate["source"]
    assert "__ldg(&x[i])" in ldg and "__ldg(&y" not in ldg
    block = by_rationale(proposals, "block size 512")[0].candidate["launch"]
    assert block[0]["block"] == [512] and block[0]["grid"] == ["ceil_div(N, 512)"]
    assert block[1] == UPLOADED["launch"][1]  # rowsum has no blockDim: untouched
    capped = by_rationale(proposals, "grid-stride grid capped at 2")[0].candidate["launch"]
    assert capped[0]["grid"] == ["min(ceil_div(N, 256), 264)"] and capped[1]["grid"] == ["R"]
    unroll = by_rationale(proposals, "#pragma unroll 4")[0].candidate["source"]
    assert unroll.count("#pragma unroll 4") == 1  # the grid-stride loop is left alone
    bounds = by_rationale(proposals, "__launch_bounds__(block threads)")[0].candidate["source"]
    assert "__launch_bounds__(256) saxpy" in bounds
    assert kernel_signatures(bounds)["saxpy"] == kernel_signatures(SAXPY)["saxpy"]
    regs = by_rationale(proposals, "-maxrregcount=64")[0].candidate["compile_options"]
    assert regs == ["-maxrregcount=64"]
    assert by_rationale(proposals, "--use_fast_math")


def test_fast_math_is_offered_only_where_the_tolerance_allows():
    tight = {"tolerance": {"float32": {"rtol": 1e-7, "atol": 0}}}
    assert not fast_math_allowed(tight)
    assert not fast_math_allowed({"tolerance": {"float64": {"rtol": 1e-3}}})
    assert not by_rationale(TransformGenerator().propose(context(UPLOADED, problem=tight), 100), "--use_fast_math")


def test_a_block_size_hard_coded_in_the_kernel_is_left_alone():
    src = ("__global__ void k(const float* x, float* y) {\n  __shared__ float t[256];\n"
           "  t[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];\n  __syncthreads();\n  y[0] = t[0];\n}\n")
    c = make_candidate(src, [{"kernel": "k", "grid": ["ceil_div(N, 256)"], "block": [256], "shared": "0",
                              "args": ["x", "y"]}])
    assert not by_rationale(TransformGenerator().propose(context(c), 100), "block size")


def test_transforms_never_repeat_a_known_kernel_and_run_out():
    generator = TransformGenerator()
    known = set()
    total = 0
    for seed in range(30):
        proposals = generator.propose(context(UPLOADED, known=known, seed=seed), 4)
        hashes = {candidate_hash(p.candidate) for p in proposals}
        assert not hashes & known
        known |= hashes
        total += len(proposals)
        if not proposals:
            break
    assert not proposals and total >= 15


GOOD_ANSWER = """Rationale: vectorise the loads with float4.
```cuda
__global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
```
```json
[{"kernel": "scale", "grid": ["ceil_div(N, 512)"], "block": [512], "shared": "0", "args": ["x", "y", "n"]}]
```"""


def test_a_generator_answer_is_read_into_code_launch_and_rationale():
    g = parse_generated(GOOD_ANSWER)
    assert g.rationale == "vectorise the loads with float4."
    assert g.launch[0]["block"] == [512]
    assert g.source.startswith("__global__ void scale")


@pytest.mark.parametrize("answer, reason", [
    ("", "empty"),
    ("I would use shared memory here.", "no CUDA code"),
    ("```cuda\nint main() { return 0; }\n```", "no __global__"),
    (GOOD_ANSWER.replace('"shared": "0"', '"shared": '), "not valid JSON"),
])
def test_a_generator_answer_without_usable_code_is_refused_with_a_reason(answer, reason):
    # (Code cut off inside its block is no longer refused by counting braces, which comments, strings and #if/#else
    # branches upset: the compile check says so, and an answer cut at the token limit is refused by the generator;
    # tests/search_engine/test_qa3_llm_answers.py.)
    with pytest.raises(AnswerError, match=reason):
        parse_generated(answer)


def test_a_sparse_enumerated_space_still_yields_start_points_and_nearby_variants():
    knobs = {f"K{i}": list(range(6)) for i in range(8)}  # 1.7 million combinations, 30 of them valid
    rng = random.Random(3)
    points = [{k: rng.choice(v) for k, v in knobs.items()} for _ in range(30)]
    sp = KnobSpace(knobs, points=points)

    def render_point(k):
        return make_candidate("#define X " + "_".join(map(str, k.values())) + "\n__global__ void k() {}",
                              [{"kernel": "k", "grid": ["1"], "block": [1], "shared": "0", "args": []}], knobs=k)

    generator = TemplateGenerator(sp, render_point)
    starts = generator.propose(context(REFERENCE), 4)
    assert len(starts) == 4 and all(sp.valid(p.candidate["knobs"]) for p in starts)
    parent = starts[0].candidate
    known = {candidate_hash(p.candidate) for p in starts}
    near = generator.propose(context(parent, known=known), 5)
    assert len(near) == 5 and all(sp.valid(p.candidate["knobs"]) for p in near)
    distance = lambda k: sum(k[n] != parent["knobs"][n] for n in knobs)
    unknown = [p for p in points if p != parent["knobs"] and candidate_hash(render_point(p)) not in known]
    fifth_nearest = sorted(distance(p) for p in unknown)[4]
    assert all(distance(p.candidate["knobs"]) <= fifth_nearest for p in near)
