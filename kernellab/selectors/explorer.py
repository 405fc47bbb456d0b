"""Reads for the explorer: the tree snapshot with its sequence number, one node's whole story, a
problem's roofline bound, and the series of a run's dashboard."""
from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Count, Max, Prefetch, QuerySet

from kernellab.models import (
    Comment,
    Discovery,
    ExpertNote,
    Forecast,
    Measurement,
    Node,
    NodeState,
    Problem,
    RunChange,
    SearchRun,
    Verification,
    VerificationState,
)
from kernellab.selectors.runs import run_table_rows

FAILED_STATES = {NodeState.FAILED_COMPILE, NodeState.FAILED_CORRECTNESS, NodeState.FAILED_RUNTIME}


_PAYLOAD_FIELDS = (
    "id", "key", "parent__key", "state", "state_reason", "speedup", "value", "forecast_bin", "forecast_confidence",
    "is_discovery", "depth", "name", "origin",
)


def run_tree_payloads(*, run: SearchRun) -> list[dict]:
    """The same dicts as services.changes.node_payload for every node (a test keeps them equal),
    read as plain rows: 5,000 nodes take a tenth of the time of run_tree's model instances, and
    kernel rows are never read (a node's name is its own, Node.name)."""
    return [
        {
            "id": row["id"],
            "key": row["key"],
            "parent": row["parent__key"],
            "state": row["state"],
            "reason": row["state_reason"][:300],
            "speedup": row["speedup"],
            "value": row["value"],
            "forecast_bin": row["forecast_bin"],
            "forecast_confidence": row["forecast_confidence"],
            "discovery": row["is_discovery"],
            "depth": row["depth"],
            "name": row["name"] or row["key"],
            "origin": row["origin"],
        }
        for row in Node.objects.filter(run=run).order_by("pk").values(*_PAYLOAD_FIELDS)
    ]


# Every viewer of a run opens with its snapshot: the latest one of a few runs is kept per process.
SNAPSHOT_RUNS_KEPT = 16
_snapshots: OrderedDict[tuple, tuple[tuple, list[dict]]] = OrderedDict()
_snapshots_lock = threading.Lock()


def run_tree_nodes_cached(*, run: SearchRun, seq: int) -> list[dict]:
    """run_tree_payloads, read again only when the run's nodes changed: the validator is the change
    number with the node count and latest node update, so a write that recorded no change (or a
    deleted node) still shows. The list is shared between callers: read it, never change it."""
    from kernellab.selectors.runs import database_identity

    stamp = Node.objects.filter(run=run).aggregate(count=Count("pk"), latest=Max("updated_at"))
    validator = (seq, stamp["count"], stamp["latest"])
    # created_at as well as pk: a test database that rolls back may hand out the same pk again.
    key = (database_identity(), run.pk, run.created_at)
    with _snapshots_lock:
        kept = _snapshots.get(key)
        if kept is not None and kept[0] == validator:
            _snapshots.move_to_end(key)
            return kept[1]
    # Read after the validator: newer rows under an older validator are harmless (see below).
    nodes = run_tree_payloads(run=run)
    with _snapshots_lock:
        _snapshots[key] = (validator, nodes)
        _snapshots.move_to_end(key)
        while len(_snapshots) > SNAPSHOT_RUNS_KEPT:
            _snapshots.popitem(last=False)
    return nodes


