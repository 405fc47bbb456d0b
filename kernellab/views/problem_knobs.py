"""A problem's automatic knobs: the ones found in its reference, confirmed or edited by a person."""
from __future__ import annotations

from dataclasses import dataclass

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render

from kernellab.selectors.access import user_can
from kernellab.selectors.problem_knobs import KnobRow, problem_knobs
from kernellab.services.errors import ServiceError
from kernellab.services.problem_knobs import dropped_constraints, parse_knob_values, problem_knobs_save
from kernellab.views.common import problem_for


@dataclass
class KnobField:
    """One row of the form as shown: the knob found, and the tick and values in its fields."""
    row: KnobRow
    ticked: bool
    values: str


@login_required
def problem_knobs_page(request, problem_id: int):
    problem = problem_for(request, problem_id)
    found = problem_knobs(problem=problem)
    error = ""
    if request.method == "POST":
        constraints = [line.strip() for line in request.POST.get("constraints", "").splitlines() if line.strip()]
        try:
            chosen = {row.name: parse_knob_values(request.POST.get(f"values-{row.name}", ""), row.name)
                      for row in found.rows if request.POST.get(f"use-{row.name}")}
            problem_knobs_save(problem=problem, user=request.user, knobs=chosen, constraints=constraints)
        except ServiceError as exc:
            error = str(exc)
        else:
            messages.success(request, f"{problem.title} now has {len(chosen)} knob(s) for the template generator."
                             if chosen else f"{problem.title} has no automatic knobs now.")
            dropped = dropped_constraints(knobs=chosen, offered=[r.name for r in found.rows], constraints=constraints)
            if chosen and dropped:
                messages.warning(request, "Dropped, since each names a knob left unticked (which keeps its value in "
                                          "the reference): " + "; ".join(dropped) + ".")
            return redirect("problem-knobs", problem_id=problem.pk)
    if error:
        # What was posted, exactly, so that the person corrects their edit rather than types it again.
        fields = [KnobField(row, bool(request.POST.get(f"use-{row.name}")), request.POST.get(f"values-{row.name}", ""))
                  for row in found.rows]
        constraints_text = request.POST.get("constraints", "")
    else:
        fields = [KnobField(row, row.used, ", ".join(str(v) for v in row.values)) for row in found.rows]
        constraints_text = "\n".join(found.constraints)
    from gpu_runner.family import MAX_COMBINATIONS, MAX_VARIANTS

    return render(request, "kernellab/problems/knobs.html", {
        "problem": problem, "workspace": problem.workspace, "knobs": found, "error": error,
        "fields": fields, "constraints_text": constraints_text,
        "max_combinations": f"{MAX_COMBINATIONS:,}", "max_variants": f"{MAX_VARIANTS:,}",
        "can_edit": user_can(user=request.user, workspace=problem.workspace, action="upload"),
    }, status=400 if error else 200)
