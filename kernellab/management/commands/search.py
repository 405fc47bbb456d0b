"""Search a problem folder or an uploaded problem headless, with the web app's driver, generators,
surrogates and runner, into the same database; writes a JSON and a text report."""
from __future__ import annotations

import json
import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from kernellab.management.database import require_migrated_database
from kernellab.models import Membership, Role
from kernellab.services.errors import ServiceError
from kernellab.services.headless_search import (UNBOUNDED_GPU_BUDGET, SearchInterrupted, SearchProgress,
                                                folder_records_copy, problem_find,
                                                problem_from_folder, problem_list, search_budget, search_check_backend,
                                                search_check_generator,
                                                search_create, search_run)
from kernellab.services.lab import lab_workspace_for_command
from kernellab.services.run_context import GENERATOR_BUILDERS
from kernellab.services.surrogates import SURROGATE_BUILDERS
from kernellab.selectors.backends import BACKENDS

BAR_WIDTH = 30


class Command(BaseCommand):
    help = ("Search a problem folder (problem.toml, reference.cu, family.cu) or an uploaded problem (id or name) "
            "headless; the run shows up in the explorer.")

    def add_arguments(self, parser):
        parser.add_argument("problem", nargs="?", help="a problem folder, or an uploaded problem's id or name")
        parser.add_argument("--list", action="store_true", dest="list_problems",
                            help="list the workspace's problems (id and name) and search nothing")
        parser.add_argument("--budget", type=int, help="GPU measurements to spend (default 40, or unbounded with --seconds)")
        parser.add_argument("--seconds", type=float, help="stop after this many seconds of searching")
        parser.add_argument("--backend", default="auto", choices=BACKENDS)
        # Unset settings are the problem's defaults, as on the run form: a problem with knobs gets the search the
        # benchmark measures (kernellab.services.runs.template_run_defaults: confidence threshold 0.5, then the
        # conformal one at 20% error, 16 children, the surrogate relearning every 5), a kernel without knobs the
        # recipes and the own-kernel step settings (kernellab.services.runs.OWN_KERNEL_DEFAULTS).
        parser.add_argument("--generator", choices=tuple(GENERATOR_BUILDERS),
                            help="default: template for a problem with knobs, recipes for a kernel without")
        parser.add_argument("--surrogate", choices=tuple(SURROGATE_BUILDERS),
                            help="default: learned, roofline for a kernel without knobs")
        parser.add_argument("--children", type=int, help="candidates per expansion (default 16)")
        parser.add_argument("--parents", type=int,
                            help="parents expanded per step; their children are compiled in one batch (default 1; 4)")
        parser.add_argument("--min-children", type=int,
                            help="a step expands more parents until it has at least N children, compiled in one "
                                 "batch (default 0: off; 16)")
        parser.add_argument("--compile-share", type=float,
                            help="a step whose compile checks would take more than this share of its wall time "
                                 "measures more of what it compiled (default 0: off; 0.25)")
        parser.add_argument("--gpu-per-step", type=int, help="the most GPU measurements a step makes (default 2; 8)")
        parser.add_argument("--screening-width", type=int,
                            help="candidates proposed at the root (default 0: off; 32)")
        parser.add_argument("--auto-knobs", action="store_true",
                            help="a problem without knobs gets the ones found in its kernel (as confirmed on its knobs page)")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--workspace", help="the workspace (default: the only workspace)")
        parser.add_argument("--user", help="whose run it is (default: the workspace's first admin)")
        parser.add_argument("--out", help="folder for report.json and report.txt, made if missing "
                                          "(default: print the text report only)")

    def handle(self, *args, problem, budget, seconds, backend, generator, surrogate, children, parents,
               min_children, compile_share, gpu_per_step, screening_width, seed, workspace, user, out, auto_knobs,
               list_problems, **options):
        run, started = None, False
        try:
            require_migrated_database()
            target = lab_workspace_for_command(workspace)
            if list_problems:
                self._list(target)
                return
            if not problem:
                raise ServiceError("Give a problem folder or an uploaded problem's id or name (--list lists them).")
            # What can be checked without storing anything is, first: a refused search leaves nothing behind.
            out_folder = _out_folder(out)
            search_budget(gpu_budget=budget, seconds=seconds)
            person = self._user(target, user)
            folder = Path(problem)
            # The upload, the knobs and the run are one transaction: what only run_create can refuse (a setting out
            # of range) takes back the problem uploaded from the folder and the knobs saved for this search.
            records = folder / "records" if folder.is_dir() else None
            with transaction.atomic():
                if records is not None:
                    found = problem_from_folder(workspace=target, user=person, folder=folder, backend=backend)
                else:
                    found = problem_find(workspace=target, key=problem)
                    search_check_generator(problem=found, generator=generator)
                    search_check_backend(problem=found, backend=backend)
                if auto_knobs and not found.family_source:
                    found = self._confirm_knobs(found, person)
                run = search_create(problem=found, user=person, gpu_budget=budget, seconds=seconds, backend=backend,
                                    generator=generator, surrogate=surrogate, children_per_step=children,
                                    parents_per_step=parents, min_children_per_step=min_children,
                                    compile_share_target=compile_share, max_gpu_per_step=gpu_per_step,
                                    screening_width=screening_width, seed=seed, records=records)
            if records is not None:
                folder_records_copy(problem=found, folder=folder)
            self.stdout.write(f"Searching {found.name} in {target.slug}"
                              + (f" for {seconds:g} s" if seconds else "") + (f", {budget} GPU measurements" if budget else ""))
            interrupted, started = False, True
            try:
                with _sigterm_interrupts():
                    report = search_run(run=run, user=person, seconds=seconds, on_progress=self._progress_printer())
            except SearchInterrupted as exc:
                report, interrupted = exc.report, True
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        except KeyboardInterrupt:
            if started:  # search_run makes Ctrl-C during the search a paused run and a report; past that, as it was
                raise
            raise CommandError(_interrupted_before_start(run), returncode=130) from None
        if self.stdout.isatty():
            self.stdout.write("")
        # The report is printed before it is written, so that a folder that cannot take it loses nothing.
        text = report.text()
        self.stdout.write(text, ending="")
        self.stdout.write(f"Explore it at /runs/{report.run_id}/")
        failed = f"The search failed: {report.status_reason}" if report.status == "failed" else ""
        if report.status == "paused" and report.status_reason:
            # Paused by the search itself (an LLM endpoint that fails every call): nothing advances it any more here.
            failed = f"The search paused: {report.status_reason.rstrip('.')}; then resume run {report.run_id} from the web app."
        if interrupted:
            failed = (f"The search was interrupted; run {report.run_id} is {report.status}"
                      + (" (resume it from the web app)." if report.status == "paused" else "."))
        if out_folder is not None:
            try:
                out_folder.mkdir(parents=True, exist_ok=True)
                (out_folder / "report.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n")
                (out_folder / "report.txt").write_text(text)
            except OSError as exc:
                unwritten = f"The report could not be written to {out_folder}: {exc.strerror or exc}; it is printed above."
                raise CommandError(f"{failed.rstrip('.')}. {unwritten}" if failed else unwritten) from None
            self.stdout.write(f"Report written to {out_folder / 'report.json'} and {out_folder / 'report.txt'}")
        if failed:
            raise CommandError(failed, returncode=130 if interrupted else 1)

    def _list(self, workspace) -> None:
        problems = problem_list(workspace=workspace)
        if not problems:
            self.stdout.write(f"{workspace.name} has no problems yet.")
        for found in problems:
            self.stdout.write(f"{found.pk:>5}  {found.name}" + (f"  ({found.title})" if found.title != found.name else ""))

    def _confirm_knobs(self, problem, person):
        from kernellab.selectors.problem_knobs import problem_knobs
        from kernellab.services.problem_knobs import problem_knobs_save

        found = problem_knobs(problem=problem)
        if found.unavailable or not found.rows:
            self.stdout.write(f"No knobs found in {problem.name}'s kernel" + (f": {found.unavailable}." if found.unavailable else "."))
            return problem
        problem = problem_knobs_save(problem=problem, user=person, knobs={r.name: r.proposed for r in found.rows},
                                     constraints=found.constraints)
        self.stdout.write("Knobs found in the kernel: " + "; ".join(f"{r.name} {r.proposed}" for r in found.rows))
        return problem

    def _user(self, workspace, username: str | None):
        if username:
            person = get_user_model().objects.filter(username=username).first()
            if person is None:
                raise ServiceError(f"No user {username!r}.")
            return person
        membership = (Membership.objects.filter(workspace=workspace, role=Role.ADMIN).select_related("user")
                      .order_by("pk").first())
        if membership is None:
            raise ServiceError(f"{workspace.name} has no admin; pass --user.")
        return membership.user

    def _progress_printer(self):
        tty = self.stdout.isatty()

        def show(progress: SearchProgress) -> None:
            if progress.seconds:
                done = min(1.0, progress.elapsed_s / progress.seconds)
            else:
                done = min(1.0, progress.measurements / max(1, progress.gpu_budget))
            best = f"{progress.best_speedup:.3f}x" if progress.best_speedup else "-"
            budget = "" if progress.gpu_budget >= UNBOUNDED_GPU_BUDGET else f"/{progress.gpu_budget}"
            # The last call comes after the search, with the last step's measurements read: the numbers of the report.
            done_steps = f"done, {progress.step} step{'s' if progress.step != 1 else ''}"
            # A replay miss spends a GPU slot and measures nothing: the slots used, and the misses among them.
            misses = f" ({progress.not_recorded} not recorded)" if progress.not_recorded else ""
            numbers = (f"{done_steps if progress.final else f'step {progress.step}'}  "
                       f"GPU {progress.measurements}{budget}{misses}  "
                       f"nodes {progress.nodes}  best {best}  {progress.elapsed_s:.0f} s")
            if tty:
                filled = int(round(done * BAR_WIDTH))
                self.stdout.write(f"\r[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {numbers}", ending="")
                sys.stdout.flush()
            else:
                self.stdout.write(f"{100 * done:3.0f}% {numbers}")

        return show


