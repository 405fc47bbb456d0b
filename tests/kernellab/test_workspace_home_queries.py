"""The workspace home counts each problem's runs in the problems' own query, not in one query a problem."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from kernellab.services.problems import problem_load_bundled

pytestmark = pytest.mark.django_db


def test_the_problem_table_costs_the_same_queries_for_many_problems(client, members, workspace, run):
    client.force_login(members["viewer"])
    url = reverse("workspace", args=[workspace.slug])
    with CaptureQueriesContext(connection) as few:
        page = client.get(url).content.decode()
    assert run.problem.title in page
    loaded = problem_load_bundled(workspace=workspace)
    assert len(loaded) > 10
    with CaptureQueriesContext(connection) as many:
        page = client.get(url).content.decode()
    assert len(many.captured_queries) == len(few.captured_queries)
    assert all(problem.title in page for problem in loaded)
    row = page[page.index(run.problem.title):]
    assert "<td>1</td>" in row[:row.index("</tr>")]  # the one run of the fixture's problem
