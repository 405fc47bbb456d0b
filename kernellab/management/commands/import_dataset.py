"""Import a dataset (JSON Lines in the GPU Forecasters layout, or CSV from elsewhere) into a workspace's lab.

Every row is checked first; a file with any bad row is refused whole with each problem named
(row, field, what is wrong), and nothing is written. A good file is stored as
DATA_DIR/datasets/<workspace>/<name>.jsonl, where train_surrogate, evaluate_surrogate and the lab pages find it.
"""
from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from kernellab.management.database import require_migrated_database
from kernellab.services.errors import ServiceError
from kernellab.services.lab import (DATASET_NAME, DatasetRejected, dataset_import, dataset_load,
                                    lab_workspace_for_command)


def plural(count: int, noun: str) -> str:
    """"1 row", "2 rows"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def add_workspace_argument(parser) -> None:
    parser.add_argument("--workspace", help="the workspace whose lab holds the named datasets and reports "
                                            "(default: the only workspace)")


def load_dataset(value: str, *, workspace: str | None = None, kind: str | None = None):
    """A file path, or the name of a dataset imported into the workspace's lab; CommandError if neither."""
    if not Path(value).is_file() and DATASET_NAME.fullmatch(value):
        require_migrated_database()  # a name is looked up in a workspace (a file is read without the database)
    try:
        return dataset_load(value=value, workspace_slug=workspace, kind=kind)
    except ServiceError as exc:
        raise CommandError(str(exc)) from None


class Command(BaseCommand):
    help = "Check a dataset (.jsonl, .ndjson or .csv, each also .gz) row by row and store it in a workspace's lab, all or nothing."

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--name", help="name in the lab (default: the file's name)")
        parser.add_argument("--source", help="provenance for rows without a 'source' column "
                                             "(default imported:<file name>)")
        parser.add_argument("--replace", action="store_true", help="replace a dataset of the same name")
        add_workspace_argument(parser)

    def handle(self, *args, file, name, source, replace, workspace, **options):
        require_migrated_database()
        from search_engine.lab.datasets import DATASET_SUFFIXES_TEXT, DatasetError, dataset_suffix, file_format

        path = Path(file)
        try:
            file_format(path)  # the type first: a file of another type is no dataset, whatever its name
        except DatasetError:
            raise CommandError(f"{file}: unsupported file type; import a {DATASET_SUFFIXES_TEXT}.") from None
        name = name or path.name[:-len(dataset_suffix(path))]
        try:
            lab_workspace = lab_workspace_for_command(workspace)
            imported = dataset_import(workspace=lab_workspace, user=None, file=path, name=name, replace=replace,
                                      source=source, replace_hint="pass --replace")
        except DatasetRejected as exc:
            raise CommandError(exc.detail) from None
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        problems = imported.problems
        shown = problems.most_common(8)
        more = f" and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
        self.stdout.write(f"Imported {plural(imported.rows, imported.kind + ' row')} as {name!r} in "
                          f"{lab_workspace.name} ({imported.path}); {plural(len(problems), 'problem')}: "
                          f"{', '.join(f'{p} {n}' for p, n in shown)}{more}.")
        if imported.ignored_fields:
            self.stdout.write(f"Columns not used: {', '.join(imported.ignored_fields)}.")
