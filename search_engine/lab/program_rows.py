"""Measured rows of PyTorch-program candidates (KernelBench `ModelNew` solutions), read in place:

- CUDA-L1 (`<dir>/<gpu>.jsonl`, five GPUs): on each GPU a task has up to three programs with the
  authors' speedups against eager PyTorch: the RL-written solution (`score_default`), and the two
  baselines they shipped as programs, the CUDA-graph one (`score_default / score_cuda_graph`) and the
  cuDNN-flags one (`score_default / score_cudnn`). Entries without code ('None') are not candidates.
  Their requests say `problem["rule"] = "authors"`: measured without KernelLab's guards (a program
  with no kernel of its own counts there).
- H200 records written by the torch backend (`kernellab/problems/kernelbench/records/h200.jsonl.gz`
  and bundled KernelBench-format problems `kernellab/problems/kb_*/records`): a candidate that was
  not `ok` (failed to build, wrong, or rejected by a guard) is a row without a speedup, a miss
  (`problem["rule"] = "kernellab"`: the torch backend's guards, as every run of the app applies them).

Each row: {"request": ForecastRequest, "speedup": float | None, "status", "problem_name", "task",
"gpu", "origin"}. A pool is the candidates of one task on one GPU (what one search run sees).
"""

from __future__ import annotations

import ast
import gzip
import json
import math
import re
from pathlib import Path

from search_engine.surrogates.base import ForecastRequest
from search_engine.surrogates.program_features import gpu_key

CUDA_L1_GPUS = ("a100", "h100", "l40", "3090", "h20")
GPU_NAMES = {"a100": "NVIDIA A100", "h100": "NVIDIA H100", "l40": "NVIDIA L40", "3090": "NVIDIA GeForce RTX 3090",
             "h20": "NVIDIA H20", "h200": "NVIDIA H200"}
_TASK_FILE = re.compile(r"^(\d+)_(.+)\.py$")


def task_slug(level: int, file_name: str) -> str:
    """kb<level>_<task>_<words> as KernelBench imports name a task (gpu_runner.kernelbench.task_name)."""
    match = _TASK_FILE.match(file_name)
    number, words = (match.group(1), match.group(2)) if match else ("", file_name[:-3])
    slug = re.sub(r"[^a-z0-9]+", "_", words.lower()).strip("_")[:60] or "task"
    return f"kb{level}_{number}_{slug}"


def kernelbench_tasks(kernelbench_dir: Path | None) -> dict[tuple[int, int], tuple[str, str]]:
    """(level, task) -> (problem name, reference program) from a KernelBench checkout (the folder that holds
    level1, level2 ...: a task is a file level<N>/<number>_<name>.py), or {} when none is given (None).

    A folder given that does not exist, or that holds no task, raises ValueError in one sentence naming it: the
    rows of KernelBench tasks need their references from here, and a wrong folder would drop every one of them
    without a word."""
    out: dict = {}
    if kernelbench_dir is None:
        return out
    folder = Path(kernelbench_dir)
    if not folder.exists():
        raise ValueError(f"The KernelBench folder {folder} does not exist.")
    if not folder.is_dir():
        raise ValueError(f"The KernelBench folder {folder} is a file, not a folder.")
    for level_dir in sorted(folder.glob("level*")):
        try:
            level = int(level_dir.name[5:])
        except ValueError:
            continue
        for path in level_dir.glob("*.py"):
            match = _TASK_FILE.match(path.name)
            if match:
                out[(level, int(match.group(1)))] = (task_slug(level, path.name), path.read_text())
    if not out:
        raise ValueError(f"The KernelBench folder {folder} holds no KernelBench task "
                         "(no file level<N>/<number>_<name>.py).")
    return out


def _score(value) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and x > 0 else None


def _has_code(code) -> bool:
    return isinstance(code, str) and code.strip() not in ("", "None")


def _row(reference: str, candidate: str, gpu: str, problem: str, level: int, speedup, *, status: str = "ok",
         origin: str, reference_ms: float | None = None, rule: str = "kernellab") -> dict:
    request = ForecastRequest(
        reference={"name": "reference", "source": reference}, candidate={"name": origin, "source": candidate},
        hardware={"name": GPU_NAMES.get(gpu, gpu)},
        problem={"name": problem, "level": level, "kind": "pytorch", "rule": rule}, reference_ms=reference_ms)
    return {"request": request, "speedup": speedup, "status": status, "problem_name": problem,
            "task": problem, "gpu": gpu, "origin": origin}