def run_tree_snapshot(*, run: SearchRun) -> dict:
    """Every node of the run and the sequence number the snapshot includes.

    The number is read before the rows: a change committed in between is then both in the rows and
    after `seq`, and the browser applies it twice, which is harmless because a node change carries
    the node's whole state. Read the other way round, a change could be in neither."""
    with transaction.atomic():
        counters = SearchRun.objects.filter(pk=run.pk).values(
            "change_seq", "status", "best_node__key", "best_speedup", "gpu_used", "gpu_budget", "forecasts_count"
        ).get()
        seq = counters["change_seq"]
        nodes = run_tree_nodes_cached(run=run, seq=seq)
        last_step = (RunChange.objects.filter(run=run, kind="step", seq__lte=seq).order_by("-seq")
                     .values_list("payload", flat=True).first())
    threshold = (last_step or {}).get("threshold")
    return {
        "run": run.pk,
        "seq": seq,
        "nodes": nodes,
        "status": counters["status"],
        # The search's own best (it knows the objective); a later "best" change replaces it.
        "best": {"node": counters["best_node__key"], "speedup": counters["best_speedup"]} if counters["best_node__key"] else None,
        "counters": {"measurements_requested": counters["gpu_used"], "forecasts": counters["forecasts_count"]},
        "gpu_budget": counters["gpu_budget"],
        # The confidence at which the policy trusts a forecast after the last step (the conformal threshold once the
        # run has measured enough forecasts); before the first step, the run's own.
        "threshold": threshold if threshold is not None else run.confidence_threshold,
    }


def node_failed_proposals(*, node: Node) -> list[dict]:
    """The generator's failed attempts to expand this node, each with its reason, newest first (a
    garbled or empty LLM answer, a kernel that does not fit the launch)."""
    return list(reversed(node.failed_proposals or []))


def node_forecast(*, node: Node) -> Forecast | None:
    """The forecast the search acted on: the latest (a revised forecast replaces the first)."""
    return node.forecasts.order_by("-created_at", "-pk").first()


def run_measurements(*, run: SearchRun) -> QuerySet[Measurement]:
    """Measurements of the run's problem of the kinds the run's own verifications produced, whichever run of the
    problem asked: replayed answers (recorded data) and measurements taken on a GPU are kept apart. The kind is
    what the answers were, not the run's backend: a run set to "auto" that a worker answered from recorded data
    lists those answers on its measured nodes. A run with no answer yet goes by its backend."""
    rows = Measurement.objects.filter(problem_id=run.problem_id)
    produced = set(Verification.objects.filter(node__run=run, measurement__isnull=False).order_by()
                   .values_list("measurement__backend", flat=True).distinct())
    replayed = "replay" in produced if produced else run.backend == "replay"
    on_a_gpu = bool(produced - {"replay"}) if produced else run.backend != "replay"
    if replayed and on_a_gpu:
        return rows
    return rows.filter(backend="replay") if replayed else rows.exclude(backend="replay")


def node_measurements(*, node: Node) -> list[Measurement]:
    """Measurements of the node's kernel for this run's problem, newest first, with expert notes."""
    if node.kernel_id is None:
        return []
    return list(
        run_measurements(run=node.run).filter(kernel_id=node.kernel_id)
        .prefetch_related(Prefetch("expert_notes", queryset=ExpertNote.objects.order_by("pk")))
        .order_by("-created_at", "-pk")
    )


def node_verifications(*, node: Node) -> list[Verification]:
    return list(node.verifications.select_related("requested_by", "approver").order_by("-created_at", "-pk"))


# A node panel shows the latest comments only (a panel is re-fetched for every viewer on every new comment); the node's
# own page shows them all.
PANEL_COMMENTS_SHOWN = 100


def node_comments(*, node: Node, latest: int | None = None) -> list[Comment]:
    """The node's comments, oldest first; with `latest`, only the last that many of them."""
    rows = node.comments.select_related("author")
    if latest is None:
        return list(rows.order_by("created_at", "pk"))
    return list(reversed(rows.order_by("-created_at", "-pk")[:latest]))


def node_discovery(*, node: Node) -> Discovery | None:
    return Discovery.objects.select_related("marked_by").filter(node=node).first()


def node_children_count(*, node: Node) -> int:
    return Node.objects.filter(parent=node).count()


@dataclass(frozen=True)
class NodeStory:
    """Everything a node panel reads about a node besides the node itself."""

    forecast: Forecast | None
    verifications: list
    measurements: list
    comments: list  # the latest PANEL_COMMENTS_SHOWN
    comments_total: int
    discovery: Discovery | None
    failed_proposals: list


_STORIES: OrderedDict[tuple, NodeStory] = OrderedDict()
_STORIES_LOCK = threading.Lock()


