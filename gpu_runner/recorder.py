"""Record whole families into the compact replay dataset (`records/<gpu>.jsonl.gz`).

One JSON object per line: variant id, knobs, source hash, then MeasurementResult.to_dict() fields.
Resumable: sources already in the file are skipped, new lines are appended (gzip members).
"""
from __future__ import annotations

import gzip
import json
import os
import time
import zlib
from pathlib import Path
from typing import Callable

from .backends.gpu import WorkerUnavailable
from .backends.replay import read_records
from .candidate import reference_candidate
from .family import enumerate_variants, render_variant, variant_id
from .result import MeasurementResult
from .runner import Runner
from .settings import RECORD_SETTINGS
from .spec import Problem


def recorded_hashes(path: Path) -> set[str]:
    if not path.is_file():
        return set()
    repair(path)
    return {r["source_hash"] for r in read_records(path) if "source_hash" in r}


def repair(path: Path) -> None:
    """Rewrite a dataset whose last write was cut off, so that appended records stay readable."""
    try:
        with gzip.open(path, "rt") as handle:
            for _ in handle:
                pass
        return
    except (EOFError, gzip.BadGzipFile, zlib.error):
        pass
    records = list(read_records(path))
    tmp = path.with_suffix(".repair")
    with gzip.open(tmp, "wt") as handle:
        for record in records:
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")
    os.replace(tmp, path)


def record_line(variant: str, knobs: dict | None, result: MeasurementResult) -> str:
    data = result.to_dict()
    if data.get("compiler") and not data["compiler"].get("kernels"):
        data["compiler"].pop("kernels", None)
    line = {"variant": variant, "knobs": knobs, **data}
    return json.dumps(line, separators=(",", ":"), default=str)


