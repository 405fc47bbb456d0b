"""The search benchmark's verdict arithmetic and its baselines (the benchmark itself runs from
benchmarks/search_bench.py)."""

from __future__ import annotations

import itertools
import json
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from tests.scripts import loaded_script

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "search_bench.py"


@pytest.fixture(scope="module")
def bench():
    with loaded_script(_PATH, "search_bench_under_test") as module:
        yield module


BUDGET = 100


def family(sur, allm, **kt):
    """Summaries as the benchmark writes them: a missed run (None) already counts as the budget."""
    def summary(values):
        return {"values": [BUDGET if v is None else v for v in values]}
    return {"puct_surrogate": summary(sur), "puct_measure_all": summary(allm),
            **{f"kt_{name}": summary(values) for name, values in kt.items()}}


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


# ---- a small recorded family: 8 x 8 variants, one of them far ahead, a few that do not compile -----

def small_family(bench, *, vendor=None):
    knobs = {"A": list(range(8)), "B": list(range(8))}
    launch = [{"kernel": "k", "block": ["32"], "grid": ["1"]}]

    def render(point):
        return {"source": f"#define A {point['A']}\n#define B {point['B']}\n__global__ void k() {{}}\n", "launch": launch,
                "temps": [], "compile_options": [], "knobs": dict(point), "name": f"A={point['A']},B={point['B']}"}

    records = {}
    for a, b in itertools.product(range(8), range(8)):
        if (a + b) % 9 == 8:
            records[(a, b)] = {"knobs": {"A": a, "B": b}, "status": "failed-compile", "wall_s": 0.0}
        else:
            records[(a, b)] = {"knobs": {"A": a, "B": b}, "status": "ok", "wall_s": 0.5,
                               "speedup": 4.0 if (a, b) == (6, 3) else 1.0 + 0.01 * (a + b)}
    return bench.Dataset(name="small", knobs=knobs, records=records, render=render,
                         reference={"source": "__global__ void k() {}\n", "launch": launch, "temps": [],
                                    "compile_options": [], "knobs": None, "name": "reference"},
                         hardware={}, problem={"name": "small", "sizes": {}}, reference_ms=1.0, synthetic=True,
                         vendor=vendor)


def search_args(**changes):
    settings = dict(threshold=0.5, gpu_per_step=2, min_gpu_per_step=1, min_beat_prob=0.15, conformal=0.2,
                    online_weight=10.0, c=1.0, children=16, retrain_every=5, max_steps=400)
    return Namespace(**(settings | changes))


def test_a_run_that_misses_the_target_counts_as_the_budget_not_as_nothing(bench):
    summary = bench.summarise([2, None, 4], budget=50)
    assert summary["median"] == 4 and summary["mean"] == (2 + 50 + 4) / 3
    assert summary["values"] == [2, 50, 4] and summary["reached"] == 2 and summary["missed_runs"] == [1]
    # A surrogate that misses four runs of seven is no longer a clear 10x win over measure-all.
    often_missing = {"x": family([1, 1, 1, None, None, None, None], [10] * 7, ga=[5] * 7)}
    out = bench.bootstrap_verdicts(often_missing, ["ga"], "median", draws=300)
    assert out["families"]["x"]["p_three_times"] < 0.5
    assert out["families"]["x"]["p_fewer_than_best_kt"] < 0.5


def test_resampling_refuses_a_missed_run_that_was_not_given_the_budget(bench):
    search = {"x": {"puct_surrogate": {"values": [1, None]}, "puct_measure_all": {"values": [3, 3]}}}
    with pytest.raises(ValueError, match="budget"):
        bench.bootstrap_verdicts(search, [], "median", draws=10)


def test_random_and_measure_all_puct_measure_different_variants_first(bench):
    # The root's first expansion draws 16 random variants; before, "random" measured the very same ones.
    dataset = small_family(bench)
    for seed in range(3):
        measure_all = bench.run_puct(dataset, seed, None, True, search_args())
        random_first = [dataset.key(r["knobs"]) for r in bench.random_order(dataset, seed) if dataset.gpu_cost(r)]
        assert len(measure_all["order"]) >= 8
        assert measure_all["order"][:8] != random_first[:8]