def node_story(*, node: Node) -> NodeStory:
    """A node's story as of its last change. Every write a panel shows (forecast, verification,
    measurement, comment, discovery, failed proposal) records a change about the node, whose number
    the node keeps (`Node.change_seq`), so that number names the story; a measurement of the same kernel by another run of the problem is
    caught by the problem's latest measurement. Panels that many people open read it once.
    Comments are written, edited and deleted anywhere (the panel, Django admin, an account's deletion, which
    keeps them by a removed user): models' signal receivers record a change for each of those too."""
    # Read now, not from `node`: a view may have written (a comment, a discovery) since it loaded it.
    version = Node.objects.filter(pk=node.pk).values_list("updated_at", "change_seq").first()
    latest = Measurement.objects.filter(problem_id=node.run.problem_id).aggregate(latest=Max("pk"))["latest"]
    key = (node.pk, version, latest)
    with _STORIES_LOCK:
        story = _STORIES.get(key)
        if story is not None:
            _STORIES.move_to_end(key)
            return story
    story = NodeStory(
        forecast=node_forecast(node=node), verifications=node_verifications(node=node),
        measurements=node_measurements(node=node), comments=node_comments(node=node, latest=PANEL_COMMENTS_SHOWN),
        comments_total=node.comments.count(),
        discovery=node_discovery(node=node), failed_proposals=node_failed_proposals(node=node))
    with _STORIES_LOCK:
        _STORIES[key] = story
        while len(_STORIES) > 512:
            _STORIES.popitem(last=False)
    return story


# Runs a problem's page lists; the rest are on the workspace's run list, filtered to the problem.
PROBLEM_RUNS_SHOWN = 10


def problem_runs(*, problem: Problem, limit: int = PROBLEM_RUNS_SHOWN) -> QuerySet[SearchRun]:
    """The problem's `limit` most recent runs, with only what a table of runs shows (never the driver's state)."""
    return run_table_rows(problem.runs.all())[:limit]


# Datasheet figures, used for a roofline bound only until a GPU of that model has measured the
# problem (its own reading then wins). SM clock is the boost clock.
DATASHEET_GPUS = {
    "h200": {"name": "NVIDIA H200 (datasheet)", "sm_count": 132, "memory_bandwidth_gbs": 4800.0, "sm_clock_mhz": 1980.0, "compute_capability": "9.0"},
    "h100": {"name": "NVIDIA H100 SXM (datasheet)", "sm_count": 132, "memory_bandwidth_gbs": 3350.0, "sm_clock_mhz": 1980.0, "compute_capability": "9.0"},
    "a100": {"name": "NVIDIA A100 SXM (datasheet)", "sm_count": 108, "memory_bandwidth_gbs": 2039.0, "sm_clock_mhz": 1410.0, "compute_capability": "8.0"},
    "l40s": {"name": "NVIDIA L40S (datasheet)", "sm_count": 142, "memory_bandwidth_gbs": 864.0, "sm_clock_mhz": 2520.0, "compute_capability": "8.9"},
}


@dataclass
class RooflineBound:
    case: str
    sizes: dict
    floor_ms: float | None
    limited_by: str
    hardware_name: str
    hardware_source: str  # "measured" or "datasheet"


@dataclass
class RooflineReport:
    bounds: list[RooflineBound] = field(default_factory=list)
    unavailable: str = ""


def _hardware_for(problem: Problem, gpu: str):
    from gpu_runner.result import Hardware

    measured = (
        Measurement.objects.filter(problem=problem, status="ok").exclude(hardware={}).order_by("-created_at").values_list("hardware", flat=True).first()
    )
    if measured:
        known = {f: measured.get(f) for f in Hardware.__dataclass_fields__ if f in measured}
        try:
            return Hardware(**{**_DEFAULT_HARDWARE, **known}), "measured"
        except TypeError:
            pass
    sheet = DATASHEET_GPUS.get(gpu)
    if sheet is None:
        return None, ""
    return Hardware(**{**_DEFAULT_HARDWARE, **sheet}), "datasheet"


