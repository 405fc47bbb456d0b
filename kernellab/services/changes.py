"""The per-run change log: every tree change gets the next sequence number of its run.

The counter is bumped with an UPDATE inside the caller's transaction, so the run's row stays
locked until commit and sequence numbers become visible in order, without gaps."""
from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import F

from kernellab.models import Node, RunChange, SearchRun
from kernellab.selectors.runs import change_as_message, database_identity

log = logging.getLogger(__name__)


def run_group_name(run_id: int) -> str:
    return f"run-{database_identity()}-{run_id}"


def user_group_name(user_id) -> str:
    """Every live socket of one user joins this group, to hear at once that their access may have changed."""
    return f"user-{database_identity()}-{user_id}"


def access_changed(*, user_id) -> None:
    """Tell this user's open sockets, once the transaction commits, to ask afresh whether they may still read their run
    (a membership removed, the account deactivated or deleted, a password changed, a logout). The socket's own re-check
    every few seconds (consumers.ACCESS_RECHECK_S) stays the backstop where this cannot reach: without Redis the
    channel layer is one process's."""
    if user_id is None:
        return
    transaction.on_commit(lambda: _push_access_changed(user_id))


def _push_access_changed(user_id) -> None:
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    try:
        async_to_sync(get_channel_layer().group_send)(user_group_name(user_id), {"type": "access.changed"})
    except Exception as exc:  # the sockets' periodic re-check still closes them
        log.warning("could not tell user %s's sockets that their access changed: %s", user_id, exc)


def node_payload(node: Node) -> dict:
    return {
        "id": node.pk,
        "key": node.key,
        "parent": node.parent.key if node.parent_id else None,
        "state": node.state,
        "reason": node.state_reason[:300],
        "speedup": node.speedup,
        "value": node.value,
        "forecast_bin": node.forecast_bin,
        "forecast_confidence": node.forecast_confidence,
        "discovery": node.is_discovery,
        "depth": node.depth,
        # The node's own name, never its (shared, cross-workspace) Kernel row's.
        "name": node.name or node.key,
        "origin": node.origin,
    }


def change_record(*, run: SearchRun, kind: str, payload: dict) -> RunChange:
    if not transaction.get_connection().in_atomic_block:
        with transaction.atomic():
            return change_record(run=run, kind=kind, payload=payload)
    SearchRun.objects.filter(pk=run.pk).update(change_seq=F("change_seq") + 1)
    seq = SearchRun.objects.filter(pk=run.pk).values_list("change_seq", flat=True).get()
    run.change_seq = seq
    change = RunChange.objects.create(run=run, seq=seq, kind=kind, payload=payload)
    # The node this change is about: a node's own changes carry its payload, the others name it.
    node_key = payload.get("key") if kind in ("node", "forecast", "discovery") else payload.get("node")
    if isinstance(node_key, str):
        Node.objects.filter(run_id=run.pk, key=node_key).update(change_seq=seq)
    transaction.on_commit(lambda: _push(run.pk, change))
    return change


def _push(run_id: int, change: RunChange) -> None:
    from django.conf import settings

    if not settings.KERNELLAB_REDIS_URL:
        return  # consumers poll the database in the embedded setup
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    try:
        async_to_sync(get_channel_layer().group_send)(
            run_group_name(run_id), {"type": "run.change", "change": change_as_message(change)}
        )
    except Exception as exc:  # the database keeps the change; clients catch up from it
        log.warning("could not push change %s of run %s: %s", change.seq, run_id, exc)


def node_changed(*, node: Node, kind: str = "node") -> RunChange:
    return change_record(run=node.run, kind=kind, payload=node_payload(node))
