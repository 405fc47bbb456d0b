"""Fuzz real runs with malformed LLM answers at scale (issue 18: an LLM answer must never end a run).

A stub OpenAI-compatible server on loopback answers every generator and surrogate call of real runs
(LLM generator + LLM surrogate, replay backend, the bundled saxpy problem, Celery eager) with a
seeded draw from tests/llm_stub.py's catalogue: broken envelopes, wrong types, NaN/Infinity/1e400,
100k-deep nesting, cut-off bodies, huge strings, HTTP errors and slow answers, and some good answers
so that the runs grow. Prints a table and writes benchmarks/results/llm_fuzz_<date>.json.

    python benchmarks/llm_fuzz.py --answers 3000 --seed 18
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=3000, help="answers to serve at least")
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--llm-call-budget", type=int, default=50, help="LLM calls per run")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / f"llm_fuzz_{date.today():%Y-%m-%d}.json")
    args = parser.parse_args()

    data = Path(tempfile.mkdtemp(prefix="kl-llm-fuzz-"))
    os.environ["KERNELLAB_DATA_DIR"] = str(data)
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kernellab.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from kernellab.config import LLMEndpoint
    from kernellab.models import Membership, Workspace
    from kernellab.services.problems import problem_load_bundled
    from tests.llm_stub import AnswerCatalogue, StubServer, fuzz_runs, recorded_saxpy_variants

    call_command("migrate", verbosity=0)
    settings.KERNELLAB_PROBLEMS_DIR = str(ROOT / "tests" / "gpu_runner" / "problems")
    workspace = Workspace.objects.create(name="Fuzz", slug="fuzz")
    user = get_user_model().objects.create_user(username="fuzzer", password="fuzz-pw-123456")
    Membership.objects.create(workspace=workspace, user=user, role="engineer")
    saxpy = next(p for p in problem_load_bundled(workspace=workspace) if p.name == "saxpy")

    with StubServer(AnswerCatalogue(seed=args.seed, variants=recorded_saxpy_variants()[:6])) as stub:
        settings.KERNELLAB_LLM = LLMEndpoint(base_url=stub.base_url, api_key="stub", surrogate_model="stub",
                                             generator_model="stub", timeout_s=0.3, max_retries=0)  # slow answers take 1.3 s
        result = fuzz_runs(problem=saxpy, user=user, stub=stub, min_answers=args.answers,
                           llm_call_budget=args.llm_call_budget, max_runs=10_000)

    result = {"date": f"{date.today():%Y-%m-%d}", "seed": args.seed, "llm_call_budget_per_run": args.llm_call_budget,
              "machine": platform.node(), "python": platform.python_version(), "cpus": os.cpu_count(), **result}
    rows = [
        ("answers served", result["answers"]),
        ("  of them unusable", result["malformed_answers"]),
        ("  to the generator / unusable", f"{result['generator_answers']} / {result['generator_malformed']}"),
        ("  to the surrogate / unusable", f"{result['surrogate_answers']} / {result['surrogate_malformed']}"),
        ("runs", result["runs"]),
        ("failed runs", result["failed_runs"]),
        ("worker crashes", result["worker_crashes"]),
        ("failed proposals recorded", result["generator_failures_recorded"]),
        ("abstentions recorded", result["surrogate_abstentions_recorded"]),
        ("unreadable reasons", result["unreadable_reasons"]),
        ("seconds", result["seconds"]),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    ok = result["failed_runs"] == 0 and result["worker_crashes"] == 0 and result["unreadable_reasons"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
