"""Confirming the knobs KernelLab found in a problem's reference: they become the problem's
[family] (template and launch), so the template generator explores them like knobs its author wrote."""
from __future__ import annotations

import re

from django.db import transaction

from kernellab.models import Problem
from kernellab.selectors.problem_knobs import AUTO_FAMILY_MARKER, spec_without_auto_family
from kernellab.services.access import access_require
from kernellab.services.errors import ServiceError
from kernellab.services.problems import ProblemRejected, problem_check
from klexpr import ExpressionError

MAX_VALUES_PER_KNOB = 32
# A knob's value becomes `#define NAME value` in the kernel, where it is read as a C int, and a number
# in the launch's expressions (grid, block, shared, temps' shapes): past 2^31 - 1 the kernel's int
# arithmetic overflows (and a value past 2^64 is refused by klexpr outright), so no such variant is
# worth compiling. The largest block dimension is 1024 and the largest grid dimension 2^31 - 1 anyway.
MAX_KNOB_VALUE = 2**31 - 1


def parse_knob_values(text: str, name: str) -> list[int]:
    """'64, 128, 256' as [64, 128, 256]; a sentence naming the knob for anything else."""
    values = []
    for part in text.replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        # ASCII digits only: str.isdigit() also takes '²' or '٣', which int() refuses or reads as
        # another number. The length is checked before int(), which refuses strings of over 4,300 digits.
        if not (part.isascii() and part.isdigit()) or not part.strip("0"):
            raise ServiceError(f"The values of {name} must be positive whole numbers separated by commas; "
                               f"{_shown(part)} is not one.")
        if len(part.lstrip("0")) > len(str(MAX_KNOB_VALUE)) or int(part) > MAX_KNOB_VALUE:
            raise ServiceError(_too_large(name, _shown(part)))
        values.append(int(part))
    if not values:
        raise ServiceError(f"The knob {name} needs at least one value (or leave it unticked).")
    if len(set(values)) > MAX_VALUES_PER_KNOB:
        raise ServiceError(f"The knob {name} has more than {MAX_VALUES_PER_KNOB} values.")
    return sorted(set(values))


def dropped_constraints(*, knobs: dict[str, list[int]], offered: list[str], constraints: list[str]) -> list[str]:
    """The constraints that saving `knobs` drops: those naming an offered knob left unticked, which
    keeps its original value (a name that is no knob at all is refused by problem_knobs_save)."""
    from gpu_runner.auto_knobs import constraint_names

    unticked = set(offered) - set(knobs)
    return [c for c in constraints if constraint_names(c) & unticked]


@transaction.atomic
def problem_knobs_save(*, problem: Problem, user, knobs: dict[str, list[int]], constraints: list[str] | None = None) -> Problem:
    """Make `knobs` (a subset of the ones found, with the values the person chose) the problem's
    [family]; no knobs removes the family this page wrote. The template is checked like an upload:
    the spec and the kernels' signatures, the family's size (gpu_runner.family's MAX_COMBINATIONS and
    MAX_VARIANTS), and the smallest and largest variants compiled with nvcc. A constraint naming a
    knob left out is dropped; one naming something that is neither a knob nor a size is refused."""
    from gpu_runner.auto_knobs import family_from_knobs, split_constraints, template_prelude_lines
    from gpu_runner.spec import SpecError, parse_problem

    access_require(user=user, workspace=problem.workspace, action="upload")
    for name, values in knobs.items():
        too_large = [v for v in values if isinstance(v, int) and v > MAX_KNOB_VALUE]
        if too_large:
            raise ServiceError(_too_large(name, str(too_large[0])))
    problem = Problem.objects.select_for_update().select_related("reference").get(pk=problem.pk)
    if problem.family_source and AUTO_FAMILY_MARKER not in problem.spec_toml:
        raise ServiceError(f"{problem.title} has its own [family]; edit it in its problem.toml instead.")
    base_toml = spec_without_auto_family(problem.spec_toml)
    try:
        if not knobs:
            if constraints:  # dropped with the family, but a typo is still worth saying
                split_constraints(parse_problem(base_toml, problem.reference.source), {}, constraints)
            problem.spec_toml, problem.family_source = base_toml, ""
            problem.save(update_fields=["spec_toml", "family_source"])
            return problem
        base = parse_problem(base_toml, problem.reference.source)
        family_toml, template = family_from_knobs(base, knobs, constraints)
    except SpecError as exc:
        raise ServiceError(_sentence(exc.message)) from None
    except ValueError as exc:
        raise ServiceError(str(exc)) from None
    spec_toml = f"{base_toml.rstrip()}\n\n{AUTO_FAMILY_MARKER}\n{family_toml}"
    _check_size(spec_toml, problem.reference.source, template)
    try:
        # Before problem_check, which compiles the same variants (the compile cache answers it then) but
        # names the lines of family.cu: the person wrote reference.cu, not the template made from it.
        _compile_knob_extremes(spec_toml, problem.reference.source, template, template_prelude_lines(base, knobs))
    except ExpressionError as exc:  # _check_size evaluates the same variants first; this is the net under it
        raise ServiceError(f"With these knobs' values, {exc}.") from None
    try:
        problem_check(spec_toml=spec_toml, reference_source=problem.reference.source, family_source=template)
    except ProblemRejected as exc:
        raise ServiceError(f"These knobs do not make a valid family: {exc}") from None
    problem.spec_toml, problem.family_source = spec_toml, template
    problem.save(update_fields=["spec_toml", "family_source"])
    return problem


