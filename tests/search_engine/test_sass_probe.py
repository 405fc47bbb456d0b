"""The SASS-mix probe's features (benchmarks/probes/cpu_2026-12-03/sass_and_exploration.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from search_engine.surrogates import features, learned
from search_engine.surrogates.base import ForecastRequest
from tests.scripts import loaded_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "probes" / "cpu_2026-12-03" / "sass_and_exploration.py"


@pytest.fixture(scope="module")
def probe():
    with loaded_script(_PATH, "sass_probe_under_test") as module:
        yield module


def test_the_mix_counts_shares_and_load_widths(probe):
    sass = {"HMMA.1688.F32.TF32": 6, "FFMA": 2, "LDG.E.128": 3, "LDG.E": 1, "LDGSTS.E.BYPASS.128": 4,
            "STG.E.64": 2, "REDG.E.ADD.F32.FTZ.RN.STRONG.GPU": 1, "BAR.SYNC.DEFER_BLOCKING": 1}
    mix = dict(zip(probe.SASS_NAMES, probe.sass_mix({"sass": sass})))
    total = sum(sass.values())
    assert mix["sass_log_instructions"] == pytest.approx(math.log1p(total))
    assert mix["sass_share_tensor"] == pytest.approx(6 / total)
    assert mix["sass_share_global_load"] == pytest.approx(4 / total)  # LDGSTS is an async copy, not a load
    assert mix["sass_share_async_copy"] == pytest.approx(4 / total)
    assert mix["sass_share_global_atomic"] == pytest.approx(1 / total)  # REDG, the reduction without a return
    assert mix["sass_share_barrier"] == pytest.approx(1 / total)
    assert mix["sass_global_load_bytes"] == pytest.approx((3 * 16 + 4) / 4)
    assert mix["sass_global_store_bytes"] == 8
    assert all(math.isnan(v) for v in probe.sass_mix({"registers": 32}))


def test_the_features_grow_only_inside_the_block(probe):
    before = len(features.feature_names())
    request = ForecastRequest(reference={"source": "__global__ void k() {}", "launch": []},
                              candidate={"source": "__global__ void k() {}", "launch": []}, hardware={},
                              problem={}, compiler_facts={"sass": {"FFMA": 3, "LDG.E.128": 1}},
                              reference_compiler_facts={"sass": {"FFMA": 1, "LDG.E": 1}})
    with probe.sass_features():
        grown = len(features.feature_names())
        assert grown == before + 2 * len(probe.SASS_NAMES) == len(learned.feature_names())
        row = features.features_matrix([request])[0]
        assert len(row) == grown
        delta = dict(zip(probe.SASS_NAMES, row[-len(probe.SASS_NAMES):]))
        assert delta["sass_global_load_bytes"] == pytest.approx(12.0)
    assert len(features.feature_names()) == before == len(learned.feature_names())
