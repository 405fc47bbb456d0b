"""The CUTLASS/CuTe code search page and the read-only file view."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponseForbidden
from django.shortcuts import render

from gpu_runner.cutlass_index import IndexMissing
from kernellab.selectors.cutlass import cutlass_file_text, cutlass_search
from kernellab.views.code import highlight_cuda


@login_required
def cutlass_search_page(request):
    query = request.GET.get("q", "").strip()[:200]
    hits, problem = [], ""
    if query:
        try:
            hits = cutlass_search(query, limit=20)
        except IndexMissing as exc:
            problem = str(exc)
    return render(request, "kernellab/cutlass/search.html", {"query": query, "hits": hits, "problem": problem})


@login_required
def cutlass_file_page(request):
    relative = request.GET.get("path", "")
    try:
        text = cutlass_file_text(relative)
    except PermissionError as exc:
        return HttpResponseForbidden(str(exc))
    except FileNotFoundError as exc:
        raise Http404(str(exc)) from None
    try:
        line = int(request.GET.get("line", "0"))
    except ValueError:
        line = 0
    return render(request, "kernellab/cutlass/file.html",
                  {"path": relative, "line": line, "code_html": highlight_cuda(text, mark_lines={line} if line else None)})
