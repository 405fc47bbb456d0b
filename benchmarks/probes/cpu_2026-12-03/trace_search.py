"""Issue 20 probe: why a search measured what it measured, set against the held-out model's own order.

  python benchmarks/probes/cpu_2026-12-03/trace_search.py FAMILY [--seeds 0,1,2] [--measure-choice C]
      [--measure-order O] [--moments M] [--local-novelty X] [--steps N] [--out FILE.json]

Trains the learned surrogate leave-one-family-out as benchmarks/search_bench.py does (every other recorded
family, the app's ranking-prior weight), ranks all of FAMILY's variants by the model's expected log speedup
(its zero-shot order; rank 1 is what the model likes best), then replays the search benchmark's surrogate
PUCT for each seed and prints, step by step, the measurements the policy chose with their reasons, the
weight of the run-local model against the recorded-data model, and each measured variant's zero-shot rank,
forecast at the time and measured speedup. It also prints the best
zero-shot ranks among the root's screened children: when they hold a hit the first step did not measure, the
search lost the model's order, not the model.

With --gains N the first N steps also print the candidates a step chose from, ordered by expected improvement,
and where each hit already in the tree stood among them: how hgemm_mma's rank 1, in the tree from step 1, was
found waiting behind wider normals (docs/search.md, "The recalibrated model on the relative bins, with one
spread").

This is how the first step's ties in P(beats best) were found on gelu (docs/search.md, "The choice of a step's
measurements"): `--measure-choice beat-probability` reproduces that trace. Use it on validation families;
a setting chosen by tracing the eight test families would no longer be tested by them.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import numpy as np  # noqa: E402

import search_bench as sb  # noqa: E402
from search_engine.policy import (MEASURE_CHOICES, MEASURE_ORDERS, VERIFY_SLOTS, PolicySettings,  # noqa: E402
                                  expected_log_improvement)
from search_engine.surrogates.base import Forecast  # noqa: E402
from search_engine.surrogates.learned import (  # noqa: E402
    DEFAULT_COMMITTEE, DEFAULT_LOCAL_NOVELTY, DEFAULT_LOCAL_PRIOR_ROWS, DEFAULT_MIXTURE, DEFAULT_MOMENTS, DEFAULT_ORDER_PRIOR_ROWS,
    DEFAULT_SPREAD_PRIOR_ROWS, DEFAULT_WEIGH_CALIBRATED, DEFAULT_CALIBRATED_MOMENTS, DEFAULT_POOLED_SPREAD, DEFAULT_LOCAL_INCUMBENT, MOMENTS,
    DEFAULT_LOCAL_MODEL, LOCAL_MODELS, LearnedSurrogate)


def zero_shot_ranks(model, dataset) -> dict[tuple, int]:
    """Each variant's rank (1 = best) by the model's expected log speedup, ties kept in record order."""
    scores = [f.expected_log_speedup() for f in model.forecast_many(sb._requests(dataset.rows))]
    order = np.argsort(-np.asarray(scores), kind="stable")
    return {dataset.key(dataset.rows[i]["candidate"]["knobs"]): rank for rank, i in enumerate(order, 1)}


def standings(tree, rank_of, hits: set, top: int = 3) -> dict:
    """Before a step decides: the tree's unmeasured candidates with a forecast ordered by the expected log
    improvement over the best measured speedup (what a step's GPU slots go by), the first `top` of them, and where
    each hit the tree already holds stands in that order, with the two models' normals of each."""
    best = max((n.speedup for n in tree.nodes.values() if n.speedup), default=1.0)
    rows = []
    for node in tree.nodes.values():
        if node.speedup is None and node.forecast and rank_of(node.id):
            forecast = Forecast.from_dict(node.forecast)
            normals = [{"weight": w, "speedup": math.exp(m), "sd": sd} for w, m, sd in forecast.log_mixture or ()]
            rows.append({"node": node.id, "zero_shot_rank": rank_of(node.id), "normals": normals,
                         "gain": expected_log_improvement(forecast, best)})
    rows.sort(key=lambda r: (-r["gain"], r["node"]))
    for place, row in enumerate(rows, 1):
        row["place"] = place
    return {"best": best, "unmeasured": len(rows), "top": rows[:top],
            "hits": [r for r in rows if r["zero_shot_rank"] in hits]}


def trace(dataset, model, ranks: dict, seed: int, args, gains: int = 0) -> dict:
    """The run's steps: the measurements chosen (node, zero-shot rank, reason) and what each measured; with gains,
    for the first `gains` steps also the standings before the step decided (`standings`)."""
    events: list[dict] = []
    hit_ranks = {rank for key, rank in ranks.items() if dataset.records[key]["speedup"] >= dataset.target}

    def watch(driver, port):
        measure, order = port.request_measurement, driver.policy.measurement_order
        decide = driver.policy.decide

        def deciding(tree, *a, **kw):
            # (a step that expanded has counted itself before it decides; a stalled one counts itself after)
            step = driver.step_count + (1 if kw.get("stalled") else 0)
            if step <= gains:
                events.append({"standings": step} | standings(tree, rank_of, hit_ranks))
            return decide(tree, *a, **kw)

        if gains > 0:
            driver.policy.decide = deciding

        def rank_of(node_id):
            knobs = (driver.tree.nodes[node_id].candidate or {}).get("knobs")
            return ranks.get(dataset.key(knobs)) if knobs else None

        def ordered(tree, measures):
            chosen = order(tree, measures)
            local = getattr(driver.surrogate, "_local", None)
            events.append({"step": driver.step_count,
                           "local_weight": None if local is None else local.weight,
                           "local_rows": None if local is None else local.n,
                           "order_slope": None if local is None or getattr(local, "calibration", None) is None
                           else local.calibration[0], "chosen": [
                {"node": d.node_id, "zero_shot_rank": rank_of(d.node_id), "reason": d.reason} for d in chosen]})
            return chosen

        def measured(node_id, candidate):
            result = measure(node_id, candidate)
            node = driver.tree.nodes[node_id]
            forecast = Forecast.from_dict(node.forecast) if node.forecast else None
            events.append({"node": node_id, "zero_shot_rank": rank_of(node_id), "speedup": result.get("speedup"),
                           "hit": (result.get("speedup") or 0) >= dataset.target,
                           "forecast_speedup": forecast.expected_speedup() if forecast else None,
                           "confidence": forecast.confidence if forecast else None})
            return result

        displace = driver.policy.displaced_by_verification

        def displaced(tree, measures, verify):
            out = displace(tree, measures, verify)
            if out is not None and events and "chosen" in events[-1]:
                events[-1]["displaced"] = {"node": out.node_id, "zero_shot_rank": rank_of(out.node_id)}
            return out

        driver.policy.measurement_order = ordered
        driver.policy.displaced_by_verification = displaced
        port.request_measurement = measured
        watch.driver = driver

    result = sb.run_puct(dataset, seed, copy.deepcopy(model), False, args, args.root_children, watch=watch)
    tree = watch.driver.tree
    root_knobs = [(n.candidate or {}).get("knobs") for n in tree.nodes.values() if n.parent_id == 0]
    screened = sorted(ranks[dataset.key(k)] for k in root_knobs if k and dataset.key(k) in ranks)
    return {"seed": seed, "measurements": result["measurements"], "events": events,
            "screened_best_ranks": screened[:10],
            "screened_first_hit_rank": next((r for r in screened if r in hit_ranks), None)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--measure-choice", choices=MEASURE_CHOICES, default=PolicySettings.measure_choice)
    parser.add_argument("--measure-order", choices=MEASURE_ORDERS, default=PolicySettings.measure_order)
    parser.add_argument("--moments", choices=MOMENTS, default=DEFAULT_MOMENTS)
    parser.add_argument("--local-novelty", type=float, default=DEFAULT_LOCAL_NOVELTY,
                        help="0 reproduces the traces committed before the sixteenth session's choice of 3")
    parser.add_argument("--order-prior-rows", type=sb.optional_float, default=DEFAULT_ORDER_PRIOR_ROWS,
                        help="recalibrate the recorded-data model's order on the run's rows (surrogates.learned); "
                             "none reproduces the traces committed before protocol 15")
    parser.add_argument("--mixture", action=argparse.BooleanOptionalAction, default=DEFAULT_MIXTURE,
                        help="P(beats best) and the gain from the two models' normals (surrogates.learned; "
                             "--no-mixture reproduces the traces committed before the seventeenth session)")
    parser.add_argument("--verify-slot", choices=VERIFY_SLOTS, default=PolicySettings.verify_slot,
                        help="the verification of a forecast-only best on top of a step's measurements or in one "
                             "of its slots (search_engine.policy; default: the app's)")
    parser.add_argument("--step-spread", type=int, default=PolicySettings.step_spread,
                        help="the knob values a step's measurements must differ in (search_engine.policy; default: "
                             "the app's)")
    parser.add_argument("--local-prior-rows", type=float, default=DEFAULT_LOCAL_PRIOR_ROWS,
                        help="the run-local model's prior odds n : this (surrogates.learned; default: the app's)")
    parser.add_argument("--committee", action=argparse.BooleanOptionalAction, default=DEFAULT_COMMITTEE,
                        help="the recorded-data model as a committee of its calibration folds' models "
                             "(surrogates.learned; default: the app's)")
    parser.add_argument("--weigh-calibrated", action=argparse.BooleanOptionalAction, default=DEFAULT_WEIGH_CALIBRATED,
                        help="the run-local model's weight earned against the recalibrated recorded-data model "
                             "(surrogates.learned; default: the app's)")
    parser.add_argument("--spread-prior-rows", type=sb.optional_float, default=DEFAULT_SPREAD_PRIOR_ROWS,
                        help="the recalibrated model's spread rescaled on the run's rows (surrogates.learned; "
                             "default: the app's; none: off)")
    parser.add_argument("--calibrated-moments", choices=MOMENTS, default=DEFAULT_CALIBRATED_MOMENTS,
                        help="the moments the recalibration reads from the third row on (surrogates.learned)")
    parser.add_argument("--pooled-spread", action=argparse.BooleanOptionalAction, default=DEFAULT_POOLED_SPREAD,
                        help="one spread for every candidate of the recalibrated model (surrogates.learned)")
    parser.add_argument("--local-incumbent", action=argparse.BooleanOptionalAction, default=DEFAULT_LOCAL_INCUMBENT,
                        help="the run-local forest reads each variant's distance to the run's best (surrogates.learned)")
    parser.add_argument("--local-model", choices=LOCAL_MODELS, default=DEFAULT_LOCAL_MODEL,
                        help="the run-local model: the forest or the Gaussian process (protocol 30)")
    parser.add_argument("--ignore-vendor", action="store_true",
                        help="the family's target from its variants alone, as search_bench --ignore-vendor (validation)")
    parser.add_argument("--steps", type=int, default=12, help="steps of each run printed")
    parser.add_argument("--gains", type=int, default=0,
                        help="for this many first steps, also print the top candidates by expected improvement and "
                             "where each hit already in the tree stands among them, with the two models' normals")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--exclude", default="",
                        help="recorded families left out of training, comma-separated (as search_bench.py's; "
                             "--exclude depthwise_conv2d,maxpool2d repeats a trace made before 2026-12-05's "
                             "twenty-fourth session)")
    args = parser.parse_args(argv)
    # the search benchmark's defaults for everything else
    bench = sb.build_parser().parse_args(["--measure-order", args.measure_order, "--measure-choice", args.measure_choice,
                                          "--moments", args.moments, "--local-novelty", str(args.local_novelty)]
                                         + ["--order-prior-rows", str(args.order_prior_rows)]
                                         + (["--mixture"] if args.mixture else ["--no-mixture"])
                                         + (["--committee"] if args.committee else ["--no-committee"])
                                         + ["--verify-slot", args.verify_slot]
                                         + ["--step-spread", str(args.step_spread)]
                                         + ["--local-prior-rows", str(args.local_prior_rows)]
                                         + (["--weigh-calibrated"] if args.weigh_calibrated else ["--no-weigh-calibrated"])
                                         + ["--spread-prior-rows", str(args.spread_prior_rows)]
                                         + ["--calibrated-moments", args.calibrated_moments]
                                         + (["--pooled-spread"] if args.pooled_spread else ["--no-pooled-spread"])
                                         + (["--local-incumbent"] if args.local_incumbent else ["--no-local-incumbent"])
                                         + ["--local-model", args.local_model])
    sb._TARGET["fraction"] = bench.target
    datasets = sb.recorded_datasets()
    excluded = sb.named_families(args.exclude, datasets, "--exclude")
    if args.family in excluded:
        raise SystemExit(f"{args.family} is traced: it cannot be excluded too.")
    datasets = [d for d in datasets if d.name not in excluded]
    held = next((d for d in datasets if d.name == args.family), None)
    if held is None:
        raise SystemExit(f"{args.family}: no recorded family of that name.")
    held.vendor_in_target = not args.ignore_vendor
    train = [r for d in datasets if d is not held for r in d.rows]
    model = LearnedSurrogate(seed=bench.model_seed, ranker_weight=bench.ranker_weight, moments=bench.moments,
                             committee=bench.committee).fit(train, groups=[r["problem_name"] for r in train])
    ranks = zero_shot_ranks(model, held)
    hits = sorted(rank for key, rank in ranks.items() if held.records[key]["speedup"] >= held.target)
    print(f"{held.name}: {len(held.records)} variants, target {held.target:.3g}x, {len(hits)} at target; "
          f"zero-shot ranks of the first hits {hits[:8]}")
    runs = []
    for seed in (int(s) for s in args.seeds.split(",")):
        run = trace(held, model, ranks, seed, bench, gains=args.gains)
        runs.append(run)
        print(f"\nseed {seed}: target reached at measurement {run['measurements']}; best zero-shot ranks screened "
              f"at the root {run['screened_best_ranks'][:6]}, the first hit among them {run['screened_first_hit_rank']}")
        for event in run["events"]:
            if "standings" in event:
                print(f"  step {event['standings']:3d} decides among {event['unmeasured']} unmeasured candidates "
                      f"(best measured {event['best']:.3g}x), by expected improvement:")
                for row in event["top"] + [h for h in event["hits"] if h["place"] > len(event["top"])]:
                    normals = " ".join(f"[w {n['weight']:.2f}: {n['speedup']:.3g}x sd {n['sd']:.2f}]" for n in row["normals"])
                    hit = " (a hit)" if row in event["hits"] else ""
                    print(f"    #{row['place']:<4d} zero-shot #{row['zero_shot_rank']}{hit}: gain {row['gain']:.4f} {normals}")
                continue
            if "chosen" in event:
                if event["step"] >= args.steps:
                    break
                if event.get("local_weight") is not None:
                    print(f"  step {event['step']:3d}: the run-local model ({event['local_rows']} rows) "
                          f"weighs {event['local_weight']:.2f} against the recorded-data model"
                          + ("" if event.get("order_slope") is None else
                             f"; the recorded-data model's order recalibrated with slope {event['order_slope']:.2f}"))
                for c in event["chosen"]:
                    print(f"  step {event['step']:3d} chooses zero-shot #{c['zero_shot_rank']}: {c['reason'][:120]}")
                if event.get("displaced"):
                    print(f"  step {event['step']:3d} leaves zero-shot #{event['displaced']['zero_shot_rank']} unmeasured: "
                          "the step's weakest with the verification in one of its slots")
            else:
                forecast, confidence = event["forecast_speedup"], event["confidence"]
                then = "no forecast" if forecast is None else f"forecast then {forecast:.3g}x ({confidence:.2f})"
                print(f"      measured #{event['zero_shot_rank']}: {event['speedup'] or 0:.3g}x"
                      f"{' (at target)' if event['hit'] else ''}, {then}")
    result = {"family": held.name, "target": held.target, "measure_choice": args.measure_choice,
              "measure_order": args.measure_order, "moments": args.moments, "local_novelty": args.local_novelty,
              "order_prior_rows": args.order_prior_rows, "mixture": args.mixture, "committee": args.committee, "local_reach": bench.local_reach,
              "verify_slot": args.verify_slot, "step_spread": args.step_spread,
              "local_prior_rows": args.local_prior_rows, "weigh_calibrated": args.weigh_calibrated,
              "spread_prior_rows": args.spread_prior_rows, "calibrated_moments": args.calibrated_moments,
              "pooled_spread": args.pooled_spread, "local_incumbent": args.local_incumbent,
              "zero_shot_hit_ranks": hits[:20], "runs": runs}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, default=float) + "\n")
        print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
