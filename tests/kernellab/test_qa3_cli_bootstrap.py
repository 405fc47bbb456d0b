"""manage.py kernellab_bootstrap (QA round 3, command line): a workspace name gets a slug its pages can link (an
unsluggable one is refused), user names are checked as the log-in page checks them, and the printed "Demo account"
is always the login of the user it names, kept per user and written only once the database has committed."""
import io
import re

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from kernellab.models import Membership, Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def data(settings, tmp_path):
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    return settings.DATA_DIR


@pytest.fixture
def no_bundled_problems(monkeypatch):
    """Loading the 24 bundled problems is not what these tests are about (seconds each on two cores)."""
    from kernellab.management.commands import kernellab_bootstrap

    monkeypatch.setattr(kernellab_bootstrap, "problem_load_bundled", lambda workspace: [])


def bootstrap(*args) -> tuple[str, str]:
    """(user, password) of the "Demo account" line printed."""
    out = io.StringIO()
    call_command("kernellab_bootstrap", *args, stdout=out)
    found = re.search(r"Demo account: user (\S+)  password (\S+)", out.getvalue())
    assert found, out.getvalue()
    return found.group(1), found.group(2)


# ---- 2. workspace names ----------------------------------------------------------------------------
def test_a_workspace_name_with_spaces_gets_a_slug_its_pages_can_link(data, client):
    user, password = bootstrap("--workspace", "My Team")
    workspace = Workspace.objects.get()
    assert (workspace.name, workspace.slug) == ("My Team", "my-team")
    assert client.login(username=user, password=password)
    assert client.get("/").status_code in (200, 302)
    assert client.get("/w/my-team/").status_code == 200
    problems = client.get("/w/my-team/problems/")
    assert problems.status_code == 200 and b"reduce_sum" in problems.content


@pytest.mark.parametrize("name", ["", "   ", "!!!", "日本"])
def test_a_workspace_name_with_nothing_to_slug_is_refused_in_one_sentence(data, no_bundled_problems, name):
    with pytest.raises(CommandError, match=r"^--workspace .* has no ASCII letter or digit to make its address "
                                           r"\(/w/<slug>/\) from; give a name such as Demo or My Team\.$"):
        call_command("kernellab_bootstrap", "--workspace", name, stdout=io.StringIO())
    assert not Workspace.objects.exists() and not get_user_model().objects.exists()
    assert not list(data.iterdir())


def test_the_same_name_again_is_the_same_workspace(data, no_bundled_problems):
    bootstrap("--workspace", "My Team")
    bootstrap("--workspace", "my team")
    bootstrap("--workspace", "My Team")
    assert list(Workspace.objects.values_list("slug", flat=True)) == ["my-team"]


def test_a_workspace_an_earlier_bootstrap_gave_a_slug_no_page_can_link_is_mended(data, no_bundled_problems):
    Workspace.objects.create(name="My Team", slug="my team")
    bootstrap("--workspace", "My Team")
    assert list(Workspace.objects.values_list("name", "slug")) == [("My Team", "my-team")]


# ---- 6. user names and the credentials printed -----------------------------------------------------
@pytest.mark.parametrize("username, message", [
    ("a b", r"^--username 'a b' is not a valid user name: use letters, digits and @ \. \+ - _ only, at most 150 "
            r"characters\.$"),
    ("x" * 151, r"^--username 'x+' is not a valid user name: .* at most 150 characters\.$"),
    ("a/b", r"^--username 'a/b' is not a valid user name"),
    ("", r"^--username cannot be empty; give a user name such as demo\.$"),
])
def test_a_user_name_the_log_in_page_would_refuse_is_refused_in_one_sentence(data, no_bundled_problems, username,
                                                                            message):
    (data / "demo-credentials.txt").write_text("demo\nkept-as-it-was\n")
    with pytest.raises(CommandError, match=message):
        call_command("kernellab_bootstrap", "--username", username, stdout=io.StringIO())
    assert not get_user_model().objects.exists() and not Workspace.objects.exists()
    assert sorted(p.name for p in data.iterdir()) == ["demo-credentials.txt"]
    assert (data / "demo-credentials.txt").read_text() == "demo\nkept-as-it-was\n"


def test_the_demo_account_printed_after_another_users_bootstrap_is_demos_own(data, no_bundled_problems):
    alice = bootstrap("--username", "alice", "--workspace", "Team")
    demo = bootstrap("--workspace", "Team")     # what ./kl run does next
    assert alice[0] == "alice" and demo[0] == "demo" and alice[1] != demo[1]
    assert authenticate(username="demo", password=demo[1]) is not None
    assert authenticate(username="alice", password=alice[1]) is not None
    # Each is kept for the next bootstrap of that user, which prints it again and changes no password.
    assert bootstrap("--workspace", "Team") == demo
    assert bootstrap("--username", "alice", "--workspace", "Team") == alice
    assert authenticate(username="demo", password=demo[1]) is not None
    assert (data / "demo-credentials.txt").read_text() == f"demo\n{demo[1]}\n"
    assert (data / "alice-credentials.txt").read_text() == f"alice\n{alice[1]}\n"
    assert (data / "demo-credentials.txt").stat().st_mode & 0o777 == 0o600
    team = Workspace.objects.get(slug="team")
    assert set(Membership.objects.filter(workspace=team).values_list("user__username", "role")) == \
        {("alice", "admin"), ("demo", "admin")}


def test_a_credentials_file_that_names_another_user_is_rewritten_for_this_one(data, no_bundled_problems):
    """The single file the bootstrap kept before: written by `--username alice`, then read back as demo's."""
    get_user_model().objects.create_user(username="demo", password="unknown-to-anyone")
    (data / "demo-credentials.txt").write_text("alice\nq7QBy6JdIiQU\n")
    user, password = bootstrap()
    assert user == "demo" and password != "q7QBy6JdIiQU"
    assert authenticate(username="demo", password=password) is not None
    assert (data / "demo-credentials.txt").read_text() == f"demo\n{password}\n"


def test_a_bootstrap_that_fails_leaves_the_credentials_file_as_it_was(data, monkeypatch):
    from kernellab.management.commands import kernellab_bootstrap

    def broken(workspace):
        raise RuntimeError("loading the bundled problems failed")

    monkeypatch.setattr(kernellab_bootstrap, "problem_load_bundled", broken)
    with pytest.raises(RuntimeError):
        call_command("kernellab_bootstrap", stdout=io.StringIO())
    assert not get_user_model().objects.exists()   # taken back
    assert not (data / "demo-credentials.txt").exists()


def test_the_password_is_printed_even_when_its_file_cannot_be_written(data, no_bundled_problems):
    (data / "demo-credentials.txt").mkdir()  # a folder where the file goes: os.replace refuses
    out = io.StringIO()
    with pytest.raises(CommandError, match=r"^Cannot write .*demo-credentials\.txt: .+; the password above is not "
                                           r"kept anywhere else\.$"):
        call_command("kernellab_bootstrap", stdout=out)
    password = re.search(r"Demo account: user demo  password (\S+)", out.getvalue()).group(1)
    assert authenticate(username="demo", password=password) is not None
    assert [p.name for p in data.iterdir()] == ["demo-credentials.txt"]  # no temporary file left
