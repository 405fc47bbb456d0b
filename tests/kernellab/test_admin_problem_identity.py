"""A stored problem's name, spec and sources cannot be changed in Django admin: its recorded measurements
(<root>/<name>/records/), its runs and the loading of the bundled problems are keyed by them. Renaming a bundled
problem there cut it off from its recording, and the next bootstrap added it again beside the renamed one."""
import pytest
from django.urls import reverse

from kernellab.models import Problem
from kernellab.services.problems import problem_load_bundled

pytestmark = pytest.mark.django_db


def test_admin_changes_a_problems_title_but_not_its_name_or_spec(client, workspace, django_user_model):
    operator = django_user_model.objects.create_superuser(username="operator", password="pw-operator-123")
    loaded = problem_load_bundled(workspace=workspace)
    gemv = next(p for p in loaded if p.name == "gemv")
    client.force_login(operator)
    page = client.get(reverse("admin:kernellab_problem_change", args=[gemv.pk]))
    assert page.status_code == 200
    fields = page.context["adminform"].form.fields
    assert "title" in fields and "description" in fields
    assert not {"name", "workspace", "spec_toml", "family_source", "reference", "bundled"} & set(fields)
    response = client.post(reverse("admin:kernellab_problem_change", args=[gemv.pk]),
                           {"title": "Matrix-vector product", "description": "renamed in admin",
                            "name": "gemv-renamed", "spec_toml": "name = 'x'"})
    assert response.status_code == 302
    gemv.refresh_from_db()
    assert (gemv.title, gemv.name) == ("Matrix-vector product", "gemv") and "gemv" in gemv.spec_toml
    assert problem_load_bundled(workspace=workspace) == []  # nothing added again
    assert Problem.objects.filter(workspace=workspace, name__startswith="gemv").count() == 1


def test_admin_still_adds_a_problem_with_every_field(client, django_user_model):
    operator = django_user_model.objects.create_superuser(username="operator", password="pw-operator-123")
    client.force_login(operator)
    fields = client.get(reverse("admin:kernellab_problem_add")).context["adminform"].form.fields
    assert {"name", "workspace", "spec_toml"} <= set(fields)
