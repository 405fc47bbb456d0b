"""The driver's window on the outside world: compile, measure, publish. A Celery task, a benchmark and a
unit test each give the driver their own port; nothing else differs between them."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from search_engine.candidates import Candidate
from search_engine.events import SearchEvent


@runtime_checkable
class SearchPort(Protocol):
    """What the driver needs from the outside world."""

    def compile(self, node_id: int, candidate: Candidate) -> dict:
        """Static check: {"status": "ok" | "failed-compile", "reason": str, "compiler": {facts} | None}."""
        ...

    def request_measurement(self, node_id: int, candidate: Candidate) -> dict | None:
        """Measure on the GPU: a MeasurementResult.to_dict() now, or None when it will arrive later
        through driver.on_measurement(node_id, result)."""
        ...

    def publish(self, event: SearchEvent) -> None:
        """Every change of the tree, as one of the typed events of events.py."""
        ...


# A port may also offer compile_many(items: list[(node_id, candidate)]) -> list[dict], the same answers
# as compile in the same order; the driver then hands it each step's children at once, so their compile
# checks run in parallel. It is optional: the Protocol above is what every port must have.
# Likewise prepare_measurements(items: list[(node_id, candidate)]) -> None: the step's measurements, all
# of them, just before the driver requests them one by one, so that a port whose measurements run here
# can do their slow CPU part at once on every core (the benchmark's port counts their SASS opcodes, about
# 0.5 s of cuobjdump per cubin, which a measurement of 20 ms would otherwise wait for, one at a time).
