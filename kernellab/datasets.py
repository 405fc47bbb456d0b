"""Recorded measurements as training and evaluation rows (plain Python: no Django needed).

A recorded line holds a variant's knobs and source hash, not its source; the source is rendered
again from the bundled problem's template, and its hash is checked against the record."""
from __future__ import annotations

from pathlib import Path

BUNDLED_DIR = Path(__file__).resolve().parent / "problems"
# Changes whenever the rows built from the same records change, so that a model trained on older rows is not reused
# (kernellab.services.surrogates._records_stamp). 2: one reference time per recording (2026-12-05).
ROWS_VERSION = 2


def bundled_problem_dirs(root: Path = BUNDLED_DIR) -> list[Path]:
    """The bundled CUDA problems whose records train the surrogates (a KernelBench-format problem's
    records are of PyTorch programs, which the CUDA features cannot read)."""
    from gpu_runner.spec import reference_kind

    return sorted(p for p in root.iterdir() if (p / "problem.toml").exists()
                  and reference_kind((p / "problem.toml").read_text()) == "cuda")


def problem_numbers(spec) -> dict:
    case = dict(spec.default_case.sizes)
    roofline = spec.roofline
    return {
        "name": spec.name,
        "title": spec.title,
        "description": spec.description,
        "sizes": case,
        "flops": float(roofline.flops.evaluate(case)) if roofline.flops is not None else None,
        "bytes": float(roofline.bytes.evaluate(case)) if roofline.bytes is not None else None,
    }


def recording_reference_ms(records) -> float | None:
    """The reference time a search of this recording forecasts with: the first record's reference median, as the app's
    runs read it (kernellab.services.run_context.RunContext.reference_ms) and the search benchmark's Dataset does. Each
    record carries the reference as timed beside that variant, within a few percent of each other; a model trained on
    those would see a reference time that moves within a problem, and forecast with one that does not."""
    for record in records:
        median = (record.get("reference") or {}).get("median_ms")
        if median:
            return float(median)
    return None


def recorded_rows(problem_dir: Path, *, gpu: str = "h200", only_ok: bool = True) -> list[dict]:
    """One row per recorded variant: the fields of search_engine's ForecastRequest plus the
    measured speedup, knobs, status and the whole record. Every row of a recording carries the same reference time
    (recording_reference_ms), the one a search forecasts with."""
    from gpu_runner import load_problem, reference_candidate, render_variant
    from gpu_runner.backends.replay import read_records

    path = Path(problem_dir) / "records" / f"{gpu}.jsonl.gz"
    if not path.exists():
        return []
    spec = load_problem(problem_dir)
    reference = reference_candidate(spec).to_dict()
    problem = problem_numbers(spec)
    records = list(read_records(path))
    reference_record = next((r for r in records if r.get("variant") == "reference"), None)
    reference_facts = (reference_record or {}).get("compiler")
    reference_profile = (reference_record or {}).get("profiler") or None
    reference_ms = recording_reference_ms(records)
    rows = []
    for record in records:
        if not record.get("knobs") or (only_ok and record.get("status") != "ok"):
            continue
        candidate = render_variant(spec, record["knobs"])
        if candidate.source_hash != record.get("source_hash"):
            continue  # the template changed since this was recorded
        rows.append(
            {
                "problem_name": spec.name,
                "reference": reference,
                "candidate": candidate.to_dict(),
                "hardware": record.get("hardware") or {},
                "problem": problem,
                "compiler_facts": record.get("compiler"),
                "reference_compiler_facts": reference_facts,
                "reference_profile": reference_profile,
                "reference_ms": reference_ms,
                "speedup": record.get("speedup"),
                "status": record.get("status"),
                "knobs": record["knobs"],
                "record": record,
            }
        )
    return rows


def all_recorded_rows(*, gpu: str = "h200", exclude: tuple[str, ...] = (), root: Path = BUNDLED_DIR) -> list[dict]:
    rows: list[dict] = []
    for folder in bundled_problem_dirs(root):
        if folder.name not in exclude:
            rows.extend(recorded_rows(folder, gpu=gpu))
    return rows
