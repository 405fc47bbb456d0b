"""Problems: the list of a workspace, uploading a reference kernel, and one problem's page."""
from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Max, Q
from django.shortcuts import redirect, render

from kernellab.forms import ProblemUploadForm, PytorchProblemUploadForm
from kernellab.selectors.explorer import problem_roofline, problem_runs
from kernellab.selectors.kernelbench import kernelbench_h200_comparison
from kernellab.selectors.problems import reference_measured, reference_recording
from kernellab.services import ServiceError
from kernellab.services.measurement import expert_notes_for
from kernellab.selectors.access import membership_role, user_can
from kernellab.services.problems import ProblemRejected, problem_create, problem_create_pytorch, problem_spec
from kernellab.spec_guide import ROLE_EXAMPLES, TEMPLATE_REFERENCE, TEMPLATE_TOML
from kernellab.views.code import highlight_cuda, highlight_python, highlight_toml
from kernellab.views.common import problem_for, workspace_for

log = logging.getLogger(__name__)


@login_required
def problem_list(request, slug: str):
    workspace = workspace_for(request, slug)
    problems = (
        workspace.problems.select_related("created_by")
        .annotate(run_count=Count("runs", distinct=True), best_speedup=Max("runs__best_speedup", filter=~Q(runs__best_node__origin="root")))
        .order_by("name")
    )
    return render(
        request,
        "kernellab/problems/list.html",
        {
            "workspace": workspace,
            "problems": problems,
            "role": membership_role(user=request.user, workspace=workspace),
            "can_upload": user_can(user=request.user, workspace=workspace, action="upload"),
        },
    )


@login_required
def problem_upload(request, slug: str):
    workspace = workspace_for(request, slug)
    can_upload = user_can(user=request.user, workspace=workspace, action="upload")
    context = {
        "workspace": workspace,
        "can_upload": can_upload,
        "rejection": None,
        "compile_errors": [],
        "marked_source": None,
        "spec_errors": [],
        "marked_spec": None,
        "kept_files": [],
        "upload_limit_kib": settings.KERNELLAB_UPLOAD_MAX_BYTES // 1024,
        "template_toml": TEMPLATE_TOML,
        "template_reference": TEMPLATE_REFERENCE,
        "role_examples": ROLE_EXAMPLES,
    }
    if request.method != "POST":
        initial = {"spec_toml": TEMPLATE_TOML, "reference_source": TEMPLATE_REFERENCE} if request.GET.get("template") else {}
        context["form"] = ProblemUploadForm(initial=initial)
        return render(request, "kernellab/problems/upload.html", context)
    form = ProblemUploadForm(request.POST, request.FILES)
    context["form"] = form
    if not form.is_valid():
        return render(request, "kernellab/problems/upload.html", context, status=400)
    data = form.cleaned_data
    context["kept_files"] = _keep_in_text_boxes(form)
    try:
        problem = problem_create(
            workspace=workspace,
            user=request.user,
            spec_toml=data["spec_toml"],
            reference_source=data["reference_source"],
            family_source=data["family_source"],
        )
    except ProblemRejected as exc:
        context["rejection"] = _sentence(str(exc))
        context["compile_errors"] = exc.compile_errors
        lines = {e["line"] for e in exc.compile_errors if isinstance(e.get("line"), int)}
        if exc.compile_errors:
            context["marked_source"] = highlight_cuda(data["reference_source"], mark_lines=lines, anchor="src")
        if exc.spec_errors:
            context["spec_errors"] = sorted(exc.spec_errors, key=lambda e: (e["line"] is None, e["line"] or 0))
            spec_lines = {e["line"] for e in exc.spec_errors if isinstance(e.get("line"), int)}
            context["marked_spec"] = highlight_toml(data["spec_toml"], mark_lines=spec_lines, anchor="spec")
        return render(request, "kernellab/problems/upload.html", context, status=400)
    except ServiceError as exc:
        context["rejection"] = _sentence(str(exc))
        return render(request, "kernellab/problems/upload.html", context, status=403 if not can_upload else 400)
    except RecursionError:  # (a RuntimeError, but the upload's fault, not the server's): TOML nested thousands deep
        context["rejection"] = ("The upload nests too deeply to be read (brackets or tables thousands of levels deep); "
                                "nothing was saved.")
        return render(request, "kernellab/problems/upload.html", context, status=400)
    except (ImportError, RuntimeError, OSError) as exc:  # the runner or nvcc is missing on this server
        log.exception("problem check could not run")
        context["rejection"] = f"The compile check cannot run on this server ({exc}); nothing was saved."
        return render(request, "kernellab/problems/upload.html", context, status=503)
    return redirect("problem-detail", problem_id=problem.pk)


