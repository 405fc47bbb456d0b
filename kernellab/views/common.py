from __future__ import annotations

from django.http import Http404
from django.shortcuts import get_object_or_404

from kernellab.models import Problem, SearchRun, Workspace
from kernellab.selectors.access import user_can

# The widest id column there is: a signed 64-bit integer (SQLite's INTEGER, PostgreSQL's bigint).
DB_ID_MAX = 2**63 - 1


def db_id(value) -> int | None:
    """A database id from user input (a POST or GET value), or None where it cannot be one.

    ASCII digits only: str.isdigit() also takes "²" or "٣", which int() or the database then refuse
    with an error page. At most DB_ID_MAX: a larger number overflows the database's integer (SQLite
    raises OverflowError). Leading zeros are taken; signs, spaces and decimals are not."""
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        return None
    digits = value.lstrip("0") or "0"
    if len(digits) > len(str(DB_ID_MAX)):  # before int(): Python refuses to convert over 4,300 digits
        return None
    number = int(digits)
    return number if number <= DB_ID_MAX else None


def workspace_for(request, slug: str, action: str = "view") -> Workspace:
    workspace = get_object_or_404(Workspace, slug=slug)
    if not user_can(user=request.user, workspace=workspace, action="view"):
        raise Http404("No such workspace.")
    return workspace


def problem_for(request, problem_id: int) -> Problem:
    problem = get_object_or_404(Problem.objects.select_related("workspace", "reference"), pk=problem_id)
    if not user_can(user=request.user, workspace=problem.workspace, action="view"):
        raise Http404("No such problem.")
    return problem


def run_for(request, run_id: int) -> SearchRun:
    # The search's saved state holds its whole tree: no page reads it, and decoding it costs more than the page.
    run = get_object_or_404(SearchRun.objects.select_related("problem__workspace", "best_node").defer("driver_state"), pk=run_id)
    if not user_can(user=request.user, workspace=run.problem.workspace, action="view"):
        raise Http404("No such run.")
    return run
