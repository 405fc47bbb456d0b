"""Reference pages rendered from the repository's docs."""
from __future__ import annotations

from functools import lru_cache

import markdown
import nh3
from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils.safestring import SafeString, mark_safe

from kernellab.spec_guide import SPEC_REFERENCE_PATH

_ALLOWED_TAGS = {"h1", "h2", "h3", "h4", "p", "ul", "ol", "li", "code", "pre", "table", "thead", "tbody", "tr",
                 "th", "td", "strong", "em", "a", "hr", "blockquote", "br"}


@lru_cache(maxsize=4)
def _rendered(path: str, modified: float) -> SafeString:
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    html = markdown.markdown(text, extensions=["fenced_code", "tables", "toc"])
    return mark_safe(nh3.clean(html, tags=_ALLOWED_TAGS, attributes={"a": {"href"}, "h2": {"id"}, "h3": {"id"}}))


@login_required
def spec_reference(request):
    return render(request, "kernellab/docs/spec.html",
                  {"reference_html": _rendered(str(SPEC_REFERENCE_PATH), SPEC_REFERENCE_PATH.stat().st_mtime)})
