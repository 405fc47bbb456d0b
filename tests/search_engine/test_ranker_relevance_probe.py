"""The ranker-relevance probe (benchmarks/probes/cpu_2026-12-06/ranker_relevance.py) keeps away from the test families
and reads the eleven validation families by default."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scripts import loaded_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "probes" / "cpu_2026-12-06" / "ranker_relevance.py"


@pytest.fixture(scope="module")
def probe():
    with loaded_script(_PATH, "ranker_relevance_probe_under_test") as module:
        yield module


def test_the_default_families_are_the_eleven_validation_families_and_a_test_family_is_refused(probe, capsys):
    families = probe.ELEVEN.split(",")
    assert len(families) == 11 and not set(families) & probe.TEST
    assert probe.main(["--families", "gelu,softmax"]) == 2
    assert "softmax" in capsys.readouterr().err


def test_an_unknown_relevance_is_refused_by_name(probe, capsys):
    assert probe.main(["--relevances", "quantile,rank"]) == 2
    assert "rank" in capsys.readouterr().err
