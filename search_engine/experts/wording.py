"""How numbers read in expert notes: short, with units, three significant figures."""

from __future__ import annotations


def seconds(value: float) -> str:
    if value < 1e-3:
        return f"{value * 1e6:.3g} µs"
    if value < 1.0:
        return f"{value * 1e3:.3g} ms"
    return f"{value:.3g} s"


def size(value: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def count(value: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g}"


def rate(value: float, unit: str) -> str:
    """1.2e12, "B/s" -> "1.2 TB/s"."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def percent(value: float) -> str:
    return f"{value:.3g}%"


def rounded(value: float) -> float:
    """Evidence values keep four significant figures."""
    return float(f"{value:.4g}")
