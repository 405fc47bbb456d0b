"""The CUTLASS search page: ranked snippets linking to the whole file, shown read-only; nothing outside."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import reverse

from gpu_runner.cutlass_headers import cutlass_source_root

pytestmark = [pytest.mark.django_db,
              pytest.mark.skipif(cutlass_source_root() is None, reason="the nvidia-cutlass wheel is not installed")]


@pytest.fixture
def signed_in(client, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    client.force_login(get_user_model().objects.create_user("reader", password="pw"))
    return client


def test_a_query_before_the_index_is_built_says_how_to_build_it(signed_in):
    page = signed_in.get(reverse("cutlass-search"), {"q": "tiled copy"}).content.decode()
    assert "manage.py cutlass_index" in page


def test_a_query_shows_ranked_snippets_that_link_to_the_highlighted_file(signed_in, capsys):
    call_command("cutlass_index")
    page = signed_in.get(reverse("cutlass-search"), {"q": "tiled copy"}).content.decode()
    assert "include/cute/atom/copy_atom.hpp:" in page
    assert "path=include/cute/atom/copy_atom.hpp&amp;line=" in page
    call_command("cutlass_search", "tiled", "copy", "--limit", "3")
    assert "include/cute/atom/copy_atom.hpp:" in capsys.readouterr().out
    shown = signed_in.get(reverse("cutlass-file"), {"path": "include/cute/atom/copy_atom.hpp", "line": "40"})
    assert shown.status_code == 200 and 'class="hl' in shown.content.decode() and "TiledCopy" in shown.content.decode()


@pytest.mark.parametrize("path", ["../../../../../../etc/passwd", "/etc/passwd", "include/../../../../pyvenv.cfg",
                                  "include/cute/../../../cutlass_library/library.py"])
def test_a_path_outside_the_headers_and_examples_is_refused(signed_in, path):
    response = signed_in.get(reverse("cutlass-file"), {"path": path})
    assert response.status_code == 403
    assert "root:" not in response.content.decode()


def test_the_pages_need_a_signed_in_user(client):
    assert client.get(reverse("cutlass-search"), {"q": "copy"}).status_code == 302
    assert client.get(reverse("cutlass-file"), {"path": "include/cute/tensor.hpp"}).status_code == 302


def test_every_page_links_to_the_search(signed_in):
    assert f'href="{reverse("cutlass-search")}"' in signed_in.get(reverse("discoveries")).content.decode()
