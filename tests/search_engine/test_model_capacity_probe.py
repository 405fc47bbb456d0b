"""The model-capacity probe (benchmarks/probes/cpu_2026-12-05/model_capacity.py) keeps away from the test families,
refuses a configuration it does not know, and its configurations reach the classifier."""

from __future__ import annotations

from pathlib import Path

import pytest

from search_engine.surrogates.learned import LearnedSurrogate
from tests.scripts import loaded_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "probes" / "cpu_2026-12-05" / "model_capacity.py"


@pytest.fixture(scope="module")
def probe():
    with loaded_script(_PATH, "model_capacity_probe_under_test") as module:
        yield module


def test_a_test_family_and_an_unknown_configuration_are_refused(probe, capsys):
    assert not set(probe.NINE.split(",")) & probe.TEST
    assert probe.main(["--families", "gelu,softmax"]) == 2
    assert "softmax" in capsys.readouterr().err
    assert probe.main(["--families", "gelu", "--configs", "today,huge"]) == 2
    assert "huge" in capsys.readouterr().err


def test_today_is_the_default_classifier_and_every_other_configuration_changes_it(probe):
    default = LearnedSurrogate().params
    assert probe.CONFIGS["today"] == {}
    for name, change in probe.CONFIGS.items():
        params = LearnedSurrogate(**change).params
        assert set(change) <= set(params), name
        assert (params == default) == (name == "today"), name
    # sklearn's own default for the leaves' minimum rows: adding the keyword left today's model as it was
    assert default["min_samples_leaf"] == 20