def _check_size(spec_toml: str, reference_source: str, template: str) -> None:
    """Refuse a family over gpu_runner.family's limits before anything is compiled (problem_check
    compiles the reference with nvcc first), and one whose first or last variant's launch (grid,
    block, shared) or temps cannot be evaluated in some size case, e.g. an expression reaching klexpr's
    bound of 2**64. The variants are remembered per spec, so the checks after this one walk them no more."""
    from gpu_runner.family import render_variant, valid_variants, variant_id
    from gpu_runner.spec import KernelLaunch, SpecError, parse_problem

    try:
        spec = parse_problem(spec_toml, reference_source, template)
    except SpecError:
        return  # problem_check says what is wrong, with its line
    try:
        variants = valid_variants(spec)
    except SpecError as exc:
        raise ServiceError(_sentence(exc.message)) from None
    for knobs in {tuple(v.items()): v for v in variants[:1] + variants[-1:]}.values():
        try:
            candidate = render_variant(spec, knobs)
        except SpecError:
            return  # _compile_extremes renders it again and says what is wrong
        except ExpressionError as exc:
            raise ServiceError(f"The variant {variant_id(knobs)} cannot be written: {exc}.") from None
        for case in spec.sizes:
            try:
                for step in candidate.launch:
                    if isinstance(step, KernelLaunch):
                        step.resolve(case.sizes)
                for temp in candidate.temps:
                    temp.numel(case.sizes)
            except ExpressionError as exc:
                raise ServiceError(f"The variant {variant_id(knobs)} cannot be launched in the size case "
                                   f"'{case.name}': {exc}.") from None


def _compile_knob_extremes(spec_toml: str, reference_source: str, template: str, template_lines: int) -> None:
    """_compile_extremes for the family the Knobs page wrote, its errors at lines of reference.cu. What
    problem_check refuses first (a spec that does not parse, a forbidden directive, a reference that
    does not compile) is left to it, so that its sentence is the one given."""
    from gpu_runner import Runner, reference_candidate
    from gpu_runner.directives import find_forbidden_directive
    from gpu_runner.spec import SpecError, parse_problem

    try:
        spec = parse_problem(spec_toml, reference_source, template)
    except SpecError:
        return
    if find_forbidden_directive(template) is not None or find_forbidden_directive(reference_source) is not None:
        return
    try:
        if not Runner(backend="static").check(spec, reference_candidate(spec)).ok:
            return
        _compile_extremes(spec, label="reference.cu", template_lines=template_lines)
    except SpecError as exc:  # the family's limits, which _check_size has checked already
        raise ServiceError(_sentence(exc.message)) from None
    except (ServiceError, ExpressionError):
        raise
    except Exception:  # nvcc missing or broken: problem_check says so
        return


def _compile_extremes(spec, *, label: str = "family.cu", template_lines: int = 0) -> None:
    """Compile the family's first and last variants. A family over gpu_runner.family's limits raises
    its SpecError (field family.knobs), so that an upload that calls this can point at the line;
    no valid setting, or a variant that does not compile, raises ServiceError.

    The compiler's lines are those of the variant's source, the knobs' #define lines
    (gpu_runner.family.render_source) followed by the template; the sentence gives them as lines of
    the file the person wrote, `label`: family.cu for an upload, reference.cu for the Knobs page,
    whose template starts with `template_lines` lines of its own (auto_knobs' unroll constants)."""
    from gpu_runner import Runner
    from gpu_runner.family import render_variant, valid_variants

    # valid_variants refuses a family over MAX_COMBINATIONS before it walks, stops at the first variant
    # past MAX_VARIANTS, and remembers the list per spec for the run that follows.
    variants = valid_variants(spec)
    if not variants:
        raise ServiceError("No setting of these knobs satisfies the constraints in every size case.")
    runner = Runner(backend="static")
    for knobs in {tuple(v.items()): v for v in (variants[0], variants[-1])}.values():
        report = runner.check(spec, render_variant(spec, knobs))
        if not report.ok:
            setting = ", ".join(f"{k}={v}" for k, v in knobs.items())
            raise ServiceError(f"The variant {setting} does not compile: "
                               f"{_compile_errors(report, _prelude_lines(knobs) + template_lines, label)}")


def _prelude_lines(knobs) -> int:
    """The lines render_source puts before the template: one #define a knob (its "\\n".join of them and
    the "\\n" after it make one line even for no knobs)."""
    return max(len(knobs), 1)


_AT_LINE = re.compile(r"\b(at line )(\d+)")


def _compile_errors(report, offset: int, label: str) -> str:
    """A failed compile's first errors, each with its line in `label` (the compiler's line less the
    `offset` lines put before it); an error in those lines is said to be in them."""
    def where(line: int | None) -> str:
        if not line:
            return ""
        if line <= offset:
            return f"line {line} of the variant (before {label}, among the lines that set the knobs): "
        return f"{label} line {line - offset}: "

    def message(text: str) -> str:  # nvcc's "declared at line 12" points into the same source
        return _AT_LINE.sub(lambda m: m.group(1) + (str(int(m.group(2)) - offset) if int(m.group(2)) > offset
                                                    else m.group(2)), text)

    errors = report.errors[:3]
    if not errors:
        return (report.log.strip().splitlines() or ["(no log)"])[-1]
    return "; ".join(where(d.line) + message(d.message) for d in errors)


def _shown(part: str) -> str:
    """A posted value as the page quotes it: in full up to 40 characters, its start beyond."""
    return repr(part) if len(part) <= 40 else f"{part[:40]!r}... ({len(part):,} characters)"


def _too_large(name: str, value: str) -> str:
    return f"The values of {name} must be at most {MAX_KNOB_VALUE:,} (2^31 - 1, the largest C int); {value} is larger."


def _sentence(message: str) -> str:
    """A spec check's message ('the knobs' values make ...') as a sentence of its own for the page."""
    return message[:1].upper() + message[1:].rstrip(".") + "."
