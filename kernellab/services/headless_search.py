"""A search run from the command line (``manage.py search``): the web app's run, advanced in this
process instead of by Celery workers, with a budget in GPU measurements or seconds and a report.

Nothing here searches differently from the web app: the run is created by run_create, advanced by
run_advance, measured by the verification task and stored in the same database, so it shows up in
the explorer like any other. The tasks run eagerly (inline) for the length of the search."""
from __future__ import annotations

import logging
import math
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from django.db import transaction
from django.db.models.signals import post_save

from kernellab.models import ApprovalMode, Node, NodeState, Problem, RunChange, RunStatus, SearchRun, Workspace
from kernellab.selectors.problems import imported_records_root
from kernellab.services.errors import ServiceError

FAILED_STATES = (NodeState.FAILED_COMPILE, NodeState.FAILED_CORRECTNESS, NodeState.FAILED_RUNTIME)
DEFAULT_GPU_BUDGET = 40
UNBOUNDED_GPU_BUDGET = 100_000  # the run form's ceiling: with only --seconds, time is the budget
FAILURE_REASONS_SHOWN = 3  # the most common reasons a report gives for its failed proposals
TARGET_GPU = "h200"  # run_create's default, named here since the backend check before it needs it too


@dataclass
class SearchProgress:
    """What the command shows after each search step."""
    step: int
    measurements: int
    gpu_budget: int
    nodes: int
    best_speedup: float | None
    elapsed_s: float
    seconds: float | None
    final: bool = False   # the search has ended: the numbers of its report
    not_recorded: int = 0  # of `measurements`, the replay backend's misses: a GPU slot spent, nothing measured


@dataclass
class SearchReport:
    run_id: int
    problem: str
    workspace: str
    status: str
    status_reason: str
    backend: str
    generator: str
    surrogate: str
    gpu_budget: int
    seconds_budget: float | None
    best_speedup: float | None
    best_node: str | None
    best_source: str | None
    best_launch: list | None
    winning_recipe: str | None
    candidates_generated: int
    candidates_forecast: int
    candidates_measured: int
    candidates_failed: int
    candidates_not_recorded: int
    measurements_requested: int
    wall_s: float
    compile_s: float
    measure_s: float
    other_s: float
    counters: dict = field(default_factory=dict)
    # Proposals that never became a candidate (an LLM answer without usable code, a recipe that cannot apply, an
    # endpoint that failed): how many, and the most common reasons with their counts, most common first.
    proposals_failed: int = 0
    proposal_failure_reasons: list = field(default_factory=list)

    @property
    def compile_share(self) -> float:
        return self.compile_s / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "compile_share_of_wall": round(self.compile_share, 4)}

    def text(self) -> str:
        best = (f"{self.best_speedup:.3f}x (node {self.best_node})" if self.best_speedup is not None and self.best_node
                else "none better than the reference")
        lines = [
            f"Search of {self.problem} (run {self.run_id}, workspace {self.workspace}): {self.status}"
            + (f", {self.status_reason}" if self.status_reason else ""),
            f"  generator {self.generator}, surrogate {self.surrogate}, backend {self.backend}, "
            f"GPU budget {self.gpu_budget}" + (f", {self.seconds_budget:g} s" if self.seconds_budget else ""),
            f"  best: {best}" + (f", by the {self.winning_recipe} recipe" if self.winning_recipe else ""),
            f"  candidates: {self.candidates_generated} generated, {self.candidates_forecast} forecast, "
            f"{self.candidates_measured} measured, {self.candidates_failed} failed"
            + (f", {self.candidates_not_recorded} not in the recorded data" if self.candidates_not_recorded else ""),
            f"  wall {self.wall_s:.1f} s: compile checks {self.compile_s:.1f} s ({100 * self.compile_share:.0f}%), "
            f"measurements {self.measure_s:.1f} s, search and database {self.other_s:.1f} s",
        ]
        if self.proposals_failed:
            lines.insert(4, f"  proposals failed: {self.proposals_failed}"
                         + (" (" + "; ".join(f"{n}× {reason.rstrip('.')}" for reason, n in self.proposal_failure_reasons)
                            + ")" if self.proposal_failure_reasons else ""))
        if self.best_source:
            lines += ["", "Best kernel:", self.best_source.rstrip()]
        return "\n".join(lines) + "\n"


