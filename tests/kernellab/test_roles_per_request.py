"""A page asks for the user's role once, however many buttons it decides on; a role changed during the
request is read afresh; outside a request nothing is remembered."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from kernellab.models import Membership, Role
from kernellab.selectors.access import membership_role, roles_remembered, user_can

pytestmark = pytest.mark.django_db


def test_within_a_request_the_role_is_read_once(members, workspace):
    with roles_remembered(), CaptureQueriesContext(connection) as queries:
        for action in ("view", "comment", "run", "approve", "admin"):
            user_can(user=members["engineer"], workspace=workspace, action=action)
    assert len(queries.captured_queries) == 1


def test_a_role_changed_during_the_request_is_read_afresh(members, workspace):
    with roles_remembered():
        assert membership_role(user=members["engineer"], workspace=workspace) == Role.ENGINEER
        membership = Membership.objects.get(user=members["engineer"], workspace=workspace)
        membership.role = Role.VIEWER
        membership.save()
        assert membership_role(user=members["engineer"], workspace=workspace) == Role.VIEWER
        membership.delete()
        assert membership_role(user=members["engineer"], workspace=workspace) is None


def test_outside_a_request_every_question_reads_the_database(members, workspace):
    with CaptureQueriesContext(connection) as queries:
        user_can(user=members["engineer"], workspace=workspace, action="view")
        user_can(user=members["engineer"], workspace=workspace, action="run")
    assert len(queries.captured_queries) == 2


def test_a_node_panel_reads_the_role_once(client, members, node):
    client.force_login(members["approver"])
    client.get(f"/runs/{node.run_id}/nodes/{node.key}/", HTTP_HX_REQUEST="true")
    with CaptureQueriesContext(connection) as queries:
        response = client.get(f"/runs/{node.run_id}/nodes/{node.key}/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert sum(q["sql"].startswith("SELECT \"kernellab_membership\".\"id\", \"kernellab_membership\".\"role\"")
               for q in queries.captured_queries) == 1
