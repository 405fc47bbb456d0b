from __future__ import annotations

from django.db.models import QuerySet

from kernellab.models import Node, RunChange, SearchRun, Workspace
from kernellab.selectors.access import user_can


def database_identity() -> str:
    """A short name of the database in use: several deployments (or test databases) may share one
    Redis or one process, and run 7 of one database is not run 7 of another."""
    import hashlib

    from django.db import connection

    params = connection.settings_dict
    origin = f"{params.get('HOST')}:{params.get('PORT')}/{params.get('NAME')}"
    return hashlib.sha1(origin.encode()).hexdigest()[:10]


def run_for_user(*, run_id: int, user) -> SearchRun | None:
    run = SearchRun.objects.select_related("problem__workspace").defer("driver_state").filter(pk=run_id).first()
    if run is None or not user_can(user=user, workspace=run.problem.workspace, action="view"):
        return None
    return run


# What a table of runs (partials/run_table.html) shows, and no more: never the driver's saved state (megabytes per
# run, about 4 KB per node it ever made), nor the problem's sources or the best node's texts. A column the table
# starts to show must be added here, or each row loads it with a query of its own.
RUN_TABLE_FIELDS = (
    "id", "name", "problem_id", "status", "generator", "surrogate", "nodes_count", "gpu_used", "gpu_budget",
    "best_speedup", "best_node_id", "created_at",
    "problem__id", "problem__title",
    "best_node__id", "best_node__origin",
)

RUNS_PER_PAGE = 50


def run_table_rows(runs: QuerySet[SearchRun]) -> QuerySet[SearchRun]:
    """`runs` with only what a table of runs shows (RUN_TABLE_FIELDS), newest first."""
    return runs.select_related("problem", "best_node").only(*RUN_TABLE_FIELDS).order_by("-created_at", "-pk")


def run_list(*, workspaces: QuerySet[Workspace] | list[Workspace], problem=None) -> QuerySet[SearchRun]:
    runs = SearchRun.objects.filter(problem__workspace__in=workspaces)
    if problem is not None:
        runs = runs.filter(problem=problem)
    return run_table_rows(runs)


def change_as_message(change: RunChange) -> dict:
    return {"seq": change.seq, "kind": change.kind, "payload": change.payload}


def run_changes_after(*, run_id: int, after: int, limit: int = 500) -> list[dict]:
    return [
        change_as_message(change)
        for change in RunChange.objects.filter(run_id=run_id, seq__gt=after).order_by("seq")[:limit]
    ]


def run_tree(*, run: SearchRun) -> list[dict]:
    from kernellab.selectors.explorer import run_tree_payloads

    return run_tree_payloads(run=run)


def node_get(*, run: SearchRun, key: str) -> Node | None:
    if "\x00" in key:
        return None  # no key holds one, and PostgreSQL refuses the character in a query
    return (
        Node.objects.select_related("parent__kernel", "kernel", "run__problem__workspace", "author")
        .defer("run__driver_state")
        .filter(run=run, key=key)
        .first()
    )


def node_best_path(*, run: SearchRun) -> list[str]:
    node = run.best_node
    path = []
    while node is not None:
        path.append(node.key)
        node = node.parent
    return list(reversed(path))
