"""Problems: an uploaded or bundled spec, checked by the runner's static backend before it is saved."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils.text import slugify

from kernellab.models import Problem, Workspace
from kernellab.selectors.problems import bundled_dir
from kernellab.services.access import access_require
from kernellab.services.errors import ServiceError
from kernellab.services.kernels import kernel_get_or_create


class ProblemRejected(ServiceError):
    """The upload was checked and refused; `compile_errors` holds [{line, message}] of reference.cu
    and `spec_errors` [{line, field, message}] of problem.toml, every one found, for the page."""

    def __init__(self, message: str, compile_errors: list[dict] | None = None, spec_errors: list[dict] | None = None):
        super().__init__(message)
        self.compile_errors = compile_errors or []
        self.spec_errors = spec_errors or []


FAMILY_WITHOUT_TABLE = ("family.cu was given but problem.toml has no [family] table: add one, or leave "
                        "family.cu out.")


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
    from gpu_runner.spec import reference_kind

    if reference_kind(spec_toml) == "pytorch":
        if (family_source or "").strip():
            raise ProblemRejected(FAMILY_WITHOUT_TABLE)
        return _pytorch_problem_check(spec_toml=spec_toml, program_source=reference_source)
    from gpu_runner.guards import find_escaping_work

    # What every measurement would reject (a host launcher, a forbidden #include) is refused now, not after a run
    # has spent its budget on rejections.
    for label, text in (("reference.cu", reference_source), ("family.cu", family_source)):
        refusal = find_escaping_work(text or "")
        if refusal is not None:
            line, reason = refusal
            raise ProblemRejected(f"{label}: {reason}", [{"line": line, "message": reason}])
    try:
        spec = parse_problem(spec_toml, reference_source, family_source or None)
    except SpecError as exc:
        spec_errors = [{"line": e.line, "field": e.field, "message": e.message} for e in exc.errors]
        if len(spec_errors) == 1:
            raise ProblemRejected(f"The problem spec is not valid: {exc}", spec_errors=spec_errors) from None
        raise ProblemRejected(f"The problem spec has {len(spec_errors)} mistakes, each listed with its line of problem.toml",
                              spec_errors=spec_errors) from None
    if spec.family is None and (family_source or "").strip():
        # parse_problem reads family.cu only for a [family]; stored anyway, it would lock the Knobs page
        raise ProblemRejected(FAMILY_WITHOUT_TABLE)
    _check_stored_lengths(spec, spec_toml)
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
        _refuse_unexported_kernels(reference, "reference.cu")
        _refuse_launch_beyond_resources(spec, spec_toml, reference, report.facts)
        facts = asdict(report.facts) if report.facts else {}
        if spec.family is not None:
            _check_family(spec, spec_toml)
    return CheckedProblem(spec=spec, reference_candidate=reference.to_dict(), compiler_facts=facts)


def _refuse_launch_beyond_resources(spec, spec_toml: str, reference, facts) -> None:
    """Refuse a reference launch whose block needs more registers or shared memory than the H100 and
    H200 give one block, in some size case: ptxas's registers per thread (allocated per warp in units
    of 256) times the block's threads past 65,536, or its static shared memory plus the launch's
    dynamic shared memory past 232,448 bytes (gpu_runner.resources). The spec's own checks read the
    launch alone; this one needs the compiled kernel, so it comes after the compile, with the launch's
    line of problem.toml like the spec's."""
    from gpu_runner.resources import plan_broken_limit
    from gpu_runner.toml_lines import field_line

    broken = plan_broken_limit(facts, reference.launch, spec.sizes) if facts is not None else None
    if broken is None:
        return
    index, limit = broken
    at = f"launch[{index}].{limit.part}"
    raise ProblemRejected(f"The problem spec is not valid: {at}: {limit.sentence}",
                          spec_errors=[{"line": field_line(spec_toml, at), "field": at, "message": limit.sentence}])


def _check_stored_lengths(spec, spec_toml: str) -> None:
    """Refuse a name or title longer than its database column (PostgreSQL raises a DataError for it,
    SQLite keeps it silently), as a spec mistake with its line of problem.toml."""
    from gpu_runner.toml_lines import field_line

    name = slugify(spec.name).replace("-", "_")
    errors = []
    for key, stored in (("name", name), ("title", spec.title or name)):
        limit = Problem._meta.get_field(key).max_length
        if len(stored) > limit:
            errors.append({"line": field_line(spec_toml, f"problem.{key}"), "field": f"problem.{key}",
                           "message": f"is {len(stored)} characters long; the limit is {limit} characters"})
    if errors:
        first = errors[0]
        raise ProblemRejected(f"The problem spec is not valid: {first['field']}: {first['message']}",
                              spec_errors=errors)


