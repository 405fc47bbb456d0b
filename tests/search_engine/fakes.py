"""Fakes for search_engine tests: a synthetic knob family, an in-memory port, a table-driven surrogate."""

from __future__ import annotations

import hashlib
import math

from search_engine.bins import DEFAULT_BINS
from search_engine.candidates import candidate_hash, make_candidate
from search_engine.generators.template import KnobSpace, TemplateGenerator
from search_engine.surrogates.base import Forecast

FAMILY_SOURCE = """
extern "C" __global__ void scale_family(const float* x, float* y, int n) {
    int base = (blockIdx.x * BLOCK + threadIdx.x) * ITEMS * VEC;
#if defined(ALGO_shared)
    __shared__ float tile[BLOCK * ITEMS * VEC];
#endif
    #pragma unroll
    for (int i = 0; i < ITEMS * VEC; ++i) {
        int j = base + i;
        if (j < n) y[j] = 2.0f * x[j];
    }
}
"""

REFERENCE = make_candidate(
    'extern "C" __global__ void scale(const float* x, float* y, int n) {\n'
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = 2.0f * x[i];\n}\n",
    [{"kernel": "scale", "grid": ["ceil_div(N, 256)"], "block": [256], "shared": "0", "args": ["x", "y", "n"]}],
    name="reference",
)

KNOBS = {"BLOCK": [64, 128, 256, 512, 1024], "ITEMS": [1, 2, 4, 8], "VEC": [1, 2, 4], "ALGO": ["naive", "shared"]}
CONSTRAINTS = ["BLOCK * ITEMS * VEC <= 8192", "ALGO != 'shared' or BLOCK >= 128"]


def render(knobs: dict):
    defines = []
    for name, value in knobs.items():
        defines.append(f"#define {name}_{value} 1" if isinstance(value, str) else f"#define {name} {value}")
    launch = [{"kernel": "scale_family", "grid": [f"ceil_div(N, {knobs['BLOCK'] * knobs['ITEMS'] * knobs['VEC']})"],
               "block": [knobs["BLOCK"]], "shared": "0", "args": ["x", "y", "n"]}]
    name = "-".join(f"{k}{v}" for k, v in knobs.items())
    return make_candidate("\n".join(defines) + FAMILY_SOURCE, launch, knobs=dict(knobs), name=name)


def true_speedup(knobs: dict) -> float | str:
    """A made-up landscape with one clear optimum and a few failures (not GPU physics)."""
    if knobs["BLOCK"] * knobs["ITEMS"] * knobs["VEC"] > 4096 and knobs["ALGO"] == "shared":
        return "failed-compile"
    if knobs["ITEMS"] == 8 and knobs["VEC"] == 4 and knobs["BLOCK"] == 64:
        return "failed-correctness"
    s = 1.0
    s *= {64: 0.6, 128: 0.9, 256: 1.0, 512: 1.1, 1024: 0.8}[knobs["BLOCK"]]
    s *= {1: 1.0, 2: 1.3, 4: 1.5, 8: 1.2}[knobs["ITEMS"]]
    s *= {1: 1.0, 2: 1.4, 4: 2.0}[knobs["VEC"]]
    s *= {"naive": 1.0, "shared": 0.7}[knobs["ALGO"]]
    return s


def space() -> KnobSpace:
    return KnobSpace(KNOBS, CONSTRAINTS)


