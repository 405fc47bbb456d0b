"""benchmarks/surrogate_lopo.py checks its arguments before any family is read or trained (QA round 4): an --out that
is a folder failed after the whole run, and --measured abc was a traceback."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.scripts import loaded_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "surrogate_lopo.py"


@pytest.fixture
def lopo(monkeypatch):
    with loaded_script(_PATH, "qa4_surrogate_lopo_under_test") as module:
        monkeypatch.setattr(module, "recorded_datasets", lambda records_dir=None: pytest.fail(
            "the families were read before the arguments were checked"))
        yield module


def test_an_out_that_is_a_folder_is_refused_first(lopo, tmp_path, capsys):
    with pytest.raises(SystemExit) as raised:
        lopo.main(["--families", "gelu", "--out", str(tmp_path)])
    assert raised.value.code == 2
    assert f"error: --out {tmp_path} is a folder; give a file name (.json)" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("measured", ["abc", "1,x", "0", "1,-2", "1.5"])
def test_measured_counts_that_are_not_whole_numbers_of_at_least_one_are_refused_in_a_sentence(lopo, tmp_path, capsys,
                                                                                          measured):
    with pytest.raises(SystemExit) as raised:
        lopo.main(["--measured", measured, "--out", str(tmp_path / "out.json")])
    assert raised.value.code == 2
    error = capsys.readouterr().err
    assert (f"error: --measured takes whole numbers of at least 1 separated by commas (such as 1,2,4), "
            f"not {measured!r}.") in error
    assert "Traceback" not in error


def test_measured_counts_read_as_before(lopo):
    assert lopo.measured_counts("1,2,4") == (1, 2, 4)
    assert lopo.measured_counts("2,1,2") == (2, 1)   # each once, in the order given
    assert lopo.measured_counts("") == ()            # the cold forecasts alone
