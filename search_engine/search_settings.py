"""A search's settings: the policy's, the tree's, and how wide and how often the driver works."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

from search_engine.policy import PolicySettings
from search_engine.tree import TreeOptions


@dataclass(frozen=True)
class TemplateSearchDefaults:
    """The search of a problem with knobs (the template generator, the learned surrogate) as the search benchmark
    measures it (benchmarks/search_bench.py's defaults) and as a run of such a problem starts in the app
    (kernellab.services.runs.run_defaults): kept in one place so that the benchmark's figures describe what a run
    does (docs/search.md, "Where it stands")."""

    threshold: float = 0.5
    # After conformal_min_samples measured forecasts (PolicySettings' 10), the threshold becomes the lowest at
    # which the run's accepted forecasts erred at most this often (1.0, trusting none, when no threshold does).
    conformal_target: float = 0.2
    conformal_warmup: float | None = None  # before then, the threshold above (PolicySettings.conformal_warmup)
    children_per_expansion: int = 16  # template neighbours are cheap to forecast
    root_children: int = 256  # the reference has no knobs: its children are random points of the family
    max_gpu_per_step: int = 2
    min_gpu_per_step: int = 1
    min_beat_prob: float = 0.15
    retrain_every: int = 5  # the surrogate relearns after 1, 2, 4, 8 of the run's rows, then every 5
    c: float = 1.0


TEMPLATE_SEARCH = TemplateSearchDefaults()


@dataclass
class SearchSettings:
    policy: PolicySettings = field(default_factory=PolicySettings)
    tree: TreeOptions = field(default_factory=TreeOptions)
    children_per_expansion: int = 4
    root_children: int = 0  # children per expansion of the root (the reference); 0: children_per_expansion
    parents_per_step: int = 1
    # A step keeps expanding more parents (beyond parents_per_step) until it has created at least this many
    # children, so its compile checks fill the machine's cores in one batch; 0 turns it off.
    min_children_per_step: int = 0
    # When a step's compile checks cost more than this share of the wall time its measurements take, the
    # step measures more of what it compiled (up to policy.max_gpu_per_step): a compile batch is a fixed
    # cost (nvcc's start on every core), measuring more of its children spreads it. 0 turns it off.
    compile_share_target: float = 0.0
    # While a step's measurements are on the GPU (a port that answers later: the app's Celery workers, a
    # benchmark's measuring thread), the next step's parents are expanded and their children compile-checked,
    # so compiling overlaps measuring; that step's forecasts and decisions wait for the results. The parents
    # are chosen among nodes already measured (one still on the GPU cannot be expanded). Off: each step
    # expands only once the step before is measured.
    prefetch_while_measuring: bool = False
    discovery_ratio: float = math.sqrt(2)
    seed: int = 0
    wait_for_measurements: bool = True
    retrain_every: int = 10
    memory_cap: int = 40

    def __post_init__(self) -> None:
        if not 0.0 <= self.compile_share_target < 1.0:
            raise ValueError("The compile share target must lie in [0, 1) (0 turns it off).")

    def to_dict(self) -> dict:
        data = asdict(self)
        data["policy"] = self.policy.to_dict()
        data["tree"] = self.tree.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict | None) -> "SearchSettings":
        data = dict(data or {})
        policy = PolicySettings.from_dict(data.pop("policy", None))
        tree = TreeOptions.from_dict(data.pop("tree", None))
        known = {f.name for f in fields(cls)}
        return cls(policy=policy, tree=tree, **{k: v for k, v in data.items() if k in known})