# ---- the problem ------------------------------------------------------------------------------
def problem_from_folder(*, workspace: Workspace, user, folder: Path, backend: str | None = None) -> Problem:
    """The problem in `folder` (problem.toml, its reference and family sources), uploaded into the
    workspace, or the same problem uploaded before. With `backend`, a backend that cannot measure it
    (counting the recorded measurements in `folder/records/`) is refused before anything is uploaded.
    The records themselves come along with folder_records_copy, once the search is sure to start."""
    from gpu_runner.spec import SpecError, load_problem

    from kernellab.services.problems import problem_create

    folder = Path(folder)
    if not (folder / "problem.toml").is_file():
        raise ServiceError(f"{folder} has no problem.toml; give a problem folder or an uploaded problem's id or name.")
    try:
        spec = load_problem(folder)
    except (SpecError, OSError) as exc:
        raise ServiceError(f"The problem in {folder} cannot be read: {exc}") from None
    spec_toml = (folder / "problem.toml").read_text(encoding="utf-8-sig")  # as load_problem read it
    reference_source = spec.reference.source
    family_source = spec.family.source if spec.family else ""
    existing = Problem.objects.filter(workspace=workspace, name=spec.name).select_related("reference").first()
    if existing is not None:
        same = (existing.spec_toml == spec_toml and existing.reference.source == reference_source
                and (existing.family_source or "") == (family_source or ""))
        if not same:
            raise ServiceError(f"{workspace.name} already has a different problem named {spec.name}; "
                               f"rename it in {folder / 'problem.toml'} or search the uploaded one by id ({existing.pk}).")
    if backend is not None:
        # An unsaved stand-in is enough to ask: the backends look at the name, the workspace and where records are.
        stand_in = existing or Problem(workspace=workspace, name=spec.name, title=spec.title or spec.name, bundled=False)
        search_check_backend(problem=stand_in, backend=backend, records=folder / "records")
    if existing is not None:
        return existing
    return problem_create(workspace=workspace, user=user, spec_toml=spec_toml,
                          reference_source=reference_source, family_source=family_source or "")


def folder_records_copy(*, problem: Problem, folder: Path) -> None:
    """The recorded measurements in `folder/records/`, copied where the replay backend reads an uploaded
    problem's, so it can answer for it. Files, not rows: a transaction cannot take them back, so this
    comes after everything that may still refuse the search."""
    records = Path(folder) / "records"
    if records.is_dir() and not problem.bundled:
        target = imported_records_root(problem.workspace) / problem.name / "records"
        target.mkdir(parents=True, exist_ok=True)
        for path in records.glob("*.jsonl.gz"):
            shutil.copyfile(path, target / path.name)


# Listed by name in the message for a problem that is not there; the rest are counted.
PROBLEMS_NAMED = 20


def problem_find(*, workspace: Workspace, key: str) -> Problem:
    """An uploaded problem by id or name."""
    problems = Problem.objects.filter(workspace=workspace)
    # ASCII digits only: str.isdigit() is true of "²" (which int() refuses) and of "١" (which int() reads as 1).
    is_id = key.isascii() and key.isdecimal()
    problem = problems.filter(pk=int(key)).first() if is_id else problems.filter(name=key).first()
    if problem is None:
        names = list(problems.order_by("name").values_list("name", flat=True))
        known = ", ".join(names[:PROBLEMS_NAMED]) or "none"
        if len(names) > PROBLEMS_NAMED:
            known += f", and {len(names) - PROBLEMS_NAMED} more (--list lists them all)"
        raise ServiceError(f"{workspace.name} has no problem {key!r} (and {key} is no problem folder); problems: {known}.")
    return problem


