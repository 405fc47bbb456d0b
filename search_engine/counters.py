"""What a search has spent and seen so far: GPU measurements, forecasts, failures, LLM tokens."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass
class SearchCounters:
    measurements_requested: int = 0  # GPU measurements asked for, pending ones included: the budget's use
    measurements_done: int = 0
    forecasts: int = 0
    abstentions: int = 0
    accepted_by_forecast: int = 0
    pruned: int = 0
    unpruned: int = 0  # pruned nodes set free again by a revised forecast
    forecast_revisions: int = 0
    failed_proposals: int = 0
    duplicates: int = 0
    compile_failures: int = 0
    measurement_failures: int = 0
    rejected_approvals: int = 0
    llm_tokens_in: int = 0
    llm_tokens_out: int = 0
    forecast_latency_s: float = 0.0

    def __getitem__(self, name: str) -> int | float:
        """A counter by the name the saved state and the step event give it."""
        if name not in _NAMES:
            raise KeyError(name)
        return getattr(self, name)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> "SearchCounters":
        return cls(**{k: v for k, v in (data or {}).items() if k in _NAMES})


_NAMES = frozenset(f.name for f in fields(SearchCounters))


@dataclass
class SearchTimes:
    """What compiling and measuring have cost the search in wall time (settings.compile_share_target reads
    them). Kept apart from the counters: two runs of the same search count alike but never time alike."""

    compile_batches: int = 0
    compile_s: float = 0.0
    # of those, the batches compiled while the GPU measured the step before (settings.prefetch_while_measuring)
    prefetched_batches: int = 0
    prefetched_compile_s: float = 0.0
    measurements_timed: int = 0
    measure_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> "SearchTimes":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in known})
