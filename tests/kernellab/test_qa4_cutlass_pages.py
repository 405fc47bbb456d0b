"""QA 4, CUTLASS search: a header of megabytes is shown a part at a time; `manage.py cutlass_search`
refuses a limit below 1 and a query without words, and says first that the index is not built."""
from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.urls import reverse

from gpu_runner.cutlass_headers import cutlass_source_root
from gpu_runner.cutlass_index import build_index, indexed_files
from kernellab.views.cutlass import FILE_WINDOW

needs_cutlass = pytest.mark.skipif(cutlass_source_root() is None, reason="the nvidia-cutlass wheel is not installed")


@pytest.fixture
def signed_in(client, settings, tmp_path, db):
    settings.DATA_DIR = tmp_path
    client.force_login(get_user_model().objects.create_user("reader", password="pw"))
    return client


def _largest_header() -> tuple[str, int, int]:
    """(path, lines, bytes) of the largest file the page may show."""
    root = cutlass_source_root()
    path = max(indexed_files(root), key=lambda p: p.stat().st_size)
    text = path.read_text(encoding="utf-8", errors="replace")
    return path.relative_to(root).as_posix(), len(text.rstrip("\n").split("\n")), len(text.encode())


@needs_cutlass
def test_a_large_header_is_shown_a_part_at_a_time_around_the_line(signed_in):
    path, lines, size = _largest_header()
    assert lines > 3 * FILE_WINDOW, "the wheel's largest header is expected to need several parts"
    line = lines // 2
    page = signed_in.get(reverse("cutlass-file"), {"path": path, "line": str(line)}).content.decode()
    assert len(page) < 2_000_000
    first, last = line - FILE_WINDOW // 2, line - FILE_WINDOW // 2 + FILE_WINDOW - 1
    assert (f"{lines:,} lines, {size / 1e6:.1f} MB. Lines {first:,}–{last:,} are shown; the file is shown "
            f"{FILE_WINDOW:,} lines at a time.") in page
    # The marked line is in the part, numbered as in the file and highlighted; nothing outside the part is.
    assert re.search(rf'id="L-{line}" name="L-{line}"></a><span class="hll">', page)
    assert f'id="L-{first}"' in page and f'id="L-{last}"' in page
    assert f'id="L-{first - 1}"' not in page and f'id="L-{last + 1}"' not in page
    assert (f'start={first - FILE_WINDOW}" rel="prev">‹ Lines {first - FILE_WINDOW:,}–{first - 1:,}</a>') in page
    assert f'start={last + 1}" rel="next">Lines {last + 1:,}–{last + FILE_WINDOW:,} ›</a>' in page

    # The next part, as its link asks for it, keeping the marked line in the links.
    after = signed_in.get(reverse("cutlass-file"), {"path": path, "line": str(line), "start": str(last + 1)})
    text = after.content.decode()
    assert f"Lines {last + 1:,}–{last + FILE_WINDOW:,} are shown" in text and 'class="hll"' not in text
    top = signed_in.get(reverse("cutlass-file"), {"path": path}).content.decode()
    assert f"Lines 1–{FILE_WINDOW:,} are shown" in top and 'rel="prev"' not in top and 'rel="next"' in top


@needs_cutlass
def test_a_small_header_is_shown_whole_with_its_size(signed_in):
    page = signed_in.get(reverse("cutlass-file"), {"path": "include/cute/tensor.hpp", "line": "3"}).content.decode()
    text = (cutlass_source_root() / "include/cute/tensor.hpp").read_text()
    lines = len(text.rstrip("\n").split("\n"))
    assert re.search(rf"<p class=\"muted\">{lines:,} lines, [\d.]+ (?:kB|bytes)\.</p>", page)
    assert 'rel="next"' not in page and 'id="L-3" name="L-3"></a><span class="hll">' in page


def _small_index(data_dir):
    root = data_dir / "wheel"
    (root / "include" / "cute").mkdir(parents=True)
    (root / "include" / "cute" / "tiled_copy.hpp").write_text("struct TiledCopy {};\nauto make_tiled_copy();\n")
    build_index(root, data_dir / "cutlass" / "index.sqlite3", version="test")


@pytest.mark.parametrize("limit", ["0", "-1"])
def test_the_command_refuses_a_limit_below_one(signed_in, settings, limit):
    _small_index(settings.DATA_DIR)
    with pytest.raises(CommandError, match=rf"argument --limit: must be 1 or more \(how many matches to print\), "
                                          rf"not {limit}\."):
        call_command("cutlass_search", "tiled", "copy", "--limit", limit)


def test_a_query_without_words_is_said_to_have_none_after_the_missing_index(signed_in, settings, capsys):
    with pytest.raises(CommandError, match=r"^The CUTLASS index has not been built yet \(run manage.py "
                                          r"cutlass_index\)\.$"):
        call_command("cutlass_search", "::")
    _small_index(settings.DATA_DIR)
    with pytest.raises(CommandError) as refused:
        call_command("cutlass_search", ":: ,,")
    assert str(refused.value) == ("The query ':: ,,' has no words to search for: give words or an identifier, "
                                  "such as tiled copy or local_tile.")
    call_command("cutlass_search", "tiled", "copy", "--limit", "1")
    assert capsys.readouterr().out.startswith("include/cute/tiled_copy.hpp:")
    page = signed_in.get(reverse("cutlass-search"), {"q": "::"}).content.decode()
    assert "“::” has no words to search for" in page and "Nothing in the headers" not in page
