"""Adding a member by user name adds the account with exactly that name.

QA's steps: accounts Carol and carol exist (only an operator can make such a pair); an admin adds "carol" and
"Carol joined": the lookup ignored case and took the first account it found."""
import html

import pytest
from django.urls import reverse

from kernellab.models import Membership
from kernellab.services import ServiceError
from kernellab.services.memberships import membership_add

pytestmark = pytest.mark.django_db


@pytest.fixture
def carols(django_user_model):
    # Carol first: a lookup that ignores case finds her before carol.
    return {name: django_user_model.objects.create_user(username=name, password=f"pw-{name}-123")
            for name in ("Carol", "carol")}


def test_the_account_named_exactly_is_added(workspace, members, carols):
    assert membership_add(workspace=workspace, user=members["admin"], username="carol", role="viewer").user == carols["carol"]
    assert membership_add(workspace=workspace, user=members["admin"], username="Carol", role="viewer").user == carols["Carol"]


def test_a_name_that_matches_several_accounts_only_apart_from_capitals_is_refused_with_a_sentence(workspace, members, carols):
    with pytest.raises(ServiceError, match="More than one account has the user name 'CAROL' in different capitals; "
                                           "enter the user name exactly as it is written, capitals included."):
        membership_add(workspace=workspace, user=members["admin"], username="CAROL", role="viewer")
    assert not Membership.objects.filter(user__in=carols.values()).exists()


def test_a_name_that_differs_only_in_capitals_from_one_account_still_finds_it(workspace, members, django_user_model):
    dave = django_user_model.objects.create_user(username="Dave", password="pw-dave-123")
    assert membership_add(workspace=workspace, user=members["admin"], username="dave", role="viewer").user == dave


def test_a_deactivated_account_named_exactly_is_no_one_and_never_its_namesake(workspace, members, carols):
    carols["carol"].is_active = False
    carols["carol"].save()
    with pytest.raises(ServiceError, match="No one has the user name 'carol'"):
        membership_add(workspace=workspace, user=members["admin"], username="carol", role="viewer")
    assert not Membership.objects.filter(user=carols["Carol"]).exists()


def test_the_members_page_adds_the_exact_account_over_http(client, workspace, members, carols):
    client.force_login(members["admin"])
    body = html.unescape(client.post(reverse("member-add", args=[workspace.slug]),
                                     {"username": "carol", "role": "viewer"}, HTTP_HX_REQUEST="true").content.decode())
    assert "carol joined as viewer." in body and "Carol joined" not in body
    assert Membership.objects.get(workspace=workspace, user=carols["carol"])
    body = html.unescape(client.post(reverse("member-add", args=[workspace.slug]),
                                     {"username": "CAROL", "role": "viewer"}, HTTP_HX_REQUEST="true").content.decode())
    assert "More than one account has the user name 'CAROL'" in body
    assert not Membership.objects.filter(user=carols["Carol"]).exists()


def test_a_fullwidth_spelling_finds_the_account_it_logs_in_as(workspace, members, django_user_model):
    dana = django_user_model.objects.create_user(username="dana", password="pw-dana-123456")
    added = membership_add(workspace=workspace, user=members["admin"], username="ｄａｎａ", role="viewer")
    assert added.user == dana
