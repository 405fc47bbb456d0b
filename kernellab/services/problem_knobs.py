"""Confirming the knobs KernelLab found in a problem's reference: they become the problem's
[family] (template and launch), so the template generator explores them like knobs its author wrote."""
from __future__ import annotations

from django.db import transaction

from kernellab.models import Problem
from kernellab.selectors.problem_knobs import AUTO_FAMILY_MARKER, spec_without_auto_family
from kernellab.services.access import access_require
from kernellab.services.errors import ServiceError
from kernellab.services.problems import ProblemRejected, problem_check

MAX_VALUES_PER_KNOB = 32


def parse_knob_values(text: str, name: str) -> list[int]:
    """'64, 128, 256' as [64, 128, 256]; a sentence naming the knob for anything else."""
    values = []
    for part in text.replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or int(part) <= 0:
            raise ServiceError(f"The values of {name} must be positive whole numbers separated by commas; {part!r} is not one.")
        values.append(int(part))
    if not values:
        raise ServiceError(f"The knob {name} needs at least one value (or leave it unticked).")
    if len(set(values)) > MAX_VALUES_PER_KNOB:
        raise ServiceError(f"The knob {name} has more than {MAX_VALUES_PER_KNOB} values.")
    return sorted(set(values))


@transaction.atomic
def problem_knobs_save(*, problem: Problem, user, knobs: dict[str, list[int]], constraints: list[str] | None = None) -> Problem:
    """Make `knobs` (a subset of the ones found, with the values the person chose) the problem's
    [family]; no knobs removes the family this page wrote. The template is checked like an upload:
    the spec and the kernels' signatures, and the smallest and largest variants compiled with nvcc."""
    from gpu_runner.auto_knobs import family_from_knobs
    from gpu_runner.spec import parse_problem

    access_require(user=user, workspace=problem.workspace, action="upload")
    problem = Problem.objects.select_for_update().select_related("reference").get(pk=problem.pk)
    if problem.family_source and AUTO_FAMILY_MARKER not in problem.spec_toml:
        raise ServiceError(f"{problem.title} has its own [family]; edit it in its problem.toml instead.")
    base_toml = spec_without_auto_family(problem.spec_toml)
    if not knobs:
        problem.spec_toml, problem.family_source = base_toml, ""
        problem.save(update_fields=["spec_toml", "family_source"])
        return problem
    try:
        base = parse_problem(base_toml, problem.reference.source)
        family_toml, template = family_from_knobs(base, knobs, constraints)
    except ValueError as exc:
        raise ServiceError(str(exc)) from None
    spec_toml = f"{base_toml.rstrip()}\n\n{AUTO_FAMILY_MARKER}\n{family_toml}"
    try:
        checked = problem_check(spec_toml=spec_toml, reference_source=problem.reference.source, family_source=template)
    except ProblemRejected as exc:
        raise ServiceError(f"These knobs do not make a valid family: {exc}") from None
    _compile_extremes(checked.spec)
    problem.spec_toml, problem.family_source = spec_toml, template
    problem.save(update_fields=["spec_toml", "family_source"])
    return problem


def _compile_extremes(spec) -> None:
    from gpu_runner import Runner
    from gpu_runner.family import render_variant, valid_variants

    variants = valid_variants(spec)
    if not variants:
        raise ServiceError("No setting of these knobs satisfies the constraints in every size case.")
    runner = Runner(backend="static")
    for knobs in {tuple(v.items()): v for v in (variants[0], variants[-1])}.values():
        report = runner.check(spec, render_variant(spec, knobs))
        if not report.ok:
            setting = ", ".join(f"{k}={v}" for k, v in knobs.items())
            raise ServiceError(f"The variant {setting} does not compile: {report.summary()}")
