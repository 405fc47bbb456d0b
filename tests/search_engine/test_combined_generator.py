"""The recipes' cures and the template of the kernel's own knobs over one tree (issue 21)."""
import random
from pathlib import Path

from gpu_runner import reference_candidate
from gpu_runner.spec import load_problem
from search_engine.candidates import make_candidate
from search_engine.generators.base import ProposalContext
from search_engine.generators.combined import CombinedGenerator
from search_engine.generators.recipes import RecipeGenerator
from search_engine.generators.template import KnobSpace, TemplateGenerator

GELU = Path(__file__).resolve().parents[1] / "gpu_runner" / "own_kernels" / "gelu"


def _setup():
    reference = reference_candidate(load_problem(GELU)).to_dict()

    def render(knobs):
        source = f"#define BLOCK {knobs['BLOCK']}\n" + reference["source"]
        launch = [{**reference["launch"][0], "grid": [f"ceil_div(N, {knobs['BLOCK']})"], "block": [str(knobs["BLOCK"])]}]
        return make_candidate(source, launch, knobs=dict(knobs), name=f"block {knobs['BLOCK']}")

    template = TemplateGenerator(KnobSpace(knobs={"BLOCK": [64, 128, 256, 512, 1024]}), render)
    return reference, CombinedGenerator([RecipeGenerator(), template])


def _context(reference, parent=None):
    return ProposalContext(node_id=0, parent=parent or reference, reference=reference, rng=random.Random(1))


def test_at_the_root_both_generators_propose_and_the_recipes_refusals_pass_through():
    reference, generator = _setup()
    proposals = generator.propose(_context(reference), 8)
    names = [p.candidate["name"] for p in proposals if not p.failed]
    assert len(names) == 8
    assert sum(n.startswith("recipe ") for n in names) == 6 and sum(n.startswith("block ") for n in names) == 2
    assert any(p.failed and "warp-per-row recipe" in p.failure for p in proposals)


def test_below_the_root_a_cure_stays_with_the_recipes_and_a_knob_variant_with_the_template():
    reference, generator = _setup()
    proposals = [p for p in generator.propose(_context(reference), 8) if not p.failed]
    cure = next(p.candidate for p in proposals if p.candidate["name"].startswith("recipe vectorise"))
    knob = next(p.candidate for p in proposals if p.candidate["name"].startswith("block "))
    assert all(p.candidate["name"].startswith("recipe vectorise") for p in generator.propose(_context(reference, cure), 3))
    assert all(p.candidate["name"].startswith("block ") for p in generator.propose(_context(reference, knob), 2))
