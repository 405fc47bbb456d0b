"""A problem's automatic knobs: the ones found in its reference, confirmed or edited by a person."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render

from kernellab.selectors.access import user_can
from kernellab.selectors.problem_knobs import problem_knobs
from kernellab.services.errors import ServiceError
from kernellab.services.problem_knobs import parse_knob_values, problem_knobs_save
from kernellab.views.common import problem_for


@login_required
def problem_knobs_page(request, problem_id: int):
    problem = problem_for(request, problem_id)
    found = problem_knobs(problem=problem)
    error = ""
    if request.method == "POST":
        try:
            chosen = {row.name: parse_knob_values(request.POST.get(f"values-{row.name}", ""), row.name)
                      for row in found.rows if request.POST.get(f"use-{row.name}")}
            constraints = [line.strip() for line in request.POST.get("constraints", "").splitlines() if line.strip()]
            problem_knobs_save(problem=problem, user=request.user, knobs=chosen, constraints=constraints)
        except ServiceError as exc:
            error = str(exc)
        else:
            messages.success(request, f"{problem.title} now has {len(chosen)} knob(s) for the template generator."
                             if chosen else f"{problem.title} has no automatic knobs now.")
            return redirect("problem-knobs", problem_id=problem.pk)
    return render(request, "kernellab/problems/knobs.html", {
        "problem": problem, "workspace": problem.workspace, "knobs": found, "error": error,
        "posted": request.POST if request.method == "POST" else None,
        "can_edit": user_can(user=request.user, workspace=problem.workspace, action="upload"),
    }, status=400 if error else 200)
