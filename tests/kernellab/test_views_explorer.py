"""The explorer: the page, the tree snapshot with its sequence number, and the node panel's actions."""
import json

import pytest
from django.urls import reverse

from kernellab.models import Comment, Discovery, ExpertNote, Forecast, Measurement, Node, NodeState
from kernellab.services.changes import node_changed

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedded_setup")]


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr("kernellab.tasks.search_run_advance.apply_async", lambda *a, **k: None)
    monkeypatch.setattr("kernellab.tasks.verification_execute.apply_async", lambda *a, **k: None)


def panel(client, node, **params):
    return client.get(reverse("node-panel", args=[node.run_id, node.key]), params, HTTP_HX_REQUEST="true")


def post(client, name, node, data=None):
    return client.post(reverse(name, args=[node.run_id, node.key]), data or {}, HTTP_HX_REQUEST="true")


def test_the_tree_snapshot_holds_every_node_and_the_sequence_it_includes(client, members, node):
    node_changed(node=node)
    client.force_login(members["viewer"])
    snapshot = client.get(reverse("run-tree", args=[node.run_id])).json()
    node.run.refresh_from_db()
    assert snapshot["seq"] == node.run.change_seq
    assert {n["key"]: n["parent"] for n in snapshot["nodes"]} == {"n0": None, "n1": "n0"}


def test_the_snapshot_and_the_page_say_at_what_confidence_the_search_trusts_a_forecast_now(client, members, node):
    from kernellab.services.changes import change_record

    run = node.run
    client.force_login(members["viewer"])
    # before the first step: the run's own threshold
    assert client.get(reverse("run-tree", args=[run.pk])).json()["threshold"] == run.confidence_threshold
    page = client.get(reverse("run-explorer", args=[run.pk])).content.decode()
    assert f'data-count="threshold">at confidence ≥ {run.confidence_threshold:.2f}</strong>' in page
    # after a step, the threshold that step's policy used (the conformal one, here above 1: no forecast trusted)
    change_record(run=run, kind="step", payload={"step": 1, "threshold": 0.62, "counters": {}})
    assert client.get(reverse("run-tree", args=[run.pk])).json()["threshold"] == 0.62
    change_record(run=run, kind="step", payload={"step": 2, "threshold": 1.05, "counters": {}})
    change_record(run=run, kind="run", payload={"status": "running"})  # a later change of another kind
    assert client.get(reverse("run-tree", args=[run.pk])).json()["threshold"] == 1.05


def test_an_outsider_gets_no_tree_and_no_panel(client, members, node):
    client.force_login(members["outsider"])
    assert client.get(reverse("run-tree", args=[node.run_id])).status_code == 404
    assert client.get(reverse("run-explorer", args=[node.run_id])).status_code == 404
    assert panel(client, node).status_code == 404


def test_the_explorer_page_carries_what_the_script_needs(client, members, node):
    client.force_login(members["viewer"])
    body = client.get(reverse("run-explorer", args=[node.run_id]) + "?node=n1").content.decode()
    assert f'data-ws-path="/ws/runs/{node.run_id}/"' in body
    assert 'data-selected="n1"' in body
    assert "d3-hierarchy-3.1.2.min.js" in body and "js/explorer.js" in body
    # every script and style sheet is served from here (a bare "cdn" can turn up in a random CSRF token)
    import re

    sources = re.findall(r'<(?:script|link)\b[^>]*?(?:src|href)="([^"]+)"', body)
    assert sources and all(url.startswith("/") and not url.startswith("//") for url in sources), sources


