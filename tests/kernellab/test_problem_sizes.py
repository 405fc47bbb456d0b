"""An uploaded problem whose buffers would not fit the per-problem memory cap is refused with a sentence."""
import pytest
from django.urls import reverse

from kernellab.models import Problem
from tests.samples import SIMPLE_REFERENCE, SIMPLE_SPEC

pytestmark = pytest.mark.django_db


def _upload(client, user, spec_toml: str):
    client.force_login(user)
    return client.post(reverse("problem-upload", args=["team"]), {"spec_toml": spec_toml, "reference_source": SIMPLE_REFERENCE})


def test_a_terabyte_input_is_refused_naming_the_argument_its_bytes_and_the_cap(client, members, monkeypatch):
    monkeypatch.delenv("KERNELLAB_MAX_PROBLEM_BYTES", raising=False)
    response = _upload(client, members["engineer"], SIMPLE_SPEC.replace("N = 1048576", f"N = {2**38}"))
    body = response.content.decode()
    assert response.status_code == 400
    assert ("argument &#x27;x&#x27; needs 1099511627776 bytes (1 TiB) for size case &#x27;default&#x27;, more than "
            "the per-problem memory cap of 68719476736 bytes (64 GiB) (KERNELLAB_MAX_PROBLEM_BYTES)") in body
    assert not Problem.objects.exists()


def test_the_largest_int64_size_is_refused(client, members):
    response = _upload(client, members["engineer"], SIMPLE_SPEC.replace("N = 1048576", f"N = {2**63 - 1}"))
    assert response.status_code == 400
    assert "argument &#x27;x&#x27; needs 36893488147419103228 bytes" in response.content.decode()
    assert not Problem.objects.exists()


def test_a_temp_of_ten_to_the_460_elements_is_refused(client, members):
    huge_temp = SIMPLE_SPEC.replace("[[launch]]", '[[args]]\nname = "scratch"\nrole = "temp"\ndtype = "float32"\n'
                                                 f'shape = {["100000"] * 92}\n\n[[launch]]')  # 10^460 elements
    response = _upload(client, members["engineer"], huge_temp)
    body = response.content.decode()
    assert response.status_code == 400
    assert "argument &#x27;scratch&#x27; needs about 10^" in body and "more than the per-problem memory cap" in body
    assert not Problem.objects.exists()


def test_buffers_that_fit_alone_but_not_together_are_refused(client, members, monkeypatch):
    monkeypatch.setenv("KERNELLAB_MAX_PROBLEM_BYTES", "6MiB")
    response = _upload(client, members["engineer"], SIMPLE_SPEC)  # x and y are 4 MiB each
    body = response.content.decode()
    assert response.status_code == 400
    assert ("the arguments need 8388608 bytes (8 MiB) together for size case &#x27;default&#x27; (the largest, "
            "&#x27;x&#x27;, 4194304 bytes (4 MiB)), more than the per-problem memory cap of 6291456 bytes (6 MiB)") in body
    assert not Problem.objects.exists()


def test_a_problem_under_the_cap_passes_the_size_check(client, members, monkeypatch):
    monkeypatch.setenv("KERNELLAB_MAX_PROBLEM_BYTES", "8MiB")
    from kernellab.services.problems import problem_check

    checked = problem_check(spec_toml=SIMPLE_SPEC, reference_source=SIMPLE_REFERENCE, compile=False)
    assert checked.spec.name == "vector_scale"
