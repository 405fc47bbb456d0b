"""Problems: an uploaded or bundled spec, checked by the runner's static backend before it is saved."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils.text import slugify

from kernellab.models import Problem, Workspace
from kernellab.services.access import access_require
from kernellab.services.errors import ServiceError
from kernellab.services.kernels import kernel_get_or_create



def bundled_dir() -> Path:
    """Where the bundled problems (and their recorded measurements) live."""
    return Path(settings.KERNELLAB_PROBLEMS_DIR)


class ProblemRejected(ServiceError):
    """The upload was checked and refused; `compile_errors` holds [{line, message}] of reference.cu
    and `spec_errors` [{line, field, message}] of problem.toml, every one found, for the page."""

    def __init__(self, message: str, compile_errors: list[dict] | None = None, spec_errors: list[dict] | None = None):
        super().__init__(message)
        self.compile_errors = compile_errors or []
        self.spec_errors = spec_errors or []


@dataclass
class CheckedProblem:
    spec: object
    reference_candidate: dict
    compiler_facts: dict = field(default_factory=dict)


def problem_check(*, spec_toml: str, reference_source: str, family_source: str = "", compile: bool = True) -> CheckedProblem:
    """Parse the spec and compile the reference with nvcc (no GPU needed). Raises ProblemRejected."""
    from gpu_runner.spec import SpecError, parse_problem

    limit = settings.KERNELLAB_UPLOAD_MAX_BYTES
    for label, text in (("problem.toml", spec_toml), ("reference.cu", reference_source), ("family.cu", family_source)):
        if len((text or "").encode()) > limit:
            raise ProblemRejected(f"{label} is larger than the {limit // 1024} KiB limit.")
        if "\x00" in (text or ""):
            raise ProblemRejected(f"{label} is not a text file.")
    if not reference_source.strip():
        raise ProblemRejected("The reference kernel source is empty.")
    from gpu_runner.directives import find_forbidden_directive

    for label, text in (("reference.cu", reference_source), ("family.cu", family_source)):
        refusal = find_forbidden_directive(text or "")
        if refusal is not None:
            raise ProblemRejected(f"{label}: {refusal.reason}", [{"line": refusal.line, "message": refusal.reason}])
    try:
        spec = parse_problem(spec_toml, reference_source, family_source or None)
    except SpecError as exc:
        spec_errors = [{"line": e.line, "field": e.field, "message": e.message} for e in exc.errors]
        if len(spec_errors) == 1:
            raise ProblemRejected(f"The problem spec is not valid: {exc}", spec_errors=spec_errors) from None
        raise ProblemRejected(f"The problem spec has {len(spec_errors)} mistakes, each listed with its line of problem.toml",
                              spec_errors=spec_errors) from None
    from gpu_runner import reference_candidate

    reference = reference_candidate(spec)
    facts: dict = {}
    if compile:
        from dataclasses import asdict

        from gpu_runner import Runner

        try:
            report = Runner(backend="static").check(spec, reference)
        except Exception as exc:  # nvcc missing or broken: say so rather than save an unchecked kernel
            raise ProblemRejected(f"The kernel could not be checked: {exc}") from None
        if not report.ok:
            errors = [{"line": e.line, "message": e.message} for e in report.errors]
            first = errors[0] if errors else {"line": None, "message": report.summary()}
            where = f" at line {first['line']}" if first.get("line") else ""
            raise ProblemRejected(f"The reference kernel does not compile{where}: {first['message']}", errors)
        facts = asdict(report.facts) if report.facts else {}
    return CheckedProblem(spec=spec, reference_candidate=reference.to_dict(), compiler_facts=facts)


@transaction.atomic
def problem_create(
    *,
    workspace: Workspace,
    user,
    spec_toml: str,
    reference_source: str,
    family_source: str = "",
    bundled: bool = False,
    compile: bool = True,
) -> Problem:
    if user is not None:
        access_require(user=user, workspace=workspace, action="upload")
    checked = problem_check(spec_toml=spec_toml, reference_source=reference_source, family_source=family_source, compile=compile)
    spec = checked.spec
    name = slugify(spec.name).replace("-", "_")
    if Problem.objects.filter(workspace=workspace, name=name).exists():
        raise ProblemRejected(f"A problem named {name} already exists in {workspace.name}; rename it in problem.toml.")
    reference = kernel_get_or_create(candidate={**checked.reference_candidate, "name": f"{name} reference"}, compiler_facts=checked.compiler_facts)
    return Problem.objects.create(
        workspace=workspace,
        name=name,
        title=spec.title or name,
        description=spec.description or "",
        spec_toml=spec_toml,
        family_source=family_source or "",
        reference=reference,
        bundled=bundled,
        created_by=user,
    )


def problem_load_bundled(*, workspace: Workspace, compile: bool = False) -> list[Problem]:
    """Add every bundled problem the workspace lacks. Bundled specs are checked by the test suite,
    so loading skips the compile step to keep start-up fast on machines without nvcc."""
    loaded = []
    for folder in sorted(p for p in bundled_dir().iterdir() if (p / "problem.toml").exists()):
        spec_toml = (folder / "problem.toml").read_text()
        from gpu_runner.spec import load_problem

        spec = load_problem(folder)
        if Problem.objects.filter(workspace=workspace, name=spec.name).exists():
            continue
        family = spec.family.source if spec.family else ""
        reference_source = spec.reference.source
        loaded.append(
            problem_create(
                workspace=workspace,
                user=None,
                spec_toml=spec_toml,
                reference_source=reference_source,
                family_source=family or "",
                bundled=True,
                compile=compile,
            )
        )
    return loaded


def problem_spec(problem: Problem):
    """The runner's spec object for a stored problem."""
    from gpu_runner.spec import parse_problem

    return parse_problem(problem.spec_toml, problem.reference.source, problem.family_source or None)
