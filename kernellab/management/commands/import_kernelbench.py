"""Import KernelBench tasks (PyTorch references) into a workspace, read in place from a KernelBench
folder (level1/, level2/, ...), one level folder or one file; never copied into the project."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from kernellab.management.database import require_migrated_database
from kernellab.services.errors import ServiceError
from kernellab.services.lab import lab_workspace_for_command
from kernellab.services.problems import problem_import_kernelbench


def default_kernelbench_dir() -> Path:
    return Path(settings.BASE_DIR).parent / "shared" / "datasets" / "kernelbench"


class Command(BaseCommand):
    help = "Import KernelBench task files (class Model, get_inputs, get_init_inputs) as PyTorch-reference problems."

    def add_arguments(self, parser):
        parser.add_argument("path", nargs="?", help=f"a KernelBench folder, level folder or task file "
                                                    f"(default: {default_kernelbench_dir()})")
        parser.add_argument("--level", type=int, help="import only this level (1, 2, 3, ...)")
        parser.add_argument("--workspace", help="the workspace to import into (default: the only workspace)")

    def handle(self, *args, path, level, workspace, **options):
        require_migrated_database()
        folder = Path(path) if path else default_kernelbench_dir()
        try:
            target = lab_workspace_for_command(workspace)
            summary = problem_import_kernelbench(workspace=target, path=folder, level=level)
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        for file, why in summary.refused:
            self.stderr.write(f"{file}: {why}")
        self.stdout.write(f"Imported {len(summary.imported)} KernelBench task(s) from {folder} into {target.name}; "
                          f"{len(summary.present)} already there, {len(summary.refused)} refused; "
                          f"{summary.with_recordings} came with recorded H200 measurements (replayable).")
        if summary.refused and not summary.imported and not summary.present:
            raise CommandError("No task could be imported.")
