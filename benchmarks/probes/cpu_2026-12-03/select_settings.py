"""The search settings chosen on the validation families by the rules written down beforehand
(benchmarks/results/search_cpu_2026-12-03_validation-protocol.txt, -protocol-2.txt for the second choice,
between B and D, which gives a step's GPU slots by expected improvement, and -protocol-3.txt for the third,
between D and E, whose forecasts take their mean and spread from the run's level instead of the bins, and
-protocol-4.txt for the fourth, between D, F and G, whose run-local forecasts widen for knob values the run
has not measured, each over two model seeds, and -protocol-5.txt for the fifth, between G, I and J, which
recalibrate the recorded-data model's order on the run's measurements, and -protocol-6.txt for the sixth,
between G and K, which reads P(beats best) and the expected gain from the two models' normals, and
-protocol-7.txt for the seventh, between K and L, whose run-local weight falls outside the run's rows' range).

    .venv/bin/python benchmarks/probes/cpu_2026-12-03/select_settings.py              # the first
    .venv/bin/python benchmarks/probes/cpu_2026-12-03/select_settings.py --protocol 2 # the second
    .venv/bin/python benchmarks/probes/cpu_2026-12-03/select_settings.py --protocol 3 # the third
    .venv/bin/python benchmarks/probes/cpu_2026-12-03/select_settings.py --protocol 4 # the fourth
    .venv/bin/python benchmarks/probes/cpu_2026-12-03/select_settings.py --protocol 5 # the fifth
    .venv/bin/python benchmarks/probes/cpu_2026-12-03/select_settings.py --protocol 6 # the sixth
    .venv/bin/python benchmarks/probes/cpu_2026-12-03/select_settings.py --protocol 7 # the seventh
    .venv/bin/python benchmarks/probes/cpu_2026-12-03/select_settings.py --protocol 15 # and so on (8-12, 15-20);
    # from the fifteenth on, eight validation families (nbody and stencil3d) in files dated 2026-12-04;
    # from the eighteenth on, nine (hgemm_mma, to 95% of its best variant);
    # from the twenty-second on, eleven (depthwise_conv2d and maxpool2d, their runs in files dated 2026-12-05);
    # the twenty-third: equal family weights (W23) against X18; the twenty-fourth: square-root weights (T24);
    # the twenty-fifth: no forecast trusted before the conformal threshold (U25); the twenty-sixth: the
    # reference's counters read on an H100 standing in for the H200 (R26); the twenty-seventh: R26 against the
    # same counters read on the H200 (R22); the twenty-eighth: R26 against its four portable counters (P28); the
    # twenty-ninth: P28 against Thompson sampling from a run's second measurement (H29); the thirtieth: P28 against a
    # Gaussian process as the run-local model (G30); the thirty-first: P28 against G30 widened for knob values the
    # run has not measured (G31); the thirty-second: G31 against G31 whose recorded-data model weighs the trained
    # families by their likeness to the searched problem's reference (S32)

Reads the validation runs (search_bench.py JSON, or for the runs made with --skip-baselines, which wrote
no JSON then, the per-seed values in their logs), takes each family's measure-all and Kernel Tuner
medians from the run that computed them, and writes
benchmarks/results/search_cpu_2026-12-03_validation-selection.json (-selection-2.json ... -selection-4.json).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "results"
PREFIX = "search_cpu_2026-12-03_"
# name: (ranker weight, measure order, measure choice, runs on the old three, runs on the new three,
#        the learned surrogate's moments)
CONFIGS = {
    "A": (0.5, "verify-first", "beat-probability", "3validation-families_16-trained_ranker0.5.json",
          "3new-families_ranker0.5_verify-first_log.txt", "bins"),
    "B": (0.5, "improvement", "beat-probability", "3validation-families_16-trained_ranker0.5_improvement.json",
          "3new-families_ranker0.5_improvement.json", "bins"),
    "C": (0.0, "verify-first", "beat-probability", "3validation-families_16-trained_ranker0.json",
          "3new-families_ranker0_verify-first_log.txt", "bins"),
    "D": (0.5, "improvement", "improvement", "3validation-families_16-trained_choice-improvement.json",
          "3new-families_choice-improvement.json", "bins"),
    "E": (0.5, "improvement", "improvement", "3validation-families_16-trained_moments-level.json",
          "3new-families_moments-level.json", "level"),
}
# protocol: (its file, the configurations it compares, the one an exact tie keeps, the selection written)
PROTOCOLS = {
    1: ("validation-protocol.txt", ("A", "B", "C"), "A", "validation-selection.json"),
    2: ("validation-protocol-2.txt", ("B", "D"), "B", "validation-selection-2.json"),
    3: ("validation-protocol-3.txt", ("D", "E"), "D", "validation-selection-3.json"),
    4: ("validation-protocol-4.txt", ("D", "F", "G"), "D", "validation-selection-4.json"),
    5: ("validation-protocol-5.txt", ("G", "I", "J"), "G", "validation-selection-5.json"),
    6: ("validation-protocol-6.txt", ("G", "K"), "G", "validation-selection-6.json"),
    7: ("validation-protocol-7.txt", ("K", "L"), "K", "validation-selection-7.json"),
    8: ("validation-protocol-8.txt", ("L", "M"), "L", "validation-selection-8.json"),
    9: ("validation-protocol-9.txt", ("L", "N"), "L", "validation-selection-9.json"),
    10: ("validation-protocol-10.txt", ("N", "O"), "N", "validation-selection-10.json"),
    11: ("validation-protocol-11.txt", ("N", "P"), "N", "validation-selection-11.json"),
    12: ("validation-protocol-12.txt", ("N", "O", "Q"), "N", "validation-selection-12.json"),
    15: ("validation-protocol-15.txt", ("N18", "S18"), "N18", "validation-selection-15.json"),
    16: ("validation-protocol-16.txt", ("S18", "W18"), "S18", "validation-selection-16.json"),
    17: ("validation-protocol-17.txt", ("W18", "V18"), "W18", "validation-selection-17.json"),
    18: ("validation-protocol-18.txt", ("V18f", "X18"), "V18f", "validation-selection-18.json"),
    19: ("validation-protocol-19.txt", ("X18", "Y19"), "X18", "validation-selection-19.json"),
    20: ("validation-protocol-20.txt", ("X18", "Z20"), "X18", "validation-selection-20.json"),
    22: ("validation-protocol-22.txt", ("X18", "R22"), "X18", "validation-selection-22.json"),
    23: ("validation-protocol-23.txt", ("X18", "W23"), "X18", "validation-selection-23.json"),
    24: ("validation-protocol-24.txt", ("X18", "T24"), "X18", "validation-selection-24.json"),
    25: ("validation-protocol-25.txt", ("X18", "U25"), "X18", "validation-selection-25.json"),
    26: ("validation-protocol-26.txt", ("X18", "R26"), "X18", "validation-selection-26.json"),
    27: ("validation-protocol-27.txt", ("R26", "R22"), "R26", "validation-selection-27.json"),
    28: ("validation-protocol-28.txt", ("R26", "P28"), "R26", "validation-selection-28.json"),
    29: ("validation-protocol-29.txt", ("P28", "H29"), "P28", "validation-selection-29.json"),
    30: ("validation-protocol-30.txt", ("P28", "G30"), "P28", "validation-selection-30.json"),
    31: ("validation-protocol-31.txt", ("P28", "G31"), "P28", "validation-selection-31.json"),
    32: ("validation-protocol-32.txt", ("G31r", "S32"), "G31r", "validation-selection-32.json"),
}
# from the twelfth protocol on, an equal sum of medians is decided by the lower sum of the runs' means
MEANS_SINCE = 12
# the fourth protocol's configurations: D (today's default) with the run-local model's novelty at these
# values, each run with two model seeds, whose 20 runs per family are pooled
NOVELTY = {"D": 0, "F": 1, "G": 3}
# the fifth protocol's: G (today's default) with the recorded-data model's order recalibrated on the run's
# measurements, its slope shrunk towards 1 by these pseudo rows (None: off); the files each one's runs are in
ORDER_PRIOR_ROWS = {"G": None, "I": 8, "J": 3, "K": None, "L": None, "M": None, "N": None, "O": None, "P": None, "Q": None,
                    "N18": None, "S18": 8, "W18": 8, "V18": 8, "V18f": 8, "X18": 8, "Y19": 8, "Z20": 8, "R22": 8, "W23": 8, "T24": 8, "U25": 8}
# the sixth protocol's: G, and K, which reads P(beats best) and the gain from the two models' normals
MIXTURE = {"G": False, "K": True, "L": True, "M": True, "N": True, "O": True, "P": True, "Q": True, "N18": True, "S18": True, "W18": True, "V18": True, "V18f": True, "X18": True, "Y19": True, "Z20": True, "R22": True, "W23": True, "T24": True, "U25": True}
# the seventh's: K (the default before it), and L, whose run-local weight falls outside the range of the run's rows
LOCAL_REACH = {"K": None, "L": 1.0, "M": 1.0, "N": 1.0, "O": 1.0, "P": 1.0, "Q": 1.0, "N18": 1.0, "S18": 1.0, "W18": 1.0, "V18": 1.0, "V18f": 1.0, "X18": 1.0, "Y19": 1.0, "Z20": 1.0, "R22": 1.0, "W23": 1.0, "T24": 1.0, "U25": 1.0}
# the eighth's: L (the default before it), and M, whose recorded-data model is a committee of its
# calibration folds' models; and the twentieth's, X18 and Z20, the committee tried again
COMMITTEE = {"L": False, "M": True, "N": False, "O": False, "P": False, "Q": False, "N18": False, "S18": False,
             "W18": False, "V18": False, "V18f": False, "X18": False, "Y19": False, "Z20": True, "R22": False, "W23": False, "T24": False, "U25": False}
# the ninth's: L, and N, whose verification of a forecast-only best takes one of a step's GPU slots
VERIFY_SLOT = {"L": "extra", "N": "shared", "O": "shared", "P": "shared", "Q": "shared", "N18": "shared", "S18": "shared",
               "W18": "shared", "V18": "shared", "V18f": "shared", "X18": "shared", "Y19": "shared", "Z20": "shared", "R22": "shared", "W23": "shared", "T24": "shared", "U25": "shared"}
# the tenth's: N, and O, whose run-local model needs more evidence to take over (prior odds n : 24, not n : 8)
LOCAL_PRIOR_ROWS = {"N": 8.0, "O": 24.0, "P": 8.0, "Q": 24.0, "N18": 8.0, "S18": 8.0, "W18": 8.0, "V18": 8.0, "V18f": 8.0, "X18": 8.0, "Y19": 8.0, "Z20": 8.0, "R22": 8.0, "W23": 8.0, "T24": 8.0, "U25": 8.0}
# the eleventh's: N, and P, whose step's measurements differ pairwise in at least 2 knob values
STEP_SPREAD = {"N": 0, "O": 0, "P": 2, "Q": 2, "N18": 0, "S18": 0, "W18": 0, "V18": 0, "V18f": 0, "X18": 0, "Y19": 0, "Z20": 0, "R22": 0, "W23": 0, "T24": 0, "U25": 0}
# the sixteenth's: S18 (the default since the fifteenth), and W18, whose run-local weight is earned against the
# recorded-data model as recalibrated on the run's other rows
WEIGH_CALIBRATED = {"S18": False, "W18": True, "V18": True, "V18f": True, "X18": True, "Y19": True, "Z20": True, "R22": True, "W23": True, "T24": True, "U25": True}
# the seventeenth's: W18 (the default since the sixteenth), and V18, whose recalibrated recorded-data model's spread
# is rescaled by its error on the run's rows (3 pseudo rows)
SPREAD_PRIOR_ROWS = {"W18": None, "V18": 3.0, "V18f": 3.0, "X18": 3.0, "Y19": 3.0, "Z20": 3.0, "R22": 3.0, "W23": 3.0, "T24": 3.0, "U25": 3.0}
# the eighteenth's: V18f (V18 with the sd floor, the default since the seventeenth), and X18, whose recalibration
# reads the relative bins' moments and whose recalibrated model has one pooled spread
CALIBRATED_MOMENTS = {"V18f": "bins", "X18": "level", "Y19": "level", "Z20": "level", "R22": "level", "W23": "level", "T24": "level", "U25": "level"}
POOLED_SPREAD = {"V18f": False, "X18": True, "Y19": True, "Z20": True, "R22": True, "W23": True, "T24": True, "U25": True}
# the nineteenth's: X18 (the default since the eighteenth), and Y19, whose run-local forest also reads each variant's
# distance to the run's best measured variant
LOCAL_INCUMBENT = {"X18": False, "Y19": True, "Z20": False, "R22": False, "W23": False, "T24": False, "U25": False}
# the twenty-second's: X18, and R22, whose recorded-data model also reads the reference's Nsight Compute counters
REFERENCE_PROFILE = {"X18": False, "R22": True, "W23": False, "T24": False, "U25": False}
# the twenty-third's: X18, and W23, whose recorded-data model weighs every recorded family the same
FAMILY_WEIGHTS = {"X18": "rows", "R22": "rows", "W23": "equal", "T24": "sqrt", "U25": "rows"}
# the twenty-fifth's: X18, and U25, which trusts no forecast until the conformal threshold has its measured forecasts
CONFORMAL_WARMUP = {"X18": None, "U25": 1.0}
# the twenty-sixth's: X18, and R26, R22 with the references' counters read on an H100 standing in for the H200
# (no H200 was lent from the twenty-fourth session to the twenty-ninth); every setting as R22's
CONFORMAL_WARMUP["R22"] = None


def same_settings(config: str, as_config: str) -> None:
    """Give `config` every setting of `as_config` (a configuration that differs in what its runs read, not in how)."""
    for table in (ORDER_PRIOR_ROWS, MIXTURE, LOCAL_REACH, COMMITTEE, VERIFY_SLOT, LOCAL_PRIOR_ROWS, STEP_SPREAD,
                  WEIGH_CALIBRATED, SPREAD_PRIOR_ROWS, CALIBRATED_MOMENTS, POOLED_SPREAD, LOCAL_INCUMBENT,
                  REFERENCE_PROFILE, FAMILY_WEIGHTS, CONFORMAL_WARMUP):
        table[config] = table[as_config]


same_settings("R26", "R22")
# the twenty-eighth's: R26, and P28, which reads only the four of the reference's counters that read alike on the
# H100 and the H200 (features.PORTABLE_REFERENCE_PROFILE_FEATURES); every other setting as R26's
same_settings("P28", "R26")
REFERENCE_COUNTERS = {"R22": "all", "R26": "all", "P28": "portable"}
# the twenty-ninth's: P28, and H29, P28 whose step's GPU slots go by draws from the forecasts (Thompson sampling) once
# the run has measured a candidate (PolicySettings.measure_choice "thompson")
same_settings("H29", "P28")
REFERENCE_COUNTERS["H29"] = "portable"
MEASURE_CHOICE = {"R22": "improvement", "R26": "improvement", "P28": "improvement", "H29": "thompson"}
# the thirtieth's: P28, and G30, P28 whose run-local model is a Gaussian process over the knob values on the recalibrated
# recorded-data model's errors (LearnedSurrogate(local_model="gp"))
same_settings("G30", "P28")
REFERENCE_COUNTERS["G30"] = "portable"
MEASURE_CHOICE["G30"] = "improvement"
LOCAL_MODEL = {"R22": "forest", "R26": "forest", "P28": "forest", "H29": "forest", "G30": "gp"}
# the thirty-first's: P28, and G31, G30 whose process's variance is widened for knob values the run has not measured as
# the forest's is (local_model "gp-novelty")
same_settings("G31", "G30")
REFERENCE_COUNTERS["G31"] = "portable"
MEASURE_CHOICE["G31"] = "improvement"
LOCAL_MODEL["G31"] = "gp-novelty"
# the thirty-second's: G31, and S32, G31 whose recorded-data model weighs the trained families by their likeness to the
# searched problem's reference (LearnedSurrogate(family_weights="similar"), similar_strength 1)
same_settings("S32", "G31")
FAMILY_WEIGHTS["S32"] = "similar"
REFERENCE_COUNTERS["S32"] = "portable"
MEASURE_CHOICE["S32"] = "improvement"
LOCAL_MODEL["S32"] = "gp-novelty"
# G31's runs did not reproduce on the machine of protocol 32 (an AMD EPYC where they were made on an Intel Xeon: one
# layernorm seed took 17 measurements against 7), so the protocol reruns G31 there as G31r, every setting G31's
same_settings("G31r", "G31")
for table in (REFERENCE_COUNTERS, MEASURE_CHOICE, LOCAL_MODEL):
    table["G31r"] = table["G31"]
# the GPU whose counters a configuration's runs must have read (search_bench's datasets' reference_profiled_on)
PROFILED_ON = {"R22": "H200", "R26": "H100", "P28": "H100", "H29": "H100", "G30": "H100", "G31": "H100", "S32": "H100",
               "G31r": "H100"}
# the setting each protocol from the fifth on added to a configuration's record, and its value per configuration
SETTINGS_SINCE = ((5, "order_prior_rows", ORDER_PRIOR_ROWS), (6, "mixture", MIXTURE), (7, "local_reach", LOCAL_REACH),
                  (8, "committee", COMMITTEE), (9, "verify_slot", VERIFY_SLOT), (10, "local_prior_rows", LOCAL_PRIOR_ROWS),
                  (11, "step_spread", STEP_SPREAD), (16, "weigh_calibrated", WEIGH_CALIBRATED),
                  (17, "spread_prior_rows", SPREAD_PRIOR_ROWS), (18, "calibrated_moments", CALIBRATED_MOMENTS),
                  (18, "pooled_spread", POOLED_SPREAD), (19, "local_incumbent", LOCAL_INCUMBENT),
                  (22, "reference_profile", REFERENCE_PROFILE), (23, "family_weights", FAMILY_WEIGHTS),
                  (25, "conformal_warmup", CONFORMAL_WARMUP), (28, "reference_counters", REFERENCE_COUNTERS),
                  (29, "measure_choice", MEASURE_CHOICE), (30, "local_model", LOCAL_MODEL))
RUN_NAMES = {"D": "novelty0", "F": "novelty1", "G": "novelty3", "I": "order8", "J": "order3", "K": "mixture",
             "L": "reach1", "M": "committee", "N": "verify-shared", "O": "prior24",
             "P": "spread2", "Q": "prior24-spread2", "N18": "N18", "S18": "S18", "W18": "W18", "V18": "V18",
             "V18f": "V18-floor", "X18": "X18", "Y19": "Y19", "Z20": "Z20",
             "R22": "R22", "W23": "W23", "T24": "T24", "U25": "U25", "R26": "R26",
             "P28": "P28", "H29": "H29", "G30": "G30", "G31": "G31", "S32": "S32",
             "G31r": "G31-rerun"}
MODEL_SEEDS = (0, 1)
TRIPLETS = ("3validation-families", "3new-families")
BASELINES = ("3validation-families_16-trained_ranker0.5_improvement.json", "3new-families_ranker0.5_improvement.json")
# From the fifteenth protocol on, eight validation families: nbody and stencil3d (recorded after every setting
# was fixed, protocols 13 and 14) join the six; every configuration's runs are made afresh with the eighteen
# recorded families, in files dated 2026-12-04, and the two families' baselines come from their held-out runs.
EIGHT_SINCE = 15
PREFIX_EIGHT = "search_cpu_2026-12-04_"
GROUPS_EIGHT = TRIPLETS + ("2heldout-families",)
BASELINES_EIGHT = ("nbody_heldout_model-seed0.json", "stencil3d_heldout_model-seed0.json")


# From the eighteenth on, nine: hgemm_mma joins, searched to 95% of its best variant (search_bench --ignore-vendor);
# its baselines come from today's default's run with them
NINE_SINCE = 18
GROUPS_NINE = GROUPS_EIGHT + ("hgemm_mma-variants-target",)
BASELINES_NINE = ("hgemm_mma-variants-target_V18-floor_model-seed0.json",)


# From the twenty-second on, eleven: depthwise_conv2d and maxpool2d (recorded under protocol 21) join, each searched
# with every other recorded family trained as in its untouched test, whose files are X18's runs and the baselines;
# the nine keep their files (a later configuration's runs there are trained without the two, --exclude).
ELEVEN_SINCE = 22
PREFIX_ELEVEN = "search_cpu_2026-12-05_"
ELEVEN_NEW = ("depthwise_conv2d", "maxpool2d")
BASELINES_ELEVEN = tuple(f"{family}_heldout_model-seed0.json" for family in ELEVEN_NEW)


def run_files(config: str, number: int) -> list[str]:
    """The result files (under benchmarks/results/) of a configuration's runs under a protocol."""
    prefix, groups = layout(number)
    files = [f"{prefix}{group}_{RUN_NAMES[config]}_model-seed{seed}.json" for group in groups for seed in MODEL_SEEDS]
    if number >= ELEVEN_SINCE:
        suffix = "" if config == "X18" else f"_{RUN_NAMES[config]}"
        files += [f"{PREFIX_ELEVEN}{family}_heldout{suffix}_model-seed{seed}.json"
                  for family in ELEVEN_NEW for seed in MODEL_SEEDS]
    return files


