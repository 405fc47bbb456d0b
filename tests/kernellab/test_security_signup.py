"""Choosing a user name and password through an invitation link (kernellab/services/memberships.py
`invitation_accept_new_user`): a look-alike of a taken name is refused as taken, never a 500 or a second
"ALICE" beside "alice" (audit finding 3), and weak passwords are refused with one sentence (finding 5)."""
import secrets

import pytest
from django.contrib.auth.password_validation import validate_password
from django.urls import reverse

from kernellab.models import Invitation
from kernellab.services import ServiceError
from kernellab.services.memberships import invitation_accept_new_user, membership_invite

pytestmark = pytest.mark.django_db


@pytest.fixture
def token(workspace, members):
    return membership_invite(workspace=workspace, user=members["admin"], role="viewer").token


# --- 3. look-alike user names ------------------------------------------------------------------------------------

@pytest.mark.parametrize("spelling", ["ｖｉｅｗｅｒ", "ＶＩＥＷＥＲ", "Ｖiewer", " ｖｉｅｗｅｒ "])
def test_a_look_alike_of_a_taken_name_is_refused_as_taken(token, members, django_user_model, spelling):
    """ｖｉｅｗｅｒ used to fail on the unique constraint (a 500); ＶＩＥＷＥＲ created "VIEWER" beside "viewer"."""
    with pytest.raises(ServiceError, match=r"^The user name '(viewer|VIEWER|Viewer)' is taken; choose another"):
        invitation_accept_new_user(token=token, username=spelling, password="a-long-password")
    assert django_user_model.objects.filter(username__iexact="viewer").count() == 1
    assert Invitation.objects.get().accepted_at is None


@pytest.mark.parametrize("taken, spelling", [("émile", "ÉMILE"), ("ÉMILE", "émile"), ("σοφία", "ΣΟΦΊΑ"), ("jürgen", "JÜRGEN")])
def test_a_name_taken_in_other_capitals_of_any_script_is_refused(token, django_user_model, taken, spelling):
    """SQLite's iexact folds only ASCII capitals: ÉMILE signed up beside émile there (PostgreSQL refused it)."""
    django_user_model.objects.create_user(username=taken, password="another-password")
    with pytest.raises(ServiceError, match=r"is taken; choose another"):
        invitation_accept_new_user(token=token, username=spelling, password="a-long-password")
    assert not django_user_model.objects.filter(username=spelling).exists()
    assert Invitation.objects.get().accepted_at is None


def test_the_characters_a_user_name_may_hold_stand_for_themselves_in_the_comparison(django_user_model):
    """Names are compared as regular expressions ignoring case: '.', '+' and '-' must match only themselves."""
    from kernellab.services.memberships import _names_alike

    django_user_model.objects.create_user(username="a.b+c-d", password="another-password")
    assert not _names_alike("aXb+c-d").exists() and not _names_alike("a.bbc-d").exists()
    assert not _names_alike("a.b").exists()  # the whole name, not a part of it
    assert list(_names_alike("A.B+C-D").values_list("username", flat=True)) == ["a.b+c-d"]


def test_a_new_name_is_stored_as_log_in_reads_it(token, django_user_model):
    person = invitation_accept_new_user(token=token, username="ｆｒｅｓｈ", password="a-long-password")
    assert person.username == "fresh"


def test_the_invitation_page_answers_a_look_alike_with_the_taken_sentence_not_a_500(client, token, members):
    path = reverse("invitation", args=[token])
    answer = client.post(path, {"username": "ｖｉｅｗｅｒ", "password": "a-long-password",
                                "password_again": "a-long-password"})
    assert answer.status_code == 400
    assert "The user name &#x27;viewer&#x27; is taken; choose another, or log in if it is yours." in answer.content.decode()


def test_a_name_taken_between_the_check_and_the_insert_gets_the_taken_sentence(token, django_user_model, monkeypatch):
    """Two people signing up as "fresh" at once: the second insert fails on the unique constraint."""
    import kernellab.services.memberships as memberships

    def someone_else_takes_it(password, user=None):
        django_user_model.objects.create_user(username="fresh", password="another-password")

    monkeypatch.setattr(memberships, "validate_password", someone_else_takes_it)
    with pytest.raises(ServiceError, match=r"^The user name 'fresh' is taken; choose another, or log in if it is yours\.$"):
        invitation_accept_new_user(token=token, username="fresh", password="a-long-password")
    assert Invitation.objects.get().accepted_at is None


# --- 5. weak passwords -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("username,password,reason", [
    ("weak1", "12345678", "entirely numeric"),
    ("password1", "password1", "too common"),
    ("ada-lovelace", "adalovelace", "too similar to the username"),
])
def test_a_weak_password_is_refused_with_one_sentence(token, django_user_model, username, password, reason):
    with pytest.raises(ServiceError) as refused:
        invitation_accept_new_user(token=token, username=username, password=password)
    sentence = str(refused.value)
    assert reason in sentence
    assert sentence.endswith(".") and sentence.count(".") == 1, sentence
    assert not django_user_model.objects.filter(username=username).exists()


def test_a_short_password_is_still_refused_in_one_sentence(token):
    with pytest.raises(ServiceError, match=r"^This password is too short; it must contain at least 8 characters\.$"):
        invitation_accept_new_user(token=token, username="fresh", password="x7#q")


@pytest.mark.parametrize("username,password", [
    ("fresh", "a-long-password"),     # tests/kernellab/test_memberships.py, through the service
    ("ada", "a-long-password"),       # tests/kernellab/test_memberships.py, through the invitation page
    ("grace", "grace-password-1"),    # tests/browser/test_members.py, through the invitation page
])
def test_the_passwords_the_tests_sign_up_with_still_pass(django_user_model, username, password):
    validate_password(password, user=django_user_model(username=username))


def test_the_demo_accounts_generated_password_passes(django_user_model):
    # kernellab_bootstrap makes it with secrets.token_urlsafe(9) for the user "demo"
    for _ in range(200):
        validate_password(secrets.token_urlsafe(9), user=django_user_model(username="demo"))
