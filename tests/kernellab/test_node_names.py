"""A node's name is its own: one Kernel row serves every node with the same content, in any workspace, and
keeps the name of whoever stored that content first, so the tree, the panel, the verification queue and the
discoveries page name a node from the node (its author, its generator's name, its problem), never from that row.

QA's steps: `engineer` of one workspace adds a hand-written child; an engineer of another workspace adds the
same source to a run there; that node was titled "by engineer", a member of a workspace its viewers are not in."""
import importlib

import pytest
from django.urls import reverse

from kernellab.models import Discovery, Kernel, Membership, Node, NodeState, Problem, Role, Workspace
from kernellab.services.changes import node_payload
from kernellab.services.kernels import kernel_get_or_create
from kernellab.services.runs import run_create

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedded_setup")]


@pytest.fixture
def no_broker(monkeypatch):
    monkeypatch.setattr("kernellab.tasks.search_run_advance.apply_async", lambda *a, **k: None)
    monkeypatch.setattr("kernellab.tasks.verification_execute.apply_async", lambda *a, **k: None)


@pytest.fixture
def other(problem, django_user_model):
    """Workspace Other, whose engineer `someone-else` is in no other workspace, with a problem of the same reference."""
    workspace = Workspace.objects.create(name="Other", slug="other")
    person = django_user_model.objects.create_user(username="someone-else", password="pw-someone-else-123")
    Membership.objects.create(workspace=workspace, user=person, role=Role.ENGINEER)
    theirs = Problem.objects.create(workspace=workspace, name="their_scale", title="Their scale", spec_toml=problem.spec_toml,
                                    reference=problem.reference)
    return {"workspace": workspace, "engineer": person, "problem": theirs}


def _run_with_root(problem, user):
    run = run_create(problem=problem, user=user, generator="transform", surrogate="none", start=False)
    root = Node.objects.create(run=run, key="0", kernel=problem.reference, origin="root", state=NodeState.MEASURED, speedup=1.0)
    return run, root


def _add_child(client, user, root, source):
    client.force_login(user)
    body = client.post(reverse("node-child", args=[root.run_id, root.key]), {"source": source, "launch": ""},
                       HTTP_HX_REQUEST="true").content.decode()
    assert "Added your candidate as node" in body, body
    return Node.objects.get(run=root.run, parent=root)


def test_the_same_source_added_in_two_workspaces_is_named_after_each_nodes_own_author(client, members, problem, other,
                                                                                     no_broker):
    source = problem.reference.source.replace("2.0f * x[i]", "x[i] + x[i]")
    ours, our_root = _run_with_root(problem, members["engineer"])
    theirs, their_root = _run_with_root(other["problem"], other["engineer"])
    mine = _add_child(client, members["engineer"], our_root, source)
    their_child = _add_child(client, other["engineer"], their_root, source)
    assert mine.kernel_id == their_child.kernel_id  # one Kernel row for the one content, as before

    client.force_login(other["engineer"])
    tree = client.get(reverse("run-tree", args=[theirs.pk])).json()
    assert {n["key"]: n["name"] for n in tree["nodes"]}[their_child.key] == "by someone-else"
    pages = [
        client.get(reverse("run-tree", args=[theirs.pk])).content.decode(),
        client.get(reverse("node-panel", args=[theirs.pk, their_child.key])).content.decode(),
        client.get(reverse("verification-queue", args=["other"])).content.decode(),
    ]
    Discovery.objects.create(node=their_child, marked_by=other["engineer"], note="twice as fast")
    Node.objects.filter(pk=their_child.pk).update(is_discovery=True)
    pages.append(client.get(reverse("discoveries")).content.decode())
    for page in pages:
        assert "by engineer" not in page and "by someone-else" in page
    # and the first author's own node keeps its name
    client.force_login(members["engineer"])
    tree = client.get(reverse("run-tree", args=[ours.pk])).json()
    assert {n["key"]: n["name"] for n in tree["nodes"]}[mine.key] == "by engineer"


