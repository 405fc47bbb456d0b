from __future__ import annotations

from django.db import transaction

from kernellab.models import Discovery, Node
from kernellab.services.access import access_require
from kernellab.services.changes import node_changed
from kernellab.services.errors import ServiceError


def _speedups(node: Node) -> tuple[float | None, float | None]:
    parent = node.parent
    return (parent.speedup if parent else None), node.speedup


@transaction.atomic
def discovery_mark(*, node: Node, user=None, note: str = "", auto: bool = False, forecast: dict | None = None) -> Discovery:
    """Mark a discovery moment: a person with a note, or the search itself (auto)."""
    if not auto:
        access_require(user=user, workspace=node.run.workspace, action="discover")
    if node.parent_id is None:
        raise ServiceError("The root kernel has no parent, so it cannot be a discovery moment.")
    if Discovery.objects.filter(node=node).exists():
        raise ServiceError("This node is already marked as a discovery.")
    parent_speedup, child_speedup = _speedups(node)
    discovery = Discovery.objects.create(
        node=node,
        marked_by=None if auto else user,
        auto=auto,
        note=(note or "").strip()[:4000],
        parent_speedup=parent_speedup,
        child_speedup=child_speedup,
        forecast_jump_bin=(forecast or {}).get("bin"),
        forecast_jump_probabilities=(forecast or {}).get("probabilities"),
    )
    node.is_discovery = True
    node.save(update_fields=["is_discovery", "updated_at"])
    node_changed(node=node, kind="discovery")
    return discovery


@transaction.atomic
def discovery_unmark(*, node: Node, user) -> None:
    access_require(user=user, workspace=node.run.workspace, action="discover")
    deleted, _ = Discovery.objects.filter(node=node).delete()
    if not deleted:
        raise ServiceError("This node is not marked as a discovery.")
    node.is_discovery = False
    node.save(update_fields=["is_discovery", "updated_at"])
    node_changed(node=node, kind="discovery")