def problem_list(*, workspace: Workspace) -> list[Problem]:
    """The workspace's problems, by name, for search --list."""
    return list(Problem.objects.filter(workspace=workspace).order_by("name"))


# ---- the search -------------------------------------------------------------------------------
@contextmanager
def _tasks_inline():
    from kernellab.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    kombu = logging.getLogger("kombu.connection")
    kombu.addFilter(_no_default_hostname_warning)
    try:
        yield
    finally:
        kombu.removeFilter(_no_default_hostname_warning)
        app.conf.task_always_eager = before


def _no_default_hostname_warning(record: logging.LogRecord) -> bool:
    """Drops kombu's "No hostname was supplied. Reverting to default 'localhost'": an eager task still takes a
    producer from the pool, whose filesystem broker (the embedded setup's) has no host to name; nothing is wrong."""
    return not record.getMessage().startswith("No hostname was supplied.")


@contextmanager
def _timing_compiles(clock: dict):
    """Wall time of the search's compile checks. The port's compile is the one place every
    candidate is compiled before it is forecast; it is timed here, for this process only, so the
    web app's port stays as it is."""
    from kernellab.services.search_port import DatabasePort

    compile_check, compile_batch = DatabasePort.compile, DatabasePort.compile_many
    inside_batch = {"now": False}

    def timed(port, node_id, candidate):
        if inside_batch["now"]:
            return compile_check(port, node_id, candidate)  # the batch's own clock counts it
        started = time.perf_counter()
        try:
            return compile_check(port, node_id, candidate)
        finally:
            clock["compile_s"] += time.perf_counter() - started

    def timed_batch(port, items):
        started = time.perf_counter()
        inside_batch["now"] = True
        try:
            return compile_batch(port, items)
        finally:
            inside_batch["now"] = False
            clock["compile_s"] += time.perf_counter() - started

    DatabasePort.compile, DatabasePort.compile_many = timed, timed_batch
    try:
        yield
    finally:
        DatabasePort.compile, DatabasePort.compile_many = compile_check, compile_batch


@contextmanager
def _timing_measurements(clock: dict):
    from celery.signals import task_postrun, task_prerun

    started: dict[str, float] = {}

    def before(task_id=None, task=None, **kwargs):
        if task is not None and task.name.endswith("verification_execute"):
            started[task_id] = time.perf_counter()

    def after(task_id=None, task=None, **kwargs):
        if task_id in started:
            clock["measure_s"] += time.perf_counter() - started.pop(task_id)

    task_prerun.connect(before, weak=False)
    task_postrun.connect(after, weak=False)
    try:
        yield
    finally:
        task_prerun.disconnect(before)
        task_postrun.disconnect(after)


@contextmanager
def _watching_steps(run: SearchRun, on_step: Callable[[RunChange], None]):
    def changed(sender, instance: RunChange, created: bool, **kwargs):
        if created and instance.run_id == run.pk and instance.kind == "step":
            on_step(instance)

    post_save.connect(changed, sender=RunChange, weak=False)
    try:
        yield
    finally:
        post_save.disconnect(changed, sender=RunChange)


def search_budget(*, gpu_budget: int | None, seconds: float | None) -> int:
    """The GPU budget of a search given in measurements, seconds or neither; refuses a time budget that is no time."""
    if seconds is not None and not (math.isfinite(seconds) and seconds > 0):  # nan and inf: no limit, no JSON
        raise ServiceError("The time budget must be a positive number of seconds.")
    if gpu_budget is None:
        gpu_budget = UNBOUNDED_GPU_BUDGET if seconds else DEFAULT_GPU_BUDGET
    return gpu_budget


