"""A search's saved state: the driver written to a JSON-able dict and read back, and a reader for
callers that want to know about a saved search without loading a driver (no generator, surrogate
or port needed, and sources are not unpacked).

Sources are most of a state (a template variant is ~10 KB, and a run screening 256 candidates at
the root holds hundreds of them) and nearly alike, so they are kept apart from the nodes, once
each, compressed: an sgemm run of 638 nodes saves 1.8 MB per step instead of 8.4 MB. Everything
else stays plain JSON that the app (and a person in the admin) can read.
"""

from __future__ import annotations

import base64
import json
import random
import zlib
from typing import TYPE_CHECKING

from search_engine.counters import SearchCounters, SearchTimes
from search_engine.memory import SearchMemory
from search_engine.node_states import NodeState
from search_engine.tree import PUCTTree

if TYPE_CHECKING:
    from search_engine.driver import SearchDriver

STATE_VERSION = 2
# Version 1 kept every node's source inline; it still loads.
READABLE_VERSIONS = (1, STATE_VERSION)


def state_of(driver: "SearchDriver") -> dict:
    version, internal, gauss = driver.rng.getstate()
    return {
        "version": STATE_VERSION,
        "settings": driver.settings.to_dict(),
        "bins": driver.bins.to_dict(),
        "reference": driver.reference,
        "hardware": driver.hardware,
        "problem": driver.problem,
        "reference_ms": driver.reference_ms,
        "reference_compiler_facts": driver.reference_compiler_facts,
        "reference_profile": driver.reference_profile,
        **_pack_sources(driver.tree.to_dict()),
        "memory": driver.memory.to_dict(),
        "rng": [version, list(internal), gauss],
        "step": driver.step_count,
        "event_count": driver.event_count,
        "counters": driver.counters.to_dict(),
        "times": driver.times.to_dict(),
        **({"prefetched": driver.prefetched.to_dict()} if driver.prefetched is not None else {}),
        "best_id": driver.best_id,
        "discoveries": list(driver.discoveries),
        "retrained_on": list(driver.retrained_on),
    }


def check_version(state: dict) -> None:
    if state.get("version") not in READABLE_VERSIONS:
        raise ValueError(f"Search state version {state.get('version')!r} is not one this driver reads "
                         f"({', '.join(map(str, READABLE_VERSIONS))}).")


def restore(driver: "SearchDriver", state: dict) -> None:
    """Everything the driver changes as it searches, as it was saved (its settings are already set)."""
    driver.tree = PUCTTree.from_dict(_unpack_sources(state))
    driver.memory = SearchMemory.from_dict(state.get("memory"))
    version, internal, gauss = state["rng"]
    driver.rng = random.Random()
    driver.rng.setstate((version, tuple(internal), gauss))
    driver.step_count = state["step"]
    driver.event_count = state["event_count"]
    driver.counters = SearchCounters.from_dict(state["counters"])
    driver.times = SearchTimes.from_dict(state.get("times"))   # a state saved before them has none
    from search_engine.driver import ExpansionBatch   # the driver imports this module

    driver.prefetched = ExpansionBatch.from_dict(state.get("prefetched"))
    driver.best_id = state.get("best_id")
    driver.discoveries = list(state.get("discoveries", []))
    driver.retrained_on = list(state.get("retrained_on", []))


class SavedSearch:
    """What a saved state says about its nodes, read without loading a driver."""

    def __init__(self, state: dict | None) -> None:
        self._nodes = {raw["id"]: raw for raw in ((state or {}).get("tree") or {}).get("nodes") or []}
        self.step: int = int((state or {}).get("step") or 0)

    def node_ids(self) -> list[int]:
        return list(self._nodes)

    def node_states(self) -> dict[int, NodeState]:
        return {node_id: NodeState(raw["state"]) for node_id, raw in self._nodes.items()}

    def failed_proposals(self, node_id: int) -> list[dict]:
        """The generator's failed attempts to expand the node, oldest first: reason, excerpt, step
        (none for a node the state does not hold)."""
        raw = self._nodes.get(node_id)
        return [dict(failure) for failure in (raw or {}).get("failed_proposals") or []]


def _pack_sources(tree: dict) -> dict:
    sources: list[str] = []
    index: dict[str, int] = {}
    for node in tree["nodes"]:
        candidate = node.get("candidate") or {}
        if isinstance(candidate.get("source"), str):
            source = candidate.pop("source")  # tree.to_dict() made these dicts; the tree keeps its own
            if source not in index:
                index[source] = len(sources)
                sources.append(source)
            candidate["source_ref"] = index[source]
    data = zlib.compress(json.dumps(sources).encode(), 6)
    return {"tree": tree, "sources": {"encoding": "zlib+base64+json", "count": len(sources),
                                      "data": base64.b64encode(data).decode("ascii")}}


def _unpack_sources(state: dict) -> dict:
    """The tree's dict with every node's source back in its candidate (the state is left unchanged)."""
    tree = state["tree"]
    packed = state.get("sources")
    if not packed:
        return tree
    if packed.get("encoding") != "zlib+base64+json":
        raise ValueError(f"Search state sources are in an unknown encoding {packed.get('encoding')!r}.")
    try:
        sources = json.loads(zlib.decompress(base64.b64decode(packed["data"])))
    except (KeyError, TypeError, ValueError, zlib.error) as exc:
        raise ValueError(f"Search state sources are damaged: {exc!r}") from None
    if len(sources) != packed.get("count"):
        raise ValueError(f"Search state holds {len(sources)} sources where it says {packed.get('count')}.")
    nodes = []
    for raw in tree["nodes"]:
        candidate = raw.get("candidate") or {}
        if "source_ref" in candidate:
            ref = candidate["source_ref"]
            if not isinstance(ref, int) or not 0 <= ref < len(sources):
                raise ValueError(f"Search state node {raw.get('id')} points at source {ref!r}, which is not there.")
            candidate = {k: v for k, v in candidate.items() if k != "source_ref"}
            candidate["source"] = sources[ref]
            raw = {**raw, "candidate": candidate}
        nodes.append(raw)
    return {**tree, "nodes": nodes}
