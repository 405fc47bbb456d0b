"""Runs: the creation form, pause/resume/cancel, and the dashboard."""
from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from kernellab.figures import run_dashboard_figures
from kernellab.forms import RunCreateForm
from kernellab.models import Node, NodeState, Verification
from kernellab.selectors.access import user_can
from kernellab.selectors.backends import run_open_verification_count, run_wait_reason
from kernellab.selectors.explorer import run_dashboard, run_measurements
from kernellab.services import ServiceError
from kernellab.services.runs import run_create, run_for_submission, run_transition
from kernellab.services.verifications import run_gpu_use
from kernellab.views.common import problem_for, run_for

PERSON_ACTIONS = {"start", "pause", "resume", "cancel"}


@login_required
def run_new(request, problem_id: int):
    problem = problem_for(request, problem_id)
    llm = settings.KERNELLAB_LLM.configured
    can_run = user_can(user=request.user, workspace=problem.workspace, action="run")
    context = {"problem": problem, "workspace": problem.workspace, "can_run": can_run, "error": None}
    if request.method != "POST":
        context["form"] = RunCreateForm(problem=problem, llm_configured=llm)
        return render(request, "kernellab/runs/new.html", context)
    form = RunCreateForm(request.POST, problem=problem, llm_configured=llm)
    context["form"] = form
    if not form.is_valid():
        return render(request, "kernellab/runs/new.html", context, status=400)
    data = dict(form.cleaned_data)
    start = data.pop("start")
    try:
        earlier = run_for_submission(problem=problem, user=request.user, submission=data["submission"])
        if earlier is not None:
            messages.info(request, "This form had already been sent, so no second run was made: this is the run it made.")
            return redirect("run-explorer", run_id=earlier.pk)
        run = run_create(problem=problem, user=request.user, start=start, **data)
    except ServiceError as exc:
        context["error"] = str(exc)
        return render(request, "kernellab/runs/new.html", context, status=400)
    return redirect("run-explorer", run_id=run.pk)


@login_required
@require_POST
def run_action(request, run_id: int):
    run = run_for(request, run_id)
    action = request.POST.get("action", "")
    if action == "cancel" and request.POST.get("confirmed") != "yes":
        if not request.htmx:
            return redirect("run-cancel", run_id=run.pk)
        error = "Confirm the cancellation first; nothing was cancelled."
    elif action not in PERSON_ACTIONS:
        error = f"{action or 'Nothing'} is not something a person can do to a run; choose start, pause, resume or cancel."
    else:
        try:
            run = run_transition(run=run, user=request.user, action=action)
            error = None
        except ServiceError as exc:
            error = str(exc)
    if request.htmx:
        run.refresh_from_db()
        return render(
            request,
            "kernellab/runs/controls.html",
            {"run": run, "error": error, "can_run": user_can(user=request.user, workspace=run.workspace, action="run"),
             "wait_reason": run_wait_reason(run=run)},
            status=200,
        )
    if error:
        messages.error(request, error)
    return redirect("run-explorer", run_id=run.pk)


@login_required
def run_cancel_confirm(request, run_id: int):
    """The confirmation step of a cancel, for a browser without scripts (htmx asks in a dialog)."""
    run = run_for(request, run_id)
    return render(request, "kernellab/runs/cancel.html", {
        "run": run, "workspace": run.workspace, "open_verifications": run_open_verification_count(run=run),
        "can_run": user_can(user=request.user, workspace=run.workspace, action="run"),
    })


def _answered_from_records(run) -> bool:
    """Whether the run's measurements came from recorded data (the replay backend), not from a GPU: a replay run, or
    an "auto" run whose worker answered every measurement it made by replay."""
    if run.backend == "replay":
        return True
    rows = Verification.objects.filter(node__run=run, measurement__isnull=False)
    return rows.exists() and not rows.exclude(measurement__backend="replay").exists()


def _times_shown(times: dict | None, replayed: bool) -> dict | None:
    """The search's time split as the page may state it. With no measurement timed there is no share of compiling to
    give (compile time over compile time alone would read 100%); under replay that is the rule, not a gap: the app
    hands the search a replayed answer without the recorded GPU times (search.measurement_as_result), so the page
    says the measurements were answered from recorded data and took no GPU time."""
    if not times:
        return times
    timed = times["measurements_timed"] > 0 and times["measure_s"] > 0
    return {**times, "replayed": replayed and not timed, "timed": timed,
            "compile_share": times["compile_share"] if timed else None}


def _energy_coverage(run) -> dict:
    """Which of the run's measured nodes (the reference aside: 1.0x by definition) the energy chart can draw, and why
    the others are missing, with the selector's rule (run_dashboard): the latest ok measurement of each node's kernel
    among those its panel lists, drawn where it has both a median time and an energy reading."""
    kernels = dict(Node.objects.filter(run=run, state=NodeState.MEASURED).exclude(parent=None)
                   .values_list("key", "kernel_id"))
    latest = {}
    for m in (run_measurements(run=run).filter(kernel_id__in=set(kernels.values()), status="ok")
              .only("kernel_id", "energy", "candidate_stats", "backend", "observer_errors").order_by("-created_at", "-pk")):
        latest.setdefault(m.kernel_id, m)
    coverage = {"measured": len(kernels), "with_energy": 0, "replayed_without": 0, "energy_failed": 0, "without": 0}
    for kernel_id in kernels.values():
        m = latest.get(kernel_id)
        if m is not None and m.energy_j_per_call is not None and (m.candidate_stats or {}).get("median_ms") is not None:
            coverage["with_energy"] += 1
        elif m is not None and m.backend == "replay":
            coverage["replayed_without"] += 1
        elif m is not None and (m.observer_errors or {}).get("nvml"):  # the energy observer (NVML) failed
            coverage["energy_failed"] += 1
        else:
            coverage["without"] += 1
    return coverage


@login_required
def run_dashboard_page(request, run_id: int):
    run = run_for(request, run_id)
    gpu = run_gpu_use(run=run)  # the count the run's other pages show, not this page's own count of finished rows (reads only)
    dashboard = run_dashboard(run=run)
    times = _times_shown(dashboard["times"], _answered_from_records(run))
    figures = run_dashboard_figures(dashboard, energy_coverage=_energy_coverage(run))
    return render(request, "kernellab/runs/dashboard.html", {"run": run, "workspace": run.workspace, "dashboard": dashboard,
                                                             "gpu": gpu, "times": times, "figures": figures,
                                                             "energy_note": figures["chart-energy"].get("note")})
