"""A search run from the command line (``manage.py search``): the web app's run, advanced in this
process instead of by Celery workers, with a budget in GPU measurements or seconds and a report.

Nothing here searches differently from the web app: the run is created by run_create, advanced by
run_advance, measured by the verification task and stored in the same database, so it shows up in
the explorer like any other. The tasks run eagerly (inline) for the length of the search."""
from __future__ import annotations

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
        if self.best_source:
            lines += ["", "Best kernel:", self.best_source.rstrip()]
        return "\n".join(lines) + "\n"


# ---- the problem ------------------------------------------------------------------------------
def problem_from_folder(*, workspace: Workspace, user, folder: Path) -> Problem:
    """The problem in `folder` (problem.toml, its reference and family sources), uploaded into the
    workspace, or the same problem uploaded before. Recorded measurements in `folder/records/` come
    along, so the replay backend can answer for it."""
    from gpu_runner.spec import SpecError, load_problem

    from kernellab.services.problems import problem_create

    folder = Path(folder)
    if not (folder / "problem.toml").is_file():
        raise ServiceError(f"{folder} has no problem.toml; give a problem folder or an uploaded problem's id or name.")
    try:
        spec = load_problem(folder)
    except (SpecError, OSError) as exc:
        raise ServiceError(f"The problem in {folder} cannot be read: {exc}") from None
    spec_toml = (folder / "problem.toml").read_text()
    reference_source = spec.reference.source
    family_source = spec.family.source if spec.family else ""
    existing = Problem.objects.filter(workspace=workspace, name=spec.name).select_related("reference").first()
    if existing is not None:
        same = (existing.spec_toml == spec_toml and existing.reference.source == reference_source
                and (existing.family_source or "") == (family_source or ""))
        if not same:
            raise ServiceError(f"{workspace.name} already has a different problem named {spec.name}; "
                               f"rename it in {folder / 'problem.toml'} or search the uploaded one by id ({existing.pk}).")
        problem = existing
    else:
        problem = problem_create(workspace=workspace, user=user, spec_toml=spec_toml,
                                 reference_source=reference_source, family_source=family_source or "")
    records = folder / "records"
    if records.is_dir() and not problem.bundled:
        target = imported_records_root(workspace) / problem.name / "records"
        target.mkdir(parents=True, exist_ok=True)
        for path in records.glob("*.jsonl.gz"):
            shutil.copyfile(path, target / path.name)
    return problem


def problem_find(*, workspace: Workspace, key: str) -> Problem:
    """An uploaded problem by id or name."""
    problems = Problem.objects.filter(workspace=workspace)
    problem = problems.filter(pk=int(key)).first() if key.isdigit() else problems.filter(name=key).first()
    if problem is None:
        known = ", ".join(problems.values_list("name", flat=True)[:20]) or "none"
        raise ServiceError(f"{workspace.name} has no problem {key!r} (and {key} is no problem folder); problems: {known}.")
    return problem


# ---- the search -------------------------------------------------------------------------------
@contextmanager
def _tasks_inline():
    from kernellab.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        yield
    finally:
        app.conf.task_always_eager = before


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


def search_headless(
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
    on_progress: Callable[[SearchProgress], None] | None = None,
) -> SearchReport:
    """Search `problem` to the end of its budget in this process and report what was found. A setting left
    None is the problem's default (runs.run_defaults, as on the run form), else run_create's."""
    from kernellab.services.runs import run_create, run_defaults, run_transition

    if seconds is not None and seconds <= 0:
        raise ServiceError("The time budget must be a positive number of seconds.")
    if gpu_budget is None:
        gpu_budget = UNBOUNDED_GPU_BUDGET if seconds else DEFAULT_GPU_BUDGET
    given = {"generator": generator, "surrogate": surrogate, "children_per_step": children_per_step,
             "parents_per_step": parents_per_step, "min_children_per_step": min_children_per_step,
             "compile_share_target": compile_share_target, "screening_width": screening_width,
             "max_gpu_per_step": max_gpu_per_step}
    chosen = {**run_defaults(problem=problem), **{k: v for k, v in given.items() if v is not None}}
    clock = {"compile_s": 0.0, "measure_s": 0.0}
    run = run_create(problem=problem, user=user, name=name or "command-line search", gpu_budget=gpu_budget,
                     approval_mode=ApprovalMode.AUTO, backend=backend, seed=seed, start=False, **chosen)
    started = time.perf_counter()
    stopping = {"asked": False}

    def stop_for_time() -> None:
        current = SearchRun.objects.get(pk=run.pk)
        if current.status in (RunStatus.RUNNING, RunStatus.WAITING):
            run_transition(run=current, action="finish", reason=f"the time budget of {seconds:g} s is spent")

    def on_step(change: RunChange) -> None:
        elapsed = time.perf_counter() - started
        if on_progress is not None:
            current = SearchRun.objects.filter(pk=run.pk).values("gpu_used", "best_speedup").get()
            on_progress(SearchProgress(step=int(change.payload.get("step") or 0), measurements=current["gpu_used"],
                                       gpu_budget=gpu_budget, nodes=Node.objects.filter(run=run).count(),
                                       best_speedup=current["best_speedup"], elapsed_s=elapsed, seconds=seconds))
        if seconds and elapsed >= seconds and not stopping["asked"]:
            stopping["asked"] = True
            transaction.on_commit(stop_for_time)  # after the step's own writes, which are in flight

    with _tasks_inline(), _timing_compiles(clock), _timing_measurements(clock), _watching_steps(run, on_step):
        run_transition(run=run, user=user, action="start")
    wall = time.perf_counter() - started
    return search_report(run=SearchRun.objects.get(pk=run.pk), wall_s=wall, compile_s=clock["compile_s"],
                         measure_s=clock["measure_s"], seconds=seconds)


def search_report(*, run: SearchRun, wall_s: float, compile_s: float, measure_s: float,
                  seconds: float | None = None) -> SearchReport:
    nodes = Node.objects.filter(run=run).exclude(origin="root")
    counters = (run.driver_state or {}).get("counters") or {}
    best = run.best_node if run.best_node_id and run.best_node.origin != "root" else None
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
    )


def _recipe_of(kernel_name: str) -> str | None:
    from search_engine.generators.recipes import RECIPE_NAME_PREFIX

    if not kernel_name.startswith(RECIPE_NAME_PREFIX):
        return None
    return kernel_name[len(RECIPE_NAME_PREFIX):].split(":", 1)[0]
