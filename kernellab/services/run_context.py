"""What a run's search driver is built from: the problem's spec and recorded measurements, the
hardware, the generator and surrogate the run chose, the search settings, and the LLM client.

A generator is built by name from GENERATOR_BUILDERS (the run form offers exactly these); a new one
is one function and one entry there."""
from __future__ import annotations

from functools import cached_property
from typing import Callable

from django.conf import settings

from kernellab.models import ApprovalMode, SearchRun
from kernellab.services.errors import ServiceError
from kernellab.services.problems import problem_spec


class RunContext:
    """What a run's driver needs from the problem: spec, records, hardware, generator, surrogate."""

    def __init__(self, run: SearchRun):
        self.run = run
        self.problem = run.problem
        self.spec = problem_spec(run.problem)

    @cached_property
    def replay_records(self) -> dict[str, dict]:
        """Recorded measurements of this problem by source hash (bundled, or imported with its folder)."""
        from gpu_runner.backends.replay import read_records

        from kernellab.selectors.problems import problem_records_file

        path = problem_records_file(self.problem, self.run.target_gpu)
        table: dict[str, dict] = {}
        if path.exists():
            for record in read_records(path):
                if "source_hash" in record:
                    table.setdefault(record["source_hash"], record)
        return table

    @cached_property
    def llm_budget(self):
        """The LLM calls this run may still make, shared by its generator and surrogate (None without an LLM)."""
        from search_engine.llm_client import LLMCallBudget

        if self.run.llm_call_budget is None:
            return None
        return LLMCallBudget(limit=self.run.llm_call_budget, used=self.run.llm_calls)

    @cached_property
    def hardware(self) -> dict:
        for record in self.replay_records.values():
            if record.get("hardware"):
                return dict(record["hardware"])
        return {"name": self.run.target_gpu.upper()}

    @cached_property
    def reference_ms(self) -> float | None:
        """The recording's reference time, the one the learned surrogate's rows of it carry
        (kernellab.datasets.recording_reference_ms; the records in the file's order); without a recording (an
        uploaded problem), the time a run's GPU worker first measured (services.reference_measurements)."""
        from kernellab.datasets import recording_reference_ms

        recorded = recording_reference_ms(self.replay_records.values())
        return recorded if recorded is not None else (self._measured_reference.get("timing") or {}).get("median_ms")

    @cached_property
    def _measured_reference(self) -> dict:
        from kernellab.selectors.problems import reference_measurement

        return reference_measurement(self.problem, self.run.target_gpu)

    @cached_property
    def _reference_record(self) -> dict:
        """The recording's reference record ({} without one)."""
        return next((r for r in self.replay_records.values() if r.get("variant") == "reference"), {})

    @cached_property
    def reference_compiler_facts(self) -> dict | None:
        """The reference's compiler facts as the learned surrogate's rows of this problem carry them: its recorded
        reference's (kernellab.datasets.recorded_rows), else those of the reference's compile check here (an uploaded
        problem). A bundled problem's reference is never compiled by the app, so without the recording a run would
        forecast with no reference facts (every candidate-vs-reference difference unknown) from a model that
        learned with them."""
        recorded = self._reference_record.get("compiler")
        return dict(recorded) if recorded else (self.problem.reference.compiler_facts or None)

    @cached_property
    def reference_profile(self) -> dict | None:
        """The reference's Nsight Compute counters that the forecasts read: from its recorded measurement where it
        was profiled, else those a run's GPU worker read (an uploaded problem). A run keeps them in its saved
        state, which is written at every step; one that started without them takes them up when they come
        (services.search._load_driver)."""
        from search_engine.surrogates.features import reference_profile_inputs

        return (reference_profile_inputs(self._reference_record.get("profiler"))
                or reference_profile_inputs(self._measured_reference.get("profiler")))

    def problem_dict(self) -> dict:
        """The same problem description the learned surrogate was trained with (sizes, roofline)."""
        from kernellab.datasets import problem_numbers

        return {**problem_numbers(self.spec), "tolerance_allows_fast_math": False}

    def render(self, knobs: dict) -> dict:
        from gpu_runner import render_variant

        return render_variant(self.spec, knobs).to_dict()

    def generator(self):
        build = GENERATOR_BUILDERS.get(self.run.generator)
        if build is None:
            raise ServiceError(f"Unknown generator {self.run.generator!r}.")
        return build(self)

    def surrogate(self):
        from kernellab.services.surrogates import surrogate_for_run

        return surrogate_for_run(self.run, llm_budget=self.llm_budget,
                                 reference_profiled=self.reference_profile is not None)

    def search_settings(self):
        from search_engine.policy import PolicySettings
        from search_engine.search_settings import SearchSettings
        from search_engine.tree import TreeOptions

        run = self.run
        return SearchSettings(
            policy=PolicySettings(
                threshold=run.confidence_threshold,
                conformal_target=run.conformal_target,
                gpu_budget=run.gpu_budget,
                max_gpu_per_step=run.max_gpu_per_step,
                approval="manual" if run.approval_mode == ApprovalMode.MANUAL else "auto",
                measure_all=run.surrogate == "none",
            ),
            tree=TreeOptions(c=run.puct_c, log_rewards=True),
            children_per_expansion=run.children_per_step,
            root_children=run.screening_width,
            parents_per_step=run.parents_per_step,
            min_children_per_step=run.min_children_per_step,
            compile_share_target=run.compile_share_target,
            prefetch_while_measuring=run.prefetch_while_measuring,
            discovery_ratio=run.discovery_threshold,
            seed=run.seed,
            retrain_every=run.retrain_every,
        )


