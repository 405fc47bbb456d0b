"""PUCT search tree over candidate kernels.

Selection follows the PUCT rule used for test-time kernel search:
    score(s) = Q(s) + c * scale * P(s) * sqrt(1 + T) / (1 + n(s))
Q(s) is the best reward among s and its descendants, P(s) a rank-based prior from forecasts,
scale the range of rewards seen so far, T the number of expansions, n(s) how often s or one of its
descendants was expanded. Every node that holds a value may be chosen (not only leaves), and a batch
never holds two nodes on one ancestor line.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields

from search_engine.candidates import Candidate, candidate_hash
from search_engine.node_states import NodeState


@dataclass
class Node:
    id: int
    parent_id: int | None
    depth: int
    candidate: Candidate
    candidate_hash: str
    rationale: str = ""
    state: NodeState = NodeState.PROPOSED
    reason: str = ""
    forecast: dict | None = None
    # the forecast last published for the node, where a revision since was too small to publish (learning.py)
    shown_forecast: dict | None = None
    speedup: float | None = None  # measured on a GPU
    provisional_speedup: float | None = None  # from a confident forecast
    reward: float | None = None  # own reward: measured, else provisional
    value_source: str | None = None  # "measured" | "forecast" | None
    best: float | None = None  # Q: best reward among the node and its descendants
    prior_score: float | None = None  # what the rank-based prior sorts by
    visits: int = 0
    expansions: int = 0
    children: list[int] = field(default_factory=list)
    consecutive_failures: int = 0
    failed_proposals: list[dict] = field(default_factory=list)
    dead: bool = False
    pruned: bool = False
    exhausted: bool = False
    discovery: bool = False
    verification_refused: bool = False
    compiler_facts: dict | None = None
    measurement: dict | None = None
    expert_notes: list[dict] = field(default_factory=list)
    created_step: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Node":
        known = {f.name for f in fields(cls)}
        node = cls(**{k: v for k, v in data.items() if k in known})
        node.state = NodeState(node.state)
        return node


@dataclass
class TreeOptions:
    c: float = 1.0
    log_rewards: bool = False
    widening_k: float | None = None  # progressive widening: children <= k * (1 + n)^alpha
    widening_alpha: float = 0.5
    dead_end_failures: int | None = 3  # a node whose last N children failed is not expanded again
    max_depth: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> "TreeOptions":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in known})


class PUCTTree:
    def __init__(self, options: TreeOptions | None = None) -> None:
        self.options = options or TreeOptions()
        self.nodes: dict[int, Node] = {}
        self.by_hash: dict[str, int] = {}
        self.expansions = 0
        self.reward_min: float | None = None
        self.reward_max: float | None = None
        self.duplicates = 0

    # ---- building -------------------------------------------------------------------------
    def add_root(self, candidate: Candidate, speedup: float = 1.0, rationale: str = "reference") -> Node:
        if self.nodes:
            raise ValueError("The tree already has a root.")
        node = Node(id=0, parent_id=None, depth=0, candidate=candidate,
                    candidate_hash=candidate_hash(candidate), rationale=rationale)
        self._insert(node)
        node.state = NodeState.MEASURED
        self.set_measured(node.id, speedup)
        return node

    def is_duplicate(self, candidate: Candidate) -> bool:
        return candidate_hash(candidate) in self.by_hash

    def add_child(self, parent_id: int, candidate: Candidate, rationale: str = "", step: int = 0) -> Node | None:
        """A new child, or None when the same code (normalised source hash) is already in the tree."""
        parent = self.nodes[parent_id]
        digest = candidate_hash(candidate)
        if digest in self.by_hash:
            self.duplicates += 1
            return None
        node = Node(id=len(self.nodes), parent_id=parent_id, depth=parent.depth + 1, candidate=candidate,
                    candidate_hash=digest, rationale=rationale, created_step=step)
        self._insert(node)
        parent.children.append(node.id)
        return node

    def _insert(self, node: Node) -> None:
        self.nodes[node.id] = node
        self.by_hash[node.candidate_hash] = node.id

    # ---- values ---------------------------------------------------------------------------
    def reward_of(self, speedup: float) -> float:
        if self.options.log_rewards:
            return math.log(max(speedup, 1e-9))
        return float(speedup)

    def set_measured(self, node_id: int, speedup: float) -> None:
        node = self.nodes[node_id]
        node.speedup = float(speedup)
        node.value_source = "measured"
        self._set_reward(node, self.reward_of(speedup))
        self._child_succeeded(node)

    def set_provisional(self, node_id: int, speedup: float) -> None:
        node = self.nodes[node_id]
        node.provisional_speedup = float(speedup)
        if node.value_source != "measured":
            node.value_source = "forecast"
            self._set_reward(node, self.reward_of(speedup))
        self._child_succeeded(node)

    def clear_value(self, node_id: int) -> None:
        """The node has no value any more (a provisional value proved a failure)."""
        node = self.nodes[node_id]
        node.reward = None
        node.value_source = None
        self._recompute_best_upwards(node)

    def _set_reward(self, node: Node, reward: float) -> None:
        node.reward = reward
        self.reward_min = reward if self.reward_min is None else min(self.reward_min, reward)
        self.reward_max = reward if self.reward_max is None else max(self.reward_max, reward)
        self._recompute_best_upwards(node)

    def _recompute_best_upwards(self, node: Node | None) -> None:
        while node is not None:
            values = [node.reward] + [self.nodes[c].best for c in node.children]
            values = [v for v in values if v is not None]
            node.best = max(values) if values else None
            node = self.nodes[node.parent_id] if node.parent_id is not None else None

    def set_prior_score(self, node_id: int, score: float | None) -> None:
        self.nodes[node_id].prior_score = score

    # ---- failures and expansions ----------------------------------------------------------
    def record_failure(self, parent_id: int) -> None:
        """A child of parent_id (or a proposal from it) failed; parents whose children keep failing die."""
        parent = self.nodes[parent_id]
        parent.consecutive_failures += 1
        limit = self.options.dead_end_failures
        if limit is not None and parent.consecutive_failures >= limit and parent.parent_id is not None:
            parent.dead = True

    def _child_succeeded(self, node: Node) -> None:
        if node.parent_id is not None:
            self.nodes[node.parent_id].consecutive_failures = 0

    def record_expansion(self, node_id: int) -> None:
        """One expansion of node_id: T grows, and so do the visits of the node and its ancestors."""
        self.expansions += 1
        node = self.nodes[node_id]
        node.expansions += 1
        for ancestor in self.lineage(node_id):
            ancestor.visits += 1

    # ---- selection ------------------------------------------------------------------------
    def lineage(self, node_id: int) -> list[Node]:
        """The node and its ancestors up to the root."""
        out = []
        current: int | None = node_id
        while current is not None:
            node = self.nodes[current]
            out.append(node)
            current = node.parent_id
        return out

    def on_one_line(self, a: int, b: int) -> bool:
        return any(n.id == b for n in self.lineage(a)) or any(n.id == a for n in self.lineage(b))

    def expandable(self, node: Node) -> bool:
        if node.reward is None or node.dead or node.pruned or node.exhausted:
            return False
        if node.state not in (NodeState.MEASURED, NodeState.ACCEPTED_BY_FORECAST):
            return False
        if self.options.max_depth is not None and node.depth >= self.options.max_depth:
            return False
        if self.options.widening_k is not None:
            limit = max(1, math.ceil(self.options.widening_k * (1 + node.visits) ** self.options.widening_alpha))
            if len(node.children) >= limit:
                return False
        return True

    def scale(self) -> float:
        if self.reward_min is None or self.reward_max is None or self.reward_max <= self.reward_min:
            return 1.0
        return self.reward_max - self.reward_min

    def priors(self, node_ids: list[int]) -> dict[int, float]:
        """Rank-based prior: the i-th best of N (by prior score) gets weight N - i, normalised."""
        if not node_ids:
            return {}

        def key(nid: int):
            node = self.nodes[nid]
            score = node.prior_score if node.prior_score is not None else node.reward
            return (-(score if score is not None else -math.inf), nid)

        ranked = sorted(node_ids, key=key)
        n = len(ranked)
        total = n * (n + 1) / 2
        return {nid: (n - i) / total for i, nid in enumerate(ranked)}

    def scores(self) -> dict[int, float]:
        candidates = [n.id for n in self.nodes.values() if self.expandable(n)]
        priors = self.priors(candidates)
        scale = self.scale()
        root_t = math.sqrt(1 + self.expansions)
        out = {}
        for nid in candidates:
            node = self.nodes[nid]
            q = node.best if node.best is not None else node.reward
            out[nid] = q + self.options.c * scale * priors[nid] * root_t / (1 + node.visits)
        return out

    def select(self, batch_size: int = 1, taken: Iterable[int] = ()) -> list[int]:
        """Up to batch_size nodes by PUCT score, never two on one ancestor line; `taken` (parents already
        expanded in this step) are never chosen again, and nothing on their lines is chosen either."""
        scored = sorted(self.scores().items(), key=lambda kv: (-kv[1], kv[0]))
        taken = list(taken)
        chosen: list[int] = []
        for nid, _ in scored:
            if len(chosen) >= batch_size:
                break
            if any(self.on_one_line(nid, other) for other in chosen + taken):
                continue
            chosen.append(nid)
        return chosen

    # ---- reading --------------------------------------------------------------------------
    def best_measured(self) -> Node | None:
        measured = [n for n in self.nodes.values() if n.state == NodeState.MEASURED and n.speedup is not None]
        if not measured:
            return None
        return max(measured, key=lambda n: (n.speedup, -n.id))

    def best_valued(self) -> Node | None:
        valued = [n for n in self.nodes.values() if n.reward is not None]
        if not valued:
            return None
        return max(valued, key=lambda n: (n.reward, n.value_source == "measured", -n.id))

    @property
    def root(self) -> Node:
        return self.nodes[0]

    # ---- persistence ----------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "options": self.options.to_dict(),
            "expansions": self.expansions,
            "reward_min": self.reward_min,
            "reward_max": self.reward_max,
            "duplicates": self.duplicates,
            "nodes": [self.nodes[i].to_dict() for i in sorted(self.nodes)],
        }

    @classmethod
    def from_dict(cls, data: dict) -> "PUCTTree":
        tree = cls(TreeOptions.from_dict(data.get("options")))
        tree.expansions = int(data.get("expansions", 0))
        tree.reward_min = data.get("reward_min")
        tree.reward_max = data.get("reward_max")
        tree.duplicates = int(data.get("duplicates", 0))
        for raw in data.get("nodes", []):
            node = Node.from_dict(raw)
            tree.nodes[node.id] = node
            tree.by_hash[node.candidate_hash] = node.id
        return tree
