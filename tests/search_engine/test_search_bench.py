"""The search benchmark's verdict arithmetic (the benchmark itself runs from benchmarks/search_bench.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "search_bench.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("search_bench_under_test", _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def family(sur, allm, **kt):
    return {"puct_surrogate": {"values": sur}, "puct_measure_all": {"values": allm},
            **{f"kt_{name}": {"values": values} for name, values in kt.items()}}


def test_a_clear_win_is_certain_and_a_tie_is_not(bench):
    search = {"won": family([1] * 10, [10] * 10, random_sample=[5] * 10),
              "tied": family([4] * 10, [4] * 10, random_sample=[4] * 10),
              "lost": family([9, 10, 11] * 3 + [None], [3] * 10, random_sample=[2] * 10)}
    out = bench.bootstrap_verdicts(search, ["random_sample"], "median", draws=300)
    won, tied, lost = (out["families"][k] for k in ("won", "tied", "lost"))
    assert won["measure_all_over_surrogate_95"] == [10.0, 10.0]
    assert won["p_three_times"] == 1.0 and won["p_fewer_than_best_kt"] == 1.0
    assert tied["p_three_times"] == 0.0 and tied["p_fewer_than_best_kt"] == 0.0  # equal is not fewer
    assert lost["p_three_times"] == 0.0 and lost["measure_all_over_surrogate_95"][1] < 1
    assert out["most"] == 2 and out["p_three_times_on_most"] == 0.0


def test_noisy_seeds_give_a_probability_between_the_extremes(bench):
    search = {name: family([1, 1, 1, 2, 2, 2, 5, 6, 2, 2], [2, 3, 4, 5, 6, 7, 8, 9, 3, 4], ga=[3] * 10)
              for name in ("a", "b", "c")}
    for statistic in ("median", "mean"):
        out = bench.bootstrap_verdicts(search, ["ga"], statistic, draws=500)
        p = out["families"]["a"]["p_three_times"]
        assert 0.05 < p < 0.95
        low, high = out["families"]["a"]["measure_all_over_surrogate_95"]
        assert low < 3 < high
        # "most" of three families is two: never more likely than one family alone reaching it
        assert 0 < out["p_three_times_on_most"] <= max(f["p_three_times"] for f in out["families"].values()) + 0.1


def test_the_same_seed_gives_the_same_probabilities(bench):
    search = {"x": family([1, 2, 3, 4], [4, 5, 6, 9], pso=[2, 3, 4, 5])}
    assert bench.bootstrap_verdicts(search, ["pso"], "mean", draws=200) == \
        bench.bootstrap_verdicts(search, ["pso"], "mean", draws=200)
