"""The honest 8-family verdicts of several search benchmark runs that differ only in the surrogate's
model seed, each on its own and with their runs pooled (issue 20; the fourth validation protocol,
benchmarks/results/search_cpu_2026-12-03_validation-protocol-4.txt).

    .venv/bin/python benchmarks/probes/cpu_2026-12-03/pool_model_seeds.py --name LABEL RUN.json [RUN.json ...] \
        [--out FILE.json]

A family passes when the surrogate PUCT's median (or mean) number of GPU measurements is 3x under
measure-all's AND under the best Kernel Tuner strategy's, as search_bench.py judges it. Pooled: the
surrogate's runs of every file together (ten search seeds per model seed), against the baselines, which
do not depend on the model seed (every file must hold the same ones, or the pooling is refused).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

SURROGATE = "puct_surrogate"


def baselines(run: dict) -> dict[str, dict]:
    """Per family, the baselines' run values (measure-all, random and the Kernel Tuner strategies)."""
    return {family: {m: r["values"] for m, r in methods.items() if not m.startswith(SURROGATE)}
            for family, methods in run["search"].items()}


def verdict(values: list[float], base: dict[str, list[float]], statistic) -> dict:
    kt = {m: statistic(v) for m, v in base.items() if m.startswith("kt_")}
    best = min(kt, key=kt.get)
    ours, all_ = statistic(values), statistic(base["puct_measure_all"])
    return {"surrogate": ours, "measure_all": all_, "best_kt": kt[best], "best_kt_strategy": best,
            "three_times": all_ / ours >= 3, "under_best_kt": ours < kt[best],
            "passes": all_ / ours >= 3 and ours < kt[best]}


def judge(values: dict[str, list[float]], base: dict[str, dict]) -> dict:
    out = {}
    for label, statistic in (("median", statistics.median), ("mean", statistics.fmean)):
        families = {f: verdict(values[f], base[f], statistic) for f in values}
        out[label] = {"families": families, "passes": sum(v["passes"] for v in families.values()),
                      "three_times": sum(v["three_times"] for v in families.values()),
                      "under_best_kt": sum(v["under_best_kt"] for v in families.values())}
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--name", required=True)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    runs = [json.loads(p.read_text()) for p in args.runs]
    base = baselines(runs[0])
    if any(baselines(r) != base for r in runs[1:]):
        raise SystemExit("The runs hold different baselines: they are not the same benchmark with another model seed.")
    result = {"name": args.name, "runs": {}, "pooled": None}
    pooled: dict[str, list[float]] = {}
    for path, run in zip(args.runs, runs):
        values = {f: m[SURROGATE]["values"] for f, m in run["search"].items()}
        for family, v in values.items():
            pooled.setdefault(family, []).extend(v)
        result["runs"][path.name] = {"model_seed": run["settings"].get("model_seed"), **judge(values, base)}
    result["pooled"] = judge(pooled, base)
    result["pooled"]["runs_per_family"] = {f: len(v) for f, v in pooled.items()}
    families = list(pooled)
    print(f"{args.name}: the surrogate PUCT's median measurements (measure-all / best Kernel Tuner), "
          "* where a family passes both criteria")
    print(f"{'run':42s}" + "".join(f"{f[:12]:>13s}" for f in families) + "   passes (median, mean)")
    for name, judged in list(result["runs"].items()) + [("pooled", result["pooled"])]:
        cells = judged["median"]["families"]
        label = name if name == "pooled" else f"model seed {judged['model_seed']}"
        print(f"{label:42s}" + "".join(
            f"{cells[f]['surrogate']:>12.1f}{'*' if cells[f]['passes'] else ' '}" for f in families)
            + f"   {judged['median']['passes']}, {judged['mean']['passes']}")
    cells = result["pooled"]["median"]["families"]
    print(f"{'measure-all / best KT':42s}" + "".join(
        f"{cells[f]['measure_all']:>6.1f}/{cells[f]['best_kt']:<6.1f}" for f in families))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
