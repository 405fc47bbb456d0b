"""Search the CUTLASS/CuTe code index from the command line."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from gpu_runner.cutlass_index import IndexMissing
from kernellab.selectors.cutlass import cutlass_search


class Command(BaseCommand):
    help = "Ranked snippets of the CUTLASS/CuTe headers and examples for a query (manage.py cutlass_index first)."

    def add_arguments(self, parser):
        parser.add_argument("query", nargs="+")
        parser.add_argument("--limit", type=int, default=10)

    def handle(self, *args, query: list[str], limit: int = 10, **options):
        try:
            hits = cutlass_search(" ".join(query), limit=limit)
        except IndexMissing as exc:
            raise CommandError(str(exc)) from None
        if not hits:
            self.stdout.write("No matches.")
        for hit in hits:
            self.stdout.write(f"{hit.path}:{hit.line}  (score {hit.score})")
            for number, text in enumerate(hit.snippet.split("\n"), hit.first_line):
                self.stdout.write(f"  {number:6d}  {text}")
            self.stdout.write("")