_DEFAULT_HARDWARE = {
    "name": "",
    "sm_count": 0,
    "memory_bytes": 0,
    "memory_bandwidth_gbs": 0.0,
    "sm_clock_mhz": 0.0,
    "mem_clock_mhz": 0.0,
    "compute_capability": "9.0",
    "driver": "",
}


def problem_roofline(*, problem: Problem, spec, gpu: str = "h200") -> RooflineReport:
    """The fastest any candidate could be, per size case, on a measured or datasheet GPU."""
    if spec is None:
        return RooflineReport(unavailable="the spec could not be read")
    roofline = getattr(spec, "roofline", None)
    if roofline is None or (roofline.flops is None and roofline.bytes is None):
        return RooflineReport(unavailable="the spec gives no FLOP or byte formula")
    try:
        from gpu_runner.guards import roofline_floor_ms
    except ImportError as exc:
        return RooflineReport(unavailable=f"the runner's roofline guard cannot be imported ({exc})")
    hardware, source = _hardware_for(problem, gpu)
    if hardware is None:
        return RooflineReport(unavailable=f"no figures are known for the GPU {gpu}")
    report = RooflineReport()
    for case in spec.sizes:
        try:
            floor = roofline_floor_ms(spec, case, hardware)
        except Exception as exc:  # a formula the runner cannot evaluate: say so, keep the page
            report.bounds.append(RooflineBound(case.name, dict(case.sizes), None, f"cannot evaluate: {exc}", hardware.name, source))
            continue
        if floor is None:
            continue
        floor_ms, what = floor
        report.bounds.append(RooflineBound(case.name, dict(case.sizes), floor_ms, what, hardware.name, source))
    return report


# -- dashboard ---------------------------------------------------------------------------------


def _bins():
    from search_engine.bins import DEFAULT_BINS

    return DEFAULT_BINS


# What the dashboard reads of a forecast.
_DASHBOARD_FORECAST_FIELDS = ("node_id", "bin", "confidence", "probabilities", "abstained", "created_at")


def _forecasts_by_node(run: SearchRun) -> dict[int, dict]:
    """The latest forecast (same rule as node_forecast) of each of the run's measured nodes, the only ones the
    dashboard pairs with a measurement, as a dict of _DASHBOARD_FORECAST_FIELDS: a large run has tens of thousands
    of forecasts, with their reasoning, that no chart reads."""
    from django.db import connection

    forecasts = Forecast.objects.filter(node__run=run, node__state=NodeState.MEASURED, node__speedup__isnull=False)
    if connection.features.can_distinct_on_fields:  # PostgreSQL: the database keeps one row a node
        rows = forecasts.order_by("node_id", "-created_at", "-pk").distinct("node_id").values(*_DASHBOARD_FORECAST_FIELDS)
        return {row["node_id"]: row for row in rows}
    chosen: dict[int, dict] = {}
    for row in forecasts.order_by("node_id", "created_at", "pk").values(*_DASHBOARD_FORECAST_FIELDS):
        chosen[row["node_id"]] = row  # the last, the latest
    return chosen


def _expected_log_speedup(probabilities: list[float], bins) -> float | None:
    """A stored forecast's expected log speedup over the bins (the search engine's Forecast.expected_log_speedup),
    or None for probabilities that do not fit the bins."""
    from search_engine.surrogates.base import Forecast as EngineForecast

    if len(probabilities) != bins.n_bins:
        return None
    try:
        return EngineForecast.from_probabilities(probabilities).expected_log_speedup(bins)
    except ValueError:  # no probability mass
        return None


def forecast_rank_correlation(pairs: list[dict]) -> float | None:
    """Spearman's rank correlation, over the run's kernels with both, of the forecast's expected log speedup and the
    measured speedup: whether the forecasts the search acted on put what it measured in the right order (issue 20's
    first measure, here on a single task). None below three kernels or when either side is one value throughout.
    Computed with numpy (the Pearson correlation of the average ranks, as scipy's spearmanr): scipy.stats would
    add about 70 MB to every web process for this one figure."""
    import numpy as np

    known = [(p["forecast_log_speedup"], p["speedup"]) for p in pairs if p.get("forecast_log_speedup") is not None]
    if len(known) < 3:
        return None
    forecast, measured = (np.asarray(side, dtype=float) for side in zip(*known))
    if np.ptp(forecast) == 0 or np.ptp(measured) == 0:
        return None

    def average_ranks(values):
        _, which, counts = np.unique(values, return_inverse=True, return_counts=True)
        return (np.cumsum(counts) - (counts - 1) / 2)[which]  # tied values share the mean of their ranks

    return float(np.corrcoef(average_ranks(forecast), average_ranks(measured))[0, 1])