@login_required
def problem_upload_pytorch(request, slug: str):
    """A KernelBench-format program as a problem: read with ast here, executed only by GPU workers."""
    workspace = workspace_for(request, slug)
    can_upload = user_can(user=request.user, workspace=workspace, action="upload")
    context = {"workspace": workspace, "can_upload": can_upload, "rejection": None, "program_errors": [],
               "upload_limit_kib": settings.KERNELLAB_UPLOAD_MAX_BYTES // 1024}
    if request.method != "POST":
        context["form"] = PytorchProblemUploadForm()
        return render(request, "kernellab/problems/upload_pytorch.html", context)
    form = PytorchProblemUploadForm(request.POST, request.FILES)
    context["form"] = form
    if not form.is_valid():
        return render(request, "kernellab/problems/upload_pytorch.html", context, status=400)
    data = form.cleaned_data
    kept = form.data.copy()
    kept["program"] = data["program"]
    kept["name"] = data["name"]
    form.data = kept
    try:
        problem = problem_create_pytorch(workspace=workspace, user=request.user, program_source=data["program"],
                                         name=data["name"], title=data.get("title") or "")
    except ProblemRejected as exc:
        context["rejection"] = _sentence(str(exc))
        context["program_errors"] = exc.compile_errors + exc.spec_errors
        return render(request, "kernellab/problems/upload_pytorch.html", context, status=400)
    except ServiceError as exc:
        context["rejection"] = _sentence(str(exc))
        return render(request, "kernellab/problems/upload_pytorch.html", context, status=403 if not can_upload else 400)
    return redirect("problem-detail", problem_id=problem.pk)


def _keep_in_text_boxes(form: ProblemUploadForm) -> list[str]:
    """Put what was checked (an uploaded file's text too) back in the text boxes, so that a refused
    upload is fixed by editing it there; returns the labels of the files that were moved."""
    kept = form.data.copy()
    moved = []
    for text_field, file_field, label in (("spec_toml", "spec_file", "problem.toml"),
                                          ("reference_source", "reference_file", "reference.cu"),
                                          ("family_source", "family_file", "family.cu")):
        kept[text_field] = form.cleaned_data.get(text_field) or ""
        if form.cleaned_data.get(file_field):
            moved.append(label)
    form.data = kept
    return moved


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def _spec_summary(spec) -> dict:
    if spec is None:
        return {}
    if spec.reference.kind == "pytorch":
        reference = spec.reference
        return {
            "pytorch": True,
            "forward_params": list(reference.forward_params),
            "sizes": [{"name": c.name, "sizes": dict(c.sizes)} for c in spec.sizes],
            "constants": {k: v for k, v in reference.constants.items() if k not in spec.sizes[0].sizes},
            "tolerance": {dtype: {"rtol": t.rtol, "atol": t.atol} for dtype, t in spec.tolerance.items()},
        }
    launches = []
    for step in getattr(spec.reference, "launch", ()):
        launches.append(step.to_dict())
    family = None
    if spec.family is not None:
        family = {
            "knobs": {name: list(values) for name, values in spec.family.knobs.items()},
            "constraints": [getattr(c, "text", str(c)) for c in spec.family.constraints],
        }
    return {
        "args": [a.to_dict() for a in spec.args],
        "sizes": [{"name": c.name, "sizes": dict(c.sizes)} for c in spec.sizes],
        "launches": launches,
        "tolerance": {dtype: {"rtol": t.rtol, "atol": t.atol} for dtype, t in spec.tolerance.items()},
        "roofline": {
            "flops": getattr(spec.roofline.flops, "text", None),
            "bytes": getattr(spec.roofline.bytes, "text", None),
        },
        "family": family,
    }


@login_required
def problem_detail(request, problem_id: int):
    problem = problem_for(request, problem_id)
    spec, spec_error = None, ""
    try:
        spec = problem_spec(problem)
    except Exception as exc:  # a stored spec the current runner no longer reads: show why, keep the page
        spec_error = str(exc)
    gpu = request.GET.get("gpu", "h200").lower()
    pytorch = spec is not None and spec.reference.kind == "pytorch"
    roofline = problem_roofline(problem=problem, spec=spec, gpu=gpu)
    recorded = None if pytorch else (reference_recording(problem, spec, "h200") or
                                     reference_measured(problem, spec, "h200"))
    if recorded and recorded.get("profiled") and spec is not None:
        recorded["notes"] = expert_notes_for(spec, recorded["record"])
    if recorded and recorded.get("median_ms") and spec is not None and gpu == "h200":
        # how near the roofline the reference already runs, at the size case it was recorded at
        floor = next((b.floor_ms for b in roofline.bounds if b.case == spec.default_case.name and b.floor_ms), None)
        recorded["floor_ms"] = floor
        recorded["roofline_pct"] = 100.0 * floor / recorded["median_ms"] if floor else None
        recorded["headroom"] = recorded["median_ms"] / floor if floor else None
    nothing_to_propose = ""
    if pytorch:
        from kernellab.forms import RunCreateForm
        from kernellab.selectors.kernelbench import recorded_solutions

        # A PyTorch problem's runs replay recorded ModelNew programs only: without any, a run could propose nothing.
        if not recorded_solutions(problem=problem)[0]:
            nothing_to_propose = RunCreateForm.no_recorded_solutions(problem)
    return render(
        request,
        "kernellab/problems/detail.html",
        {
            "problem": problem,
            "nothing_to_propose": nothing_to_propose,
            "workspace": problem.workspace,
            "source_html": (highlight_python if pytorch else highlight_cuda)(problem.reference.source, anchor="ref"),
            "pytorch": pytorch,
            "h200_comparison": kernelbench_h200_comparison(problem=problem) if pytorch else None,
            "spec_html": highlight_toml(problem.spec_toml),
            "family_html": highlight_cuda(problem.family_source, anchor="fam") if problem.family_source else None,
            "spec": _spec_summary(spec),
            "spec_error": spec_error,
            "roofline": roofline,
            "recorded_reference": recorded,
            "gpu": gpu,
            "facts": problem.reference.compiler_facts or {},
            "runs": problem_runs(problem=problem),  # the most recent few; the run list has them all
            "runs_total": problem.runs.count(),
            "can_run": user_can(user=request.user, workspace=problem.workspace, action="run"),
        },
    )