def test_a_vendor_faster_than_every_variant_sets_the_target_and_every_run_then_costs_the_budget(bench):
    dataset = small_family(bench, vendor={"name": "vendor:lib", "speedup": 5.0, "source": "test"})
    assert dataset.target == pytest.approx(0.95 * 5.0)
    runs = [bench.run_random(dataset, seed) for seed in range(3)]
    assert all(run["measurements"] is None for run in runs)
    summary = bench.summarise_runs(runs, dataset.budget, compile_s=None)
    assert summary["median"] == dataset.budget == sum(1 for r in dataset.records.values() if r["status"] == "ok")
    assert small_family(bench).target == pytest.approx(0.95 * 4.0)


def test_a_validation_family_named_to_ignore_its_vendor_counts_its_variants_alone(bench):
    dataset = small_family(bench, vendor={"name": "vendor:lib", "speedup": 5.0, "source": "test"})
    dataset.vendor_in_target = False
    assert dataset.target == pytest.approx(0.95 * 4.0) and dataset.reachable
    order = [r for r in bench.random_order(dataset, 0) if dataset.gpu_cost(r)]
    hit = next(i for i, r in enumerate(order, 1) if r["knobs"] == {"A": 6, "B": 3})
    assert bench.run_random(dataset, 0)["measurements"] == hit


def test_ignoring_the_vendor_of_a_family_that_is_not_recorded_is_refused_with_its_name(bench):
    with pytest.raises(SystemExit, match="--ignore-vendor names no recorded family: nosuch"):
        bench.main(["--ignore-vendor", "nosuch", "--seeds", "1", "--out", "/dev/null"])


def test_wall_time_counts_every_compile_check_beside_the_measurements(bench):
    dataset = small_family(bench)
    order = [dataset.records[(1, 7)],  # does not compile
             dataset.records[(0, 0)], dataset.records[(6, 3)], dataset.records[(2, 2)]]
    run = bench.measurements_to_target(dataset, order) | {"cpu_s": 0.25}
    assert run["measurements"] == 2 and run["compile_checks"] == 3 and run["gpu_wall_s"] == 1.0
    summary = bench.summarise_runs([run], dataset.budget, compile_s=2.0)
    assert summary["estimated_wall_s"] == [3 * 2.0 + 1.0 + 0.25]


@pytest.mark.parametrize("strategy", ["bayes_opt", "greedy_ils", "genetic_algorithm"])
def test_a_kernel_tuner_strategy_gives_the_same_run_for_the_same_seed_and_stops_by_count(bench, strategy, tmp_path):
    pytest.importorskip("kernel_tuner")
    dataset = small_family(bench, vendor={"name": "vendor:lib", "speedup": 9.0, "source": "test"})  # unreachable
    cache = bench.kt_cache(dataset, tmp_path)
    configurations = len(json.loads(cache.read_text())["cache"])
    runs = [bench.run_kernel_tuner(dataset, strategy, 3, cache, configurations, lookups_per_configuration=20)
            for _ in range(2)]
    assert runs[0]["order"] == runs[1]["order"] and len(runs[0]["order"]) > 1
    assert runs[0] == runs[1] | {"cpu_s": runs[0]["cpu_s"]}
    assert runs[0]["lookups"] <= 20 * configurations + 64  # the cap, give or take the last batch asked


def test_a_constraint_over_sizes_alone_is_dropped_and_kernel_tuner_takes_the_rest(bench, tmp_path):
    knobs = {"LANES": [1, 2, 4], "VEC": [1, 2]}
    kept = bench.knob_constraints(["K == 32", "C >= 1024", "LANES * VEC <= K // 8"], {"K": 32, "C": 4096}, knobs)
    assert kept == ["LANES * VEC <= 32 // 8"]
    pytest.importorskip("kernel_tuner")
    from kernel_tuner.searchspace import Searchspace

    space = Searchspace(knobs, kept, 1 << 30).list  # Kernel Tuner refused the constant ones
    assert sorted(space) == [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1)]


class _RecordingSurrogate:
    """Forecasts nothing (every child abstains) and keeps the requests it was asked about."""

    name, version = "recording", "1"
    id = "recording@1"

    def __init__(self):
        self.requests = []

    def forecast_many(self, requests):
        from search_engine.surrogates.base import Forecast

        self.requests.extend(requests)
        return [Forecast.abstention("recording only", surrogate=self.id) for _ in requests]