def test_a_generated_node_keeps_its_generators_name_whoever_stored_the_content_first(run, problem, other, members):
    """A template variant, an LLM child, a replayed solution: the name its candidate had when the node was made,
    as DatabasePort makes nodes (the Kernel returned by kernel_get_or_create, then the node)."""
    launch = problem.reference.launch
    source = problem.reference.source.replace("2.0f", "2.0f * 1.0f")
    person = kernel_get_or_create(candidate={"source": source, "launch": launch, "name": "by engineer"})
    Node.objects.create(run=run, key="1", kernel=person, origin="human", author=members["engineer"], depth=1)
    from search_engine.events import EventKind, NodeCreated
    from search_engine.node_states import NodeState as SearchNodeState

    from kernellab.services.run_context import RunContext
    from kernellab.services.search_port import DatabasePort

    theirs = run_create(problem=other["problem"], user=other["engineer"], generator="transform", start=False)
    port = DatabasePort(RunContext(theirs))
    port.publish(NodeCreated(type=EventKind.NODE_CREATED, node_id=0, parent_id=None, depth=0, rationale="",
                             candidate=theirs.problem.reference.as_candidate(), candidate_hash="",
                             state=SearchNodeState.MEASURED))
    for key, name in ((1, "recipe unroll: factor 2"), (2, "llm-1")):
        port.publish(NodeCreated(type=EventKind.NODE_CREATED, node_id=key, parent_id=0, depth=1, rationale="",
                                 candidate={"source": source, "launch": launch, "name": name}, candidate_hash="",
                                 state=SearchNodeState.PROPOSED))
    assert Kernel.objects.get(pk=person.pk).name == "by engineer"  # the shared row keeps the first name
    nodes = {n.key: n for n in Node.objects.filter(run=theirs).select_related("parent", "kernel")}
    assert nodes["1"].kernel_id == nodes["2"].kernel_id == person.pk
    assert [node_payload(nodes[k])["name"] for k in ("0", "1", "2")] == [
        f"{theirs.problem.name} reference", "recipe unroll: factor 2", "llm-1"]


def test_a_root_is_named_after_its_own_problem_not_the_first_problem_with_that_reference(problem, other):
    theirs = run_create(problem=other["problem"], user=other["engineer"], generator="transform", start=False)
    assert problem.reference.name == "vector_scale reference"  # the first problem's name, on the shared row
    root = Node.objects.create(run=theirs, key="0", kernel=problem.reference, origin="root", state=NodeState.MEASURED)
    assert root.name == "their_scale reference"


@pytest.mark.django_db(transaction=True)
def test_a_search_names_every_node_as_its_saved_search_does(saxpy, members):
    """A real run (template variants from the replay recording): each node's name is its candidate's in the
    search's own saved state, the reference aside."""
    from kernellab.models import SearchRun

    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=3, children_per_step=3, max_gpu_per_step=2)
    state = SearchRun.objects.get(pk=run.pk).driver_state
    saved = {str(raw["id"]): raw["candidate"]["name"] for raw in state["tree"]["nodes"]}
    nodes = dict(Node.objects.filter(run=run).values_list("key", "name"))
    assert len(nodes) > 1 and set(nodes) == set(saved)
    assert nodes.pop("0") == "saxpy reference"
    assert nodes == {key: saved[key] for key in nodes}


def test_the_migration_names_existing_nodes_from_their_runs_saved_search(run, members):
    from django.apps import apps

    root = Node.objects.create(run=run, key="0", kernel=run.problem.reference, origin="root", state=NodeState.MEASURED)
    shared = kernel_get_or_create(candidate={"source": "x", "launch": [], "name": "by someone of another workspace"})
    generated = Node.objects.create(run=run, key="1", parent=root, kernel=shared, depth=1)
    by_hand = Node.objects.create(run=run, key="2", parent=root, kernel=shared, origin="human", author=members["engineer"], depth=1)
    unsaved = Node.objects.create(run=run, key="3", parent=root, kernel=shared, depth=1)
    Node.objects.filter(run=run).update(name="")  # as the column was added: empty
    run.driver_state = {"tree": {"nodes": [{"id": 0, "candidate": {"name": "by someone of another workspace"}},
                                           {"id": 1, "candidate": {"name": "recipe tile: 64"}}]}}
    run.save(update_fields=["driver_state"])

    importlib.import_module("kernellab.migrations.0014_node_own_name_and_comments_outlive_authors").name_nodes(apps, None)

    names = dict(Node.objects.filter(run=run).values_list("key", "name"))
    assert names == {root.key: "vector_scale reference", generated.key: "recipe tile: 64", by_hand.key: "by engineer",
                     unsaved.key: ""}
