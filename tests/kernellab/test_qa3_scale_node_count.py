"""QA3 scale finding 7: every node the search made recounted all of the run's nodes (SELECT COUNT(*) over the run's
nodes, inside the transaction that holds the step's writes), quadratic work over a run: about 70 s of counting for a
20k-node search. A flush now adds the nodes it made to SearchRun.nodes_count in one UPDATE; the count stays exact."""
from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from search_engine.events import EventKind, NodeCreated
from search_engine.node_states import NodeState as SearchNodeState

from kernellab.models import Node, SearchRun
from kernellab.services.run_context import RunContext
from kernellab.services.search_port import DatabasePort

COUNTING_NODES = re.compile(r'COUNT\(.*FROM "kernellab_node"', re.S)


def _created(run, node_id: int, parent_id: int | None) -> NodeCreated:
    source = run.problem.reference.source if parent_id is None else f"// child {node_id}\n{run.problem.reference.source}"
    return NodeCreated(type=EventKind.NODE_CREATED, node_id=node_id, parent_id=parent_id, depth=0 if parent_id is None else 1,
                       rationale="", candidate={"source": source, "launch": run.problem.reference.launch,
                                                "name": f"child {node_id}"},
                       candidate_hash=str(node_id), state=SearchNodeState.PROPOSED)


def _nodes_count(run) -> int:
    return SearchRun.objects.values_list("nodes_count", flat=True).get(pk=run.pk)


@pytest.mark.django_db
def test_a_flush_counts_its_new_nodes_without_counting_the_runs_nodes(run):
    port = DatabasePort(RunContext(run))
    with port.holding_writes():
        port.publish(_created(run, 0, None))
        for i in range(1, 8):
            port.publish(_created(run, i, 0))
    assert _nodes_count(run) == 0  # held: nothing written yet
    with CaptureQueriesContext(connection) as queries:
        port.flush()
    sql = [q["sql"] for q in queries.captured_queries]
    assert not [q for q in sql if COUNTING_NODES.search(q)]
    assert len([q for q in sql if q.startswith('UPDATE "kernellab_searchrun"') and "nodes_count" in q]) == 1
    assert _nodes_count(run) == 8 == Node.objects.filter(run=run).count()

    with port.holding_writes():  # the next step: three more, and one the driver published again (not a new node)
        for i in range(8, 11):
            port.publish(_created(run, i, 0))
        port.publish(_created(run, 3, 0))
    with CaptureQueriesContext(connection) as queries:
        port.flush()
    assert not [q["sql"] for q in queries.captured_queries if COUNTING_NODES.search(q["sql"])]
    assert _nodes_count(run) == 11 == Node.objects.filter(run=run).count()

    with port.holding_writes():  # a flush that makes no node writes no count
        pass
    with CaptureQueriesContext(connection) as queries:
        port.flush()
    assert not queries.captured_queries and _nodes_count(run) == 11


@pytest.mark.django_db
def test_a_node_made_outside_a_held_step_is_counted_at_once(run):
    port = DatabasePort(RunContext(run))
    with CaptureQueriesContext(connection) as queries:
        port.publish(_created(run, 0, None))
        port.publish(_created(run, 1, 0))
    assert not [q["sql"] for q in queries.captured_queries if COUNTING_NODES.search(q["sql"])]
    assert _nodes_count(run) == 2 == Node.objects.filter(run=run).count()


@pytest.mark.django_db
def test_a_flush_that_fails_leaves_no_count_behind_for_the_next(run):
    port = DatabasePort(RunContext(run))
    with port.holding_writes():
        port.publish(_created(run, 0, None))
        port.publish(_created(run, 1, 0))
    port._held.append(lambda: (_ for _ in ()).throw(RuntimeError("a write failed")))
    with pytest.raises(RuntimeError):
        port.flush()  # in a real step this rolls back with its transaction; the port keeps no count of it
    assert port._nodes_made == 0 and not port._flushing


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("embedded_setup")
def test_a_whole_search_keeps_nodes_count_exact(saxpy, members):
    from kernellab.services.runs import run_create
    from kernellab.services.search import node_add_human_child

    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=6, children_per_step=3, max_gpu_per_step=2)
    run.refresh_from_db()
    assert run.nodes_count > 3 and run.nodes_count == Node.objects.filter(run=run).count()
    root = Node.objects.get(run=run, origin="root")
    source = saxpy.reference.source.replace("a * x[i] + y[i]", "y[i] + a * x[i]")
    node_add_human_child(node=root, user=members["engineer"], source=source)
    run.refresh_from_db()
    assert run.nodes_count == Node.objects.filter(run=run).count()