def record_family(problem: Problem, out_path: str | Path, *, limit: int | None = None, profile_sample: int = 0,
                  vendor: bool = True, runner: Runner | None = None, seed: int = 0, timeout_s: float = 120.0,
                  chunk: int = 256, deadline_s: float | None = None,
                  log: Callable[[str], None] | None = print) -> dict:
    """Measure the reference, the vendor baseline and every (or `limit`) family variant not yet recorded.

    With `deadline_s`, variants are measured a few at a time and none is started once that many seconds
    have passed since the call began; what is left is counted in the summary's `left` (a later call
    resumes it)."""
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    own_runner = runner is None
    runner = runner or Runner("auto", settings=RECORD_SETTINGS)
    done = recorded_hashes(out_path)
    started = time.perf_counter()
    counts: dict[str, int] = {}
    written = 0
    left = 0

    def write(variant: str, knobs: dict | None, result: MeasurementResult) -> None:
        nonlocal written
        with gzip.open(out_path, "at") as handle:
            handle.write(record_line(variant, knobs, result) + "\n")
        done.add(result.source_hash)
        counts[result.status] = counts.get(result.status, 0) + 1
        written += 1

    try:
        reference = reference_candidate(problem)
        if reference.source_hash not in done:
            result = runner.measure(problem, reference, seed=seed, timeout_s=timeout_s)
            if profile_sample and result.status == "ok":
                # The reference's own counters are a search's features (how near its roofline it runs,
                # whether its loads hit the caches), so a profiled recording always profiles it.
                profile_batch(runner, problem, [(reference, result)], seed=seed)
            write("reference", None, result)
        if vendor and problem.vendor is not None:
            from .vendor import vendor_candidate
            label = vendor_candidate(problem)
            if label.source_hash not in done:
                result = runner.measure_vendor(problem, seed=seed, timeout_s=timeout_s)
                write(label.name, None, result)
        pending = []
        if problem.family is not None:
            for knobs in enumerate_variants(problem):
                candidate = render_variant(problem, knobs)
                if candidate.source_hash in done:
                    continue
                pending.append(candidate)
                if limit is not None and len(pending) >= limit:
                    break
        total = len(pending)
        step = max(1, total // profile_sample) if profile_sample else 0
        if deadline_s is not None:
            chunk = min(chunk, 8)

        def wants_profile(global_index: int) -> bool:
            return bool(step) and global_index % step == 0 and global_index // step < profile_sample

        for first in range(0, total, chunk):
            if deadline_s is not None and time.perf_counter() - started > deadline_s:
                left = total - first
                if log:
                    log(f"{problem.name}: deadline of {deadline_s:.0f} s reached, {left} variants left")
                break
            batch = pending[first:first + chunk]
            # The profiled sample also gets an NVML energy reading (a window of ~0.1 s or more each).
            sampled = lambda i, first=first: wants_profile(first + i)  # noqa: E731
            results = runner.measure_many(problem, batch, seed=seed, timeout_s=timeout_s,
                                          profile=False, energy=sampled)
            profile_batch(runner, problem, [(c, r) for i, (c, r) in enumerate(zip(batch, results))
                                            if sampled(i) and r.status == "ok"], seed=seed)
            for candidate, result in zip(batch, results):
                write(variant_id(candidate.knobs or {}), dict(candidate.knobs or {}), result)
            if log:
                rate = (first + len(batch)) / max(1e-9, time.perf_counter() - started)
                log(f"{problem.name}: {first + len(batch)}/{total} variants, {rate:.1f}/s, {counts}")
    finally:
        if own_runner:
            runner.close()
    return {"written": written, "statuses": counts, "seconds": time.perf_counter() - started,
            "path": str(out_path), "left": left}


def profile_reference(problem: Problem, path: str | Path, *, runner: Runner | None = None, seed: int = 0,
                      force: bool = False, stand_in: bool = False) -> dict:
    """Profile the reference of an existing recording with Nsight Compute and store its counters in the
    reference's record (`profiler`), rewriting the file; the other records are kept as they are.

    Recordings made before references were profiled get their counters this way. A reference that
    already carries counters is left alone unless `force`, or unless they were a stand-in's and this call is
    not. Returns what was done, with the reason when nothing could be profiled (no reference record, a
    reference that changed since, ncu missing, a GPU other than the one the recording was made on: counters
    describe the GPU they were read on).

    `stand_in` profiles on another GPU all the same, and the record says which (`profiler_hardware`), so that
    whoever reads the counters knows they describe that GPU and not the recording's."""
    path = Path(path)
    found = _reference_record(problem, path)
    if isinstance(found, str):
        return {"path": str(path), "profiled": False, "reason": found}
    # counters a stand-in GPU read are replaced once the recording's own GPU profiles the reference
    if found.get("profiler") and not force and (stand_in or not found.get("profiler_hardware")):
        return {"path": str(path), "profiled": False, "already": True,
                "reason": "the reference already carries counters"}
    own_runner = runner is None
    runner = runner or Runner("auto", settings=RECORD_SETTINGS)
    try:
        recorded_on = (found.get("hardware") or {}).get("name")
        here = runner.hardware(problem)
        if recorded_on and here is not None and here.name != recorded_on and not stand_in:
            return {"path": str(path), "profiled": False,
                    "reason": f"the recording was made on {recorded_on} and this machine's GPU is {here.name}: its "
                              "counters would describe another GPU"}
        counters, why_not = runner.profile_reference(problem, seed=seed)
    except WorkerUnavailable as exc:  # no GPU here (or its worker cannot start): say so, change nothing
        return {"path": str(path), "profiled": False, "reason": str(exc)}
    finally:
        if own_runner:
            runner.close()
    if not counters:
        return {"path": str(path), "profiled": False, "reason": why_not}
    summary = store_reference_profile(problem, path, counters,
                                      profiled_on=here.name if here is not None else None, stand_in=stand_in)
    return summary | {"profiled_on": here.name if here is not None else None}


def store_reference_profile(problem: Problem, path: str | Path, profiler: dict, *,
                            profiled_on: str | None = None, stand_in: bool = False) -> dict:
    """Write counters measured for `problem`'s reference (here or on another machine) into the reference's
    record of the recording at `path`; every other record is rewritten unchanged.

    `profiled_on` names the GPU the counters were read on. Counters of another GPU than the recording's are
    refused unless `stand_in`, and then the record keeps that GPU's name (`profiler_hardware`: {"name": ...});
    counters read on the recording's GPU (or of unknown origin) drop an earlier stand-in's mark."""
    path = Path(path)
    found = _reference_record(problem, path)
    if isinstance(found, str):
        return {"path": str(path), "profiled": False, "reason": found}
    recorded_on = (found.get("hardware") or {}).get("name")
    other = profiled_on if profiled_on and recorded_on and profiled_on != recorded_on else None
    if other and not stand_in:
        return {"path": str(path), "profiled": False,
                "reason": f"the counters were read on {other} and the recording was made on {recorded_on} "
                          "(stored only as a stand-in, marked with the GPU they describe)"}

    def profiled(record: dict) -> dict:
        record = {k: v for k, v in record.items() if k != "profiler_hardware"} | {"profiler": dict(profiler)}
        return record | ({"profiler_hardware": {"name": other}} if other else {})

    records = list(read_records(path))
    records = [profiled(r) if r.get("variant") == "reference" else r for r in records]
    tmp = path.with_suffix(".profiled")
    with gzip.open(tmp, "wt") as handle:
        for line in records:
            handle.write(json.dumps(line, separators=(",", ":"), default=str) + "\n")
    os.replace(tmp, path)
    return {"path": str(path), "profiled": True, "metrics": len(profiler), "stand_in_for": recorded_on if other else None}


def _reference_record(problem: Problem, path: Path) -> dict | str:
    """The recording's reference record, or why there is none to profile."""
    if not path.is_file():
        return "no such recording"
    repair(path)
    record = next((r for r in read_records(path) if r.get("variant") == "reference"), None)
    if record is None:
        return "the recording has no reference record"
    if record.get("source_hash") != reference_candidate(problem).source_hash:
        return "the reference changed since it was recorded"
    return record


def profile_batch(runner: Runner, problem: Problem, pairs: list, *, seed: int) -> None:
    """Nsight Compute metrics for many variants under one ncu start (a start costs seconds)."""
    if not pairs:
        return
    from .compiler import compile_cubin
    from .observers import ObserverUnavailable
    from .observers.ncu import NcuObserver

    backend = runner.backend_for(problem)
    module = getattr(backend, "device_module", "")
    if not module:
        return
    arch = backend.arch
    items = [(candidate, compile_cubin(candidate.source, candidate.compile_options, arch).cubin)
             for candidate, _ in pairs]
    try:
        metrics = NcuObserver().profile_many(problem, items, module, seed=seed)
    except ObserverUnavailable as exc:
        for _, result in pairs:
            result.observer_errors["ncu"] = str(exc)
        return
    for (_, result), found in zip(pairs, metrics):
        if found:
            result.profiler = found
        else:
            result.observer_errors["ncu"] = "ncu returned no rows for this candidate's launches"
