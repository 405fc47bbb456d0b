"""A web process loads what serving pages needs before it takes its first request.

Views import their heavier helpers where they use them (numpy, plotly, pygments, markdown, the
search engine's scoring, ...), so that management commands and workers start quickly. A web process
would then load them while it serves its first requests: that request is slow, and the process's
memory grows by a third during its first minute for reasons that have nothing to do with the load it
serves, which hides a real leak among one-time costs. `warm_process` pays those costs at start, once:
the URL configuration (every view module), the modules that pages import lazily, every template
compiled, and plotly's per-property validators (built the first time a figure uses a property).

`tests/kernellab/test_warmup.py` renders the pages after a warm-up and fails if they still import a
package: add it to PAGE_MODULES when it does.
"""
from __future__ import annotations

import importlib
from pathlib import Path

# Imported inside view, selector or figure functions (see the module docstring).
PAGE_MODULES = (
    "numpy",
    "plotly.graph_objects",
    "pygments.lexers",
    "pygments.formatters",
    "pygments.styles.default",
    "markdown",
    "nh3",
    "psycopg_pool",
    "sqlite3",
    "xml.etree.ElementTree",
    "search_engine.bins",
    "search_engine.scoring",
    "search_engine.experts",
    "search_engine.surrogates.base",
    "search_engine.surrogates.features",
    "search_engine.experts.profile",
    "search_engine.lab.datasets",
    "search_engine.lab.evaluation",
    "search_engine.lab.reports",
    "search_engine.generators.replayed",
    "gpu_runner.auto_knobs",
    "gpu_runner.cutlass_index",
    "gpu_runner.guards",
    "gpu_runner.result",
    "gpu_runner.backends.replay",
    "kernellab.figures",
    "kernellab.datasets",
    "kernellab.spec_guide",
    "kernellab.context_processors",
    "kernellab.services.search",
)


def _import_optional(name: str) -> None:
    try:
        importlib.import_module(name)
    except ImportError:
        # A setup without an optional package (psycopg_pool off PostgreSQL, say) serves without it.
        pass


def warm_process() -> dict:
    """Load URL patterns, lazily imported modules, templates and plotly's validators; returns counts."""
    from django.conf import settings
    from django.template import TemplateDoesNotExist, TemplateSyntaxError
    from django.template.loader import get_template
    from django.urls import get_resolver

    from django.template import engines
    from django.utils import formats
    from django.utils.module_loading import import_string

    get_resolver().url_patterns  # imports every view module
    for engine in engines.all():
        getattr(engine, "engine", None) and engine.engine.template_context_processors
    import_string(settings.MESSAGE_STORAGE)
    import_string(settings.SESSION_SERIALIZER)
    formats.get_format("DATETIME_FORMAT")
    for name in PAGE_MODULES:
        _import_optional(name)
    templates = 0
    for folder in (Path(d) for entry in settings.TEMPLATES for d in entry.get("DIRS", [])):
        for path in sorted(folder.rglob("*.html")):
            try:
                get_template(str(path.relative_to(folder)))
                templates += 1
            except (TemplateDoesNotExist, TemplateSyntaxError):
                continue
    from django.core.cache import cache

    try:
        cache.get("warm-up")  # loads the cache's client (Redis where configured)
    except Exception:  # unreachable now: pages render without it (kernellab/views/explorer.py)
        pass
    from kernellab.figures import forecast_figure

    # The figures a node panel draws, so plotly's validators exist before the first panel.
    forecast_figure(probabilities=[0.125] * 8, bin_names=[f"b{i}" for i in range(8)], forecast_bin=3, measured_bin=4)
    return {"modules": len(PAGE_MODULES), "templates": templates}