def _refuse_unexported_kernels(candidate, label: str) -> None:
    """Refuse a kernel the GPU workers could not find: they look each one up in the cubin by its plain
    name, which only an extern "C" kernel keeps (C++ mangles the others' names, vadd becomes
    _Z4vaddPKfS0_Pfi), so every measurement would fail. The cubin is the static check's, from the
    compile cache."""
    from gpu_runner.compiler import DEFAULT_ARCH, compile_cubin, cubin_kernel_names
    from gpu_runner.signature import kernel_signatures

    output = compile_cubin(candidate.source, candidate.compile_options, DEFAULT_ARCH, sass=False)
    if not output.report.ok or output.cubin is None:
        return
    compiled = cubin_kernel_names(output.cubin)
    missing = [kernel for kernel in candidate.kernel_names if kernel not in compiled]
    if not missing:
        return
    # the sentence the static backend gives when it measures such a kernel
    message = f"The kernel '{missing[0]}' is not in the compiled module; declare it extern \"C\" __global__."
    definitions = kernel_signatures(candidate.source).get(missing[0]) or ()
    line = definitions[0].line if definitions else None
    # the page marks compile errors on reference.cu's lines only
    errors = [{"line": line, "message": message}] if label == "reference.cu" else []
    raise ProblemRejected(f"{label}: {message}", errors)


def _check_family(spec, spec_toml: str) -> None:
    """Check a [family] as the Knobs page checks the one it writes (problem_knobs._compile_extremes,
    called rather than copied, so its limits hold here too): some setting of the knobs satisfies
    the constraints, and the smallest and largest variants compile and export their kernels (each
    variant launches the kernels its `when`s pick, so the largest may name kernels the smallest does
    not)."""
    from gpu_runner.family import render_variant, valid_variants
    from gpu_runner.spec import SpecError
    from gpu_runner.toml_lines import field_line

    from kernellab.services.problem_knobs import _compile_extremes

    try:
        _compile_extremes(spec)
        variants = valid_variants(spec)
        extremes = [render_variant(spec, knobs) for knobs in {tuple(v.items()): v
                                                              for v in (variants[0], variants[-1])}.values()]
    except SpecError as exc:   # the family's own limits (its size), each with its line of problem.toml
        errors = [{"line": field_line(spec_toml, e.field), "field": e.field, "message": e.message} for e in exc.errors]
        raise ProblemRejected(f"The problem spec is not valid: {exc}", spec_errors=errors) from None
    except ServiceError as exc:
        raise ProblemRejected(f"[family]: {exc}") from None
    except Exception as exc:  # nvcc missing or broken: say so rather than save an unchecked family
        raise ProblemRejected(f"The family could not be checked: {exc}") from None
    for variant in extremes:
        _refuse_unexported_kernels(variant, f"family.cu (the variant {variant.name})")


def _pytorch_problem_check(*, spec_toml: str, program_source: str) -> CheckedProblem:
    """A KernelBench program is read with `ast` only: the web tier never runs it, nor needs torch."""
    from gpu_runner.spec import SpecError, parse_problem

    try:
        spec = parse_problem(spec_toml, program_source)
    except SpecError as exc:
        errors = exc.errors
        program_errors = [{"line": None, "message": e.message} for e in errors if e.field == "problem.reference"]
        spec_errors = [{"line": e.line, "field": e.field, "message": e.message} for e in errors
                       if e.field != "problem.reference"]
        first = errors[0]
        message = first.message if first.field == "problem.reference" else f"The problem spec is not valid: {first}"
        raise ProblemRejected(message, program_errors, spec_errors) from None
    _check_stored_lengths(spec, spec_toml)
    reference = {"source": program_source, "launch": [], "temps": [], "compile_options": [], "knobs": None,
                 "name": f"{spec.name} reference"}
    return CheckedProblem(spec=spec, reference_candidate=reference)


