from __future__ import annotations

from django.http import Http404
from django.shortcuts import get_object_or_404

from kernellab.models import Problem, SearchRun, Workspace
from kernellab.selectors.access import user_can


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