def test_the_panel_shows_code_diff_forecast_measurement_and_notes(client, members, node):
    Forecast.objects.create(
        node=node, surrogate="learned@v3", probabilities=[0, 0, 0, 0.1, 0.7, 0.2, 0, 0], bin=5,
        confidence=0.7, reasoning="The change adds **nothing**:\n- same loads\n- same stores\n<script>alert(1)</script>",
    )
    m = Measurement.objects.create(kernel=node.kernel, problem=node.run.problem, status="ok", speedup=1.02, backend="replay",
                                   candidate_stats={"median_ms": 0.0981, "iqr_ms": 0.0004, "n": 50},
                                   reference_stats={"median_ms": 0.1001, "iqr_ms": 0.0005, "n": 50},
                                   max_abs_error=0.0, energy={"j_per_call": 0.00123, "mean_w": 410})
    ExpertNote.objects.create(measurement=m, expert="memory", severity="medium", finding="Loads are not vectorised.",
                              evidence={"ld_global_32": 2}, advice="Use float4 loads.")
    client.force_login(members["viewer"])
    body = panel(client, node).content.decode()
    assert "2.0f + 0.0f" in body                                  # the code
    assert 'class="hl diff"' in body and "+1" in body             # a highlighted diff, one line added
    assert "<strong>nothing</strong>" in body and "<li>same loads</li>" in body
    assert "<script>alert(1)</script>" not in body and "&lt;script&gt;" in body
    figure = json.loads(body.split('data-figure="')[1].split('"')[0].replace("&quot;", '"'))
    bars = figure["data"][0]
    assert bars["y"][4] == 0.7 and bars["marker"]["color"][4] == "#2f6fdb"  # the forecast bin in blue
    assert "0.0981" in body and "0.0004" in body and "0.00123 J per call" in body
    assert "Loads are not vectorised." in body and "Use float4 loads." in body


def test_a_comment_is_added_and_an_empty_one_is_refused_with_a_sentence(client, members, node):
    client.force_login(members["engineer"])
    body = post(client, "node-comment", node, {"body": "Try float4 here."}).content.decode()
    assert "Try float4 here." in body and "Comment added." in body
    body = post(client, "node-comment", node, {"body": "   "}).content.decode()
    assert 'class="msg error panel-error"' in body
    assert Comment.objects.count() == 1


def test_a_viewer_cannot_comment(client, members, node):
    client.force_login(members["viewer"])
    body = post(client, "node-comment", node, {"body": "hello"}).content.decode()
    assert "You need the engineer role or above to comment on nodes in Team; you are a viewer." in body
    assert not Comment.objects.exists()


def test_a_discovery_is_marked_with_a_note_and_unmarked(client, members, node):
    client.force_login(members["engineer"])
    body = post(client, "node-discovery", node, {"action": "mark", "note": "tiling pays off"}).content.decode()
    assert "Marked as a discovery moment." in body and "tiling pays off" in body
    assert Discovery.objects.get(node=node).marked_by == members["engineer"]
    body = post(client, "node-discovery", node, {"action": "mark", "note": "again"}).content.decode()
    assert "already marked as a discovery" in body
    post(client, "node-discovery", node, {"action": "unmark"})
    assert not Discovery.objects.exists()


def test_the_root_cannot_be_a_discovery(client, members, node):
    client.force_login(members["engineer"])
    body = post(client, "node-discovery", node.parent, {"action": "mark"}).content.decode()
    assert "The root cannot be a discovery moment." in body or "cannot be a discovery moment" in body
    assert not Discovery.objects.exists()


def test_requesting_verification_in_manual_mode_waits_for_an_approver(client, members, node):
    node.run.approval_mode = "manual"
    node.run.save()
    client.force_login(members["engineer"])
    body = post(client, "node-verify", node).content.decode()
    assert "GPU verification requested." in body
    node.refresh_from_db()
    assert node.state == NodeState.AWAITING_APPROVAL
    assert "An approver decides" in body  # the engineer sees no approve button
    body = post(client, "node-verify", node).content.decode()
    assert "already has a verification under way" in body


def test_an_approver_approves_from_the_panel_and_the_node_is_queued(client, members, node):
    node.run.approval_mode = "manual"
    node.run.save()
    from kernellab.services.verifications import verification_request

    verification = verification_request(node=node, policy_reason="uncertain forecast")
    client.force_login(members["approver"])
    body = panel(client, node).content.decode()
    assert "Approve GPU verification" in body
    body = post(client, "node-decide", node, {"verification": verification.pk, "decision": "approve"}).content.decode()
    assert "approved and queued" in body
    node.refresh_from_db()
    assert node.state == NodeState.QUEUED