def kernelbench_spec_toml(*, name: str, title: str, description: str = "", level: int | None = None,
                          task: int | None = None) -> str:
    """The stored spec of a PyTorch-reference problem: the program itself is the reference file."""
    def quoted(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'

    lines = ["[problem]", f"name = {quoted(name)}", f"title = {quoted(title)}"]
    if description:
        lines.append(f"description = {quoted(description)}")
    lines += ['kind = "pytorch"', 'reference = "reference.py"', "",
              "[tolerance]   # KernelBench's own check: allclose with atol = rtol = 1e-2",
              "float32 = { rtol = 1e-2, atol = 1e-2 }"]
    if level is not None or task is not None:
        lines += ["", "[kernelbench]"]
        lines += [f"level = {int(level)}"] if level is not None else []
        lines += [f"task = {int(task)}"] if task is not None else []
    return "\n".join(lines) + "\n"


def problem_create_pytorch(*, workspace: Workspace, user, program_source: str, name: str, title: str = "",
                           description: str = "", level: int | None = None, task: int | None = None,
                           bundled: bool = False) -> Problem:
    """Store a KernelBench-format program (`Model`, `get_inputs`, `get_init_inputs`) as a problem."""
    slug = slugify(name or "").replace("-", "_")
    if not slug:
        raise ProblemRejected("Give the problem a name of letters, digits and underscores.")
    if Problem.objects.filter(workspace=workspace, name=slug).exists():
        raise ProblemRejected(f"A problem named {slug} already exists in {workspace.name}; choose another name.")
    spec_toml = kernelbench_spec_toml(name=slug, title=title or slug, description=description, level=level,
                                      task=task)
    return problem_create(workspace=workspace, user=user, spec_toml=spec_toml, reference_source=program_source,
                          bundled=bundled, compile=False)


@dataclass
class KernelBenchImport:
    imported: list[Problem] = field(default_factory=list)
    present: list[str] = field(default_factory=list)          # names the workspace already had
    refused: list[tuple[str, str]] = field(default_factory=list)   # (file, why)
    with_recordings: int = 0   # imported tasks that came with recorded H200 measurements (replayable)


def kernelbench_files(path: Path, level: int | None = None) -> list[tuple[Path, int | None]]:
    """The task files under a KernelBench root (level1/, level2/, ...), one level folder or one file,
    each with its level (from a `levelN` folder name); `level` keeps only that level."""
    import re

    if not path.exists():
        raise ServiceError(f"{path} does not exist.")

    def level_of(folder: Path) -> int | None:
        match = re.fullmatch(r"level_?(\d+)", folder.name)
        return int(match.group(1)) if match else None

    if path.is_file():
        found = [(path, level_of(path.parent))]
    else:
        folders = sorted((p for p in path.iterdir() if p.is_dir() and level_of(p) is not None), key=level_of)
        if folders:
            found = [(f, level_of(d)) for d in folders for f in sorted(d.glob("*.py"))]
        else:
            found = [(f, level_of(path)) for f in sorted(path.glob("*.py"))]
    if level is not None:
        found = [(f, lvl) for f, lvl in found if lvl == level]
    return sorted(found, key=lambda item: (item[1] or 0, _task_number(item[0].name), item[0].name))


def _task_number(file_name: str) -> int:
    head = file_name.split("_", 1)[0]
    return int(head) if head.isdigit() else 1 << 30


def problem_import_kernelbench(*, workspace: Workspace, path: Path, level: int | None = None,
                               user=None) -> KernelBenchImport:
    """Import every KernelBench task under `path` (read in place, never copied) that the workspace lacks;
    a file that is not a KernelBench program is reported with why and the others still imported."""
    from gpu_runner.kernelbench import task_name

    summary = KernelBenchImport()
    files = kernelbench_files(path, level)
    if not files:
        where = f" of level {level}" if level is not None else ""
        raise ServiceError(f"No KernelBench task files (*.py){where} under {path}.")
    for file, file_level in files:
        name, title = task_name(file.name, file_level)
        if Problem.objects.filter(workspace=workspace, name=name).exists():
            summary.present.append(name)
            continue
        number = _task_number(file.name)
        try:
            text = file.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            summary.refused.append((str(file), f"it cannot be read as text ({exc.__class__.__name__})"))
            continue
        try:
            problem = problem_create_pytorch(
                workspace=workspace, user=user, program_source=text, name=name, title=title,
                description=f"KernelBench level {file_level} task {number} ({file.name})" if file_level else file.name,
                level=file_level, task=number if number < 1 << 30 else None)
        except ProblemRejected as exc:
            summary.refused.append((str(file), str(exc)))
            continue
        summary.imported.append(problem)
        summary.with_recordings += bool(_kernelbench_recordings_bring(problem))
    return summary


def _kernelbench_recordings_bring(problem: Problem) -> int:
    """Write the H200 measurements recorded for this KernelBench task (kernelbench/records, bundled)
    where replay reads an uploaded problem's records, so a run over it replays them offline."""
    import gzip
    import json

    from kernellab.selectors.kernelbench import kernelbench_records
    from kernellab.selectors.problems import problem_records_file

    # Only the GPU's name was recorded with them, not the full hardware facts a replayed result carries.
    records = [{k: v for k, v in record.items() if k != "hardware"}
               for record in kernelbench_records(problem_name=problem.name) if record.get("source_hash")]
    if not records:
        return 0
    target = problem_records_file(problem, "h200")
    target.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(target, "wt") as handle:
        for record in records:
            handle.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
    return len(records)


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
        family_source=(family_source or "") if spec.family is not None else "",
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
