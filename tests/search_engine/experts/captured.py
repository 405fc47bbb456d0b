"""The real H200 captures in tests/fixtures/ncu (see capture.py there), loaded for the expert tests."""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path

from search_engine.experts import ExpertNote, analyse

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "ncu"


@lru_cache(maxsize=None)
def _load(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def names() -> list[str]:
    return sorted(p.stem for p in FIXTURES.glob("*.json"))


def fixture(name: str) -> dict:
    return copy.deepcopy(_load(name))


def measurement(name: str, *, drop_extras: bool = False) -> dict:
    """The MeasurementResult dict; with drop_extras, as the runner's seven sections alone give it."""
    data = fixture(name)
    result = data["measurement"]
    if drop_extras:
        extras = {m.rsplit(".", 1)[0] for m in data["fixture"]["extra_metrics"]}
        result["profiler"] = {k: v for k, v in result["profiler"].items() if k.rsplit(".", 1)[0] not in extras}
    return result


def notes_for(name: str, *, drop_extras: bool = False, result: dict | None = None) -> list[ExpertNote]:
    facts = _load(name)["fixture"]
    return analyse(result if result is not None else measurement(name, drop_extras=drop_extras),
                   flops=facts["flops"], bytes=facts["bytes"], hardware=None)


def by(notes: list[ExpertNote], expert: str) -> list[ExpertNote]:
    return [n for n in notes if n.expert == expert]


def serious(notes: list[ExpertNote], expert: str) -> list[ExpertNote]:
    """Warnings and criticals of one expert."""
    return [n for n in by(notes, expert) if n.severity != "info"]
