"""The surrogate lab pages keep each workspace's datasets and reports to its members."""
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from kernellab.models import Membership, Role, Workspace
from search_engine.lab.datasets import read_dataset, write_dataset
from search_engine.lab.reports import save_report
from tests.lab.helpers import synthetic_rows

pytestmark = pytest.mark.django_db


@pytest.fixture
def other_engineer(django_user_model):
    other = Workspace.objects.create(name="Other team", slug="other")
    user = django_user_model.objects.create_user(username="other-engineer", password="pw-other-123")
    Membership.objects.create(workspace=other, user=user, role=Role.ENGINEER)
    return user


def _jsonl(rows: list[dict], name: str = "mine.jsonl") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, "".join(json.dumps(r) + "\n" for r in rows).encode())


def _upload(client, user, rows, **fields):
    client.force_login(user)
    return client.post("/lab/datasets/upload", {"file": _jsonl(rows), "name": "shared-name", **fields}, follow=True)


def _team_report(data_dir) -> str:
    rows = synthetic_rows({"a": [0.5, 1.5]})
    return save_report(data_dir / "reports" / "team", {
        "title": "Team secret report", "created_at": "2026-12-01T00:00:00+00:00",
        "surrogate": {"id": "roofline@1"}, "dataset": {"name": "team-rows", "fingerprint": "f"},
        "evaluation": {"rows": len(rows), "answered": 0, "metrics": {}}})


def test_an_engineer_imports_a_dataset_that_their_team_sees(client, members, data_dir):
    response = _upload(client, members["engineer"], synthetic_rows({"a": [0.5, 1.5, 3.0]}))
    assert "Imported 3 comparison rows as &#x27;shared-name&#x27; in Team." in response.content.decode()
    assert len(read_dataset(data_dir / "datasets" / "team" / "shared-name.jsonl").rows) == 3
    client.force_login(members["viewer"])
    assert "shared-name" in client.get("/lab/").content.decode()


def test_another_workspace_neither_sees_nor_replaces_a_teams_dataset(client, members, other_engineer, data_dir):
    _upload(client, members["engineer"], synthetic_rows({"a": [0.5, 1.5, 3.0]}))
    team_file = data_dir / "datasets" / "team" / "shared-name.jsonl"
    before = team_file.read_bytes()

    client.force_login(other_engineer)
    assert "shared-name" not in client.get("/lab/").content.decode()
    response = _upload(client, other_engineer, synthetic_rows({"b": [2.0]}), replace="1", workspace="team")
    assert "Choose the workspace to import the dataset into." in response.content.decode()
    assert team_file.read_bytes() == before

    _upload(client, other_engineer, synthetic_rows({"b": [2.0]}), replace="1")
    assert team_file.read_bytes() == before
    assert len(read_dataset(data_dir / "datasets" / "other" / "shared-name.jsonl").rows) == 1


def test_a_viewer_is_told_that_importing_needs_the_engineer_role(client, members, data_dir):
    response = _upload(client, members["viewer"], synthetic_rows({"a": [1.5]}))
    assert "Importing a dataset needs the engineer role in a workspace." in response.content.decode()
    assert not (data_dir / "datasets" / "team").exists()


def test_another_workspace_cannot_list_open_or_compare_a_teams_report(client, members, other_engineer, data_dir):
    report_id = _team_report(data_dir)
    client.force_login(members["viewer"])
    assert "Team secret report" in client.get("/lab/reports/").content.decode()

    client.force_login(other_engineer)
    for page in ("/lab/", "/lab/reports/", "/lab/compare"):
        assert "Team secret report" not in client.get(page).content.decode()
    assert client.get(f"/lab/reports/{report_id}/").status_code == 404
    assert client.get(f"/lab/compare?a={report_id}&b={report_id}").status_code == 404


def test_an_outsider_sees_no_dataset_and_no_report(client, members, data_dir):
    write_dataset(data_dir / "datasets" / "team" / "team-rows.jsonl", synthetic_rows({"a": [1.5]}))
    _team_report(data_dir)
    client.force_login(members["outsider"])
    page = client.get("/lab/").content.decode()
    assert "team-rows" not in page and "Team secret report" not in page
    assert "Import a dataset" not in page


def test_an_engineer_elsewhere_who_only_views_a_team_cannot_import_into_it(client, members, other_engineer, data_dir):
    Membership.objects.create(workspace=Workspace.objects.get(slug="other"), user=members["viewer"], role=Role.ENGINEER)
    response = _upload(client, members["viewer"], synthetic_rows({"a": [1.5]}), workspace="team")
    assert "You need the engineer role or above to upload or change problems and datasets in Team; you are a viewer." in response.content.decode()
    assert not (data_dir / "datasets" / "team").exists()