def layout(number: int) -> tuple[str, tuple[str, ...]]:
    """The file prefix and the groups of validation families a protocol's runs are in."""
    if number >= NINE_SINCE:
        return PREFIX_EIGHT, GROUPS_NINE
    return (PREFIX_EIGHT, GROUPS_EIGHT) if number >= EIGHT_SINCE else (PREFIX, TRIPLETS)


def surrogate_medians(name: str) -> dict[str, float]:
    path = RESULTS / (PREFIX + name)
    if path.suffix == ".json":
        return {f: r["puct_surrogate"]["median"] for f, r in json.loads(path.read_text())["search"].items()}
    out, family = {}, None
    for line in path.read_text().splitlines():
        head = re.match(r"^(\w+): \d+ variants", line)
        if head:
            family = head.group(1)
        values = re.match(r"^\s+puct_surrogate median\s+[\d.]+ values \[([\d, ]+)\]", line)
        if values and family:
            out[family] = statistics.median(int(v) for v in values.group(1).split(","))
    return out


def pooled_runs(config: str, number: int = 4) -> tuple[dict[str, list[int]], list[str]]:
    """Per family, the surrogate PUCT's runs over both model seeds, and the files read."""
    values, sources = {}, []
    for name in run_files(config, number):
        sources.append(name.removeprefix(layout(number)[0]))
        run = json.loads((RESULTS / name).read_text())
        if config in PROFILED_ON:
            check_profiled_on(name, run, PROFILED_ON[config])
        for family, runs in run["search"].items():
            values.setdefault(family, []).extend(runs["puct_surrogate"]["values"])
    return values, sources


