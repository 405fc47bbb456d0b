"""The CUTLASS/CuTe code search page and the read-only file view."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponseForbidden
from django.shortcuts import render
from django.utils.safestring import mark_safe
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CudaLexer

from gpu_runner.cutlass_index import IndexMissing, query_words
from kernellab.selectors.cutlass import cutlass_file_text, cutlass_search
from kernellab.views.code import _line_numbers_out_of_tab_order

# Lines of a file shown at once. The largest CuTe headers have 60,000 lines (2.9 MB), which highlighted
# whole make 27 MB of HTML and take 12 s; 2,000 lines are about 1 MB and well under a second, and most
# headers fit in one part.
FILE_WINDOW = 2000


@login_required
def cutlass_search_page(request):
    query = request.GET.get("q", "").strip()[:200]
    hits, problem = [], ""
    if query:
        try:
            hits = cutlass_search(query, limit=20)
        except IndexMissing as exc:
            problem = str(exc)
    return render(request, "kernellab/cutlass/search.html",
                  {"query": query, "hits": hits, "problem": problem, "no_words": bool(query) and not query_words(query)})


def _size(n_bytes: int) -> str:
    if n_bytes < 1000:
        return f"{n_bytes} bytes"
    if n_bytes < 1_000_000:
        return f"{n_bytes / 1000:.1f} kB"
    return f"{n_bytes / 1_000_000:.1f} MB"


def _number(request, name: str) -> int | None:
    try:
        return int(request.GET.get(name, ""))
    except ValueError:
        return None


@login_required
def cutlass_file_page(request):
    relative = request.GET.get("path", "")
    try:
        text = cutlass_file_text(relative)
    except PermissionError as exc:
        return HttpResponseForbidden(str(exc))
    except FileNotFoundError as exc:
        raise Http404(str(exc)) from None
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()   # the newline that ends the last line starts no line of its own
    total = len(lines)
    line = _number(request, "line") or 0
    start = _number(request, "start")
    if start is None:
        # The part around the marked line (a search hit's), else the top.
        start = line - FILE_WINDOW // 2 if 1 <= line <= total else 1
    start = max(1, min(start, total))
    end = min(total, start + FILE_WINDOW - 1)
    # highlight_cuda's options, numbered from the part's first line so that the anchors (#L-1234, which
    # the search's links name) and the line numbers are the file's.
    formatter = HtmlFormatter(cssclass="hl", linenos="table", lineanchors="L", anchorlinenos=True, linenostart=start,
                              hl_lines=[line - start + 1] if start <= line <= end else [])
    code_html = mark_safe(_line_numbers_out_of_tab_order(
        highlight("\n".join(lines[start - 1:end]) + "\n", CudaLexer(stripnl=False), formatter)))
    return render(request, "kernellab/cutlass/file.html", {
        "path": relative, "line": line, "code_html": code_html, "total_lines": f"{total:,}",
        "size": _size(len(text.encode("utf-8"))), "partial": start > 1 or end < total,
        "window": f"{FILE_WINDOW:,}", "first_part_last": f"{min(total, FILE_WINDOW):,}",
        "first": f"{start:,}", "last": f"{end:,}",
        "previous": max(1, start - FILE_WINDOW) if start > 1 else None,
        "previous_first": f"{max(1, start - FILE_WINDOW):,}", "previous_last": f"{start - 1:,}",
        "next": end + 1 if end < total else None,
        "next_first": f"{end + 1:,}", "next_last": f"{min(total, end + FILE_WINDOW):,}",
        "final": max(1, total - FILE_WINDOW + 1), "final_first": f"{max(1, total - FILE_WINDOW + 1):,}"})