def _interrupted_before_start(run) -> str:
    """Ctrl-C while the search was being set up: the transaction that stores the problem, its knobs and the run was
    taken back, unless it had committed (then the run is stored, not started)."""
    from kernellab.models import SearchRun

    if run is not None and SearchRun.objects.filter(pk=run.pk).exists():
        return (f"The search was interrupted before it started; run {run.pk} is stored but not started "
                "(start it from the web app).")
    return "The search was interrupted before it started; nothing was stored."


@contextmanager
def _sigterm_interrupts():
    """SIGTERM stops the search as Ctrl-C does (a KeyboardInterrupt), so that its run is paused and reported."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    try:
        before = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: signals cannot be handled here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _out_folder(out: str | None) -> Path | None:
    """The --out folder, checked before the search: a file there, or a folder that cannot be made or written,
    would otherwise be found only once the search is over."""
    if not out:
        return None
    folder = Path(out).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ServiceError(f"--out {out} is a file, not a folder; give a folder for report.json and report.txt.")
    existing = folder
    while not existing.exists():       # the folder is made after the search, under its nearest existing parent
        existing = existing.parent
    if not existing.is_dir():
        raise ServiceError(f"--out {out} cannot be made: {existing} is a file, not a folder.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ServiceError(f"--out {out} cannot be written: {existing} is not writable.")
    return folder
