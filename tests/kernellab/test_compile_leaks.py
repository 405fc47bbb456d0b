"""No server file leaves through the compiler: every smuggled include is refused on the upload page and
in the node panel's hand-written child form, and the file's text never appears in the answer."""
from __future__ import annotations

import pytest
from django.urls import reverse

from kernellab.models import Node, Problem
from tests.gpu_runner.test_directives import SECRET, attacks, secret_file
from tests.samples import SIMPLE_REFERENCE, SIMPLE_SPEC

pytestmark = pytest.mark.django_db

NAMES = list(attacks("/etc/passwd"))


@pytest.mark.parametrize("name", NAMES)
def test_an_upload_that_includes_a_server_file_is_refused_without_quoting_it(client, members, tmp_path, name):
    source = attacks(secret_file(tmp_path), SIMPLE_REFERENCE)[name]
    client.force_login(members["engineer"])
    response = client.post(reverse("problem-upload", args=["team"]),
                           {"spec_toml": SIMPLE_SPEC, "reference_source": source})
    body = response.content.decode()
    assert SECRET not in body
    assert "reference.cu" in body and ("include" in body or "#import" in body)
    assert not Problem.objects.filter(name="vector_scale").exists()


@pytest.mark.parametrize("name", NAMES)
def test_a_hand_written_child_that_includes_a_server_file_is_refused_without_quoting_it(client, members, node,
                                                                                        tmp_path, name):
    source = attacks(secret_file(tmp_path), SIMPLE_REFERENCE)[name]
    client.force_login(members["engineer"])
    before = Node.objects.filter(run=node.run).count()
    response = client.post(reverse("node-child", args=[node.run_id, node.key]), {"source": source},
                           HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert SECRET not in body
    assert "allow" in body and "line" in body
    assert Node.objects.filter(run=node.run).count() == before


def test_the_etc_passwd_and_secret_key_never_show_on_the_upload_page(client, members, settings):
    client.force_login(members["engineer"])
    for path in ("/etc/passwd", str(settings.DATA_DIR / "secret_key")):
        source = attacks(path, SIMPLE_REFERENCE)["in a function body"]
        body = client.post(reverse("problem-upload", args=["team"]),
                           {"spec_toml": SIMPLE_SPEC, "reference_source": source}).content.decode()
        assert "root:x:0:0" not in body and "quoted path" in body