def search_check_backend(*, problem: Problem, backend: str, records: Path | None = None) -> None:
    """Refuse a search that `backend` cannot measure before its run is stored: the run's start would refuse it
    too (runs._require_measurable), but only after run_create had stored a run that never starts. `records`: a
    problem folder's recorded measurements, not yet copied in (folder_records_copy), which replay would read."""
    from kernellab.selectors.backends import backend_choice

    # Asked with the tasks inline, as the search runs: a GPU backend then measures in this process, not on a worker.
    with _tasks_inline():
        choice = backend_choice(problem=problem, backend=backend, target_gpu=TARGET_GPU)
    recorded = records / f"{TARGET_GPU}.jsonl.gz" if records is not None else None
    if choice.measures_with == "replay" and choice.available and (recorded is None or not recorded.is_file()):
        from kernellab.selectors.problems import problem_records_file

        recorded = problem_records_file(problem, TARGET_GPU)  # what replay reads: bundled, or copied in before
    if choice.measures_with == "replay" and recorded is not None and recorded.is_file():
        # Read, not only found: a corrupt or empty file, or one of another problem's records, measures nothing (and
        # a folder's would replace the records an earlier search of it copied in).
        from gpu_runner.backends.replay import records_unusable

        wrong = records_unusable(recorded, problem.name)
        if wrong is None:
            return
        raise ServiceError(f"The {backend} backend cannot measure {problem.title}: {recorded} holds no readable "
                           f"measurement of {problem.name}, since {wrong}.")
    if choice.available:
        return
    # With the tasks inline a GPU backend has no worker to wait for: the worker sentence would mislead.
    why = (choice.unavailable if choice.measures_with == "replay"
           else "this machine has no GPU, and the command-line search measures on this machine")
    from kernellab.selectors.problems import problem_records_file

    has_records = ((recorded is not None and recorded.is_file())
                   or problem_records_file(problem, TARGET_GPU).is_file())  # a folder's, or the problem's own
    raise ServiceError(f"The {backend} backend cannot measure {problem.title}: {why}. "
                       f"{_what_can_measure(backend, recorded=has_records)}")


def _what_can_measure(refused: str, *, recorded: bool) -> str:
    """What to do instead of a backend refused: another one, where this machine has one that measures (a GPU, or the
    problem's recorded measurements); otherwise what would make the search possible, rather than "choose a backend
    that can" when none can."""
    from gpu_runner import gpu_present

    if recorded and refused != "replay":
        return "It has recorded measurements: search with --backend replay to search them on this machine."
    if gpu_present():
        others = [name for name in ("auto", "cupy", "pycuda") if name != refused]
        return f"This machine has a GPU: search with --backend {' or '.join(others)}."
    return (f"No backend can measure it here (no GPU, and no recorded measurements to replay): search it on a "
            f"machine with a GPU, or put its recorded measurements in the problem folder's records/{TARGET_GPU}.jsonl.gz.")


def search_check_generator(*, problem: Problem, generator: str | None) -> None:
    """Refuse a generator the run form would not offer for `problem` (its rule, RunCreateForm's generator
    choices, asked rather than copied): a KernelBench task takes only replayed ModelNew programs, and the
    other generators would search it forever, or spend LLM calls, for nothing."""
    from kernellab.forms import RunCreateForm

    if generator is None:
        return
    form = RunCreateForm(problem=problem)
    if form.nothing_to_propose:
        raise ServiceError(form.nothing_to_propose)
    allowed = [name for name, _ in form.fields["generator"].choices]
    if generator not in allowed:
        raise ServiceError(f"The {generator} generator cannot search {problem.title}; "
                           f"choose {' or '.join(allowed) if allowed else 'another problem'}.")


class SearchInterrupted(Exception):
    """The search was interrupted (Ctrl-C, SIGTERM): its run is paused; `report` is what it found so far."""

    def __init__(self, report: "SearchReport"):
        super().__init__(INTERRUPTED_REASON)
        self.report = report


INTERRUPTED_REASON = "the command-line search was interrupted"


