"""QA3 scale findings 1, 2 and 4: lists of runs and discoveries that grew with the database.

1: the run list (and the workspace and all-workspaces home pages) read every run's driver_state, about 4 KB per node
the run ever made (292 MB over 404 runs: 28 s), and rendered every run. It selects only what the table shows and
shows 50 runs a page, with page links that keep the problem filter.
2: a problem's page read the state of every run of the problem (the 20k-node run alone 77 MB). It lists the most
recent few, without their state, and links to the run list filtered to the problem.
4: the discoveries page joined two kernels (their sources) and the problem (its spec) a row and listed every
discovery; it now selects what it shows, 100 a page. The JSONL export streams from a cursor, with the same content."""
from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from kernellab.models import Discovery, Membership, Node, NodeState, Problem, SearchRun, Workspace
from kernellab.selectors.discoveries import discovery_as_record, discovery_list
from kernellab.selectors.runs import run_list

pytestmark = pytest.mark.usefixtures("embedded_setup")

STATE = {"tree": {"nodes": [{"id": i, "candidate": {"source": "x" * 400}} for i in range(20)]}, "times": {}}


def _runs(problem, user, n: int, **fields) -> list[SearchRun]:
    return SearchRun.objects.bulk_create(
        [SearchRun(problem=problem, created_by=user, name=f"{problem.name} run {i}", driver_state=STATE, nodes_count=i,
                   **fields) for i in range(n)])


def _second_problem(problem) -> Problem:
    return Problem.objects.create(workspace=problem.workspace, name="other", title="Other problem",
                                  spec_toml=problem.spec_toml, reference=problem.reference)


def _sql(queries) -> list[str]:
    return [q["sql"] for q in queries.captured_queries]


def _get(client, url):
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response, _sql(queries)


# -- 1: the run list ---------------------------------------------------------------------------------------------


def test_the_run_list_selects_neither_the_driver_state_nor_the_problems_sources(problem, members, workspace):
    _runs(problem, members["engineer"], 3)
    sql = str(run_list(workspaces=[workspace]).query)
    assert "driver_state" not in sql
    assert "spec_toml" not in sql and "family_source" not in sql and "failed_proposals" not in sql
    assert len(list(run_list(workspaces=[workspace]))) == 3


def test_the_run_list_and_both_home_pages_never_read_a_runs_driver_state(client, problem, members, workspace):
    _runs(problem, members["engineer"], 3)
    other = Workspace.objects.create(name="Other team", slug="other")  # two workspaces: "/" lists, not redirects
    Membership.objects.create(workspace=other, user=members["viewer"], role="viewer")
    client.force_login(members["viewer"])
    for url in (reverse("run-list", args=[workspace.slug]), reverse("workspace", args=[workspace.slug]), "/"):
        response, sql = _get(client, url)
        assert not [q for q in sql if "driver_state" in q], url
        assert "Vector scale" in response.content.decode()  # the table's problem column, from the join


def test_the_run_list_shows_50_runs_a_page_newest_first(client, problem, members, workspace):
    _runs(problem, members["engineer"], 120)
    client.force_login(members["viewer"])
    url = reverse("run-list", args=[workspace.slug])
    first, _ = _get(client, url)
    page = first.context["page"]
    assert len(page.object_list) == 50 and page.paginator.count == 120 and page.paginator.num_pages == 3
    html = first.content.decode()
    assert html.count('<td><a href="/runs/') == 50
    newest = SearchRun.objects.order_by("-created_at", "-pk")[0]
    assert page.object_list[0].pk == newest.pk
    assert 'href="?page=2"' in html and "Page 1 of 3" in html
    last, _ = _get(client, url + "?page=3")
    assert len(last.context["page"].object_list) == 20
    shown = [r.pk for n in (1, 2, 3) for r in _get(client, f"{url}?page={n}")[0].context["page"].object_list]
    assert sorted(shown) == sorted(SearchRun.objects.values_list("pk", flat=True))  # every run, once
    assert len(_get(client, url + "?page=99")[0].context["page"].object_list) == 20  # past the end: the last page
    assert len(_get(client, url + "?page=x")[0].context["page"].object_list) == 50  # not a number: the first


