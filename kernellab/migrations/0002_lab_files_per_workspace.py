"""The surrogate lab keeps datasets and reports per workspace (DATA_DIR/datasets/<slug>/, reports/<slug>/).

Files from before sat directly in DATA_DIR/datasets/ and DATA_DIR/reports/. With exactly one workspace
(the embedded setup's Demo) they are its files and move into its folders. With several, nobody can
tell which team made them, so they stay where they are, out of every workspace's pages, until an
operator moves them (or re-imports them with manage.py import_dataset --workspace).
"""
from pathlib import Path

from django.conf import settings
from django.db import migrations


def _moves(workspace_slug: str) -> list[tuple[Path, Path]]:
    root = Path(settings.DATA_DIR)
    moves = []
    for kind, pattern in (("datasets", "*.jsonl"), ("reports", "*.json")):
        folder = root / kind
        if folder.is_dir():
            moves += [(path, folder / workspace_slug / path.name) for path in sorted(folder.glob(pattern))
                      if path.is_file() and not path.name.startswith(".")]
    return moves


def move_into_the_only_workspace(apps, schema_editor):
    Workspace = apps.get_model("kernellab", "Workspace")
    slugs = list(Workspace.objects.values_list("slug", flat=True)[:2])
    if len(slugs) != 1:
        return
    for source, target in _moves(slugs[0]):
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            source.rename(target)


def move_back(apps, schema_editor):
    Workspace = apps.get_model("kernellab", "Workspace")
    slugs = list(Workspace.objects.values_list("slug", flat=True)[:2])
    if len(slugs) != 1:
        return
    root = Path(settings.DATA_DIR)
    for kind, pattern in (("datasets", "*.jsonl"), ("reports", "*.json")):
        folder = root / kind / slugs[0]
        if folder.is_dir():
            for path in sorted(folder.glob(pattern)):
                if not (root / kind / path.name).exists():
                    path.rename(root / kind / path.name)


class Migration(migrations.Migration):
    dependencies = [("kernellab", "0001_initial")]

    operations = [migrations.RunPython(move_into_the_only_workspace, move_back)]