def test_a_viewer_cannot_approve(client, members, node):
    node.run.approval_mode = "manual"
    node.run.save()
    from kernellab.services.verifications import verification_request

    verification = verification_request(node=node, policy_reason="uncertain forecast")
    client.force_login(members["viewer"])
    assert "Approve GPU verification" not in panel(client, node).content.decode()
    body = post(client, "node-decide", node, {"verification": verification.pk, "decision": "approve"}).content.decode()
    assert "approver role or above" in body
    verification.refresh_from_db()
    assert verification.state == "pending-approval"


def test_a_live_part_refresh_shows_the_new_state(client, members, node):
    client.force_login(members["viewer"])
    Node.objects.filter(pk=node.pk).update(state=NodeState.MEASURING)
    body = panel(client, node, part="live").content.decode()
    assert 'data-state="measuring"' in body and "<details" in body and "panel-code" not in body


def test_an_unknown_node_is_not_found(client, members, run):
    client.force_login(members["viewer"])
    assert client.get(reverse("node-panel", args=[run.pk, "nope"])).status_code == 404


def test_the_panel_opened_directly_is_a_whole_page(client, members, node):
    client.force_login(members["viewer"])
    body = client.get(reverse("node-panel", args=[node.run_id, node.key])).content.decode()
    assert "<html" in body and "2.0f + 0.0f" in body


def test_a_bad_launch_plan_is_refused_before_the_service(client, members, node):
    client.force_login(members["engineer"])
    body = post(client, "node-child", node, {"source": "__global__ void k(){}", "launch": "[{"}).content.decode()
    assert "not valid JSON" in body
    assert Node.objects.filter(run=node.run).count() == 2


def test_an_engineer_adds_a_hand_written_child(client, members, problem):
    from kernellab.services.runs import run_create

    # Node keys are the driver's node ids; the root is 0.
    run = run_create(problem=problem, user=members["engineer"], generator="transform", surrogate="none", start=False)
    root = Node.objects.create(run=run, key="0", kernel=problem.reference, origin="root", state=NodeState.MEASURED, speedup=1.0)
    client.force_login(members["engineer"])
    source = problem.reference.source.replace("2.0f * x[i]", "x[i] + x[i]")
    body = post(client, "node-child", root, {"source": source, "launch": ""}).content.decode()
    child = Node.objects.get(run=run, parent=root)
    assert child.origin == "human" and child.kernel.source == source and child.author == members["engineer"]
    assert f"Added your candidate as node {child.key}." in body


def test_a_refused_hand_written_child_is_a_sentence_in_the_panel(client, members, node):
    client.force_login(members["engineer"])
    body = post(client, "node-child", node, {"source": "   ", "launch": ""}).content.decode()
    assert 'class="msg error panel-error"' in body
    assert Node.objects.filter(run=node.run).count() == 2


def test_the_snapshot_rows_equal_the_live_change_payloads(node):
    """The snapshot reads plain rows for speed; it must say exactly what a live change would."""
    from kernellab.selectors.explorer import run_tree_payloads
    from kernellab.services.changes import node_payload

    Node.objects.filter(pk=node.pk).update(state_reason="x" * 400, speedup=1.5, value=1.5, forecast_bin=6,
                                           forecast_confidence=0.8, is_discovery=True)
    nodes = {n.key: n for n in Node.objects.filter(run=node.run).select_related("parent", "kernel")}
    nameless = Node.objects.create(run=node.run, key="n2", parent=nodes["n1"], depth=2)  # no kernel: named by its key
    nodes["n2"] = Node.objects.select_related("parent", "kernel").get(pk=nameless.pk)
    assert run_tree_payloads(run=node.run) == [node_payload(nodes[k]) for k in ("n0", "n1", "n2")]