def search_create(
    *,
    problem: Problem,
    user,
    gpu_budget: int | None = None,
    seconds: float | None = None,
    backend: str = "auto",
    generator: str | None = None,
    surrogate: str | None = None,
    children_per_step: int | None = None,
    parents_per_step: int | None = None,
    min_children_per_step: int | None = None,
    compile_share_target: float | None = None,
    screening_width: int | None = None,
    max_gpu_per_step: int | None = None,
    seed: int = 0,
    name: str = "",
    records: Path | None = None,
) -> SearchRun:
    """The run of a search of `problem`, stored but not started (search_run starts it), or a ServiceError that
    stored nothing. A setting left None is the problem's default (runs.run_defaults, as on the run form), else
    run_create's. Call it in the transaction that made the problem ready (its upload, its knobs), so that a
    setting run_create refuses takes those back too. `records`: as for search_check_backend."""
    from kernellab.services.runs import run_create, run_defaults

    gpu_budget = search_budget(gpu_budget=gpu_budget, seconds=seconds)
    given = {"generator": generator, "surrogate": surrogate, "children_per_step": children_per_step,
             "parents_per_step": parents_per_step, "min_children_per_step": min_children_per_step,
             "compile_share_target": compile_share_target, "screening_width": screening_width,
             "max_gpu_per_step": max_gpu_per_step}
    chosen = {**run_defaults(problem=problem), **{k: v for k, v in given.items() if v is not None}}
    search_check_generator(problem=problem, generator=chosen.get("generator"))
    search_check_backend(problem=problem, backend=backend, records=records)
    return run_create(problem=problem, user=user, name=name or "command-line search", gpu_budget=gpu_budget,
                      approval_mode=ApprovalMode.AUTO, backend=backend, seed=seed, target_gpu=TARGET_GPU, start=False,
                      **chosen)


def search_run(*, run: SearchRun, user, seconds: float | None = None,
               on_progress: Callable[[SearchProgress], None] | None = None) -> SearchReport:
    """Start `run` (from search_create) and search to the end of its budget in this process; report what was found.
    on_progress hears after each step, and once more when the search has ended: a step's measurements are read
    only by the step after it, so the last step's are in that last call alone."""
    from kernellab.services.runs import run_transition

    started = time.perf_counter()
    clock = {"compile_s": 0.0, "measure_s": 0.0}
    stopping = {"asked": False}

    def stop_for_time() -> None:
        current = SearchRun.objects.get(pk=run.pk)
        if current.status in (RunStatus.RUNNING, RunStatus.WAITING):
            run_transition(run=current, action="finish", reason=f"the time budget of {seconds:g} s is spent")

    def progress(step: int, elapsed: float, final: bool = False) -> None:
        current = SearchRun.objects.select_related("best_node").get(pk=run.pk)
        best = _best_node(current)  # the report's best, not best_speedup, which counts the reference's 1.0
        nodes = Node.objects.filter(run=run)
        on_progress(SearchProgress(step=step, measurements=current.gpu_used, gpu_budget=run.gpu_budget,
                                   nodes=nodes.count(), not_recorded=nodes.filter(state=NodeState.NOT_RECORDED).count(),
                                   best_speedup=best.speedup if best is not None else None, elapsed_s=elapsed,
                                   seconds=seconds, final=final))

    def on_step(change: RunChange) -> None:
        elapsed = time.perf_counter() - started
        if on_progress is not None:
            progress(int(change.payload.get("step") or 0), elapsed)
        if seconds and elapsed >= seconds and not stopping["asked"]:
            stopping["asked"] = True
            transaction.on_commit(stop_for_time)  # after the step's own writes, which are in flight

    try:
        with _tasks_inline(), _timing_compiles(clock), _timing_measurements(clock), _watching_steps(run, on_step):
            run_transition(run=run, user=user, action="start")
    except ServiceError:
        # search_create checked what the start checks; should it have changed since (a worker gone), the run
        # that never started goes, rather than stay behind as a created run nobody will start.
        SearchRun.objects.filter(pk=run.pk, status=RunStatus.CREATED).delete()
        raise
    except KeyboardInterrupt:
        # Nobody advances the run once this process stops: it is paused, to be resumed from the web app,
        # rather than left running or waiting with nothing queued; what it found so far is reported.
        current = SearchRun.objects.get(pk=run.pk)
        if current.status in (RunStatus.RUNNING, RunStatus.WAITING):
            run_transition(run=current, action="pause", reason=INTERRUPTED_REASON)
        wall = time.perf_counter() - started
        raise SearchInterrupted(search_report(run=SearchRun.objects.get(pk=run.pk), wall_s=wall,
                                              compile_s=clock["compile_s"], measure_s=clock["measure_s"],
                                              seconds=seconds)) from None
    wall = time.perf_counter() - started
    finished = SearchRun.objects.get(pk=run.pk)
    if on_progress is not None:
        progress(int((finished.driver_state or {}).get("step") or 0), wall, final=True)
    return search_report(run=finished, wall_s=wall, compile_s=clock["compile_s"], measure_s=clock["measure_s"],
                         seconds=seconds)


