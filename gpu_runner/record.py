"""`python -m gpu_runner.record <problem_dir> [--out PATH] [--limit N] [--profile-sample N] [--no-vendor] [--deadline-s S]`

With `--profile-reference`, nothing is measured: the reference of the existing recording (--out, or the
problem's own for this GPU) is profiled with Nsight Compute and its counters are stored in its record."""
from __future__ import annotations

import argparse
import json
import sys

from .recorder import profile_reference, record_family
from .runner import Runner
from .settings import RECORD_SETTINGS
from .spec import SpecError, load_problem


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_runner.record", description=__doc__)
    parser.add_argument("problem_dir")
    parser.add_argument("--out", help="default: <problem_dir>/records/<gpu>.jsonl.gz")
    parser.add_argument("--limit", type=int, default=None, help="at most this many new variants")
    parser.add_argument("--profile-sample", type=int, default=0, help="profile this many variants with ncu")
    parser.add_argument("--no-vendor", action="store_true", help="skip the [vendor] baseline")
    parser.add_argument("--backend", default="cupy", choices=["cupy", "pycuda"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per variant")
    parser.add_argument("--deadline-s", type=float, default=None,
                        help="start no variant after this many seconds (a later call resumes)")
    parser.add_argument("--profile-reference", action="store_true",
                        help="only profile the reference of the existing recording and store its counters")
    parser.add_argument("--force", action="store_true", help="with --profile-reference: profile it again")
    args = parser.parse_args(argv)
    try:
        problem = load_problem(args.problem_dir)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with Runner(args.backend, settings=RECORD_SETTINGS) as runner:
        out = args.out
        if out is None:
            hardware = runner.hardware(problem)
            if hardware is None:
                print("error: no GPU worker could start; pass --out and run where a GPU is", file=sys.stderr)
                return 2
            out = f"{args.problem_dir}/records/{hardware.slug}.jsonl.gz"
        if args.profile_reference:
            summary = profile_reference(problem, out, runner=runner, seed=args.seed, force=args.force)
            print(json.dumps(summary))
            return 0 if summary["profiled"] or summary.get("already") else 1
        summary = record_family(problem, out, limit=args.limit, profile_sample=args.profile_sample,
                                vendor=not args.no_vendor, runner=runner, seed=args.seed, timeout_s=args.timeout,
                                deadline_s=args.deadline_s)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