def test_a_page_of_runs_costs_the_same_queries_as_a_page_of_one(client, problem, members, workspace):
    """The table reads only the selected columns: a column it shows but the selector left out would cost a query a
    row."""
    _runs(problem, members["engineer"], 1)
    client.force_login(members["viewer"])
    url = reverse("run-list", args=[workspace.slug])
    one = len(_get(client, url)[1])
    _runs(problem, members["engineer"], 60)
    assert len(_get(client, url)[1]) == one
    assert len(_get(client, reverse("workspace", args=[workspace.slug]))[1]) <= one + 10


def test_the_run_list_filtered_to_a_problem_keeps_the_filter_in_its_page_links(client, problem, members, workspace):
    other = _second_problem(problem)
    _runs(problem, members["engineer"], 5)
    _runs(other, members["engineer"], 70)
    client.force_login(members["viewer"])
    url = reverse("run-list", args=[workspace.slug])
    response, _ = _get(client, f"{url}?problem={other.pk}")
    page = response.context["page"]
    assert page.paginator.count == 70 and {r.problem_id for r in page.object_list} == {other.pk}
    html = response.content.decode()
    assert f'href="?problem={other.pk}&amp;page=2"' in html and "Runs of" in html
    second, _ = _get(client, f"{url}?problem={other.pk}&page=2")
    assert len(second.context["page"].object_list) == 20
    assert {r.problem_id for r in second.context["page"].object_list} == {other.pk}


def test_a_problem_filter_of_another_workspace_or_no_problem_is_not_found(client, problem, members, workspace):
    elsewhere = Workspace.objects.create(name="Elsewhere", slug="elsewhere")
    foreign = Problem.objects.create(workspace=elsewhere, name="foreign", title="Foreign", spec_toml=problem.spec_toml,
                                     reference=problem.reference)
    client.force_login(members["viewer"])
    url = reverse("run-list", args=[workspace.slug])
    for value in (foreign.pk, "abc", "", 10 ** 30):
        assert client.get(f"{url}?problem={value}").status_code == 404, value


# -- 2: the problem page -----------------------------------------------------------------------------------------


def test_the_problem_page_lists_its_latest_runs_without_their_state_and_links_to_all(client, problem, members, workspace):
    _runs(problem, members["engineer"], 15)
    _runs(_second_problem(problem), members["engineer"], 3)
    client.force_login(members["viewer"])
    response, sql = _get(client, reverse("problem-detail", args=[problem.pk]))
    assert not [q for q in sql if "driver_state" in q]
    runs = list(response.context["runs"])
    newest = list(SearchRun.objects.filter(problem=problem).order_by("-created_at", "-pk")[:10])
    assert [r.pk for r in runs] == [r.pk for r in newest]
    html = response.content.decode()
    link = f'{reverse("run-list", args=[workspace.slug])}?problem={problem.pk}'
    assert f'<a href="{link}">All 15 runs of this problem</a>' in html
    assert client.get(link).context["page"].paginator.count == 15


def test_a_problem_with_few_runs_lists_them_all_without_the_link(client, problem, members):
    _runs(problem, members["engineer"], 4)
    client.force_login(members["viewer"])
    response, _ = _get(client, reverse("problem-detail", args=[problem.pk]))
    assert len(response.context["runs"]) == 4 and 'id="all-runs"' not in response.content.decode()


# -- 4: discoveries ----------------------------------------------------------------------------------------------


@pytest.fixture
def discoveries(node, members):
    """120 discoveries under the node fixture's root, their kernels alternating, one marked by a person."""
    run, root = node.run, node.parent
    SearchRun.objects.filter(pk=run.pk).update(driver_state=STATE)
    kernels = [root.kernel, node.kernel]
    children = Node.objects.bulk_create(
        [Node(run=run, key=f"d{i}", name=f"child {i}", parent=root if i % 3 else node, kernel=kernels[i % 2], depth=1,
              state=NodeState.MEASURED, speedup=1.5 + i / 100) for i in range(120)])
    Discovery.objects.bulk_create(
        [Discovery(node=child, auto=i != 7, marked_by=members["engineer"] if i == 7 else None, note=f"why {i}",
                   parent_speedup=1.0, child_speedup=child.speedup, forecast_jump_bin=i % 8 or None)
         for i, child in enumerate(children)])
    return children


