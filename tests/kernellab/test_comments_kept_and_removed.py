"""Comments outlive their author's account, and a comment removed in Django admin is gone at once.

QA's steps: deleting a user account deleted every comment they wrote (the only user link that cascaded); and a
comment deleted in Django admin (the only way to remove one) was still served by the node's panel on every reload,
because the panel's story is cached under the node's last change and deleting a comment recorded none."""
import pytest
from django.urls import reverse

from kernellab.models import Comment, Node, RunChange, SearchRun, Workspace
from kernellab.services.comments import comment_create

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedded_setup")]


def _comments_part(client, node) -> str:
    return client.get(reverse("node-panel", args=[node.run_id, node.key]), {"part": "comments"},
                      HTTP_HX_REQUEST="true").content.decode()


def _whole_panel(client, node) -> str:
    return client.get(reverse("node-panel", args=[node.run_id, node.key]), HTTP_HX_REQUEST="true").content.decode()


def _comment_changes(node) -> list[dict]:
    return [c.payload for c in RunChange.objects.filter(run_id=node.run_id, kind="comment").order_by("seq")]


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_superuser(username="operator", password="pw-operator-123")


# ---- an account's deletion keeps its comments --------------------------------------------------------------------

def test_deleting_an_account_keeps_its_comments_by_a_removed_user(client, members, node):
    comment_create(node=node, author=members["approver"], body="The tail loop reads past the end.")
    client.force_login(members["viewer"])
    assert "approver" in _comments_part(client, node) and "approver" in _whole_panel(client, node)  # read and cached

    members["approver"].delete()

    kept = Comment.objects.get(node=node)
    assert kept.author is None and kept.body == "The tail loop reads past the end."
    for page in (_comments_part(client, node), _whole_panel(client, node)):
        assert "The tail loop reads past the end." in page
        assert "a removed user" in page and "<strong>approver</strong>" not in page
    told = _comment_changes(node)[-1]
    assert told["node"] == node.key and "approver" not in str(told)  # live viewers reload; no name is sent


def test_a_comment_by_a_removed_user_reads_so_in_its_change(members, node):
    comment = comment_create(node=node, author=members["engineer"], body="first")
    members["engineer"].delete()
    comment.refresh_from_db()
    comment.body = "first, edited by an operator"
    comment.save()
    assert _comment_changes(node)[-1] == {"node": node.key, "id": comment.pk, "author": "a removed user", "what": "edited"}


# ---- a comment removed or edited in Django admin -------------------------------------------------------------------

def test_a_comment_deleted_in_admin_is_no_longer_served(client, members, node, operator):
    doomed = comment_create(node=node, author=members["engineer"], body="Leaked a token here: abc123")
    comment_create(node=node, author=members["engineer"], body="Try float4 loads.")
    client.force_login(members["viewer"])
    assert "abc123" in _comments_part(client, node) and "abc123" in _whole_panel(client, node)
    seq_before = SearchRun.objects.get(pk=node.run_id).change_seq

    client.force_login(operator)
    response = client.post(reverse("admin:kernellab_comment_delete", args=[doomed.pk]), {"post": "yes"})
    assert response.status_code == 302 and not Comment.objects.filter(pk=doomed.pk).exists()

    client.force_login(members["viewer"])
    for page in (_comments_part(client, node), _whole_panel(client, node)):
        assert "abc123" not in page and "Try float4 loads." in page
    # live viewers are told (explorer.js reloads the comments of the node a change names)
    change = RunChange.objects.filter(run_id=node.run_id, kind="comment").order_by("-seq").first()
    assert change.seq > seq_before and change.payload["node"] == node.key and change.payload["what"] == "deleted"
    assert Node.objects.get(pk=node.pk).change_seq == change.seq
    tree = client.get(reverse("run-tree", args=[node.run_id])).json()
    assert tree["seq"] == change.seq


def test_comments_deleted_with_the_admins_bulk_action_are_no_longer_served(client, members, node, operator):
    first = comment_create(node=node, author=members["engineer"], body="one secret")
    second = comment_create(node=node, author=members["approver"], body="two secrets")
    client.force_login(members["viewer"])
    assert "one secret" in _comments_part(client, node)

    client.force_login(operator)
    response = client.post(reverse("admin:kernellab_comment_changelist"),
                           {"action": "delete_selected", "_selected_action": [first.pk, second.pk], "post": "yes"})
    assert response.status_code == 302 and not Comment.objects.exists()

    client.force_login(members["viewer"])
    page = _comments_part(client, node)
    assert "secret" not in page and "No comments yet." in page
    assert [p["what"] for p in _comment_changes(node)][-2:] == ["deleted", "deleted"]


def test_a_comment_edited_in_admin_shows_its_new_text_at_once(client, members, node, operator):
    comment = comment_create(node=node, author=members["engineer"], body="call me at 555-0100")
    client.force_login(members["viewer"])
    assert "555-0100" in _comments_part(client, node)

    client.force_login(operator)
    response = client.post(reverse("admin:kernellab_comment_change", args=[comment.pk]),
                           {"node": node.pk, "author": members["engineer"].pk, "body": "(removed by an operator)"})
    assert response.status_code == 302, response.content.decode()[:2000]

    client.force_login(members["viewer"])
    page = _comments_part(client, node)
    assert "555-0100" not in page and "(removed by an operator)" in page


def test_a_node_run_or_workspace_deleted_with_its_comments_records_nothing_about_them(members, node):
    comment_create(node=node, author=members["engineer"], body="on the child")
    root = Node.objects.get(run=node.run, key="n0")
    comment_create(node=root, author=members["engineer"], body="on the root")
    before = RunChange.objects.filter(run_id=node.run_id).count()
    node.delete()
    assert RunChange.objects.filter(run_id=node.run_id).count() == before
    run_id = root.run_id
    SearchRun.objects.get(pk=run_id).delete()
    assert not Comment.objects.exists() and not RunChange.objects.filter(run_id=run_id).exists()
    Workspace.objects.get(slug="team").delete()  # everything under it, comments included, without an error