class FakePort:
    """In-memory port driven by synthetic speedups; measures at once, or later when asynchronous."""

    def __init__(self, asynchronous: bool = False):
        self.asynchronous = asynchronous
        self.events: list[dict] = []
        self.requests: list[int] = []
        self.compiled: list[int] = []
        self.by_hash = {}

    def outcome(self, candidate):
        knobs = candidate.get("knobs")
        if knobs is None:
            return 1.0
        return true_speedup(knobs)

    def compile(self, node_id, candidate):
        self.compiled.append(node_id)
        if self.outcome(candidate) == "failed-compile":
            return {"status": "failed-compile", "reason": "ptxas error: too much shared data", "compiler": None}
        return {"status": "ok", "reason": "", "compiler": {"registers": 32, "shared_bytes": 0,
                                                            "spill_stores": 0, "spill_loads": 0}}

    def result(self, candidate) -> dict:
        outcome = self.outcome(candidate)
        if isinstance(outcome, str):
            return {"status": outcome, "reason": "outputs differ from the reference", "speedup": None}
        return {"status": "ok", "reason": "", "speedup": outcome,
                "reference": {"median_ms": 1.0}, "candidate": {"median_ms": 1.0 / outcome}}

    def request_measurement(self, node_id, candidate):
        self.requests.append(node_id)
        if self.asynchronous:
            return None
        return self.result(candidate)

    def publish(self, event):
        self.events.append(event)


class TableSurrogate:
    """Forecasts from the true speedup: right with probability `accuracy` (decided by a hash), else one bin off."""

    name = "table"
    version = "1"

    def __init__(self, confidence: float = 0.8, accuracy: float = 0.8, abstain_every: int = 0):
        self.confidence = confidence
        self.accuracy = accuracy
        self.abstain_every = abstain_every
        self.calls = 0
        self.learned_rows: list = []

    def forecast(self, request):
        return self.forecast_many([request])[0]

    def forecast_many(self, requests):
        out = []
        for request in requests:
            self.calls += 1
            knobs = request.candidate.get("knobs") or {}
            speedup = true_speedup(knobs) if knobs else 1.0
            if self.abstain_every and self.calls % self.abstain_every == 0:
                out.append(Forecast.abstention("the answer had no probabilities", surrogate="table@1"))
                continue
            if isinstance(speedup, str):
                speedup = 0.3
            b = DEFAULT_BINS.bin_of(speedup)
            h = int(hashlib.sha256(candidate_hash(request.candidate).encode()).hexdigest()[:8], 16)
            if (h % 1000) / 1000 >= self.accuracy:
                b = b + 1 if b < 8 else b - 1
            probabilities = [(1 - self.confidence) / 7] * 8
            probabilities[b - 1] = self.confidence
            out.append(Forecast.from_probabilities(probabilities, surrogate="table@1", reasoning=f"table says bin {b}"))
        return out

    def learn(self, rows):
        self.learned_rows = list(rows)


def make_driver(*, port=None, surrogate=None, seed=0, root_children=0, parents_per_step=1, min_children_per_step=0,
                compile_share_target=0.0, prefetch_while_measuring=False, **policy):
    from search_engine.driver import SearchDriver
    from search_engine.search_settings import SearchSettings
    from search_engine.policy import PolicySettings

    settings = SearchSettings(policy=PolicySettings(**{"gpu_budget": 30, "threshold": 0.6, **policy}), seed=seed,
                              children_per_expansion=4, root_children=root_children, retrain_every=5,
                              parents_per_step=parents_per_step, min_children_per_step=min_children_per_step,
                              compile_share_target=compile_share_target,
                              prefetch_while_measuring=prefetch_while_measuring)
    return SearchDriver(port=port or FakePort(), generator=TemplateGenerator(space(), render),
                        surrogate=surrogate or TableSurrogate(), reference=REFERENCE,
                        hardware={"name": "H200"}, problem={"name": "scale", "sizes": {"N": 1 << 24}},
                        settings=settings)


def reopen(driver, port=None, surrogate=None):
    """The same run after a restart: its state through JSON and back, with fresh objects around it."""
    import json

    from search_engine.driver import SearchDriver

    state = json.loads(json.dumps(driver.state_dict()))
    return SearchDriver.from_state(state, port=port or FakePort(), generator=TemplateGenerator(space(), render),
                                   surrogate=surrogate or TableSurrogate())


def log2(x):
    return math.log(x, 2)
