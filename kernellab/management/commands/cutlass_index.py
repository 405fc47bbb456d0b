"""Build the CUTLASS/CuTe code index (SQLite FTS5) in the data folder, once."""
from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from kernellab.selectors.cutlass import cutlass_index_path
from kernellab.services.cutlass import cutlass_index_build
from kernellab.services.errors import ServiceError


class Command(BaseCommand):
    help = "Index the CUTLASS/CuTe headers and examples of the nvidia-cutlass wheel for search (once)."

    def add_arguments(self, parser):
        parser.add_argument("--rebuild", action="store_true", help="index again even where an index exists")

    def handle(self, *args, rebuild: bool = False, **options):
        started = time.perf_counter()
        try:
            facts = cutlass_index_build(rebuild=rebuild)
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"CUTLASS {facts.get('version') or '?'}: {facts.get('files')} files indexed in "
                          f"{cutlass_index_path()} ({time.perf_counter() - started:.1f} s)")
