"""Search a problem folder or an uploaded problem headless, with the web app's driver, generators,
surrogates and runner, into the same database; writes a JSON and a text report."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from kernellab.models import Membership, Role
from kernellab.services.errors import ServiceError
from kernellab.services.headless_search import UNBOUNDED_GPU_BUDGET, SearchProgress, problem_find, problem_from_folder, search_headless
from kernellab.services.lab import lab_workspace_for_command
from kernellab.services.run_context import GENERATOR_BUILDERS
from kernellab.services.surrogates import SURROGATE_BUILDERS
from kernellab.selectors.backends import BACKENDS

BAR_WIDTH = 30


class Command(BaseCommand):
    help = ("Search a problem folder (problem.toml, reference.cu, family.cu) or an uploaded problem (id or name) "
            "headless; the run shows up in the explorer.")

    def add_arguments(self, parser):
        parser.add_argument("problem", help="a problem folder, or an uploaded problem's id or name")
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
        parser.add_argument("--out", help="folder for report.json and report.txt (default: print the text report only)")

    def handle(self, *args, problem, budget, seconds, backend, generator, surrogate, children, parents,
               min_children, compile_share, gpu_per_step, screening_width, seed, workspace, user, out, auto_knobs, **options):
        try:
            target = lab_workspace_for_command(workspace)
            person = self._user(target, user)
            folder = Path(problem)
            if folder.is_dir():
                found = problem_from_folder(workspace=target, user=person, folder=folder)
            else:
                found = problem_find(workspace=target, key=problem)
            if auto_knobs and not found.family_source:
                found = self._confirm_knobs(found, person)
            self.stdout.write(f"Searching {found.name} in {target.slug}"
                              + (f" for {seconds:g} s" if seconds else "") + (f", {budget} GPU measurements" if budget else ""))
            report = search_headless(problem=found, user=person, gpu_budget=budget, seconds=seconds, backend=backend,
                                     generator=generator, surrogate=surrogate, children_per_step=children,
                                     parents_per_step=parents, min_children_per_step=min_children,
                                     compile_share_target=compile_share, max_gpu_per_step=gpu_per_step,
                                     screening_width=screening_width, seed=seed,
                                     on_progress=self._progress_printer())
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        if self.stdout.isatty():
            self.stdout.write("")
        text = report.text()
        self.stdout.write(text, ending="")
        self.stdout.write(f"Explore it at /runs/{report.run_id}/")
        if out:
            folder = Path(out)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "report.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n")
            (folder / "report.txt").write_text(text)
            self.stdout.write(f"Report written to {folder / 'report.json'} and {folder / 'report.txt'}")
        if report.status == "failed":
            raise CommandError(f"The search failed: {report.status_reason}")

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
            numbers = (f"step {progress.step}  measured {progress.measurements}{budget}  "
                       f"nodes {progress.nodes}  best {best}  {progress.elapsed_s:.0f} s")
            if tty:
                filled = int(round(done * BAR_WIDTH))
                self.stdout.write(f"\r[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {numbers}", ending="")
                sys.stdout.flush()
            else:
                self.stdout.write(f"{100 * done:3.0f}% {numbers}")

        return show
