"""Search memory: short lessons of what changed and what it did, rendered into generator prompts."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

KIND_WEIGHT = {"improved": 3.0, "regressed": 2.0, "failed": 2.0, "neutral": 1.0, "forecast": 0.5}


@dataclass
class Lesson:
    kind: str  # improved | regressed | neutral | failed | forecast
    change: str  # what changed, in a sentence
    effect: str  # measured or forecast effect, or why it failed
    source: str  # measured | forecast | failure
    node_id: int | None = None
    count: int = 1
    last_seen: int = 0

    @property
    def weight(self) -> float:
        return KIND_WEIGHT.get(self.kind, 1.0)

    def line(self) -> str:
        seen = f" (seen {self.count}x)" if self.count > 1 else ""
        return f"- [{self.kind}, {self.source}] {self.change} -> {self.effect}{seen}"


def _key(kind: str, change: str) -> str:
    text = re.sub(r"\s+", " ", change.lower()).strip()
    text = re.sub(r"\d+(\.\d+)?", "#", text)
    return f"{kind}:{text[:160]}"


class SearchMemory:
    """Deduplicated (by kind and change, numbers ignored), capped lessons; the least important go first."""

    def __init__(self, cap: int = 40, max_change_chars: int = 200) -> None:
        self.cap = cap
        self.max_change_chars = max_change_chars
        self.lessons: list[Lesson] = []
        self._clock = 0

    def add(self, kind: str, change: str, effect: str, source: str, node_id: int | None = None) -> bool:
        """Record a lesson; returns False when it repeated an existing one (which is refreshed)."""
        self._clock += 1
        change = _shorten(change, self.max_change_chars) or "(no rationale given)"
        effect = _shorten(effect, self.max_change_chars)
        key = _key(kind, change)
        for lesson in self.lessons:
            if _key(lesson.kind, lesson.change) == key:
                lesson.count += 1
                lesson.effect = effect
                lesson.source = source
                lesson.node_id = node_id
                lesson.last_seen = self._clock
                return False
        self.lessons.append(Lesson(kind, change, effect, source, node_id, 1, self._clock))
        while len(self.lessons) > self.cap:
            victim = min(self.lessons, key=lambda l: (l.weight, l.last_seen))
            self.lessons.remove(victim)
        return True

    def render(self, max_lessons: int = 12, max_chars: int = 2500) -> str:
        if not self.lessons:
            return "No lessons yet."
        ranked = sorted(self.lessons, key=lambda l: (-l.weight, -l.last_seen))[:max_lessons]
        out, used = [], 0
        for lesson in ranked:
            line = lesson.line()
            if used + len(line) + 1 > max_chars:
                break
            out.append(line)
            used += len(line) + 1
        return "\n".join(out)

    def to_dict(self) -> dict:
        return {"cap": self.cap, "max_change_chars": self.max_change_chars, "clock": self._clock,
                "lessons": [asdict(l) for l in self.lessons]}

    @classmethod
    def from_dict(cls, data: dict | None) -> "SearchMemory":
        data = data or {}
        memory = cls(cap=data.get("cap", 40), max_change_chars=data.get("max_change_chars", 200))
        memory._clock = data.get("clock", 0)
        memory.lessons = [Lesson(**raw) for raw in data.get("lessons", [])]
        return memory


def _shorten(text: str, limit: int) -> str:
    text = re.sub(r"\s+", " ", text or "").strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
