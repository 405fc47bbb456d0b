from pathlib import Path

import pytest

from gpu_runner import SpecError, enumerate_variants, render_variant, parse_problem
from gpu_runner.candidate import check_candidate
from tests.gpu_runner.helpers import PROBLEMS, saxpy_problem

# A spec is checked against its kernels' parameters, so these tests pass the real sources.
REFERENCE = (PROBLEMS / "saxpy" / "reference.cu").read_text()
TEMPLATE = (PROBLEMS / "saxpy" / "family.cu").read_text()


def test_it_enumerates_only_variants_that_meet_the_constraints():
    problem = saxpy_problem()
    variants = list(enumerate_variants(problem))
    assert all(v["BLOCK"] * v["ITEMS"] * v["VEC"] <= 4096 for v in variants)
    assert {"BLOCK": 1024, "ITEMS": 4, "VEC": 4} not in variants
    assert len(variants) == 4 * 3 * 2 - 3   # 1024*4*4, 1024*2*4 and 512*4*4 break the constraint
    assert variants[0] == {"BLOCK": 128, "ITEMS": 1, "VEC": 1}


def test_valid_variants_are_enumerated_once_per_spec_and_handed_out_as_copies(monkeypatch):
    import dataclasses

    import gpu_runner.family as family

    problem = saxpy_problem()
    calls = []
    real = family.enumerate_variants
    monkeypatch.setattr(family, "enumerate_variants", lambda p: calls.append(p.spec_hash) or real(p))
    monkeypatch.setattr(family, "_VARIANTS", type(family._VARIANTS)())
    first = family.valid_variants(problem)
    assert first == list(real(problem)) and calls == [problem.spec_hash]
    first[0]["BLOCK"] = -1  # a caller's change does not reach the next caller
    assert family.valid_variants(problem) == list(real(problem)) and len(calls) == 1
    changed = parse_problem((PROBLEMS / "saxpy" / "problem.toml").read_text().replace("<= 4096", "<= 2048"),
                            REFERENCE, TEMPLATE)
    assert len(family.valid_variants(changed)) < len(first) and len(calls) == 2  # another spec, another walk
    unhashed = dataclasses.replace(problem, spec_hash="")
    family.valid_variants(unhashed), family.valid_variants(unhashed)
    assert len(calls) == 4  # without a hash nothing is remembered


def test_a_rendered_variant_defines_its_knobs_and_binds_them_in_the_launch():
    problem = saxpy_problem()
    candidate = render_variant(problem, {"BLOCK": 256, "ITEMS": 2, "VEC": 4})
    assert candidate.source.startswith("#define BLOCK 256\n#define ITEMS 2\n#define VEC 4\n")
    step = candidate.launch[0]
    assert step.grid[0].evaluate({"N": 4096}) == 2 and step.block[0].evaluate({}) == 256
    assert candidate.name == "BLOCK=256,ITEMS=2,VEC=4"
    check_candidate(problem, candidate)


def test_string_knobs_become_defined_flags_and_family_temps_use_knobs():
    text = (PROBLEMS / "saxpy" / "problem.toml").read_text().replace(
        'VEC = [1, 4] }', 'VEC = [1, 4], ALGO = ["plain", "wide"] }').replace(
        'constraints = ["BLOCK*ITEMS*VEC <= 4096"]',
        'constraints = ["BLOCK*ITEMS*VEC <= 4096", "ALGO != \'wide\' or VEC == 4"]\n'
        '[[family.temps]]\nname = "partials"\ndtype = "float32"\nshape = ["ceil_div(N, BLOCK)"]')
    problem = parse_problem(text, REFERENCE, TEMPLATE)
    variants = list(enumerate_variants(problem))
    assert all(v["ALGO"] != "wide" or v["VEC"] == 4 for v in variants)
    candidate = render_variant(problem, {"BLOCK": 128, "ITEMS": 1, "VEC": 4, "ALGO": "wide"})
    assert "#define ALGO_wide 1" in candidate.source
    assert candidate.temps[0].shape[0].text == "ceil_div(N, 128)"


def test_rendering_an_invalid_variant_is_refused():
    problem = saxpy_problem()
    with pytest.raises(SpecError, match="breaks a constraint"):
        render_variant(problem, {"BLOCK": 1024, "ITEMS": 4, "VEC": 4})
    with pytest.raises(SpecError, match="not one of"):
        render_variant(problem, {"BLOCK": 100, "ITEMS": 1, "VEC": 1})
    with pytest.raises(SpecError, match="missing"):
        render_variant(problem, {"BLOCK": 128})


def test_a_family_step_with_when_belongs_only_to_variants_where_it_holds():
    text = (PROBLEMS / "saxpy" / "problem.toml").read_text().replace(
        'VEC = [1, 4] }', 'VEC = [1, 4], ZERO = ["yes", "no"] }').replace(
        '[[family.launch]]\nkernel = "saxpy_family"',
        '[[family.launch]]\nmemset = "out"\nvalue = 0\nwhen = "ZERO == \'yes\'"\n\n'
        '[[family.launch]]\nkernel = "saxpy_family"')
    problem = parse_problem(text, REFERENCE, TEMPLATE)
    with_memset = render_variant(problem, {"BLOCK": 128, "ITEMS": 1, "VEC": 1, "ZERO": "yes"})
    without = render_variant(problem, {"BLOCK": 128, "ITEMS": 1, "VEC": 1, "ZERO": "no"})
    assert [type(s).__name__ for s in with_memset.launch] == ["MemsetStep", "KernelLaunch"]
    assert [type(s).__name__ for s in without.launch] == ["KernelLaunch"]
    with pytest.raises(SpecError, match="when"):
        parse_problem(text.replace("when = \"ZERO == 'yes'\"", "when = \"ZERO == BOGUS\""), REFERENCE, TEMPLATE)


