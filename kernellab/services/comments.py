from __future__ import annotations

from django.db import transaction

from kernellab.models import Comment, Node
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
    comment = Comment.objects.create(node=node, author=author, body=body)
    change_record(run=node.run, kind="comment", payload={"node": node.key, "id": comment.pk, "author": author.get_username()})
    return comment
