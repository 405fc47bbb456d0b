"""Import a dataset (JSON Lines in the GPU Forecasters layout, or CSV from elsewhere) into the lab.

Every row is checked first; a file with any bad row is refused whole with each problem named
(row, field, what is wrong), and nothing is written. A good file is stored as
DATA_DIR/datasets/<name>.jsonl, where train_surrogate, evaluate_surrogate and the lab pages find it.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from search_engine.lab.datasets import DatasetError, read_dataset, write_dataset


def datasets_dir() -> Path:
    return Path(settings.DATA_DIR) / "datasets"


def reports_dir() -> Path:
    return Path(settings.DATA_DIR) / "reports"


def resolve_dataset(value: str) -> Path:
    """A file path, or the name of a dataset imported into the lab."""
    path = Path(value)
    if path.is_file():
        return path
    if re.fullmatch(r"[A-Za-z0-9_.-]+", value):
        for candidate in (datasets_dir() / f"{value}.jsonl", datasets_dir() / value):
            if candidate.is_file():
                return candidate
    known = sorted(p.stem for p in datasets_dir().glob("*.jsonl")) if datasets_dir().is_dir() else []
    hint = f" Imported datasets: {', '.join(known)}." if known else ""
    raise CommandError(f"No dataset {value!r}: give a .jsonl/.csv path or the name of an imported dataset.{hint}")


def load_dataset(value: str, *, kind: str | None = None):
    path = resolve_dataset(value)
    try:
        return path, read_dataset(path, kind=kind, default_source=f"imported:{path.name}")
    except DatasetError as exc:
        raise CommandError(str(exc)) from None


class Command(BaseCommand):
    help = "Check a dataset (.jsonl, .jsonl.gz or .csv) row by row and store it in the lab, all or nothing."

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--name", help="name in the lab (default: the file's name)")
        parser.add_argument("--source", help="provenance for rows without a 'source' column "
                                             "(default imported:<file name>)")
        parser.add_argument("--replace", action="store_true", help="replace a dataset of the same name")

    def handle(self, *args, file, name, source, replace, **options):
        path = Path(file)
        name = name or re.sub(r"\.(jsonl|ndjson|json|csv)(\.gz)?$", "", path.name)
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,80}", name):
            raise CommandError(f"Dataset name {name!r}: use letters, digits, '-' and '_' only (at most 80).")
        target = datasets_dir() / f"{name}.jsonl"
        if target.exists() and not replace:
            raise CommandError(f"A dataset named {name!r} exists already; pass --replace or choose --name.")
        try:
            dataset = read_dataset(path, default_source=source or f"imported:{path.name}")
        except DatasetError as exc:
            raise CommandError(str(exc)) from None
        write_dataset(target, dataset.rows)
        problems = Counter(r.get("pack") or r.get("problem_id") for r in dataset.rows)
        self.stdout.write(f"Imported {len(dataset)} {dataset.kind} rows as {name!r} ({target}); "
                          f"{len(problems)} problem(s): {', '.join(f'{p} {n}' for p, n in problems.most_common(8))}.")
        if dataset.ignored_fields:
            self.stdout.write(f"Columns not used: {', '.join(dataset.ignored_fields)}.")
