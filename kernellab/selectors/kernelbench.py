"""Reads for KernelBench problems: the recorded H200 measurements of LLM-written solutions beside the
speedups their authors reported on other GPUs."""
from __future__ import annotations

import functools
from pathlib import Path

from kernellab.models import Problem
from kernellab.selectors.problems import bundled_dir

KERNELBENCH_RECORDS = Path("kernelbench") / "records" / "h200.jsonl.gz"


@functools.lru_cache(maxsize=4)
def _records(path: str, mtime: float) -> dict[str, list[dict]]:
    from gpu_runner.backends.replay import read_records

    by_problem: dict[str, list[dict]] = {}
    for record in read_records(Path(path)):
        by_problem.setdefault(record.get("problem", ""), []).append(record)
    return by_problem


def kernelbench_records(*, problem_name: str) -> list[dict]:
    path = bundled_dir() / KERNELBENCH_RECORDS
    if not path.is_file():
        return []
    return _records(str(path), path.stat().st_mtime).get(problem_name, [])


def kernelbench_h200_comparison(*, problem: Problem) -> dict | None:
    """Each recorded solution's H200 verdict and speedup over eager PyTorch, with the authors' H100 and
    A100 figures for the same source; None when this problem was not recorded."""
    records = kernelbench_records(problem_name=problem.name)
    if not records:
        return None
    reference = next((r for r in records if r.get("variant") == "reference"), None)
    rows = []
    for record in records:
        if record.get("variant") in ("reference",) or record.get("variant", "").startswith("baseline:"):
            continue
        authors = record.get("authors_speedup") or {}
        speedup = record.get("speedup") if record.get("status") == "ok" else None
        rows.append({
            "variant": record.get("variant"),
            "replayed_from": ", ".join(record.get("solution_gpus") or []),
            "status": record.get("status"),
            "reason": record.get("reason", ""),
            "verdict_notes": record.get("pytorch_notes") or [],
            "h200_speedup": speedup,
            "h100_speedup": authors.get("h100"),
            "a100_speedup": authors.get("a100"),
            "slower_than_eager": speedup is not None and speedup < 1.0,
        })
    baselines = {r["variant"].split(":", 1)[1]: (r.get("candidate") or {}).get("median_ms")
                 for r in records if r.get("variant", "").startswith("baseline:") and r.get("status") == "ok"}
    return {"rows": rows, "reference_ms": ((reference or {}).get("reference") or {}).get("median_ms"),
            "baselines_ms": baselines, "hardware": ((reference or records[0]).get("hardware") or {}).get("name")}
