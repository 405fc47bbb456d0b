from __future__ import annotations

import pytest

from search_engine.experts import energy
from tests.search_engine.experts import captured


def notes(name, **kw):
    return captured.by(captured.notes_for(name, **kw), "energy")


def test_it_reports_joules_per_call_per_byte_and_per_flop():
    (note,) = notes("vadd__large")
    assert note.severity == "info"
    result = captured.measurement("vadd__large")
    assert note.evidence["j_per_call"] == result["energy"]["j_per_call"]
    assert note.evidence["pj_per_byte"] == pytest.approx(result["energy"]["j_per_call"] / (12 * 2**26) * 1e12,
                                                         rel=1e-3)
    assert note.evidence["pj_per_flop"] > 0


def test_a_reading_above_the_power_limit_is_flagged_as_unreliable():
    (note,) = notes("rmsnorm__reference")  # 905 W from a 0.4 s NVML window, limit 700 W
    assert note.severity == "warning"
    assert note.evidence["mean_w"] > energy.OVER_LIMIT * note.evidence["power_limit_w"]
    assert "longer window" in note.advice


def test_a_kernel_near_the_power_limit_is_warned():
    (note,) = notes("softmax__block_cached_vec4")  # 682 W of 700
    assert note.severity == "warning" and "limit" in note.finding


def test_a_mostly_idle_chip_is_mentioned():
    (note,) = notes("vadd__tiny")  # 136 W
    assert note.severity == "info" and "idles" in note.finding


def test_the_power_checks_need_a_power_limit():
    result = captured.measurement("rmsnorm__reference")
    result["hardware"].pop("power_limit_w")
    (note,) = notes("rmsnorm__reference", result=result)
    assert note.severity == "info"


def test_no_energy_reading_no_note():
    result = captured.measurement("vadd__large")
    result["energy"] = None
    assert not notes("vadd__large", result=result)
