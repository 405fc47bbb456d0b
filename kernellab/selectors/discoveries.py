from __future__ import annotations

from django.db.models import QuerySet

from kernellab.models import Discovery

DISCOVERIES_PER_PAGE = 100

# What the discoveries page (discoveries.html) shows of a discovery, and no more: no kernel source (two a row), no
# problem spec, no driver state. A column the page starts to show must be added here, or each row loads it alone.
DISCOVERY_PAGE_FIELDS = (
    "id", "node_id", "marked_by_id", "auto", "note", "parent_speedup", "child_speedup", "created_at",
    "node__id", "node__key", "node__name", "node__run_id", "node__parent_id",
    "node__run__id", "node__run__problem_id", "node__run__problem__id", "node__run__problem__title",
    "node__parent__id", "node__parent__key", "node__parent__name",
    "marked_by__id", "marked_by__username",
)

# What an exported record (discovery_as_record) reads: the two kernels' sources, and none of their other columns.
DISCOVERY_EXPORT_FIELDS = (
    "id", "node_id", "marked_by_id", "auto", "note", "parent_speedup", "child_speedup", "forecast_jump_bin", "created_at",
    "node__id", "node__key", "node__run_id", "node__parent_id", "node__kernel_id",
    "node__run__id", "node__run__problem_id", "node__run__problem__id", "node__run__problem__name",
    "node__kernel__id", "node__kernel__source",
    "node__parent__id", "node__parent__key", "node__parent__kernel_id", "node__parent__kernel__id",
    "node__parent__kernel__source",
    "marked_by__id", "marked_by__username",
)


def discovery_list(*, workspaces) -> QuerySet[Discovery]:
    return (
        Discovery.objects.filter(node__run__problem__workspace__in=workspaces)
        .select_related("node__run__problem", "node__kernel", "node__parent__kernel", "marked_by")
        .defer("node__run__driver_state")  # the search's state: megabytes per run, never shown in a list
        .order_by("-created_at")
    )


def discovery_page_rows(*, workspaces) -> QuerySet[Discovery]:
    """The discoveries as the page lists them, newest first: only DISCOVERY_PAGE_FIELDS."""
    return (
        Discovery.objects.filter(node__run__problem__workspace__in=workspaces)
        .select_related("node__run__problem", "node__parent", "marked_by")
        .only(*DISCOVERY_PAGE_FIELDS)
        .order_by("-created_at", "-pk")
    )


def discovery_export_rows(*, workspaces) -> QuerySet[Discovery]:
    """discovery_list with only what an exported record holds (DISCOVERY_EXPORT_FIELDS), in the same order."""
    return discovery_list(workspaces=workspaces).only(*DISCOVERY_EXPORT_FIELDS)


def discovery_as_record(discovery: Discovery) -> dict:
    node = discovery.node
    parent = node.parent
    return {
        "problem": node.run.problem.name,
        "run": node.run_id,
        "parent_node": parent.key if parent else None,
        "child_node": node.key,
        "parent_code": parent.kernel.source if parent and parent.kernel else None,
        "child_code": node.kernel.source if node.kernel else None,
        "parent_speedup": discovery.parent_speedup,
        "child_speedup": discovery.child_speedup,
        "jump": discovery.jump,
        "marked_by": "auto" if discovery.auto else (discovery.marked_by.get_username() if discovery.marked_by else None),
        "note": discovery.note,
        "forecast_jump_bin": discovery.forecast_jump_bin,
        "created_at": discovery.created_at.isoformat(),
    }