def _best_node(run: SearchRun) -> Node | None:
    """The run's best candidate, as the report names it: the reference (the root) is no candidate."""
    return run.best_node if run.best_node_id and run.best_node.origin != "root" else None


def search_report(*, run: SearchRun, wall_s: float, compile_s: float, measure_s: float,
                  seconds: float | None = None) -> SearchReport:
    nodes = Node.objects.filter(run=run).exclude(origin="root")
    counters = (run.driver_state or {}).get("counters") or {}
    best = _best_node(run)
    best_kernel = best.kernel if best is not None else None
    return SearchReport(
        run_id=run.pk,
        problem=run.problem.name,
        workspace=run.problem.workspace.slug,
        status=run.status,
        status_reason=run.status_reason,
        backend=run.backend,
        generator=run.generator,
        surrogate=run.surrogate,
        gpu_budget=run.gpu_budget,
        seconds_budget=seconds,
        best_speedup=best.speedup if best is not None else None,
        best_node=best.key if best is not None else None,
        best_source=best_kernel.source if best_kernel is not None else None,
        best_launch=best_kernel.as_candidate().get("launch") if best_kernel is not None else None,
        winning_recipe=_recipe_of(best_kernel.as_candidate().get("name") or "") if best_kernel is not None else None,
        candidates_generated=nodes.count(),
        candidates_forecast=nodes.filter(forecasts__isnull=False).distinct().count(),
        candidates_measured=nodes.filter(state=NodeState.MEASURED).count(),
        candidates_failed=nodes.filter(state__in=FAILED_STATES).count(),
        candidates_not_recorded=nodes.filter(state=NodeState.NOT_RECORDED).count(),
        measurements_requested=int(counters.get("measurements_requested", run.gpu_used)),
        wall_s=round(wall_s, 3),
        compile_s=round(compile_s, 3),
        measure_s=round(measure_s, 3),
        other_s=round(max(0.0, wall_s - compile_s - measure_s), 3),
        counters=counters,
        **_proposal_failures(run, counters),
    )


def _proposal_failures(run: SearchRun, counters: dict) -> dict:
    """How many proposals failed (the search's count) and the most common reasons the nodes keep for them."""
    from collections import Counter

    tally: Counter = Counter()
    for failures in Node.objects.filter(run=run).values_list("failed_proposals", flat=True):
        tally.update(str(f.get("reason") or "no reason given") for f in failures or [] if isinstance(f, dict))
    return {"proposals_failed": int(counters.get("failed_proposals") or sum(tally.values())),
            "proposal_failure_reasons": [[reason, n] for reason, n in tally.most_common(FAILURE_REASONS_SHOWN)]}


def _recipe_of(kernel_name: str) -> str | None:
    from search_engine.generators.recipes import RECIPE_NAME_PREFIX

    if not kernel_name.startswith(RECIPE_NAME_PREFIX):
        return None
    return kernel_name[len(RECIPE_NAME_PREFIX):].split(":", 1)[0]
