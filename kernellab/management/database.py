"""The check every management command that reads or writes the database makes first: is the database
migrated? A fresh KERNELLAB_DATA_DIR, or a DATABASE_URL naming an empty PostgreSQL database, would
otherwise end the command with a traceback ("no such table", "relation ... does not exist").

The check reads only the migration plan (django_migrations, if it exists), never a KernelLab table."""
from __future__ import annotations

import os

from django.core.management.base import CommandError
from django.db import DEFAULT_DB_ALIAS, Error as DatabaseError, connections

MIGRATE = ".venv/bin/python manage.py migrate"


def database_label(alias: str = DEFAULT_DB_ALIAS) -> str:
    """The database in words, engine and name or path, never the password: 'the SQLite database /x/y.sqlite3',
    "the PostgreSQL database 'kl' on db.example:5432 (user kernellab)"."""
    connection = connections[alias]
    settings = connection.settings_dict
    name = settings.get("NAME") or "?"
    if connection.vendor == "sqlite":
        return f"the SQLite database {name}"
    host = settings.get("HOST") or "localhost"
    port = settings.get("PORT")
    where = f"{host}:{port}" if port else host
    user = settings.get("USER")
    return (f"the {connection.display_name} database {str(name)!r} on {where}"
            + (f" (user {user})" if user else ""))


def unapplied_migrations(alias: str = DEFAULT_DB_ALIAS) -> tuple[list[str], set[str]]:
    """(the migrations `migrate` would apply, in order, and those applied already; each as 'app.name')."""
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connections[alias])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return ([f"{migration.app_label}.{migration.name}" for migration, backwards in plan if not backwards],
            {f"{app}.{name}" for app, name in executor.loader.applied_migrations})


def _how_to_migrate() -> str:
    same = ("the same DATABASE_URL" if os.environ.get("DATABASE_URL")
            else "the same KERNELLAB_DATA_DIR" if os.environ.get("KERNELLAB_DATA_DIR") else "")
    return (f"Run `{MIGRATE}`{f' (with {same})' if same else ''} first; "
            "`./kl run` and `./kl search` migrate by themselves before they start.")


def require_migrated_database(alias: str = DEFAULT_DB_ALIAS) -> None:
    """CommandError (one paragraph, no traceback) unless the database can be opened and every migration
    is applied: which database, what is missing, and the command that fixes it."""
    label = database_label(alias)
    try:
        unapplied, applied = unapplied_migrations(alias)
    except DatabaseError as exc:  # cannot connect, no such database, no permission, ...
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CommandError(f"Cannot open {label} ({first_line}).") from None
    if not unapplied:
        return
    if not any(name.startswith("kernellab.") for name in applied):
        problem = "has no KernelLab tables: it was never migrated"
    else:
        shown = ", ".join(unapplied[:5]) + (f" and {len(unapplied) - 5} more" if len(unapplied) > 5 else "")
        problem = (f"has {len(unapplied)} unapplied migration{'s' if len(unapplied) != 1 else ''} ({shown}): "
                   "its tables are older than this code")
    raise CommandError(f"{label[0].upper()}{label[1:]} {problem}. {_how_to_migrate()}")

