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
    records, origin = kernelbench_records(problem_name=problem.name), "cuda-l1"
    if not records and problem.bundled:
        from gpu_runner.backends.replay import read_records

        from kernellab.selectors.problems import problem_records_file

        own = problem_records_file(problem, "h200")
        records, origin = (list(read_records(own)) if own.is_file() else []), "bundled"
    if not records:
        return None
    reference = next((r for r in records if r.get("variant") == "reference"), None)
    rows = []
    for record in records:
        if record.get("variant") in ("reference",) or record.get("variant", "").startswith("baseline:"):
            continue
        authors = record.get("authors_speedup") or {}
        # Measured whenever it ran correct and was timed, also when a guard rejected it (a PyTorch-level rewrite
        # is still a program that ran that fast); the verdict beside it says which.
        speedup = record.get("speedup")
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
    baselines = {name: stats.get("median_ms") for name, stats in ((reference or {}).get("baselines") or {}).items()
                 if isinstance(stats, dict) and stats.get("median_ms")}
    return {"origin": origin, "rows": rows, "reference_ms": ((reference or {}).get("reference") or {}).get("median_ms"),
            "reference_note": _reference_note((reference or {}).get("reference_vs_kernelbench")),
            "baselines_ms": baselines, "hardware": ((reference or records[0]).get("hardware") or {}).get("name")}


def _reference_note(agreement: str | None) -> str | None:
    """What the page says when CUDA-L1's copy of the reference (the one measured) is not this problem's file."""
    if agreement in (None, "same"):
        return None
    if agreement == "another model":
        return ("CUDA-L1's copy of this task's reference differs from this problem's file in its model code, not "
                "only in sizes: these solutions were written and measured for that version.")
    return f"Measured with CUDA-L1's copy of this task's reference: {agreement} than this problem's file."


CUDA_L1_GPUS = ("h100", "a100", "l40", "3090", "h20")
MAX_RECORDED_SOLUTIONS = 5


def cuda_l1_dir() -> Path:
    """Where CUDA-L1's solutions are read in place: KERNELLAB_CUDA_L1_DIR, else ../shared/datasets/cuda-l1."""
    import os

    from django.conf import settings

    configured = getattr(settings, "KERNELLAB_CUDA_L1_DIR", None) or os.environ.get("KERNELLAB_CUDA_L1_DIR")
    return Path(configured) if configured else Path(settings.BASE_DIR).parent / "shared" / "datasets" / "cuda-l1"


@functools.lru_cache(maxsize=8)
def _cuda_l1_rows(path: str, mtime: float) -> dict[tuple[int, int], list[dict]]:
    import json

    by_task: dict[tuple[int, int], list[dict]] = {}
    with open(path) as handle:
        for line in handle:
            if not line.strip():
                continue
            row = json.loads(line)
            # CUDA-L1 writes the text "None" where a GPU has no solution for the task.
            if isinstance(row, dict) and row.get("custom_code") and row["custom_code"].strip() != "None":
                by_task.setdefault((int(row["level_id"]), int(row["task_id"])), []).append(row)
    return by_task


def kernelbench_task(*, problem: Problem) -> tuple[int, int] | None:
    """(level, task) from the problem's [kernelbench] table, set when it was imported from KernelBench."""
    import tomllib

    try:
        table = tomllib.loads(problem.spec_toml).get("kernelbench") or {}
    except tomllib.TOMLDecodeError:
        return None
    level, task = table.get("level"), table.get("task")
    return (int(level), int(task)) if isinstance(level, int) and isinstance(task, int) else None


MAX_LAB_SOLUTIONS = 64


@functools.lru_cache(maxsize=16)
def _lab_dataset_solutions(path: str, mtime: float) -> dict[str, list[tuple]]:
    """A lab dataset's candidates by problem: (source, launch, temps, options, label), comparisons' candidates
    and pairs' children; a file that does not read is left out (the lab pages say why)."""
    from search_engine.lab.datasets import DatasetError, read_dataset, row_id, row_problem, row_speedup

    try:
        dataset = read_dataset(path)
    except (DatasetError, OSError, ValueError):
        return {}
    by_problem: dict[str, list[tuple]] = {}
    prefix = "candidate" if dataset.kind == "comparison" else "child"
    for row in dataset.rows:
        hardware = row.get("hardware")
        hardware = hardware.get("name", "") if isinstance(hardware, dict) else str(hardware or "")
        label = f"lab dataset {Path(path).stem} row {row_id(row)} ({row_speedup(row):.2f}x on {hardware or 'a GPU'})"
        by_problem.setdefault(row_problem(row), []).append(
            (row[f"{prefix}_code"], tuple(row.get(f"{prefix}_launch") or ()), tuple(row.get(f"{prefix}_temps") or ()),
             tuple(row.get(f"{prefix}_compile_options") or ()), label))
    return by_problem


def lab_dataset_solutions(*, problem: Problem) -> list:
    """Candidates for this problem in the workspace's lab datasets (the GPU Forecasters layout that
    import_dataset stores), one per distinct source, in file and row order."""
    from search_engine.generators.replayed import RecordedSolution

    from kernellab.selectors.lab import lab_datasets_dir

    folder = lab_datasets_dir(problem.workspace)
    solutions, seen = [], set()
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        for source, launch, temps, options, label in _lab_dataset_solutions(str(path), path.stat().st_mtime).get(
                problem.name, []):
            if source in seen or len(solutions) >= MAX_LAB_SOLUTIONS:
                continue
            seen.add(source)
            solutions.append(RecordedSolution(source=source, label=label, launch=launch, temps=temps,
                                              compile_options=options))
    return solutions


def recorded_solutions(*, problem: Problem):
    """(solutions, dataset) for the replayed generator: a bundled KernelBench-format problem's own
    candidates/, else the CUDA-L1 solutions of its KernelBench task (one per distinct source, up to five,
    in GPU order); then the candidates of this problem in the workspace's lab datasets."""
    from search_engine.generators.replayed import RecordedSolution

    solutions, sources = [], []
    folder = bundled_dir() / problem.name / "candidates"
    if problem.bundled and folder.is_dir():
        solutions = [RecordedSolution(source=path.read_text(), label=f"bundled candidate {path.stem}")
                     for path in sorted(folder.glob("*.py"))]
        sources.append(f"the problem's bundled candidates ({len(solutions)})")
    task = kernelbench_task(problem=problem)
    seen = {s.source for s in solutions}
    cuda_l1 = cuda_l1_dir()
    found = 0
    for gpu in CUDA_L1_GPUS if task else ():
        path = cuda_l1 / f"{gpu}.jsonl"
        if not path.is_file():
            continue
        for row in _cuda_l1_rows(str(path), path.stat().st_mtime).get(task, []):
            if row["custom_code"] in seen or found >= MAX_RECORDED_SOLUTIONS:
                continue
            seen.add(row["custom_code"])
            found += 1
            solutions.append(RecordedSolution(source=row["custom_code"],
                                              label=f"CUDA-L1 {gpu} solution (authors: {row.get('score_default')}x "
                                                    f"on the {gpu.upper()})"))
    if found:
        sources.append(f"CUDA-L1 ({cuda_l1})")
    lab = [s for s in lab_dataset_solutions(problem=problem) if s.source not in seen]
    if lab:
        solutions += lab
        sources.append("the workspace's lab datasets")
    return solutions, " and ".join(sources)
