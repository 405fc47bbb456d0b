from __future__ import annotations

from search_engine.experts import ExpertNote, notes_for_prompt, raw_metrics_for_prompt
from tests.search_engine.experts import captured


def test_the_notes_text_puts_the_roofline_first_and_critical_before_info():
    text = notes_for_prompt(captured.notes_for("local__array"))
    lines = [ln for ln in text.splitlines() if ln[:1].isdigit()]
    assert lines[0].startswith("1. [critical] roofline:")
    assert lines.index(next(ln for ln in lines if "[info]" in ln)) == len(lines) - 1
    assert "Advice:" in text and "Evidence:" in text
    assert "spills" in text and "local memory" in text


def test_info_notes_can_be_left_out_and_no_notes_give_no_text():
    text = notes_for_prompt(captured.notes_for("reduce_sum__atomic_vec4"), include_info=False)
    assert text == ""
    assert notes_for_prompt([]) == ""


def test_notes_stored_as_dicts_read_the_same():
    notes = captured.notes_for("transpose__reference")
    assert notes_for_prompt([n.to_dict() for n in notes]) == notes_for_prompt(notes)
    assert ExpertNote.from_dict(notes[1].to_dict()) == notes[1]


def test_the_raw_text_has_the_numbers_and_no_interpretation():
    result = captured.measurement("transpose__reference")
    text = raw_metrics_for_prompt(result)
    assert "median 1.001 ms" in text
    assert "registers 12" in text and "LDG.E.CONSTANT 1" in text
    assert "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct = 12.5" in text
    assert "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed = 11.84" in text
    assert "drain" in text  # the top stall reason
    assert "Advice" not in text and "uncoalesced" not in text


def test_an_invalid_severity_is_refused():
    try:
        ExpertNote("x", "severe", "f.", {}, "a.")
    except ValueError as exc:
        assert "info, warning, critical" in str(exc)
    else:
        raise AssertionError("accepted an unknown severity")
