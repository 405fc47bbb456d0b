"""Which surrogate a run uses, built once per process and shared between runs.

The learned surrogate starts from the recorded measurements of the bundled problems (every
problem except the run's own, so a run never forecasts from its own answers) and is retrained
online by the driver from the run's measurements. For a PyTorch (KernelBench) problem it is the
shipped program surrogate, trained on tasks outside the held-out set, which moves its level and its
confidence with the run's first measurements."""
from __future__ import annotations

import threading
from typing import Callable

from django.conf import settings

from kernellab.services.errors import ServiceError

_lock = threading.Lock()
_learned: dict[tuple[str, str, bool], object] = {}


def surrogate_for_run(run, *, llm_budget=None, reference_profiled: bool | None = None):
    """The run's surrogate. `reference_profiled` says whether the run's reference carries Nsight Compute counters
    (RunContext.reference_profile; None: read it here), which decides the learned surrogate's feature set."""
    build = SURROGATE_BUILDERS.get(run.surrogate)
    if build is None:
        raise ServiceError(f"Unknown surrogate {run.surrogate!r}.")
    if build is _learned_surrogate:
        return build(run, llm_budget, reference_profiled)
    return build(run, llm_budget)


def _llm_surrogate(run, llm_budget):
    from search_engine.surrogates.cache import SqliteCache
    from search_engine.surrogates.llm import LLMSurrogate

    from kernellab.services.run_context import llm_client

    cache = SqliteCache(settings.DATA_DIR / "forecast-cache.sqlite3")
    return LLMSurrogate(llm_client("surrogate", budget=llm_budget), cache=cache)


def _roofline_surrogate(run, llm_budget):
    from search_engine.surrogates.roofline import RooflineSurrogate

    # With "none" it is never asked: a run without a surrogate measures every candidate.
    return RooflineSurrogate()


def _learned_surrogate(run, llm_budget, reference_profiled: bool | None = None):
    from gpu_runner.spec import reference_kind

    from search_engine.surrogates.learned import DEFAULT_REFERENCE_PROFILE

    if reference_kind(run.problem.spec_toml) == "pytorch":
        return program_surrogate()
    if reference_profiled is None:
        from kernellab.services.run_context import RunContext

        reference_profiled = RunContext(run).reference_profile is not None
    # The model reads the reference's counters only where this run has them: every recorded family it learns from
    # carries them, so a run without (an uploaded problem until its first GPU measurement has profiled the
    # reference: services.reference_measurements) would hand it values it never saw, and gets the model trained
    # without those features instead; from the step after, the run's driver is built with the one that reads them.
    return learned_surrogate(exclude_problem=run.problem.name, gpu=run.target_gpu,
                             reference_profile=DEFAULT_REFERENCE_PROFILE and reference_profiled)


_program: list = []


def program_surrogate():
    """The shipped program surrogate (search_engine/surrogates/models/), which reads KernelBench
    `ModelNew` candidates; loaded once per process, each run given its own copy (a run moves its
    level with what it measures)."""
    import copy

    from search_engine.surrogates.program import SHIPPED_MODEL, ProgramSurrogate

    with _lock:
        if not _program:
            try:
                _program.append(ProgramSurrogate.shipped())
            except (ValueError, ImportError) as exc:
                raise ServiceError(f"The learned surrogate of PyTorch problems cannot be loaded from "
                                   f"{SHIPPED_MODEL.name}: {exc}") from None
        model = copy.copy(_program[0])
    model.reset_run()
    return model


# The run form offers these, in this order; a new surrogate is one function and one entry here.
SURROGATE_BUILDERS: dict[str, Callable] = {
    "learned": _learned_surrogate,
    "llm": _llm_surrogate,
    "roofline": _roofline_surrogate,
    "none": _roofline_surrogate,
}