def test_the_search_forecasts_with_the_references_compiler_facts_as_the_model_was_trained(bench):
    facts = {"registers": 31, "shared_bytes": 1024, "spill_stores": 0, "spill_loads": 0, "stack_bytes": 0}
    dataset = small_family(bench)
    dataset.reference_facts = facts
    dataset.rows = bench._rows(dataset)
    assert dataset.rows and all(row["reference_compiler_facts"] == facts for row in dataset.rows)
    surrogate = _RecordingSurrogate()
    bench.run_puct(dataset, 0, surrogate, False, search_args(), root_children=16)
    assert surrogate.requests
    assert all(request.reference_compiler_facts == facts for request in surrogate.requests)


def test_the_search_forecasts_with_the_references_profile_read_from_its_record(bench):
    dataset = small_family(bench)
    assert dataset.reference_profile is None  # this recording's reference was never profiled
    profile = {"l1tex__t_sector_hit_rate.pct": 68.0, "dram__bytes_read.sum": 1.0e6}
    dataset.reference_profile = profile
    dataset.rows = bench._rows(dataset)
    assert dataset.rows and all(row["reference_profile"] == profile for row in dataset.rows)
    surrogate = _RecordingSurrogate()
    bench.run_puct(dataset, 0, surrogate, False, search_args(), root_children=16)
    assert surrogate.requests and all(request.reference_profile == profile for request in surrogate.requests)


def test_a_recorded_references_counters_reach_the_dataset(bench, tmp_path):
    import gzip
    import json

    source = bench.ROOT / "kernellab" / "problems" / "column_sum" / "records" / "h200.jsonl.gz"
    with gzip.open(source, "rt") as handle:
        records = [json.loads(line) for line in handle]
    for record in records:
        if record.get("variant") == "reference":
            record["profiler"] = {"l1tex__t_sector_hit_rate.pct": 12.5}
            record.pop("profiler_hardware", None)  # read on the recording's own GPU
    with gzip.open(tmp_path / "column_sum.jsonl.gz", "wt") as handle:
        handle.write("".join(json.dumps(record) + "\n" for record in records))
    datasets = {d.name: d for d in bench.recorded_datasets(records_dir=tmp_path)}
    assert datasets["column_sum"].reference_profile == {"l1tex__t_sector_hit_rate.pct": 12.5}
    assert datasets["column_sum"].reference_profile_gpu == "NVIDIA H200"
    # a family this folder does not hold: its bundled recording's, whose counters an H100 read (protocol 26)
    assert datasets["gelu"].reference_profile and datasets["gelu"].reference_profile_gpu == "NVIDIA H100 80GB HBM3"
    assert all(row["reference_profile"] == {"l1tex__t_sector_hit_rate.pct": 12.5} for row in datasets["column_sum"].rows)


def test_a_stand_in_gpus_counters_are_named_as_such_in_the_dataset(bench, tmp_path):
    import gzip
    import json

    source = bench.ROOT / "kernellab" / "problems" / "column_sum" / "records" / "h200.jsonl.gz"
    with gzip.open(source, "rt") as handle:
        records = [json.loads(line) for line in handle]
    records = [r | {"profiler": {"l1tex__t_sector_hit_rate.pct": 12.5},
                    "profiler_hardware": {"name": "NVIDIA H100 80GB HBM3"}} if r.get("variant") == "reference" else r
               for r in records]
    with gzip.open(tmp_path / "column_sum.jsonl.gz", "wt") as handle:
        handle.write("".join(json.dumps(record) + "\n" for record in records))
    datasets = {d.name: d for d in bench.recorded_datasets(records_dir=tmp_path)}
    assert datasets["column_sum"].reference_profile_gpu == "NVIDIA H100 80GB HBM3"


def test_the_reference_counters_setting_reaches_the_model_and_defaults_to_the_apps(bench, monkeypatch):
    from search_engine.surrogates.learned import DEFAULT_REFERENCE_COUNTERS

    parser = bench.build_parser()
    assert parser.parse_args([]).reference_counters == DEFAULT_REFERENCE_COUNTERS
    args = parser.parse_args(["--reference-counters", "portable"])
    assert args.reference_counters == "portable"
    with pytest.raises(SystemExit):
        parser.parse_args(["--reference-counters", "some"])
    rows = [{"problem_name": "a"}]
    monkeypatch.setattr(bench.LearnedSurrogate, "fit", lambda model, rows, groups, like=None: model)
    assert bench.lopo_model(rows, args).reference_counters == "portable"
    # settings written before the option read all eight
    del args.reference_counters
    assert bench.lopo_model(rows, args).reference_counters == "all"


