"""Recalibration of bin forecasts, fitted on a calibration split and applied to new forecasts.

- temperature scaling: p ∝ p^(1/T), one T minimising the negative log-likelihood (the same fit the
  learned surrogate uses on its out-of-fold predictions);
- isotonic: one monotone map per bin (one-vs-rest, as scikit-learn's CalibratedClassifierCV does for
  several classes), then renormalised. Probabilities are floored at `floor` first, so that a bin the
  calibration split never saw keeps some mass and the NLL stays finite.

Abstentions stay abstentions.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from sklearn.isotonic import IsotonicRegression

from search_engine.surrogates.base import Forecast
from search_engine.surrogates.learned import _fit_temperature, _temper

METHODS = ("temperature", "isotonic")


class TemperatureScaling:
    name = "temperature"

    def __init__(self, temperature: float = 1.0) -> None:
        self.temperature = float(temperature)

    def fit(self, probabilities: np.ndarray, true_bins) -> "TemperatureScaling":
        probabilities, y = _checked(probabilities, true_bins)
        self.temperature = _fit_temperature(probabilities, y)
        return self

    def apply(self, probabilities: np.ndarray) -> np.ndarray:
        return _temper(np.asarray(probabilities, dtype=float), self.temperature)

    def to_dict(self) -> dict:
        return {"method": self.name, "temperature": self.temperature}


class IsotonicCalibration:
    name = "isotonic"

    def __init__(self, floor: float = 1e-3) -> None:
        self.floor = floor
        self.maps: list[tuple[list[float], list[float]]] = []

    def fit(self, probabilities: np.ndarray, true_bins) -> "IsotonicCalibration":
        probabilities, y = _checked(probabilities, true_bins)
        self.maps = []
        for b in range(probabilities.shape[1]):
            target = (y == b + 1).astype(float)
            iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(probabilities[:, b], target)
            self.maps.append(([float(x) for x in iso.X_thresholds_], [float(v) for v in iso.y_thresholds_]))
        return self

    def apply(self, probabilities: np.ndarray) -> np.ndarray:
        probabilities = np.asarray(probabilities, dtype=float)
        if not self.maps:
            raise ValueError("The isotonic calibration is not fitted.")
        out = np.empty_like(probabilities)
        for b, (xs, ys) in enumerate(self.maps):
            out[:, b] = np.interp(probabilities[:, b], xs, ys) if len(xs) > 1 else (ys[0] if ys else 0.0)
        out = np.maximum(out, self.floor)
        return out / out.sum(axis=1, keepdims=True)

    def to_dict(self) -> dict:
        return {"method": self.name, "floor": self.floor, "maps": self.maps}


def make(method: str):
    if method == "temperature":
        return TemperatureScaling()
    if method == "isotonic":
        return IsotonicCalibration()
    raise ValueError(f"Unknown recalibration {method!r}; use {' or '.join(METHODS)}.")


def from_dict(data: dict):
    if data.get("method") == "temperature":
        return TemperatureScaling(data["temperature"])
    if data.get("method") == "isotonic":
        model = IsotonicCalibration(data.get("floor", 1e-3))
        model.maps = [(list(xs), list(ys)) for xs, ys in data["maps"]]
        return model
    raise ValueError("Not a saved recalibration (method must be temperature or isotonic).")


def fit_on_forecasts(method: str, forecasts: list[Forecast], true_bins: list[int]):
    """Fit on the answered forecasts of a calibration split."""
    pairs = [(f.probabilities, t) for f, t in zip(forecasts, true_bins) if not f.abstained and f.probabilities]
    if len(pairs) < 2:
        raise ValueError("Recalibration needs at least two answered forecasts in the calibration split.")
    probabilities = np.array([p for p, _ in pairs], dtype=float)
    return make(method).fit(probabilities, [t for _, t in pairs])


def apply_to_forecasts(recalibrator, forecasts: list[Forecast]) -> list[Forecast]:
    answered = [i for i, f in enumerate(forecasts) if not f.abstained and f.probabilities]
    out = list(forecasts)
    if not answered:
        return out
    probabilities = recalibrator.apply(np.array([forecasts[i].probabilities for i in answered], dtype=float))
    for i, p in zip(answered, probabilities):
        fresh = Forecast.from_probabilities(p, surrogate=forecasts[i].surrogate, reasoning=forecasts[i].reasoning)
        out[i] = replace(forecasts[i], probabilities=fresh.probabilities, bin=fresh.bin, confidence=fresh.confidence)
    return out


def _checked(probabilities, true_bins) -> tuple[np.ndarray, np.ndarray]:
    probabilities = np.asarray(probabilities, dtype=float)
    y = np.asarray(list(true_bins), dtype=int)
    if probabilities.ndim != 2 or probabilities.shape[0] != y.size or probabilities.shape[0] == 0:
        raise ValueError("Recalibration needs one row of bin probabilities per true bin.")
    if y.min() < 1 or y.max() > probabilities.shape[1]:
        raise ValueError(f"True bins must be within 1..{probabilities.shape[1]}.")
    return probabilities, y