def learned_surrogate(*, exclude_problem: str, gpu: str, reference_profile: bool | None = None):
    """The recorded-data model trained on every recorded problem but `exclude_problem`, cached on disk and in the
    process; `reference_profile` (default DEFAULT_REFERENCE_PROFILE) whether it reads the reference's counters."""
    from search_engine.surrogates.learned import (DEFAULT_CALIBRATED_MOMENTS, DEFAULT_LOCAL_INCUMBENT,
                                                  DEFAULT_LOCAL_MODEL, DEFAULT_LOCAL_NOVELTY, DEFAULT_LOCAL_PRIOR_ROWS,
                                                  DEFAULT_LOCAL_REACH,
                                                  DEFAULT_MIXTURE, DEFAULT_ORDER_PRIOR_ROWS, DEFAULT_POOLED_SPREAD,
                                                  DEFAULT_FAMILY_WEIGHTS, DEFAULT_REFERENCE_COUNTERS,
                                                  DEFAULT_REFERENCE_PROFILE, DEFAULT_SPREAD_PRIOR_ROWS,
                                                  DEFAULT_WEIGH_CALIBRATED, LearnedSurrogate)
    from search_engine.surrogates.ranker import APP_WEIGHT

    from kernellab.selectors.problems import bundled_dir

    if reference_profile is None:
        reference_profile = DEFAULT_REFERENCE_PROFILE
    key = (exclude_problem, gpu, reference_profile)
    with _lock:
        if key not in _learned:
            cache = learned_cache_path(exclude_problem=exclude_problem, gpu=gpu, reference_profile=reference_profile)
            if cache.exists():
                model = LearnedSurrogate.load(cache)
                # How a run's own measurements are used is not part of the trained model: a model cached
                # by an earlier version forecasts a run's candidates as today's would.
                model.local_novelty = DEFAULT_LOCAL_NOVELTY
                model.mixture = DEFAULT_MIXTURE
                model.local_reach = DEFAULT_LOCAL_REACH
                model.local_prior_rows = DEFAULT_LOCAL_PRIOR_ROWS
                model.order_prior_rows = DEFAULT_ORDER_PRIOR_ROWS
                model.weigh_calibrated = DEFAULT_WEIGH_CALIBRATED
                model.spread_prior_rows = DEFAULT_SPREAD_PRIOR_ROWS
                model.calibrated_moments = DEFAULT_CALIBRATED_MOMENTS
                model.pooled_spread = DEFAULT_POOLED_SPREAD
                model.local_incumbent = DEFAULT_LOCAL_INCUMBENT
                model.local_model = DEFAULT_LOCAL_MODEL
            else:
                from kernellab.datasets import all_recorded_rows

                rows = all_recorded_rows(gpu=gpu, exclude=(exclude_problem,), root=bundled_dir())
                model = LearnedSurrogate(ranker_weight=APP_WEIGHT, reference_profile=reference_profile,
                                         family_weights=DEFAULT_FAMILY_WEIGHTS,
                                         reference_counters=DEFAULT_REFERENCE_COUNTERS)
                if rows:
                    model.fit(rows, groups=[row["problem_name"] for row in rows])
                    model.save(cache)
            _learned[key] = model
        return _learned[key]


def forget_learned(*, exclude_problem: str, gpu: str) -> None:
    """Drop this process's copies of the models trained without `exclude_problem` (either feature set), so that the
    next run loads them from disk or trains them again."""
    with _lock:
        for key in [k for k in _learned if k[:2] == (exclude_problem, gpu)]:
            del _learned[key]


def learned_cache_path(*, exclude_problem: str, gpu: str, reference_profile: bool | None = None):
    """Where the app keeps the learned surrogate trained without `exclude_problem` on `gpu`'s records."""
    from search_engine.surrogates.learned import (DEFAULT_FAMILY_WEIGHTS, DEFAULT_REFERENCE_COUNTERS,
                                                  DEFAULT_REFERENCE_PROFILE)
    from search_engine.surrogates.ranker import APP_WEIGHT

    if reference_profile is None:
        reference_profile = DEFAULT_REFERENCE_PROFILE
    # "centred", "ranker": models saved before the centred target or the ranking prior are not reused;
    # "refprofile": one that reads the reference's counters is another feature set ("refprofile-portable": four of
    # them); "equalfam", "sqrtfam": another weighting of the families.
    counters = "" if DEFAULT_REFERENCE_COUNTERS == "all" else f"-{DEFAULT_REFERENCE_COUNTERS}"
    profile = (f"-refprofile{counters}" if reference_profile else "") + \
        ("" if DEFAULT_FAMILY_WEIGHTS == "rows" else f"-{DEFAULT_FAMILY_WEIGHTS}fam")
    return settings.DATA_DIR / (f"learned-surrogate-centred-ranker{APP_WEIGHT:g}{profile}-{gpu}-without-{exclude_problem}-"
                                f"{_records_stamp()}.pkl")


def _records_stamp() -> str:
    """Changes whenever a recorded dataset, the feature set or the rows built from the records change
    (kernellab.datasets.ROWS_VERSION), so a cached model is never stale."""
    import hashlib

    from kernellab.datasets import ROWS_VERSION
    from kernellab.selectors.problems import bundled_dir

    from search_engine.surrogates.features import feature_names

    digest = hashlib.sha256(" ".join(feature_names()).encode())
    digest.update(f"rows {ROWS_VERSION}".encode())
    for path in sorted(bundled_dir().glob("*/records/*.jsonl.gz")):
        stat = path.stat()
        digest.update(f"{path.name}:{stat.st_size}:{int(stat.st_mtime)}".encode())
    return digest.hexdigest()[:12]
