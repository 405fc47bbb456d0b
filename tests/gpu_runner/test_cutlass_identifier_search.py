"""The CUTLASS search (QA round b): a query that is an identifier finds the code that spells it, its
definition first, and no window that merely holds its words; queries of words work as before."""
from __future__ import annotations

import re

import pytest

from gpu_runner.cutlass_headers import cutlass_source_root, cutlass_version
from gpu_runner.cutlass_index import build_index, search_index

# A file that says "local" and "tile" often, never local_tile: the words search put such a file first.
DISTRACTOR = "\n".join(
    ["// local tile of the local tile scheduler: a tile is local to a CTA; local tiles tile the local grid"] * 12
    + ["struct TileScheduler { int local; int tile; }; // local tile local tile local tile"] * 12)
DEFINITION = """#pragma once
namespace cute {
template <class Tensor, class Tiler, class Coord>
CUTE_HOST_DEVICE
auto
local_tile(Tensor&& tensor, Tiler const& tiler, Coord const& coord)
{
  return inner_partition(tensor, tiler, coord);
}

struct SM90_TMA_LOAD
{
  static void copy();
};

struct SM90_TMA_LOAD_MULTICAST
{
  static void copy();
};
}
"""
USE = """// an example
#include <cute/tensor.hpp>
using namespace cute;
void f() {
  auto gA = local_tile(mA, cta_tiler, cta_coord);
  auto gB = cute::local_tile(mB, cta_tiler, cta_coord);
  auto atom = SM90_TMA_LOAD_MULTICAST{};
}
"""


@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("cutlass")
    (root / "include" / "cute").mkdir(parents=True)
    (root / "examples" / "fmha").mkdir(parents=True)
    (root / "include" / "cute" / "tensor_impl.hpp").write_text(DEFINITION)
    (root / "examples" / "fmha" / "sm100_fmha_local_tile_scheduler.hpp").write_text(DISTRACTOR)
    (root / "examples" / "fmha" / "use.cu").write_text(USE)
    database = root / "index.sqlite3"
    build_index(root, database)
    return database


def spells(hit, identifier: str) -> bool:
    line = hit.snippet.splitlines()[hit.line - hit.first_line]
    return re.search(rf"(?<!\w){re.escape(identifier)}(?!\w)", line) is not None


def test_an_identifier_finds_only_the_code_that_spells_it_its_definition_first(small_index):
    hits = search_index(small_index, "local_tile")
    assert [hit.path for hit in hits] == ["include/cute/tensor_impl.hpp", "examples/fmha/use.cu"]
    assert hits[0].line == 6 and all(spells(hit, "local_tile") for hit in hits)
    qualified = search_index(small_index, "cute::local_tile")
    assert [hit.path for hit in qualified] == ["include/cute/tensor_impl.hpp", "examples/fmha/use.cu"]
    assert qualified[1].line == 6   # the line that spells cute::local_tile


def test_a_whole_identifier_comes_before_a_longer_one_that_holds_it(small_index):
    hits = search_index(small_index, "SM90_TMA_LOAD")
    assert hits[0].path == "include/cute/tensor_impl.hpp" and hits[0].line == 11
    assert [hit.path for hit in hits] == ["include/cute/tensor_impl.hpp", "examples/fmha/use.cu"]
    assert "SM90_TMA_LOAD_MULTICAST" in hits[1].snippet


def test_words_and_an_identifier_nothing_spells_still_search_the_words(small_index):
    assert search_index(small_index, "local tile")[0].path == "examples/fmha/sm100_fmha_local_tile_scheduler.hpp"
    assert search_index(small_index, "local_tile_scheduler_xyz")   # no spelling: the words search answers
    assert search_index(small_index, "zzqx qqzzy") == []


@pytest.mark.skipif(cutlass_source_root() is None, reason="the nvidia-cutlass wheel is not installed")
@pytest.mark.parametrize("identifier, defined_in", [
    ("local_tile", "include/cute/tensor_impl.hpp"),
    ("SM90_TMA_LOAD", "include/cute/arch/copy_sm90_tma.hpp"),
    ("partition_fragment_C", "include/cute/atom/mma_atom.hpp"),
])
def test_in_the_real_headers_every_hit_spells_the_identifier_and_the_first_defines_it(real_index, identifier,
                                                                                     defined_in):
    hits = search_index(real_index, identifier, limit=10)
    assert hits and hits[0].path == defined_in, [(hit.path, hit.line) for hit in hits]
    assert all(spells(hit, identifier) for hit in hits), [(hit.path, hit.line) for hit in hits]


@pytest.fixture(scope="module")
def real_index(tmp_path_factory):
    database = tmp_path_factory.mktemp("cutlass-real") / "index.sqlite3"
    build_index(cutlass_source_root(), database, version=cutlass_version() or "")
    return database
