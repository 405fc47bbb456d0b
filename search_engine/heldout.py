"""The held-out test set (issue 20), frozen on 2026-12-01: tasks that no model, feature or setting
choice may look at. Recorded-data training refuses them (LearnedSurrogate.fit); only a final report
forecasts them, once per change worth reporting, and says so beside its figures.

Chosen by name before any result on them was read, so that no choice can lean on them:
- every KernelBench task whose number is a multiple of 5, at every level (problem names
  kb<level>_<task>_<slug>, as kernellab/problems/kernelbench and the KernelBench imports name them);
- the bundled problems listed below. None of the eight recorded families is in it: features, the
  target and the search settings were all chosen on them, so they cannot test anything.

Change this file only to add tasks that nobody has looked at yet, never to take one out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

KERNELBENCH_TASK_MULTIPLE = 5
HELD_OUT_PROBLEMS: frozenset[str] = frozenset()

_KERNELBENCH_NAME = re.compile(r"^kb(\d+)_(\d+)(?:_|$)")


class HeldOutTaskError(ValueError):
    """Training data that includes a task of the held-out test set."""


def is_held_out(problem: str) -> bool:
    """Whether a problem (a bundled problem's name or a KernelBench task's) belongs to the held-out set."""
    name = str(problem or "").strip().lower()
    if name in HELD_OUT_PROBLEMS:
        return True
    match = _KERNELBENCH_NAME.match(name)
    return bool(match) and int(match.group(2)) % KERNELBENCH_TASK_MULTIPLE == 0


def refuse_held_out(problems: Iterable) -> None:
    """Raise HeldOutTaskError, naming them, when any of these problems is held out."""
    held = sorted({str(p) for p in problems if p is not None and is_held_out(str(p))})
    if held:
        raise HeldOutTaskError(
            f"{', '.join(held[:5])}{' and others' if len(held) > 5 else ''} belong to the held-out test set "
            "(search_engine/heldout.py); leave them out of training.")