def test_similar_family_weights_reach_the_model_with_the_searched_familys_requests(bench, monkeypatch):
    from search_engine.surrogates.learned import DEFAULT_FAMILY_WEIGHTS

    parser = bench.build_parser()
    assert parser.parse_args([]).family_weights == DEFAULT_FAMILY_WEIGHTS
    args = parser.parse_args(["--family-weights", "similar", "--similar-strength", "2"])
    seen = {}

    def fit(model, rows, groups, like=None):
        seen["like"] = like
        return model

    monkeypatch.setattr(bench.LearnedSurrogate, "fit", fit)
    model = bench.lopo_model([{"problem_name": "a"}], args, like=["request"])
    assert (model.family_weights, model.similar_strength, seen["like"]) == ("similar", 2.0, ["request"])
    # settings written before the option weigh every row alike
    del args.family_weights, args.similar_strength
    assert bench.lopo_model([{"problem_name": "a"}], args).family_weights == "rows"


def test_excluding_a_family_that_is_not_recorded_is_refused_with_its_name(bench):
    with pytest.raises(SystemExit, match="no recorded family: nosuch"):
        bench.main(["--exclude", "nosuch", "--seeds", "1", "--out", "/dev/null"])


def test_where_no_variant_reaches_the_target_every_method_counts_the_whole_family(bench):
    dataset = small_family(bench, vendor={"name": "vendor:lib", "speedup": 5.0, "source": "test"})
    assert not dataset.reachable and small_family(bench).reachable
    results = bench.unreachable_results(dataset, ["puct_surrogate", "random"], seeds=4)
    measured = [r for r in dataset.records.values() if r["status"] == "ok"]
    for summary in results.values():
        assert summary["values"] == [dataset.budget] * 4 and summary["reached"] == 0 and summary["unreachable"]
        assert summary["compile_checks_median"] == len(dataset.records)
        assert summary["gpu_wall_s_median"] == pytest.approx(0.5 * len(measured))
    # the same as running a method to the end
    assert bench.run_random(dataset, 0)["measurements"] is None


def test_the_benchmark_runs_itself_again_under_the_pinned_string_hash_seed(bench, monkeypatch):
    """greedy_ils follows set order over string knob values, which Python salts per process."""
    calls = []
    monkeypatch.setattr(bench.os, "execve", lambda path, argv, env: calls.append((path, argv, env)))
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    bench.pin_hash_seed(["benchmarks/search_bench.py", "--seeds", "3"])
    assert len(calls) == 1
    path, argv, env = calls[0]
    assert path == sys.executable and argv == [sys.executable, "benchmarks/search_bench.py", "--seeds", "3"]
    assert env["PYTHONHASHSEED"] == bench.PYTHON_HASH_SEED
    monkeypatch.setenv("PYTHONHASHSEED", "7")
    bench.pin_hash_seed(["benchmarks/search_bench.py"])
    assert len(calls) == 2 and calls[1][2]["PYTHONHASHSEED"] == bench.PYTHON_HASH_SEED
    monkeypatch.setenv("PYTHONHASHSEED", bench.PYTHON_HASH_SEED)
    bench.pin_hash_seed(["benchmarks/search_bench.py"])
    assert len(calls) == 2


def test_the_surrogates_seed_is_a_setting_of_its_own_and_reaches_every_held_out_model(bench):
    first, second = small_family(bench), small_family(bench)
    second.name = "other"
    for dataset in (first, second):
        dataset.rows = bench._rows(dataset)
        for row in dataset.rows:
            row["problem_name"] = dataset.name
    models, _ = bench.lopo_surrogates([first, second], Namespace(model_seed=3, ranker_weight=0.0, moments="level"))
    assert {name: model.seed for name, model in models.items()} == {"small": 3, "other": 3}
    assert all(model.ranker_weight == 0.0 and model._ranker is None for model in models.values())
    # --moments reaches every held-out model; its default is the app's
    assert all(model.moments == "level" for model in models.values())
    assert bench.build_parser().parse_args([]).moments == bench.LearnedSurrogate().moments