def _template_generator(context: RunContext):
    from search_engine.generators.template import KnobSpace, TemplateGenerator

    from gpu_runner.family import valid_variants  # the runner's family knows the constraints

    family = context.spec.family
    if family is None:
        raise ServiceError("The template generator needs a problem with knobs.")
    space = KnobSpace(
        knobs={name: list(values) for name, values in family.knobs.items()},
        points=valid_variants(context.spec),
    )
    return TemplateGenerator(space, context.render)


def _transform_generator(context: RunContext):
    from search_engine.generators.transform import TransformGenerator

    return TransformGenerator()


def _recipe_generator(context: RunContext):
    from search_engine.generators.recipes import RecipeGenerator

    recipes = RecipeGenerator()
    if context.spec.family is None:
        return recipes
    from search_engine.generators.combined import CombinedGenerator

    # The cures, and the template of the problem's own knobs (its [family], or the automatic knobs
    # confirmed on the problem page) over the same tree, as benchmarks/own_kernels_h200.py searches.
    return CombinedGenerator([recipes, _template_generator(context)])


def _llm_generator(context: RunContext):
    from search_engine.generators.llm import LLMGenerator

    from kernellab.selectors.cutlass import cutlass_index_path, cutlass_search_text

    # The model may search the CUTLASS/CuTe headers where the index is built (manage.py cutlass_index).
    code_search = cutlass_search_text if cutlass_index_path().is_file() else None
    return LLMGenerator(llm_client("generator", budget=context.llm_budget), feedback=context.run.feedback,
                        code_search=code_search)


def _replayed_generator(context: RunContext):
    from search_engine.generators.replayed import ReplayedGenerator

    from kernellab.selectors.kernelbench import recorded_solutions

    solutions, dataset = recorded_solutions(problem=context.problem)
    if not solutions:
        raise ServiceError("The replayed generator has no recorded solutions for this problem: it needs a bundled "
                           "problem's candidates or a KernelBench task with CUDA-L1 solutions.")
    return ReplayedGenerator(solutions, dataset)


# The run form offers these, in this order.
GENERATOR_BUILDERS: dict[str, Callable[[RunContext], object]] = {
    "template": _template_generator,
    "transform": _transform_generator,
    "recipes": _recipe_generator,
    "llm": _llm_generator,
    "replayed": _replayed_generator,
}


def llm_client(role: str, *, budget=None):
    """The LLM client for a run's generator or surrogate, from the KERNELLAB_LLM settings."""
    from search_engine.llm_client import LLMClient

    endpoint = settings.KERNELLAB_LLM
    model = endpoint.generator_model if role == "generator" else endpoint.surrogate_model
    if not endpoint.configured or not model:
        raise ServiceError(f"No LLM {role} is configured: set OPENAI_BASE_URL and KERNELLAB_{role.upper()}_MODEL.")
    return LLMClient(base_url=endpoint.base_url, api_key=endpoint.api_key or "none", model=model,
                     timeout_s=endpoint.timeout_s, max_retries=endpoint.max_retries,
                     max_answer_chars=endpoint.max_answer_chars, budget=budget)
