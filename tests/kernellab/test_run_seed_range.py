"""QA bug 3: a run's seed is 0..2**31 - 1 (services.runs.SEED_MAX); a larger one is refused with a sentence on the
form, where 99999999999999999999 used to overflow SQLite's INTEGER (a 500) and 2**31 or 2**32 started a run."""
import pytest
from django.urls import reverse

from kernellab.models import SearchRun
from kernellab.services import ServiceError
from kernellab.services.runs import SEED_MAX, run_create

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedded_setup")]


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr("kernellab.tasks.search_run_advance.apply_async", lambda *a, **k: None)
    monkeypatch.setattr("kernellab.tasks.verification_execute.apply_async", lambda *a, **k: None)


def _form_defaults(client, problem) -> dict:
    form = client.get(reverse("run-new", args=[problem.pk])).context["form"]
    data = {name: field.initial for name, field in form.fields.items() if field.initial is not None}
    data["start"] = "on"
    return data


def test_the_seed_range_is_what_a_positive_integer_column_holds_everywhere():
    assert SEED_MAX == 2**31 - 1
    assert SearchRun._meta.get_field("seed").get_internal_type() == "PositiveIntegerField"


@pytest.mark.parametrize("seed", ["99999999999999999999", str(2**31), str(2**32)])
def test_the_form_refuses_a_seed_past_the_range_in_a_sentence(client, members, recorded, seed):
    client.force_login(members["engineer"])
    data = _form_defaults(client, recorded) | {"seed": seed}
    response = client.post(reverse("run-new", args=[recorded.pk]), data)
    assert response.status_code == 400
    body = response.content.decode()
    # The service's sentence; once RunCreateForm.seed has max_value=SEED_MAX, the form's own ("... less than or equal
    # to 2147483647") comes first.
    assert "seed must be a whole number from 0 to 2,147,483,647" in body or "less than or equal to 2147483647" in body
    assert not SearchRun.objects.exists()


@pytest.mark.parametrize("seed", [0, SEED_MAX])
def test_the_ends_of_the_range_start_a_run(client, members, recorded, seed):
    client.force_login(members["engineer"])
    data = _form_defaults(client, recorded) | {"seed": str(seed)}
    response = client.post(reverse("run-new", args=[recorded.pk]), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert SearchRun.objects.get().seed == seed


@pytest.mark.parametrize("seed", [-1, 2**31, 10**20, pytest.param(10**5000, id="10**5000"), 1.5, "7", None, True])
def test_the_service_refuses_a_seed_that_is_not_one(members, problem, seed):
    with pytest.raises(ServiceError, match="seed must be a whole number"):
        run_create(problem=problem, user=members["engineer"], generator="transform", seed=seed, start=False)
    assert not SearchRun.objects.exists()
