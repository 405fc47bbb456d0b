"""Export measured comparisons (and parent -> child pairs) as JSON Lines in the GPU Forecasters layout.

Sources:
- the database: every Measurement with status ok, joined to its Kernel and its Problem's reference
  (source "kernellab-db"); measurements made by the replay backend are copies of recorded rows and
  are left out unless --include-replays;
- the recorded datasets <problems>/<name>/records/<gpu>.jsonl.gz (source "recorded-<gpu>"): each
  record's variant source is rendered from its knobs with gpu_runner.render_variant on the problem's
  spec and checked against the recorded source hash.

Pairs (--pairs): measured parent -> child nodes of the database's search trees, and, from the
records, variants one knob apart (the template generator's moves), both directions.
"""
from __future__ import annotations

import os
import re
import tempfile
from collections import Counter
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from kernellab.management.database import require_migrated_database
from kernellab.management.commands.import_dataset import plural
from search_engine.lab.datasets import comparison_row, neighbour_pairs, pair_row, rows_from_records, write_dataset


def check_out_file(value: str | None, option: str, *, example: str = "dataset.jsonl",
                   kinds: str = ".jsonl or .jsonl.gz") -> None:
    """An output file's path, checked before the export (or training) runs: what would end it only once every row
    was read or the model fitted. A folder is refused, not written into, so that the file is always the one named;
    the missing folders on the way are made when it is written, so the nearest one that exists must be a folder
    that takes new files (tried: as root, os.access says yes even of /proc)."""
    if not value:
        return
    path = Path(value).expanduser()
    if path.is_dir():
        raise CommandError(f"{option} {value} is a folder; give a file name ({kinds}), e.g. {Path(value) / example}.")
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise CommandError(f"{option} {value} cannot be written: {existing} is a file, not a folder.")
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".kernellab-write-check-")
    except OSError as exc:
        raise CommandError(f"{option} {value} cannot be written: {existing} takes no new file "
                           f"({(exc.strerror or str(exc)).rstrip('.')}).") from None
    os.close(fd)
    os.unlink(probe)


JSONL_OUTPUT_SUFFIXES = (".jsonl", ".jsonl.gz")


def check_jsonl_out(value: str | None, option: str) -> None:
    """The exports write JSON Lines only (there is no CSV writer): a name of another type (rows.csv) is refused
    before the work, where it had been given JSON Lines that import_dataset then failed to read as CSV."""
    if value and not Path(value).name.lower().endswith(JSONL_OUTPUT_SUFFIXES):
        raise CommandError(f"{option} {value}: the file is written as JSON Lines, so its name must end in .jsonl "
                           "or .jsonl.gz.")


def check_distinct_outputs(first: tuple[str, str | None], second: tuple[str, str | None]) -> None:
    """Two outputs named as one file: the second write would replace the first, and the command would say it wrote
    both (export_rl --out X --eval-out X kept only the held-out prompts)."""
    (first_option, first_value), (second_option, second_value) = first, second
    if first_value and second_value and Path(first_value).expanduser().resolve() == Path(second_value).expanduser().resolve():
        raise CommandError(f"{first_option} and {second_option} name the same file, {second_value}; give each its own.")


def write_failure(path, exc: OSError) -> CommandError:
    """A write that failed after the checks (the disk filled, the folder was removed): one sentence, no traceback."""
    return CommandError(f"Cannot write {path}: {(exc.strerror or str(exc)).rstrip('.')}.")


# ---- recorded datasets (gpu_runner renders; search_engine.lab stays pure) -------------------------

def problem_context(spec) -> dict:
    roofline = {}
    if getattr(spec, "roofline", None) is not None:
        if spec.roofline.flops is not None:
            roofline["flops"] = spec.roofline.flops.text
        if spec.roofline.bytes is not None:
            roofline["bytes"] = spec.roofline.bytes.text
    return {"sizes": dict(spec.default_case.sizes), "roofline": roofline, "description": spec.description or ""}


def knob_values(spec) -> dict[str, list]:
    return {name: list(values) for name, values in spec.family.knobs.items()} if spec.family else {}


def recorded_rows(problem_dir: Path, records_path: Path, source: str) -> tuple[list[dict], list[str], dict]:
    """(rows, skipped reasons, knob values) for one problem's recorded file; a file that cannot be read raises
    gpu_runner's RecordsUnreadable, naming it, rather than exporting none of its rows without a word."""
    from gpu_runner import load_problem, reference_candidate, render_variant
    from gpu_runner.backends.replay import read_records

    spec = load_problem(problem_dir)
    reference = reference_candidate(spec).to_dict()
    rows, skipped = rows_from_records(
        read_records(records_path, strict=True), problem=spec.name, reference=reference,
        render=lambda knobs: render_variant(spec, knobs).to_dict(), source=source,
        problem_context=problem_context(spec),
    )
    return rows, skipped, knob_values(spec)