@pytest.mark.parametrize("name", ["node-panel", "node-comment"])
def test_a_node_key_with_a_nul_character_is_not_found(client, members, run, name):
    """PostgreSQL refuses NUL in a query: the key must be answered as unknown, never a server error."""
    client.force_login(members["engineer"])
    url = reverse(name, args=[run.pk, "n0"]).replace("/n0/", "/%00/")
    response = client.get(url) if name == "node-panel" else client.post(url, {"body": "hi"})
    assert response.status_code == 404


def test_an_unchanged_run_s_snapshot_is_served_without_reading_its_nodes_again(client, members, node):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.force_login(members["viewer"])
    first = client.get(reverse("run-tree", args=[node.run_id])).json()
    with CaptureQueriesContext(connection) as queries:
        second = client.get(reverse("run-tree", args=[node.run_id])).json()
    assert second == first
    assert not [q["sql"] for q in queries if "\"kernellab_kernel\".\"name\"" in q["sql"]]


def test_the_snapshot_shows_every_node_write_after_it_was_cached(client, members, node):
    client.force_login(members["viewer"])
    before = client.get(reverse("run-tree", args=[node.run_id])).json()
    node.value = 2.5
    node.save(update_fields=["value", "updated_at"])  # as the search stores a measured value, with no change
    unchanged_seq = client.get(reverse("run-tree", args=[node.run_id])).json()
    assert unchanged_seq["seq"] == before["seq"]
    assert {n["key"]: n["value"] for n in unchanged_seq["nodes"]}["n1"] == 2.5
    Node.objects.create(run=node.run, key="n2", parent=node, depth=2)
    node_changed(node=Node.objects.get(run=node.run, key="n2"))
    after = client.get(reverse("run-tree", args=[node.run_id])).json()
    assert after["seq"] > before["seq"] and [n["key"] for n in after["nodes"]] == ["n0", "n1", "n2"]


def test_an_unchanged_nodes_panel_is_read_once_and_a_comment_shows_at_once(client, members, node):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.force_login(members["engineer"])
    url = f"/runs/{node.run_id}/nodes/{node.key}/"
    client.get(url, HTTP_HX_REQUEST="true")
    with CaptureQueriesContext(connection) as again:
        client.get(url, HTTP_HX_REQUEST="true")
    assert not any("kernellab_comment" in q["sql"] or "kernellab_verification" in q["sql"] for q in again.captured_queries)
    response = client.post(f"/runs/{node.run_id}/nodes/{node.key}/comment", {"body": "tried a wider tile"},
                           HTTP_HX_REQUEST="true")
    assert "tried a wider tile" in response.content.decode()
    assert "tried a wider tile" in client.get(url, HTTP_HX_REQUEST="true").content.decode()


def test_a_panel_renders_its_highlighted_source_when_the_cache_is_unreachable(client, members, node, monkeypatch):
    def unreachable(*args, **kwargs):
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6380. Connection refused.")

    monkeypatch.setattr("kernellab.views.explorer.cache.get", unreachable)
    monkeypatch.setattr("kernellab.views.explorer.cache.set", unreachable)
    client.force_login(members["viewer"])
    response = panel(client, node)
    assert response.status_code == 200
    assert "0.0f</span>" in response.content.decode()  # the child's source, highlighted without the cache


def test_a_kernel_is_highlighted_once_for_every_panel_that_shows_it(client, members, node, monkeypatch):
    from django.core.cache import cache

    cache.clear()
    calls = []
    real = __import__("kernellab.views.explorer", fromlist=["highlight_cuda"]).highlight_cuda
    monkeypatch.setattr("kernellab.views.explorer.highlight_cuda", lambda text, anchor: calls.append(anchor) or real(text, anchor=anchor))
    client.force_login(members["viewer"])
    for _ in range(3):
        assert panel(client, node).status_code == 200
    assert calls == [f"n{node.pk}-"]