def test_the_order_recalibration_defaults_to_the_apps_and_can_be_switched_off(bench):
    from search_engine.surrogates.learned import DEFAULT_ORDER_PRIOR_ROWS

    assert bench.build_parser().parse_args([]).order_prior_rows == DEFAULT_ORDER_PRIOR_ROWS == 8.0
    assert bench.build_parser().parse_args(["--order-prior-rows", "none"]).order_prior_rows is None
    assert bench.build_parser().parse_args(["--order-prior-rows", "3"]).order_prior_rows == 3.0
    with pytest.raises(SystemExit):
        bench.build_parser().parse_args(["--order-prior-rows", "off"])


@pytest.mark.parametrize("setting, given, value, old", [
    ("weigh_calibrated", ["--no-weigh-calibrated"], False, False),  # protocol 16
    ("weigh_calibrated", ["--weigh-calibrated"], True, False),
    ("spread_prior_rows", ["--spread-prior-rows", "none"], None, None),  # protocol 17
    ("spread_prior_rows", ["--spread-prior-rows", "3"], 3.0, None),
    ("calibrated_moments", ["--calibrated-moments", "bins"], "bins", "bins"),  # protocol 18
    ("calibrated_moments", ["--calibrated-moments", "level"], "level", "bins"),
    ("pooled_spread", ["--no-pooled-spread"], False, False),
    ("pooled_spread", ["--pooled-spread"], True, False),
    ("local_incumbent", ["--no-local-incumbent"], False, False),  # protocol 19
    ("local_incumbent", ["--local-incumbent"], True, False),
    ("local_model", ["--local-model", "forest"], "forest", "forest"),  # protocol 30
    ("local_model", ["--local-model", "gp"], "gp", "forest")])
def test_a_run_local_setting_defaults_to_the_apps_and_reaches_the_surrogate(bench, setting, given, value, old):
    from search_engine.surrogates.learned import LearnedSurrogate

    assert getattr(bench.build_parser().parse_args([]), setting) == getattr(LearnedSurrogate(), setting)
    assert getattr(bench.build_parser().parse_args(given), setting) == value
    # the setting reaches the run's surrogate; settings saved before it keep the behaviour of their runs
    dataset = small_family(bench)
    for changes, expected in (({setting: value}, value), ({}, old)):
        surrogate = _RecordingSurrogate()
        surrogate.online_weight = 1.0
        setattr(surrogate, setting, "unset")
        bench.run_puct(dataset, 0, surrogate, False, search_args(**changes), root_children=16)
        assert getattr(surrogate, setting) == expected


def test_another_recording_replaces_the_families_it_holds_and_no_other(bench, tmp_path):
    import gzip

    bundled = {d.name: d for d in bench.recorded_datasets()}
    if "gemv" not in bundled or "rmsnorm" not in bundled:
        pytest.skip("the bundled gemv and rmsnorm records are not here")
    with gzip.open(bench.ROOT / "kernellab" / "problems" / "gemv" / "records" / "h200.jsonl.gz", "rt") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    for record in records:  # a second recording in which every variant ran twice as fast
        if record.get("knobs") and record.get("status") == "ok":
            record["speedup"] *= 2
    with gzip.open(tmp_path / "gemv.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    replayed = {d.name: d for d in bench.recorded_datasets(records_dir=tmp_path)}
    assert replayed["gemv"].source == str(tmp_path / "gemv.jsonl.gz")
    assert replayed["gemv"].best == pytest.approx(2 * bundled["gemv"].best)
    assert [r["speedup"] for r in replayed["gemv"].rows] == pytest.approx([2 * r["speedup"] for r in bundled["gemv"].rows])
    assert replayed["rmsnorm"].source == bundled["rmsnorm"].source == "kernellab/problems/rmsnorm/records/h200.jsonl.gz"
    assert replayed["rmsnorm"].best == bundled["rmsnorm"].best


def test_a_records_folder_that_does_not_exist_is_refused_with_its_name(bench):
    with pytest.raises(SystemExit, match="--records-dir /nonexistent/recording: no such folder"):
        bench.main(["--records-dir", "/nonexistent/recording", "--seeds", "1", "--out", "/dev/null"])


def _earlier_run(bench, dataset, tmp_path, **changes):
    methods = ["puct_measure_all", "random", "kt_pso"]
    run = {"seeds": 2, "target_fraction": bench.TARGET_FRACTION, "settings": {"records_dir": None},
           "datasets": {dataset.name: {"variants": len(dataset.records), "best": dataset.best,
                                       "target": dataset.target, "budget": dataset.budget}},
           "search": {dataset.name: {m: {"values": [3, 5], "median": 4.0} for m in methods}},
           "verdicts": {}} | changes
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps(run))
    return path