def recorded_files(problems_dir: Path, gpu: str | None) -> list[tuple[Path, Path]]:
    """(problem folder, records file) for every problem with records for the GPU (or any GPU)."""
    from kernellab.datasets import bundled_problem_dirs

    out = []
    for folder in bundled_problem_dirs(problems_dir):
        for path in sorted((folder / "records").glob("*.jsonl.gz")):
            if gpu is None or path.name == f"{gpu}.jsonl.gz":
                out.append((folder, path))
    return out


def records_dataset(*, problems_dir: Path, gpu: str | None, extra_files: list[tuple[str, Path]],
                    problems: set[str] | None = None, log=None) -> tuple[list[dict], list[dict]]:
    """Rows and one-knob pairs from recorded files (the bundled ones plus NAME=PATH extras)."""
    files = recorded_files(problems_dir, gpu) + [(problems_dir / name, path) for name, path in extra_files]
    rows, pairs = [], []
    for folder, path in files:
        if problems and folder.name not in problems:
            continue
        stem = path.name.removesuffix(".jsonl.gz")
        gpu_key = stem if re.fullmatch(r"[a-z0-9]+", stem) else (gpu or "gpu")
        problem_rows, skipped, knobs = recorded_rows(folder, path, f"recorded-{gpu_key}")
        rows.extend(problem_rows)
        pairs.extend(neighbour_pairs(problem_rows, knob_values=knobs))
        if log:
            reasons = Counter(r.split(": ", 1)[1] for r in skipped)
            note = "; skipped " + ", ".join(f"{n} ({why})" for why, n in reasons.items()) if skipped else ""
            log(f"{folder.name}: {len(problem_rows)} rows from {path}{note}")
    return rows, pairs


# ---- the database ------------------------------------------------------------------------------

def database_rows(*, include_replays: bool = False, problems: set[str] | None = None, log=None,
                  workspaces: list[str] | None = None) -> tuple[list[dict], list[dict]]:
    """The database's measurements and measured parent -> child pairs, of the workspaces named (their slugs; None:
    every workspace, each problem's pack then named "<workspace>/<problem>" so that two teams' problems of one name
    stay apart)."""
    from kernellab.models import Measurement, Node
    from kernellab.services.problems import problem_spec

    contexts: dict[int, dict] = {}

    def context(problem) -> dict:
        if problem.pk not in contexts:
            try:
                contexts[problem.pk] = problem_context(problem_spec(problem))
            except Exception as exc:  # a stored spec the runner no longer reads: export without sizes
                if log:
                    log(f"problem {problem.name}: spec not readable ({exc}); exported without sizes")
                contexts[problem.pk] = {"description": problem.description}
        return contexts[problem.pk]

    measurements = (Measurement.objects.filter(status="ok", speedup__gt=0)
                    .select_related("kernel", "problem__reference").order_by("pk"))
    if not include_replays:
        measurements = measurements.exclude(backend="replay")
    if problems:
        measurements = measurements.filter(problem__name__in=problems)
    if workspaces is not None:
        measurements = measurements.filter(problem__workspace__slug__in=workspaces)

    def pack(problem) -> str:
        return problem.name if workspaces is not None and len(workspaces) == 1 else \
            f"{problem.workspace.slug}/{problem.name}"

    measurements = measurements.select_related("problem__workspace")
    rows = []
    latest: dict[tuple[int, int], object] = {}
    for m in measurements:
        problem = m.problem
        latest[(m.kernel_id, problem.pk)] = m
        rows.append(comparison_row(
            comparison_id=f"kernellab-db:measurement:{m.pk}", pack=pack(problem),
            anchor=problem.reference.as_candidate(), candidate=m.kernel.as_candidate(),
            hardware=m.hardware or {"name": m.gpu_model or "unknown GPU"}, speedup=m.speedup, source="kernellab-db",
            source_id=f"measurement {m.pk} ({m.backend}, kernel {m.kernel.content_hash[:12]})",
            compiler_facts=m.compiler_facts or m.kernel.compiler_facts or {},
            anchor_compiler_facts=problem.reference.compiler_facts or {},
            reference_ms=(m.reference_stats or {}).get("median_ms"), problem=context(problem),
        ))
    pairs = []
    nodes = (Node.objects.filter(parent__isnull=False, speedup__gt=0, parent__speedup__gt=0,
                                 kernel__isnull=False, parent__kernel__isnull=False)
             .select_related("kernel", "parent__kernel", "run__problem__reference").order_by("pk"))
    if problems:
        nodes = nodes.filter(run__problem__name__in=problems)
    if workspaces is not None:
        nodes = nodes.filter(run__problem__workspace__slug__in=workspaces)
    nodes = nodes.select_related("run__problem__workspace")
    for node in nodes:
        problem = node.run.problem
        measured = latest.get((node.kernel_id, problem.pk))
        if measured is None:
            continue  # measured only by replay (left out above) or not at all
        parent_measured = latest.get((node.parent.kernel_id, problem.pk))
        pairs.append(pair_row(
            pair_id=f"kernellab-db:run:{node.run_id}:{node.parent.key}->{node.key}", problem_id=pack(problem),
            parent=node.parent.kernel.as_candidate(), child=node.kernel.as_candidate(),
            hardware=measured.hardware or {"name": measured.gpu_model or "unknown GPU"},
            parent_speedup=node.parent.speedup, child_speedup=node.speedup, source="kernellab-db",
            source_id=f"run {node.run_id}", parent_node_id=node.parent.key, child_node_id=node.key,
            anchor=problem.reference.as_candidate(),
            parent_compiler_facts=(parent_measured.compiler_facts if parent_measured else node.parent.kernel.compiler_facts),
            child_compiler_facts=measured.compiler_facts or node.kernel.compiler_facts,
            reference_ms=(measured.reference_stats or {}).get("median_ms"), problem=context(problem),
        ))
    if log:
        log(f"database: {len(rows)} measurements, {len(pairs)} measured parent -> child pairs")
    return rows, pairs