BUNDLED = Path(__file__).resolve().parents[2] / "kernellab" / "problems"


@pytest.mark.skipif(not BUNDLED.is_dir(), reason="no bundled problems in this checkout")
def test_every_bundled_problem_loads_and_every_variant_renders_valid():
    from gpu_runner import load_problem

    folders = sorted(p.parent for p in BUNDLED.glob("*/problem.toml"))
    assert folders
    total = 0
    for folder in folders:
        problem = load_problem(folder)
        for knobs in enumerate_variants(problem) if problem.family else []:
            check_candidate(problem, render_variant(problem, knobs))
            total += 1
    assert total > 0


def _saxpy_with(knobs: str, constraints: str = '["BLOCK*ITEMS*VEC <= 4096"]'):
    """saxpy's family with extra knobs that its template ignores (each only multiplies the settings)."""
    text = (PROBLEMS / "saxpy" / "problem.toml").read_text()
    changed = text.replace('knobs = { BLOCK = [128, 256, 512, 1024], ITEMS = [1, 2, 4], VEC = [1, 4] }',
                           f'knobs = {{ BLOCK = [128], ITEMS = [1], VEC = [1], {knobs} }}').replace(
        'constraints = ["BLOCK*ITEMS*VEC <= 4096"]', f"constraints = {constraints}")
    assert changed.count("K1 = ") == 1
    return parse_problem(changed, REFERENCE, TEMPLATE)


def _knobs(count: int, values: int) -> str:
    return ", ".join(f"K{i} = {list(range(1, values + 1))}" for i in range(1, count + 1))


def test_a_family_with_more_combinations_than_the_limit_is_refused_before_any_walk(monkeypatch):
    import klexpr

    from gpu_runner.family import MAX_COMBINATIONS, check_family_size

    problem = _saxpy_with(_knobs(6, 12), '["K1 + K2 + K3 + K4 + K5 + K6 == 6"]')  # 12^6 = 2,985,984
    monkeypatch.setattr(klexpr.Expression, "evaluate", lambda *a: pytest.fail("a constraint was evaluated"))
    expected = f"2,985,984 combinations .*more than the {MAX_COMBINATIONS:,} a family may have"
    with pytest.raises(SpecError, match=expected):
        next(enumerate_variants(problem))
    with pytest.raises(SpecError, match=expected):
        check_family_size(problem)


def test_a_family_with_more_variants_than_the_limit_stops_at_the_first_one_past_it(monkeypatch):
    import gpu_runner.family as family

    # QA's upload: four unconstrained knobs of 32 values, 1,048,576 settings, every one valid.
    problem = _saxpy_with(_knobs(4, 32))
    monkeypatch.setattr(family, "_VARIANTS", type(family._VARIANTS)())
    seen = []
    with pytest.raises(SpecError, match=f"more than {family.MAX_VARIANTS:,} of the knobs' 1,048,576 combinations"):
        for variant in enumerate_variants(problem):
            seen.append(variant)
    assert len(seen) == family.MAX_VARIANTS  # never more held than the limit
    with pytest.raises(SpecError, match="a family may have at most 65,536 variants"):
        family.valid_variants(problem)
    assert not family._VARIANTS  # nothing remembered of a family refused
    fits = _saxpy_with(_knobs(4, 16))  # 65,536 exactly
    assert family.check_family_size(fits) == family.MAX_VARIANTS == len(family.valid_variants(fits))


@pytest.mark.skipif(not BUNDLED.is_dir(), reason="no bundled problems in this checkout")
def test_every_bundled_family_is_within_the_limits():
    from gpu_runner import load_problem
    from gpu_runner.family import MAX_COMBINATIONS, combination_count

    counts = {folder.parent.name: combination_count(load_problem(folder.parent).family.knobs)
              for folder in BUNDLED.glob("*/problem.toml") if "[family]" in folder.read_text()}
    assert counts and max(counts.values()) <= MAX_COMBINATIONS
    assert max(counts, key=counts.get) == "sgemm" and counts["sgemm"] == 1_244_160  # the limit is set above it


def test_a_variant_that_cuda_could_not_launch_is_left_out_of_the_family():
    # BLOCK = 2048 asks for more threads per block than the card allows: every launch of it would fail.
    text = (PROBLEMS / "saxpy" / "problem.toml").read_text().replace(
        "BLOCK = [128, 256, 512, 1024]", "BLOCK = [128, 2048]").replace("<= 4096", "<= 8192")
    problem = parse_problem(text, REFERENCE, TEMPLATE)
    variants = list(enumerate_variants(problem))
    assert variants and {v["BLOCK"] for v in variants} == {128}
    assert len(variants) == 3 * 2


def test_a_family_whose_every_variant_breaks_a_launch_limit_says_which_limit():
    from gpu_runner.family import check_family_size

    text = (PROBLEMS / "saxpy" / "problem.toml").read_text().replace(
        "BLOCK = [128, 256, 512, 1024]", "BLOCK = [2048, 4096]").replace("<= 4096", "<= 65536")
    problem = parse_problem(text, REFERENCE, TEMPLATE)
    with pytest.raises(SpecError, match=r"every setting that satisfies the constraints breaks a CUDA launch limit, "
                                        r"for instance BLOCK=2048,ITEMS=1,VEC=1: gives block \(2048, 1, 1\), 2048 "
                                        r"threads per block") as caught:
        check_family_size(problem)
    assert caught.value.field == "family.launch[0].block"