def test_baselines_are_taken_from_an_earlier_run_only_where_nothing_they_depend_on_changed(bench, tmp_path):
    dataset = small_family(bench)
    args = Namespace(baselines_from=_earlier_run(bench, dataset, tmp_path), seeds=2, target=bench.TARGET_FRACTION,
                     records_dir=None)
    earlier = bench._earlier_baselines(args)
    reused = bench.reused_baselines(earlier, dataset, ["pso"])
    assert set(reused) == {"puct_measure_all", "random", "kt_pso"}
    assert reused["kt_pso"]["values"] == [3, 5] and reused["random"]["reused_from"] == earlier["path"]
    with pytest.raises(SystemExit, match="no kt_bayes_opt for small"):
        bench.reused_baselines(earlier, dataset, ["pso", "bayes_opt"])
    earlier["datasets"]["small"]["target"] *= 1.01  # the family was recorded again since
    with pytest.raises(SystemExit, match="small's records have changed since that run \\(target\\)"):
        bench.reused_baselines(earlier, dataset, ["pso"])
    with pytest.raises(SystemExit, match="made with another seeds"):
        bench._earlier_baselines(Namespace(**(vars(args) | {"seeds": 10})))
    with pytest.raises(SystemExit, match="made with another records_dir"):
        bench._earlier_baselines(Namespace(**(vars(args) | {"records_dir": tmp_path})))
    no_baselines = _earlier_run(bench, dataset, tmp_path)
    no_baselines.write_text(json.dumps({k: v for k, v in json.loads(no_baselines.read_text()).items() if k != "verdicts"}))
    with pytest.raises(SystemExit, match="has no baselines"):
        bench._earlier_baselines(Namespace(**(vars(args) | {"baselines_from": no_baselines})))
    with pytest.raises(SystemExit, match="cannot be read"):
        bench._earlier_baselines(Namespace(**(vars(args) | {"baselines_from": tmp_path / "missing.json"})))


def test_a_run_without_baselines_writes_its_runs_and_no_verdicts_and_cannot_lend_baselines(bench, tmp_path):
    from benchmarks import search_synthetic as syn

    name = syn.FAMILIES[0].name
    out = tmp_path / "skip.json"
    bench.main(["--synthetic", "--families", name, "--lopo-searched-only", "--seeds", "2", "--skip-baselines",
                "--root-children", "16", "--max-steps", "4", "--compile-samples", "0", "--out", str(out)])
    written = json.loads(out.read_text())
    assert set(written["search"]) == {name}
    runs = written["search"][name]
    assert set(runs) == {"puct_surrogate"} and len(runs["puct_surrogate"]["values"]) == 2
    assert written["verdicts"] == {} and written["baselines"].startswith("skipped")
    assert written["settings"]["skip_baselines"] is True and name in written["surrogate_lopo"]
    with pytest.raises(SystemExit, match="has no baselines"):
        bench._earlier_baselines(Namespace(baselines_from=out, seeds=2, target=bench.TARGET_FRACTION,
                                           records_dir=None))


def test_the_threshold_before_the_conformal_one_defaults_to_the_apps_and_reaches_the_policy(bench):
    from search_engine.search_settings import TEMPLATE_SEARCH

    assert bench.build_parser().parse_args([]).conformal_warmup == TEMPLATE_SEARCH.conformal_warmup
    args = bench.build_parser().parse_args(["--conformal-warmup", "1"])
    assert bench.search_settings(args, False, 0, 256, gpu_budget=100).policy.conformal_warmup == 1.0
    # settings made before --conformal-warmup (the probes' Namespaces) keep the fixed threshold until the conformal one
    old = search_args()
    assert not hasattr(old, "conformal_warmup")
    assert bench.search_settings(old, False, 0, 256, gpu_budget=100).policy.conformal_warmup is None