def check_profiled_on(name: str, run: dict, gpu: str) -> None:
    """Refuse a run whose references' counters (any family's, trained or searched) were read on another GPU than
    its configuration names, or that read none at all."""
    read_on = {f: d.get("reference_profiled_on") for f, d in run.get("datasets", {}).items()}
    wrong = sorted(f for f, on in read_on.items() if on and gpu not in on)
    if wrong or not any(read_on.values()):
        raise SystemExit(f"{name}: its references' counters are not all read on an {gpu} "
                         f"({', '.join(f'{f}: {read_on[f]}' for f in wrong) or 'none was profiled'})")


def pooled_medians(config: str, number: int = 4) -> tuple[dict[str, float], list[str]]:
    """Per family, the median of the surrogate PUCT's runs over both model seeds, and the files read."""
    values, sources = pooled_runs(config, number)
    return {f: float(statistics.median(v)) for f, v in values.items()}, sources


def baselines(number: int = 1) -> dict[str, dict]:
    out = {}
    files = [PREFIX + name for name in BASELINES]
    if number >= EIGHT_SINCE:
        files += [PREFIX_EIGHT + name for name in BASELINES_EIGHT]
    if number >= NINE_SINCE:
        files += [PREFIX_EIGHT + name for name in BASELINES_NINE]
    if number >= ELEVEN_SINCE:
        files += [PREFIX_ELEVEN + name for name in BASELINES_ELEVEN]
    for path in files:
        for family, runs in json.loads((RESULTS / path).read_text())["search"].items():
            kt = {m: r["median"] for m, r in runs.items() if m.startswith("kt_")}
            out[family] = {"measure_all": runs["puct_measure_all"]["median"], "best_kt": min(kt.values()),
                           "best_kt_strategy": min(kt, key=kt.get)}
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", type=int, choices=sorted(PROTOCOLS), default=1)
    number = parser.parse_args(argv).protocol
    protocol, names, keep, written = PROTOCOLS[number]
    base = baselines(number)
    prefix = layout(number)[0]
    # the protocols from the twenty-second on are written in files dated as their eleven families' new runs
    result = {"protocol": (PREFIX_ELEVEN if number >= ELEVEN_SINCE else prefix) + protocol, "baselines": base,
              "configs": {}}
    print(f"{'config':8s}" + "".join(f"{f:>12s}" for f in base) + f"{'passes':>8s}{'sum':>8s}")
    for name in names:
        if number >= 4:
            medians, sources = pooled_medians(name, number)
            config = {"ranker_weight": 0.5, "measure_order": "improvement", "measure_choice": "improvement",
                      "local_novelty": NOVELTY.get(name, 3), "model_seeds": list(MODEL_SEEDS)}
            config |= {setting: values[name] for since, setting, values in SETTINGS_SINCE if number >= since}
        else:
            weight, order, choice, old, new, moments = CONFIGS[name]
            medians, sources = surrogate_medians(old) | surrogate_medians(new), [old, new]
            config = {"ranker_weight": weight, "measure_order": order}
            if choice != "beat-probability":
                config["measure_choice"] = choice
            if moments != "bins":
                config["moments"] = moments
        passes = [f for f, b in base.items() if b["measure_all"] / medians[f] >= 3 and medians[f] < b["best_kt"]]
        total = sum(medians[f] for f in base)
        result["configs"][name] = config | {"medians": medians, "passes": passes, "sum_of_medians": total,
                                            "sources": sources}
        if number >= MEANS_SINCE:
            means = {f: float(statistics.mean(v)) for f, v in pooled_runs(name, number)[0].items()}
            result["configs"][name] |= {"means": means, "sum_of_means": round(sum(means[f] for f in base), 6)}
        print(f"{name:8s}" + "".join(f"{medians[f]:12.1f}" for f in base) + f"{len(passes):8d}{total:8.1f}")
    print(f"{'all/KT':8s}" + "".join(f"{b['measure_all']:>6.1f}/{b['best_kt']:<5.1f}" for b in base.values()))
    # the rule: most passes, then the lower sum of medians, then the app's settings before
    # (from MEANS_SINCE on, then the lower sum of means; an exact tie keeps the earlier configuration)
    ranked = sorted(result["configs"], key=lambda n: (-len(result["configs"][n]["passes"]),
                                                      result["configs"][n]["sum_of_medians"],
                                                      result["configs"][n].get("sum_of_means", 0.0), n != keep, n))
    result["chosen"] = ranked[0]
    print(f"chosen: {ranked[0]} {result['configs'][ranked[0]]}")
    out = RESULTS / (prefix + written)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out.relative_to(RESULTS.parents[1])}")
    return result


if __name__ == "__main__":
    main()