def _workspaces(named: list[str], every: bool) -> list[str] | None:
    """The workspaces whose measurements an export reads: those named, or every one with --all-workspaces. Without
    either, the database's only workspace; a database of several teams is not exported together by default, since
    the rows carry each team's kernel sources and an import puts them all in one team's lab."""
    from kernellab.models import Workspace

    slugs = list(Workspace.objects.order_by("slug").values_list("slug", flat=True))
    if named and every:
        raise CommandError("Give --workspace SLUG or --all-workspaces, not both.")
    if every:
        return None
    unknown = [slug for slug in named if slug not in slugs]
    if unknown:
        raise CommandError(f"No workspace {', '.join(map(repr, unknown))}; the database has: "
                           f"{', '.join(slugs) or 'none'}.")
    if named:
        return sorted(set(named))
    if len(slugs) > 1:
        raise CommandError(f"The database holds {len(slugs)} workspaces ({', '.join(slugs)}): name the one to export "
                           "with --workspace SLUG, or export every team's measurements together with "
                           "--all-workspaces.")
    return slugs


PROBLEMS_NAMED = 20  # the most problem names a refused --problem lists


def _check_problems(only: set[str], *, wanted: set[str], problems_dir: Path, extra: list[tuple[str, Path]],
                    workspaces: list[str] | None) -> None:
    """Refuse a --problem that names no problem of the sources read, before reading them: otherwise a typo ends in
    "Nothing to export", which blames the measurements."""
    from kernellab.datasets import bundled_problem_dirs
    from kernellab.models import Problem

    known: set[str] = set()
    where = []
    if "records" in wanted:
        known |= {folder.name for folder in bundled_problem_dirs(problems_dir)} | {name for name, _ in extra}
        where.append(f"the recorded datasets under {problems_dir}")
    if "db" in wanted:
        stored = Problem.objects.all()
        if workspaces is not None:
            stored = stored.filter(workspace__slug__in=workspaces)
        known |= set(stored.values_list("name", flat=True))
        where.append("the database")
    unknown = sorted(only - known)
    if unknown:
        names = sorted(known)
        listed = ", ".join(names[:PROBLEMS_NAMED]) + (f" and {len(names) - PROBLEMS_NAMED} more"
                                                      if len(names) > PROBLEMS_NAMED else "")
        raise CommandError(f"--problem {', '.join(unknown)}: no such problem in {' or '.join(where)}; "
                           f"there are: {listed or 'none'}.")


