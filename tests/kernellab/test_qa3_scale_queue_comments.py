"""A busy team's queue and comment threads: the verification queue shows its pending requests a page at a time and a
bounded number of jobs (polled every 2 s), without the kernels' sources; a node panel shows its latest comments and
the node's own page all of them."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from kernellab.models import Comment, Node, NodeState, Verification, VerificationState
from kernellab.selectors.explorer import PANEL_COMMENTS_SHOWN
from kernellab.selectors.verifications import ACTIVE_SHOWN, PENDING_PER_PAGE

pytestmark = pytest.mark.django_db


def _nodes(run, parent, count: int) -> list[Node]:
    return Node.objects.bulk_create([Node(run=run, key=f"q{i}", parent=parent, kernel=parent.kernel, depth=1,
                                          state=NodeState.AWAITING_APPROVAL) for i in range(count)])


def test_the_queue_pages_its_pending_requests_and_bounds_its_jobs(client, members, node):
    root = node.parent
    pending = _nodes(node.run, root, PENDING_PER_PAGE + 7)
    Verification.objects.bulk_create([Verification(node=n, state=VerificationState.PENDING) for n in pending])
    active = _nodes(node.run, root, 0)  # (none yet)
    active = Node.objects.bulk_create([Node(run=node.run, key=f"a{i}", parent=root, kernel=root.kernel, depth=1,
                                            state=NodeState.QUEUED) for i in range(ACTIVE_SHOWN + 3)])
    Verification.objects.bulk_create([Verification(node=n, state=VerificationState.QUEUED, queue="replay") for n in active])
    client.force_login(members["approver"])
    url = reverse("verification-queue", args=[node.run.workspace.slug])
    with CaptureQueriesContext(connection) as queries:
        page = client.get(url).content.decode()
    assert page.count('class="pending-row"') == PENDING_PER_PAGE
    assert f"of {PENDING_PER_PAGE + 7} awaiting approval" in page and "?page=2" in page
    assert page.count('class="active-row"') == ACTIVE_SHOWN
    assert f"The {ACTIVE_SHOWN} newest of {ACTIVE_SHOWN + 3} queued or running jobs are shown." in page
    selected = " ".join(q["sql"] for q in queries.captured_queries if "kernellab_verification" in q["sql"])
    assert "kernellab_kernel" not in selected and "driver_state" not in selected and "spec_toml" not in selected
    second = client.get(url + "?page=2").content.decode()
    assert second.count('class="pending-row"') == 7
    polled = client.get(url + "?part=active", HTTP_HX_REQUEST="true").content.decode()
    assert polled.count('class="active-row"') == ACTIVE_SHOWN and "queued or running jobs are shown" in polled


def test_a_panel_shows_the_latest_comments_and_the_nodes_page_all(client, members, node):
    Comment.objects.bulk_create([Comment(node=node, author=members["engineer"], body=f"remark number {i:04d}")
                                 for i in range(PANEL_COMMENTS_SHOWN + 20)])
    client.force_login(members["viewer"])
    url = reverse("node-panel", args=[node.run.pk, node.key])
    panel = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert panel.count("remark number") == PANEL_COMMENTS_SHOWN
    assert "remark number 0019" not in panel and "remark number 0020" in panel
    assert f"{PANEL_COMMENTS_SHOWN + 20:04d}" not in panel and f"remark number {PANEL_COMMENTS_SHOWN + 19:04d}" in panel
    assert f"The {PANEL_COMMENTS_SHOWN} latest of {PANEL_COMMENTS_SHOWN + 20} comments" in panel
    part = client.get(url + "?part=comments", HTTP_HX_REQUEST="true").content.decode()
    assert part.count("remark number") == PANEL_COMMENTS_SHOWN
    whole = client.get(url).content.decode()
    assert whole.count("remark number") == PANEL_COMMENTS_SHOWN + 20 and "comments-more" not in whole
