"""Nsight Compute counters of each bundled family's reference, stored in its recording's reference record.

    python kernellab/problems/tools/reference_profiles.py profile --out FILE.json [--problems a,b]
                                                                  [--recordings DIR] [--stand-in]
    python kernellab/problems/tools/reference_profiles.py store FILE.json [--recordings DIR] [--stand-in]

`profile` (on a GPU machine with ncu) profiles the reference of each problem's recording and writes
{problem: counters, or {"error": why}} to FILE.json, again after every reference, so that a call stopped by its time
limit keeps what it read (`store` it, and the next call finds those references profiled already); the recordings it
profiles are rewritten in place.
`store` (anywhere) writes the counters of such a file into the reference records of the recordings here,
so that a recording made on the device machine and its profile travel separately.
FILE.json's "_profiled_on" names the GPU the counters were read on. Counters are read on the GPU the recording was
made on; `--stand-in` reads (and stores) them on another one, and each reference record then names that GPU
(`profiler_hardware`), so that the problem page and the search benchmark say whose counters they are.

A recording is `kernellab/problems/<p>/records/h200.jsonl.gz`, or with --recordings, `DIR/<p>.jsonl.gz`
(the layout of a second recording under benchmarks/results/recordings/). The search's features read the
reference's counters (how near its roofline it runs, how its loads are served by the caches); recordings
made before references were profiled (every one until 2026-12-05) get them this way.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROBLEMS = ROOT / "kernellab" / "problems"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def recording_path(problem: str, recordings: str | None) -> Path:
    if recordings:
        return Path(recordings) / f"{problem}.jsonl.gz"
    return PROBLEMS / problem / "records" / "h200.jsonl.gz"


def chosen_problems(names: str | None, recordings: str | None) -> list[str]:
    if names:
        return [n for n in names.split(",") if n]
    return sorted(folder.name for folder in PROBLEMS.iterdir()
                  if (folder / "problem.toml").is_file() and recording_path(folder.name, recordings).is_file())


def write_found(found: dict, out: Path) -> None:
    """The counters found so far, written whole (a temporary file renamed over the last one)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text(json.dumps(found, indent=1, sort_keys=True))
    partial.replace(out)


def profile(names: list[str], recordings: str | None, out: Path, stand_in: bool = False) -> int:
    from gpu_runner import Runner, load_problem
    from gpu_runner.backends.replay import read_records
    from gpu_runner.recorder import profile_reference
    from gpu_runner.settings import RECORD_SETTINGS

    found: dict[str, dict] = {}
    failures = 0
    with Runner("cupy", settings=RECORD_SETTINGS) as runner:
        for name in names:
            path = recording_path(name, recordings)
            started = time.monotonic()
            try:
                summary = profile_reference(load_problem(PROBLEMS / name), path, runner=runner, stand_in=stand_in)
            except Exception as exc:  # one problem's failure must not lose the others' counters
                summary = {"profiled": False, "reason": f"{type(exc).__name__}: {exc}"}
            if summary.get("profiled_on"):
                found["_profiled_on"] = summary["profiled_on"]
            if summary["profiled"] or summary.get("already"):
                record = next(r for r in read_records(path) if r.get("variant") == "reference")
                found[name] = record["profiler"]
                if summary.get("already"):  # counters read earlier, on the GPU the record names
                    read_on = (record.get("profiler_hardware") or record.get("hardware") or {}).get("name")
                    found.setdefault("_profiled_on", read_on)
                print(f"{name}: {len(record['profiler'])} counters ({time.monotonic() - started:.1f} s)", flush=True)
            else:
                failures += 1
                found[name] = {"error": summary["reason"]}
                print(f"{name}: not profiled ({time.monotonic() - started:.1f} s): {summary['reason']}", flush=True)
            # After every reference: a device call cut short by its time limit still hands back the counters
            # read so far, `store` writes them here, and the next call finds those references profiled already.
            write_found(found, out)
    write_found(found, out)
    print(f"wrote {out}: {len(names) - failures} of {len(names)} references profiled"
          + (f" on {found['_profiled_on']}" if found.get("_profiled_on") else ""))
    return 0 if failures < len(names) else 1


def store(source: Path, recordings: str | None, stand_in: bool = False) -> int:
    from gpu_runner import load_problem
    from gpu_runner.recorder import store_reference_profile

    found = json.loads(source.read_text())
    profiled_on = found.pop("_profiled_on", None)
    stored = 0
    for name, counters in sorted(found.items()):
        if "error" in counters:
            print(f"{name}: skipped, it was not profiled ({counters['error']})")
            continue
        summary = store_reference_profile(load_problem(PROBLEMS / name), recording_path(name, recordings), counters,
                                          profiled_on=profiled_on, stand_in=stand_in)
        stored += bool(summary["profiled"])
        print(f"{name}: " + (f"not stored: {summary['reason']}" if not summary["profiled"] else
                             f"stored, read on {profiled_on} standing in for {summary['stand_in_for']}"
                             if summary.get("stand_in_for") else "stored"))
    print(f"stored {stored} of {len(found)}")
    return 0 if stored or not found else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    run = verbs.add_parser("profile", help="profile the references (GPU and ncu needed)")
    run.add_argument("--out", required=True, type=Path)
    run.add_argument("--problems", default=None, help="default: every problem with a recording")
    run.add_argument("--recordings", default=None, help="a folder of <problem>.jsonl.gz recordings")
    run.add_argument("--stand-in", action="store_true",
                     help="profile on a GPU other than the recording's (the records then name it)")
    keep = verbs.add_parser("store", help="store counters profiled elsewhere in the recordings here")
    keep.add_argument("source", type=Path)
    keep.add_argument("--recordings", default=None)
    keep.add_argument("--stand-in", action="store_true",
                      help="store counters read on a GPU other than the recording's, marked with it")
    args = parser.parse_args(argv)
    if args.verb == "profile":
        return profile(chosen_problems(args.problems, args.recordings), args.recordings, args.out, args.stand_in)
    return store(args.source, args.recordings, args.stand_in)


if __name__ == "__main__":
    sys.exit(main())