class Command(BaseCommand):
    help = ("Export every measurement (database and recorded datasets) as JSON Lines in the GPU Forecasters "
            "layout: anchor_code, candidate_code, hardware, aggregated_speedup, true_bin, pack, source.")

    def add_arguments(self, parser):
        parser.add_argument("out", help="output file (.jsonl or .jsonl.gz)")
        parser.add_argument("--from", dest="sources", default="db,records",
                            help="comma-separated: db, records (default both)")
        parser.add_argument("--pairs", help="also write parent -> child pairs to this file")
        parser.add_argument("--gpu", default="h200", help="which recorded GPU files to read (default h200; 'any' for all)")
        parser.add_argument("--problems-dir", default=None, help="folder of problem specs (default the bundled problems)")
        parser.add_argument("--records-file", action="append", default=[], metavar="PROBLEM=PATH",
                            help="an extra recorded file for a problem of --problems-dir (repeatable)")
        parser.add_argument("--problem", action="append", default=[], help="only these problems (repeatable)")
        parser.add_argument("--include-replays", action="store_true",
                            help="also export database measurements made by the replay backend")
        parser.add_argument("--workspace", action="append", default=[], metavar="SLUG",
                            help="the database's measurements of this workspace only (repeatable); needed when the "
                                 "database holds more than one workspace")
        parser.add_argument("--all-workspaces", action="store_true",
                            help="every workspace's measurements together, each pack named WORKSPACE/PROBLEM")

    def handle(self, *args, out, sources, pairs, gpu, problems_dir, records_file, problem, include_replays,
               workspace, all_workspaces, **options):
        check_out_file(out, "The output")
        check_out_file(pairs, "--pairs")
        check_jsonl_out(out, "The output")
        check_jsonl_out(pairs, "--pairs")
        check_distinct_outputs(("The output", out), ("--pairs", pairs))
        wanted = {s.strip() for s in sources.split(",") if s.strip()}
        if not wanted or wanted - {"db", "records"}:
            raise CommandError("--from takes db, records or both (comma-separated).")
        problems_dir = Path(problems_dir or settings.KERNELLAB_PROBLEMS_DIR)
        extra = []
        for item in records_file:
            name, sep, path = item.partition("=")
            if not sep or not Path(path).is_file() or not (problems_dir / name / "problem.toml").exists():
                raise CommandError(f"--records-file {item!r}: give PROBLEM=PATH with a problem of {problems_dir} "
                                   "and an existing file.")
            extra.append((name, Path(path)))
        only = set(problem) or None
        log = lambda line: self.stderr.write(line)  # noqa: E731
        rows, pair_rows = [], []
        workspaces = None
        if "db" in wanted:
            try:
                require_migrated_database()
            except CommandError as exc:
                raise CommandError(f"{exc} (Or export only the recorded datasets: --from records.)") from None
            workspaces = _workspaces(workspace, all_workspaces)
        if only:
            _check_problems(only, wanted=wanted, problems_dir=problems_dir, extra=extra, workspaces=workspaces)
        if "db" in wanted:
            db_rows, db_pairs = database_rows(include_replays=include_replays, problems=only, log=log,
                                              workspaces=workspaces)
            rows += db_rows
            pair_rows += db_pairs
        if "records" in wanted:
            from gpu_runner.backends.replay import RecordsUnreadable

            try:
                rec_rows, rec_pairs = records_dataset(problems_dir=problems_dir, gpu=None if gpu == "any" else gpu,
                                                      extra_files=extra, problems=only, log=log)
            except RecordsUnreadable as exc:
                raise CommandError(f"{exc}.") from None
            rows += rec_rows
            pair_rows += rec_pairs
        if not rows:
            raise CommandError("Nothing to export: no successful measurements in the database and no recorded "
                               f"files under {problems_dir}/*/records/ for '{gpu}'.")
        try:
            count = write_dataset(out, rows)
        except OSError as exc:
            raise write_failure(out, exc) from None
        by_source = Counter(r["source"] for r in rows)
        self.stdout.write(f"Wrote {plural(count, 'row')} to {out} ({', '.join(f'{n} {s}' for s, n in by_source.items())}).")
        if pairs:
            if not pair_rows:
                self.stderr.write("No parent -> child pairs to write.")
            else:
                try:
                    n = write_dataset(pairs, pair_rows)
                except OSError as exc:
                    raise write_failure(pairs, exc) from None
                found = sum(1 for p in pair_rows if p["g_speedup"] >= 2 ** 0.5)
                self.stdout.write(f"Wrote {plural(n, 'pair')} to {pairs} ({found} with the child >= √2x its parent).")
