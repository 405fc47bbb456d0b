from __future__ import annotations

from django.db import transaction

from kernellab.models import Comment, Node, SearchRun
from kernellab.services.access import access_require
from kernellab.services.changes import change_record
from kernellab.services.errors import ServiceError

COMMENT_MAX = 5000


@transaction.atomic
def comment_create(*, node: Node, author, body: str) -> Comment:
    access_require(user=author, workspace=node.run.workspace, action="comment")
    body = (body or "").strip()
    if not body:
        raise ServiceError("A comment cannot be empty.")
    if len(body) > COMMENT_MAX:
        raise ServiceError(f"A comment can be at most {COMMENT_MAX} characters long; this one has {len(body)}.")
    # Saving records the "comment" change (models: every comment write does, from here or Django admin).
    return Comment.objects.create(node=node, author=author, body=body)


def comment_changed(*, comment: Comment, what: str) -> None:
    """Records a "comment" change about the comment's node (`what`: added, edited or deleted): live viewers
    reload its comments and the node's cached story is read again (called for every comment write, see models)."""
    found = Node.objects.filter(pk=comment.node_id).values_list("run_id", "key").first()
    if found is None:  # the node went first
        return
    run_id, key = found
    change_record(run=SearchRun(pk=run_id), kind="comment",
                  payload={"node": key, "id": comment.pk, "author": comment.author_name, "what": what})


def comments_of_removed_author(*, user) -> None:
    """Before an account is deleted: every node it commented on is told, since its comments, kept, now read as
    written by a removed user (the payload names no one)."""
    if user.pk is None:
        return
    nodes = (Comment.objects.filter(author_id=user.pk).values_list("node__run_id", "node__key").distinct()
             .order_by("node__run_id", "node__key"))
    for run_id, key in nodes:
        change_record(run=SearchRun(pk=run_id), kind="comment", payload={"node": key, "what": "author removed"})