def run_dashboard(*, run: SearchRun) -> dict:
    """Series for the dashboard's charts, each a plain list so the template can hand it to plotly."""
    from search_engine import scoring

    bins = _bins()
    done = list(
        Verification.objects.filter(node__run=run, state__in=[VerificationState.DONE, VerificationState.FAILED])
        .exclude(finished_at=None)
        .select_related("measurement", "node")
        .order_by("finished_at", "pk")
    )
    node_times = sorted(Node.objects.filter(run=run).values_list("created_at", flat=True))

    # Best measured speedup against GPU measurements used, and candidates considered per measurement.
    progress = {"gpu": [], "best": [], "candidates": [], "per_gpu": []}
    best = None
    considered_index = 0
    for i, verification in enumerate(done, start=1):
        m = verification.measurement
        if m is not None and m.status == "ok" and m.speedup:
            best = m.speedup if best is None else max(best, m.speedup)
        while considered_index < len(node_times) and node_times[considered_index] <= verification.finished_at:
            considered_index += 1
        progress["gpu"].append(i)
        progress["best"].append(best)
        progress["candidates"].append(considered_index)
        progress["per_gpu"].append(considered_index / i)

    # Forecast against measurement, for nodes with both. A forecast made before the run's first measurement knew
    # nothing of this problem's level; the recalibration on the run's own rows starts after it (issue 20's
    # "ECE after the run's first measurement").
    first_measured_at = next((v.finished_at for v in done if v.measurement is not None and v.measurement.status == "ok"),
                             None)
    forecasts = _forecasts_by_node(run)
    measured = list(Node.objects.filter(run=run, state=NodeState.MEASURED).exclude(speedup=None).values("pk", "key", "speedup"))
    pairs = []
    for row in measured:
        forecast = forecasts.get(row["pk"])
        if forecast is None or forecast["abstained"] or not forecast["probabilities"]:
            continue
        try:
            measured_bin = bins.bin_of(row["speedup"])
        except ValueError:
            continue
        probabilities = [float(p) for p in forecast["probabilities"]]
        pairs.append({"key": row["key"], "speedup": row["speedup"], "measured_bin": measured_bin,
                      "forecast_bin": forecast["bin"] or scoring.predicted_bin(probabilities),
                      "forecast_confidence": forecast["confidence"] if forecast["confidence"] is not None
                      else max(probabilities),
                      "forecast_log_speedup": _expected_log_speedup(probabilities, bins),
                      "after_first_measurement": first_measured_at is not None
                      and forecast["created_at"] > first_measured_at})

    n = bins.n_bins
    confusion = [[0] * n for _ in range(n)]  # rows: forecast bin, columns: measured bin
    for pair in pairs:
        confusion[pair["forecast_bin"] - 1][pair["measured_bin"] - 1] += 1

    confidences = [p["forecast_confidence"] for p in pairs]
    correct = [p["forecast_bin"] == p["measured_bin"] for p in pairs]
    reliability = {"confidence": [], "accuracy": [], "count": [], "ece": None, "ece_after_first": None,
                   "pairs_after_first": 0}
    risk_coverage = {"coverage": [], "risk": [], "aurc": None}
    if pairs:
        reliability["ece"] = scoring.ece(confidences, correct)
        later = [(c, ok) for c, ok, p in zip(confidences, correct, pairs) if p["after_first_measurement"]]
        reliability["pairs_after_first"] = len(later)
        if later:
            reliability["ece_after_first"] = scoring.ece([c for c, _ in later], [ok for _, ok in later])
        for b in range(10):
            lo, hi = b / 10, (b + 1) / 10
            members = [(c, ok) for c, ok in zip(confidences, correct) if (lo < c <= hi) or (b == 0 and c == 0)]
            if members:
                reliability["confidence"].append(sum(c for c, _ in members) / len(members))
                reliability["accuracy"].append(sum(1 for _, ok in members if ok) / len(members))
                reliability["count"].append(len(members))
        losses = [0.0 if ok else 1.0 for ok in correct]
        coverage, risk = scoring.risk_coverage(confidences, losses)
        risk_coverage = {"coverage": [float(c) for c in coverage], "risk": [float(r) for r in risk], "aurc": scoring.aurc(confidences, losses)}

    # Energy against runtime for measured nodes: the latest ok measurement of each node's kernel
    # among those its panel lists (node_measurements), so a dot and its node tell the same story.
    energy = {"runtime_ms": [], "j_per_call": [], "key": [], "speedup": []}
    kernel_to_node = {k: key for key, k in Node.objects.filter(run=run, state=NodeState.MEASURED).values_list("key", "kernel_id")}
    seen = set()
    for m in run_measurements(run=run).filter(kernel_id__in=kernel_to_node, status="ok").order_by("-created_at", "-pk"):
        if m.kernel_id in seen:
            continue
        seen.add(m.kernel_id)
        median = (m.candidate_stats or {}).get("median_ms")
        joules = m.energy_j_per_call
        if median is None or joules is None:
            continue
        energy["runtime_ms"].append(median)
        energy["j_per_call"].append(joules)
        energy["key"].append(kernel_to_node[m.kernel_id])
        energy["speedup"].append(m.speedup)
    from search_engine.experts import pareto_front

    front = set(pareto_front(list(zip(energy["runtime_ms"], energy["j_per_call"], energy["key"]))))
    energy["pareto"] = [key in front for key in energy["key"]]

    return {
        "bins": {"names": list(bins.names), "edges": list(bins.edges)},
        "progress": progress,
        "pairs": pairs,
        "confusion": confusion,
        "reliability": reliability,
        "risk_coverage": risk_coverage,
        "energy": energy,
        "counts": {
            "nodes": len(node_times),
            "gpu_measurements": len(done),
            "forecast_measured_pairs": len(pairs),
            "accuracy": (sum(correct) / len(correct)) if correct else None,
            "spearman": forecast_rank_correlation(pairs),
        },
        "times": _search_times(run),
    }