def test_the_discoveries_page_shows_100_a_page_and_selects_no_kernel_source(client, members, discoveries):
    client.force_login(members["viewer"])
    response, sql = _get(client, reverse("discoveries"))
    page = response.context["page"]
    assert len(page.object_list) == 100 and page.paginator.count == 120
    for column in ('"source"', "spec_toml", "family_source", "driver_state", "compiler_facts", '"launch"'):
        assert not [q for q in sql if column in q], column
    html = response.content.decode()
    assert html.count("<tr><td>Vector scale</td>") == 100 and 'href="?page=2"' in html
    assert "vector_scale reference → child 119</a>" in html  # newest first: parent and child by their names
    second, _ = _get(client, reverse("discoveries") + "?page=2")
    rows = second.context["page"].object_list
    assert len(rows) == 20
    marked = Discovery.objects.get(note="why 7")
    shown = {d.pk: d for n in (1, 2) for d in _get(client, reverse("discoveries") + f"?page={n}")[0].context["page"].object_list}
    assert len(shown) == 120 and shown[marked.pk].marked_by.get_username() == "engineer"


def test_a_page_of_discoveries_costs_the_same_queries_as_a_page_of_few(client, members, node):
    client.force_login(members["viewer"])
    Discovery.objects.create(node=node, auto=True, parent_speedup=1.0, child_speedup=2.0)
    few = len(_get(client, reverse("discoveries"))[1])
    run, root = node.run, node.parent
    children = Node.objects.bulk_create([Node(run=run, key=f"e{i}", parent=root, kernel=node.kernel, depth=1)
                                         for i in range(30)])
    Discovery.objects.bulk_create([Discovery(node=c, marked_by=members["approver"]) for c in children])
    assert len(_get(client, reverse("discoveries"))[1]) == few


def _export_before(workspaces) -> str:
    """What the export held before it streamed: every record of discovery_list, a line each."""
    lines = [json.dumps(discovery_as_record(d)) for d in discovery_list(workspaces=workspaces)]
    return "\n".join(lines) + ("\n" if lines else "")


def test_the_discoveries_export_streams_the_same_lines(client, members, discoveries, workspace):
    client.force_login(members["viewer"])
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("discoveries-export"))
        assert response.streaming
        body = b"".join(response.streaming_content).decode()
    assert response["Content-Type"] == "application/x-ndjson"
    assert response["Content-Disposition"] == 'attachment; filename="discoveries.jsonl"'
    assert body == _export_before([workspace])
    records = [json.loads(line) for line in body.splitlines()]
    assert len(records) == 120 and {r["child_code"] for r in records} == {discoveries[0].kernel.source,
                                                                          discoveries[1].kernel.source}
    assert any(r["marked_by"] == "engineer" for r in records)
    sql = _sql(queries)
    for column in ("driver_state", "spec_toml", "compiler_facts"):
        assert not [q for q in sql if column in q], column


def test_an_empty_export_is_empty(client, members):
    client.force_login(members["viewer"])
    response = client.get(reverse("discoveries-export"))
    assert response.streaming and b"".join(response.streaming_content) == b""


@pytest.mark.django_db(transaction=True)
async def test_the_export_streams_under_asgi_too(async_client, members, discoveries, workspace):
    """Served by daphne, a synchronous iterator would be read whole before the first byte: the view hands ASGI an
    asynchronous one."""
    from asgiref.sync import sync_to_async
    from django.db import connections

    await async_client.aforce_login(members["viewer"])
    try:
        response = await async_client.get(reverse("discoveries-export"))
        assert response.streaming and response.is_async
        body = b"".join([chunk async for chunk in response.streaming_content]).decode()
        assert body == await sync_to_async(_export_before)([workspace])
    finally:
        await sync_to_async(connections.close_all)()  # the request thread's connection, kept open (CONN_MAX_AGE)
