"""Source shown in pages: highlighted CUDA and TOML, diffs between kernels, and the surrogate's
reasoning as sanitised markdown-ish text."""
from __future__ import annotations

import difflib
import html
import re

import nh3
from django.utils.safestring import SafeString, mark_safe
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CudaLexer, DiffLexer, PythonLexer, TOMLLexer

_FORMATTER_OPTIONS = {"nowrap": False, "cssclass": "hl", "linenos": "table", "lineanchors": ""}


# Pygments links each line number to its line (anchorlinenos): a link a click or a URL still reaches, but taken out of
# the tab order, or a keyboard would stop at every line of a kernel on its way to what follows the code. The source's
# own text is escaped by then, so the only `<a href="#` in the output are those links.
_LINE_NUMBER_LINK = re.compile(r'<a href="#')


def _line_numbers_out_of_tab_order(html_text: str) -> str:
    return _LINE_NUMBER_LINK.sub('<a tabindex="-1" href="#', html_text)


def highlight_cuda(source: str, *, mark_lines: set[int] | None = None, anchor: str = "L") -> SafeString:
    formatter = HtmlFormatter(cssclass="hl", linenos="table", hl_lines=sorted(mark_lines or ()), lineanchors=anchor, anchorlinenos=True)
    return mark_safe(_line_numbers_out_of_tab_order(highlight(source or "", CudaLexer(stripnl=False), formatter)))


def highlight_python(source: str, *, mark_lines: set[int] | None = None, anchor: str = "L") -> SafeString:
    formatter = HtmlFormatter(cssclass="hl", linenos="table", hl_lines=sorted(mark_lines or ()), lineanchors=anchor,
                              anchorlinenos=True)
    return mark_safe(_line_numbers_out_of_tab_order(highlight(source or "", PythonLexer(stripnl=False), formatter)))


def highlight_toml(text: str, *, mark_lines: set[int] | None = None, anchor: str = "") -> SafeString:
    formatter = HtmlFormatter(cssclass="hl", linenos="table", hl_lines=sorted(mark_lines or ()), lineanchors=anchor,
                              anchorlinenos=bool(anchor))
    return mark_safe(_line_numbers_out_of_tab_order(highlight(text or "", TOMLLexer(stripnl=False), formatter)))


def diff_unified(before: str, after: str, *, before_name: str = "parent", after_name: str = "this node") -> tuple[SafeString, int, int]:
    """A highlighted unified diff and how many lines were added and removed."""
    lines = list(
        difflib.unified_diff(
            (before or "").splitlines(), (after or "").splitlines(), fromfile=before_name, tofile=after_name, lineterm="", n=3
        )
    )
    added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    if not lines:
        return mark_safe(""), 0, 0
    text = "\n".join(lines) + "\n"
    return mark_safe(highlight(text, DiffLexer(), HtmlFormatter(cssclass="hl diff"))), added, removed


def pygments_css() -> str:
    return HtmlFormatter(cssclass="hl", style="default").get_style_defs(".hl")


_ALLOWED_TAGS = {"p", "br", "strong", "em", "code", "pre", "ul", "ol", "li", "h4", "h5", "blockquote"}
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_BOLD = re.compile(r"\*\*([^*\n]+)\*\*")
_ITALIC = re.compile(r"(?<![*\w])\*([^*\n]+)\*(?![*\w])")


def _inline(text: str) -> str:
    text = _CODE_SPAN.sub(lambda m: f"<code>{m.group(1)}</code>", text)
    text = _BOLD.sub(r"<strong>\1</strong>", text)
    return _ITALIC.sub(r"<em>\1</em>", text)


def reasoning_html(text: str) -> SafeString:
    """Markdown-ish rendering of model output: paragraphs, lists, headings, code; everything escaped
    first and the result passed through nh3, so the model can never inject markup."""
    escaped = html.escape(text or "")
    out: list[str] = []
    in_list: str | None = None
    in_code = False
    code: list[str] = []
    paragraph: list[str] = []

    def flush_paragraph() -> None:
        if paragraph:
            out.append("<p>" + "<br>".join(_inline(p) for p in paragraph) + "</p>")
            paragraph.clear()

    def close_list() -> None:
        nonlocal in_list
        if in_list:
            out.append(f"</{in_list}>")
            in_list = None

    for raw in escaped.splitlines():
        line = raw.rstrip()
        if line.strip().startswith("```"):
            if in_code:
                out.append("<pre><code>" + "\n".join(code) + "</code></pre>")
                code.clear()
                in_code = False
            else:
                flush_paragraph()
                close_list()
                in_code = True
            continue
        if in_code:
            code.append(raw)
            continue
        stripped = line.strip()
        bullet = re.match(r"^[-*•]\s+(.*)", stripped)
        numbered = re.match(r"^\d+[.)]\s+(.*)", stripped)
        heading = re.match(r"^#{1,6}\s+(.*)", stripped)
        if not stripped:
            flush_paragraph()
            close_list()
        elif heading:
            flush_paragraph()
            close_list()
            out.append(f"<h5>{_inline(heading.group(1))}</h5>")
        elif bullet or numbered:
            flush_paragraph()
            kind = "ul" if bullet else "ol"
            if in_list != kind:
                close_list()
                out.append(f"<{kind}>")
                in_list = kind
            out.append(f"<li>{_inline((bullet or numbered).group(1))}</li>")
        else:
            close_list()
            paragraph.append(stripped)
    if in_code:
        out.append("<pre><code>" + "\n".join(code) + "</code></pre>")
    flush_paragraph()
    close_list()
    return mark_safe(nh3.clean("".join(out), tags=_ALLOWED_TAGS, attributes={}))