def _search_times(run: SearchRun) -> dict | None:
    """Where the driver's wall time went: its compile batches and the measurements it timed (the saved
    state's SearchTimes), with compiling's share of the two; None before the first batch."""
    if "driver_state" in run.get_deferred_fields():
        # Only the times, with a JSON key lookup: the whole state is megabytes (about 4 KB per node) for these numbers.
        times = SearchRun.objects.filter(pk=run.pk).values_list("driver_state__times", flat=True).first()
    else:
        times = (run.driver_state or {}).get("times")
    times = times if isinstance(times, dict) else {}
    compile_s, measure_s = float(times.get("compile_s") or 0.0), float(times.get("measure_s") or 0.0)
    if not times.get("compile_batches"):
        return None
    total = compile_s + measure_s
    return {"compile_s": compile_s, "compile_batches": int(times["compile_batches"]), "measure_s": measure_s,
            "measurements_timed": int(times.get("measurements_timed") or 0),
            "compile_share": compile_s / total if total > 0 else None,
            # batches compiled while the GPU measured the step before (their time overlapped measuring)
            "prefetched_batches": int(times.get("prefetched_batches") or 0),
            "prefetched_compile_s": float(times.get("prefetched_compile_s") or 0.0)}


def bin_midpoints() -> list[float]:
    """A representative speedup per bin (geometric middle; the open ends one step beyond the edge)."""
    edges = list(_bins().edges)
    points = [edges[0] / math.sqrt(2)]
    points += [math.sqrt(a * b) for a, b in zip(edges, edges[1:])]
    points.append(edges[-1] * math.sqrt(2))
    return points
