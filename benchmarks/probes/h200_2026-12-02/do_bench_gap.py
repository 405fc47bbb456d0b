"""Issue 19 probe: why our reference time of a few small KernelBench ops sits under triton's do_bench.

  python3 benchmarks/probes/h200_2026-12-02/do_bench_gap.py --cuda-l1 PATH/h100.jsonl [--tasks 50,84,20,64]
                                                            [--rounds 8] [--out FILE.json]

The references are the level-1 programs CUDA-L1's rows carry (`ref_code`, KernelBench's sizes of its time,
as benchmarks/kernelbench_h200.py measured them); `--kernelbench PATH/level1` takes today's KernelBench files
instead (larger sizes: 1:50 is a 2 ms conv there, 15 us in CUDA-L1's).

For each task, the reference module is timed in alternating rounds by:
  ours              gpu_runner.timing.Timer with the PyTorch worker's device, as a measurement does
                    (fresh inputs, head start, a uint8 fill_ of the flush buffer with the repetition's byte)
  ours_zero         the same with the flush written as zeros (uint8 zero_)
  ours_int32_zero   the same with the flush written as do_bench does it (an int32 buffer, zero_)
  ours_no_head      the same without the head start
  ours_same_inputs  the same without fresh inputs before each run (do_bench times one input set)
  ours_flush_rw     the flush read and written (an int32 add_ of the buffer) instead of only written
  ours_no_head_same neither head start nor fresh inputs
  do_bench          triton.testing.do_bench(warmup=25, rep=200, return_mode="all")
Every timer's round gives a median; the table shows the median of rounds and each over do_bench.
Which change closes the gap says where it comes from. Needs torch, triton and a GPU.

`--per-rep [--draws N] [--rounds R] [--tasks 20]` times only ours, keeping every run's time with the input set
it used, to see whether a run's time follows its set, the set before it, or the round.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from gpu_runner import pytorch_worker as pw  # noqa: E402
from gpu_runner.timing import Timer, time_sides  # noqa: E402


def _reference(args, number: int) -> tuple[str, str]:
    """(name, program) of level-1 task `number`."""
    if args.cuda_l1:
        with open(args.cuda_l1) as rows:
            for line in rows:
                row = json.loads(line)
                if row["level_id"] == 1 and row["task_id"] == number:
                    return f"1_{number}", row["ref_code"]
        raise SystemExit(f"no level-1 task {number} in {args.cuda_l1}")
    found = sorted(Path(args.kernelbench).glob(f"{number}_*.py"))
    if not found:
        raise SystemExit(f"no task {number} in {args.kernelbench}")
    return found[0].stem, found[0].read_text()


class _ZeroDevice(pw._TorchDevice):
    def memset(self, ptr, byte, nbytes):
        self.tensors[ptr].zero_()


class _Int32ZeroDevice(pw._TorchDevice):
    """The flush written as do_bench writes its buffer: an int32 zero_."""

    def int32(self, ptr):
        view = self.tensors.get(("int32", ptr))
        if view is None:
            view = self.tensors[ptr].view(self.torch.int32)
            self.tensors[("int32", ptr)] = view
        return view

    def memset(self, ptr, byte, nbytes):
        self.int32(ptr).zero_()


class _NoHeadDevice(pw._TorchDevice):
    head_start = None


class _ReadWriteDevice(_Int32ZeroDevice):
    """The flush read and written: an int32 add_."""

    def memset(self, ptr, byte, nbytes):
        self.int32(ptr).add_(1)


def _trimmed_mean(values, cut=0.1):
    ordered = sorted(values)
    k = int(len(ordered) * cut)
    kept = ordered[k:len(ordered) - k] or ordered
    return statistics.fmean(kept)


class _SameInputs:
    def fill(self, seed):
        pass


def probe_task(name: str, program: str, rounds: int, torch) -> dict:
    from triton.testing import do_bench

    module, _ = pw._load_program(program, name, None)
    model = module.Model(*module.get_init_inputs()).cuda().eval()
    draws = [pw._draw_inputs(module, seed, torch) for seed in range(2)]
    working = [t.clone() if isinstance(t, torch.Tensor) else t for t in draws[0]]
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
    nbytes = max(256 << 20, 4 * l2)
    timers = {}
    for label, device_class, fresh in (("ours", pw._TorchDevice, True), ("ours_zero", _ZeroDevice, True),
                                       ("ours_int32_zero", _Int32ZeroDevice, True),
                                       ("ours_no_head", _NoHeadDevice, True),
                                       ("ours_same_inputs", pw._TorchDevice, False),
                                       ("ours_flush_rw", _ReadWriteDevice, True),
                                       ("ours_no_head_same", _NoHeadDevice, False)):
        device = device_class(torch)
        flush = pw._Flush(device, nbytes)
        inputs = pw._DrawInputs(working, draws) if fresh else _SameInputs()
        timers[label] = Timer(device, inputs, flush, 1234, 10.0)
    side = pw._ModuleSide("reference", model, working)
    with torch.no_grad():
        # the measurement's own warm-up and repetitions: the count each round of ours uses
        first = time_sides(timers["ours"], [side], warmup=5, min_reps=20, max_reps=2000, target_ms=200.0)[0]
        reps = len(first)
        rows: dict[str, list[float]] = {k: [] for k in list(timers) + ["do_bench"]}
        means: dict[str, list[float]] = {k: [] for k in rows}
        trimmed: dict[str, list[float]] = {k: [] for k in rows}
        histograms: dict[str, dict] = {}

        def keep(label, samples, r):
            rows[label].append(statistics.median(samples))
            means[label].append(statistics.fmean(samples))
            trimmed[label].append(_trimmed_mean(samples))
            if r == 0:   # one round's samples, binned at 0.05 us, to see their modes
                bins: dict[str, int] = {}
                for t in samples:
                    key = f"{round(t * 1e3 / 0.05) * 0.05:.2f}"
                    bins[key] = bins.get(key, 0) + 1
                histograms[label] = dict(sorted(bins.items(), key=lambda kv: float(kv[0])))

        for r in range(rounds):
            for label, timer in timers.items():
                keep(label, timer.run([side], reps, first_rep=3_000_000 + r * reps)[0], r)
            theirs = do_bench(lambda: model(*working), warmup=25, rep=200, return_mode="all")
            keep("do_bench", [float(t) for t in theirs], r)
    medians = {k: statistics.median(v) for k, v in rows.items()}
    spread = {k: (max(v) - min(v)) / medians[k] for k, v in rows.items()}
    mean_of = {k: statistics.median(v) for k, v in means.items()}
    trimmed_of = {k: statistics.median(v) for k, v in trimmed.items()}
    return {"task": name, "reps": reps, "rounds": rows, "median_of_rounds_ms": medians,
            "round_spread": spread, "round_means": means, "round_trimmed_means": trimmed,
            "trimmed_spread": {k: (max(v) - min(v)) / trimmed_of[k] for k, v in trimmed.items()},
            "trimmed_over_do_bench": {k: trimmed_of[k] / trimmed_of["do_bench"] - 1 for k in trimmed_of
                                      if k != "do_bench"},
            "mean_over_do_bench": {k: mean_of[k] / mean_of["do_bench"] - 1 for k in mean_of if k != "do_bench"},
            "first_round_histogram_us": histograms,
            "over_do_bench": {k: medians[k] / medians["do_bench"] - 1 for k in medians if k != "do_bench"}}


class _LoggedInputs(pw._DrawInputs):
    """Fresh inputs that note which drawn set each run got."""

    def __init__(self, working, draws):
        super().__init__(working, draws)
        self.picked: list[int] = []

    def fill(self, seed: int) -> None:
        self.picked.append(seed % len(self.draws))
        super().fill(seed)


def per_rep(name: str, program: str, rounds: int, draws_n: int, torch) -> dict:
    """Our timer's every run of a few rounds with the input set it used: does a run's time follow its set,
    the set before it, or the round?"""
    module, _ = pw._load_program(program, name, None)
    model = module.Model(*module.get_init_inputs()).cuda().eval()
    draws = [pw._draw_inputs(module, seed, torch) for seed in range(draws_n)]
    working = [t.clone() if isinstance(t, torch.Tensor) else t for t in draws[0]]
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
    device = pw._TorchDevice(torch)
    flush = pw._Flush(device, max(256 << 20, 4 * l2))
    inputs = _LoggedInputs(working, draws)
    timer = Timer(device, inputs, flush, 1234, 10.0)
    side = pw._ModuleSide("reference", model, working)
    out = []
    with torch.no_grad():
        timer.run([side], 200, first_rep=1_000_000)
        for r in range(rounds):
            inputs.picked.clear()
            samples = timer.run([side], 2000, first_rep=3_000_000 + r * 2000)[0]
            picked = list(inputs.picked)
            by_set = {i: [t for t, k in zip(samples, picked) if k == i] for i in range(draws_n)}
            same = [t for j, t in enumerate(samples) if j and picked[j] == picked[j - 1]]
            other = [t for j, t in enumerate(samples) if j and picked[j] != picked[j - 1]]
            halves = [samples[:1000], samples[1000:]]
            out.append({"round": r, "median_us": statistics.median(samples) * 1e3,
                        "mean_us": statistics.fmean(samples) * 1e3,
                        "median_by_set_us": {i: statistics.median(v) * 1e3 for i, v in by_set.items() if v},
                        "runs_by_set": {i: len(v) for i, v in by_set.items()},
                        "median_after_same_set_us": statistics.median(same) * 1e3 if same else None,
                        "median_after_other_set_us": statistics.median(other) * 1e3 if other else None,
                        "median_by_half_us": [statistics.median(h) * 1e3 for h in halves],
                        "samples_us": [round(t * 1e3, 3) for t in samples], "sets": picked})
            def us(value):
                return "-" if value is None else f"{value:.2f}"

            print(f"{name} round {r}: median {out[-1]['median_us']:.2f} us; by set "
                  + ", ".join(f"{i}: {v:.2f}" for i, v in out[-1]["median_by_set_us"].items())
                  + f"; after the same set {us(out[-1]['median_after_same_set_us'])}, after another "
                  f"{us(out[-1]['median_after_other_set_us'])}; halves "
                  + ", ".join(f"{h:.2f}" for h in out[-1]["median_by_half_us"]), flush=True)
    return {"task": name, "draws": draws_n, "rounds": out}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--cuda-l1", help="a CUDA-L1 rows file (jsonl): its level-1 ref_code programs")
    source.add_argument("--kernelbench", help="KernelBench's level1 folder")
    parser.add_argument("--tasks", default="50,84,20,64")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--per-rep", action="store_true",
                        help="instead: every run of our timer in a few rounds, with the input set it used")
    parser.add_argument("--draws", type=int, default=2, help="with --per-rep: input sets drawn")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    import torch

    if args.per_rep:
        results = [per_rep(*_reference(args, int(t)), args.rounds, args.draws, torch)
                   for t in args.tasks.split(",") if t]
        doc = {"probe": "do_bench_gap per run", "date": dt.date.today().isoformat(),
               "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "tasks": results}
        out = Path(args.out or ROOT / "benchmarks" / "results" / f"probe_do_bench_gap_per_run_h200_{doc['date']}.json")
        out.write_text(json.dumps(doc))
        print(f"wrote {out}")
        return 0

    started = time.perf_counter()
    results = []
    for number in [int(t) for t in args.tasks.split(",") if t]:
        result = probe_task(*_reference(args, number), args.rounds, torch)
        results.append(result)
        cells = "  ".join(f"{k} {v * 1e3:7.2f} us ({result['over_do_bench'].get(k, 0.0):+.1%})"
                          for k, v in result["median_of_rounds_ms"].items())
        print(f"1:{number:<4} reps {result['reps']:<5} {cells}", flush=True)
        print("        10%-trimmed means over do_bench: " + "  ".join(
            f"{k} {v:+.1%} (rounds spread {result['trimmed_spread'][k]:.1%})"
            for k, v in result["trimmed_over_do_bench"].items()), flush=True)
    doc = {"probe": "do_bench_gap", "date": dt.date.today().isoformat(), "gpu": torch.cuda.get_device_name(0),
           "torch": torch.__version__, "rounds": args.rounds,
           "references": "CUDA-L1 ref_code" if args.cuda_l1 else "KernelBench files", "tasks": results,
           "seconds": round(time.perf_counter() - started, 1)}
    out = Path(args.out or ROOT / "benchmarks" / "results" / f"probe_do_bench_gap_h200_{doc['date']}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