def check_cuda_l1(directory: Path, gpus=CUDA_L1_GPUS) -> None:
    """A ValueError naming the folder when it holds none of CUDA-L1's <gpu>.jsonl files: its rows would all be left
    out without a word, and the held-out figures read as if the data were whole."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"CUDA-L1's folder {directory} does not exist.")
    if not any((directory / f"{gpu}.jsonl").is_file() for gpu in gpus):
        raise ValueError(f"CUDA-L1's folder {directory} holds none of its files "
                         f"({', '.join(f'{gpu}.jsonl' for gpu in gpus)}).")


def cuda_l1_rows(directory: Path, kernelbench_dir: Path | None = None, gpus=CUDA_L1_GPUS) -> list[dict]:
    """CUDA-L1's programs with the authors' speedups (see the module's docstring)."""
    directory = Path(directory)
    check_cuda_l1(directory, gpus)
    names = kernelbench_tasks(kernelbench_dir)
    rows: list[dict] = []
    for gpu in gpus:
        path = directory / f"{gpu}.jsonl"
        if not path.exists():
            continue
        for line in path.open():
            entry = json.loads(line)
            level, task = int(entry["level_id"]), int(entry["task_id"])
            problem = names.get((level, task), (f"kb{level}_{task}", ""))[0]
            reference = entry.get("ref_code") or ""
            score = _score(entry.get("score_default"))
            if not _has_code(entry.get("custom_code")) or score is None or not reference:
                continue
            rows.append(_row(reference, entry["custom_code"], gpu, problem, level, score, origin="cuda-l1",
                             rule="authors"))
            for field, code_field in (("score_cuda_graph", "cuda_graph_code"), ("score_cudnn", "cudnn_code")):
                ratio = _score(entry.get(field))
                if ratio is not None and _has_code(entry.get(code_field)):
                    rows.append(_row(reference, entry[code_field], gpu, problem, level, score / ratio,
                                     origin=code_field.replace("_code", ""), rule="authors"))
    return rows


def _dict(value) -> dict:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.startswith("{"):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return {}
    return {}


def torch_record_rows(records: Path, kernelbench_dir: Path | None = None, reference_source: str | None = None
                      ) -> list[dict]:
    """Rows from a torch backend's records file: candidates, with the reference's measured time."""
    records = Path(records)
    if not records.exists():
        return []
    names = kernelbench_tasks(kernelbench_dir)
    entries = [json.loads(line) for line in gzip.open(records, "rt")]
    rows = []
    for entry in entries:
        if entry.get("variant") == "reference" or not entry.get("source"):
            continue
        problem = entry.get("problem") or ""
        match = re.match(r"^kb(\d+)_(\d+)", problem)
        reference = reference_source
        level = None
        if match:
            level = int(match.group(1))
            reference = names.get((level, int(match.group(2))), (None, reference_source))[1]
        if not reference:
            continue
        gpu = gpu_key(entry.get("hardware_name") or _dict(entry.get("hardware")).get("name") or "h200") or "h200"
        status = entry.get("status") or "failed"
        speedup = _score(entry.get("speedup")) if status == "ok" else None
        reference_ms = _score(_dict(entry.get("reference")).get("median_ms"))
        rows.append(_row(reference, entry["source"], gpu, problem, level, speedup, status=status,
                         origin=str(entry.get("variant") or "record").split(":")[0], reference_ms=reference_ms))
    return rows


def program_rows(*, cuda_l1_dir: Path | None, kernelbench_dir: Path | None, records: list[Path] = ()) -> list[dict]:
    """Every row: CUDA-L1 (where its folder is given) and the torch records files (bundled KernelBench-
    format problems are read with the reference.py beside their records folder). A KernelBench folder given
    that does not exist or holds no task raises ValueError (kernelbench_tasks)."""
    rows = cuda_l1_rows(cuda_l1_dir, kernelbench_dir) if cuda_l1_dir else []
    for path in records:
        path = Path(path)
        reference = path.parent.parent / "reference.py"
        rows += torch_record_rows(path, kernelbench_dir, reference.read_text() if reference.exists() else None)
    return rows


def pools(rows: list[dict]) -> dict[tuple[str, str], list[int]]:
    """Row indices by (task, GPU): the candidates one run on one GPU chooses among."""
    out: dict = {}
    for i, row in enumerate(rows):
        out.setdefault((row["task"], row["gpu"]), []).append(i)
    return out
