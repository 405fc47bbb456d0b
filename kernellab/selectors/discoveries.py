from __future__ import annotations

from django.db.models import QuerySet

from kernellab.models import Discovery


def discovery_list(*, workspaces) -> QuerySet[Discovery]:
    return (
        Discovery.objects.filter(node__run__problem__workspace__in=workspaces)
        .select_related("node__run__problem", "node__kernel", "node__parent__kernel", "marked_by")
        .defer("node__run__driver_state")  # the search's state: megabytes per run, never shown in a list
        .order_by("-created_at")
    )


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
