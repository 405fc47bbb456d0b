"""Search the CUTLASS/CuTe code index from the command line."""
from __future__ import annotations

import argparse

from django.core.management.base import BaseCommand, CommandError

from gpu_runner.cutlass_index import IndexMissing, query_words
from kernellab.selectors.cutlass import cutlass_search


def _limit(value: str) -> int:
    """--limit as the arguments are read: a whole number of matches, 1 or more (SQLite would read 0 as
    none and a negative one as all of them)."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of matches.") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more (how many matches to print), not {number}.")
    return number


class Command(BaseCommand):
    help = "Ranked snippets of the CUTLASS/CuTe headers and examples for a query (manage.py cutlass_index first)."

    def add_arguments(self, parser):
        parser.add_argument("query", nargs="+")
        parser.add_argument("--limit", type=_limit, default=10, help="how many matches to print (1 or more)")

    def handle(self, *args, query: list[str], limit: int = 10, **options):
        text = " ".join(query)
        try:
            # Asked even for a query without words, so that an index not built yet is said first.
            hits = cutlass_search(text, limit=limit)
        except IndexMissing as exc:
            raise CommandError(str(exc)) from None
        if not query_words(text):
            raise CommandError(f"The query {text.strip()!r} has no words to search for: give words or an "
                               "identifier, such as tiled copy or local_tile.")
        if not hits:
            self.stdout.write("No matches.")
        for hit in hits:
            self.stdout.write(f"{hit.path}:{hit.line}  (score {hit.score})")
            for number, code in enumerate(hit.snippet.split("\n"), hit.first_line):
                self.stdout.write(f"  {number:6d}  {code}")
            self.stdout.write("")
