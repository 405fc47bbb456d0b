"""QA3 scale finding 3: the dashboard of a 20k-node run took 5 s (13 s live). It loaded the run's whole driver_state
(77 MB) to read its "times" (a few numbers), and built every Forecast of the run (20,000, with their reasoning) to
keep each node's latest. It now reads the one key with a JSON key lookup, and fetches only the latest forecast of
each measured node, only the columns the charts read. The dashboard says the same as before."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from kernellab.models import Forecast, Measurement, Node, NodeState, SearchRun, Verification, VerificationState
from kernellab.selectors import explorer
from kernellab.selectors.explorer import run_dashboard

pytestmark = pytest.mark.usefixtures("embedded_setup")

TIMES = {"compile_batches": 19, "compile_s": 12.0, "measurements_timed": 150, "measure_s": 36.0,
         "prefetched_batches": 17, "prefetched_compile_s": 10.5}
BIG_STATE = {"times": TIMES, "tree": {"nodes": [{"id": i, "candidate": {"source": "x" * 400}} for i in range(50)]}}


# "driver_state" not followed by a JSON key path: the whole column.
WHOLE_STATE = re.compile(r""""driver_state"(?!\s*(,\s*'\$|->|#>))""")


def onehot(b: int) -> list[float]:
    return [1.0 if i == b - 1 else 0.0 for i in range(8)]


def _child(run, parent, key, *, state=NodeState.MEASURED, speedup=None, forecasts=(), finished_at=None):
    """A child of `parent` with its forecasts ((probabilities, bin, confidence, abstained, created_at) each) and, when
    measured, its measurement."""
    from kernellab.services.kernels import kernel_get_or_create

    kernel = kernel_get_or_create(candidate={"source": f"// {key}\n" + parent.kernel.source,
                                             "launch": parent.kernel.launch, "name": key})
    node = Node.objects.create(run=run, key=key, parent=parent, kernel=kernel, depth=1, state=state, speedup=speedup)
    for probabilities, bin_, confidence, abstained, created_at in forecasts:
        f = Forecast.objects.create(node=node, surrogate="learned", probabilities=probabilities, bin=bin_,
                                    confidence=confidence, abstained=abstained, reasoning="r" * 2000)
        Forecast.objects.filter(pk=f.pk).update(created_at=created_at)
    if state == NodeState.MEASURED and speedup is not None:
        m = Measurement.objects.create(kernel=kernel, problem=run.problem, status="ok", speedup=speedup, backend="replay",
                                       candidate_stats={"median_ms": 1.0 / speedup}, energy={"j_per_call": 0.01})
        Verification.objects.create(node=node, state=VerificationState.DONE, finished_at=finished_at, measurement=m)
    return node


@pytest.fixture
def busy_run(node):
    """A run whose measured nodes have several forecasts each: an older one that disagrees with the latest, two made
    at the same moment (the later row wins), an abstained latest, forecasts made before and after the first
    measurement, and forecasts of nodes never measured."""
    run, root = node.run, node.parent
    now = timezone.now()
    early, first, late = now - timedelta(hours=2), now - timedelta(hours=1), now
    SearchRun.objects.filter(pk=run.pk).update(driver_state=BIG_STATE)
    _child(run, root, "a", speedup=1.2, finished_at=first,
           forecasts=[(onehot(2), 2, 0.9, False, early), (onehot(5), 5, 0.8, False, early + timedelta(minutes=1))])
    _child(run, root, "b", speedup=3.0, finished_at=late,
           forecasts=[(onehot(3), 3, 0.7, False, late), (onehot(7), None, None, False, late)])  # a tie: the later row
    _child(run, root, "c", speedup=0.6, finished_at=late,
           forecasts=[(onehot(3), 3, 0.9, False, early), ([0, 0, 0, 0, 0, 0.6, 0.4, 0], 6, 0.6, True, late)])
    _child(run, root, "d", speedup=1.0, finished_at=late,
           forecasts=[([0, 0, 0, 0.5, 0.5, 0, 0, 0], 4, 0.5, False, late)])
    _child(run, root, "e", speedup=1.7, finished_at=late, forecasts=[([0.1] * 3, 2, 0.4, False, late)])  # not 8 bins
    _child(run, root, "f", speedup=2.2, finished_at=late, forecasts=[])                                     # no forecast
    _child(run, root, "g", state=NodeState.FORECAST, forecasts=[(onehot(6), 6, 0.95, False, late)])
    _child(run, root, "h", state=NodeState.PRUNED, forecasts=[(onehot(1), 1, 0.99, False, late)])
    return SearchRun.objects.defer("driver_state").get(pk=run.pk)  # as the page's run_for reads it


def _forecasts_by_node_before(run):
    """The rule before the fix, on every Forecast of the run as a model: the latest by (created_at, pk) of each node."""
    chosen = {}
    for forecast in Forecast.objects.filter(node__run=run).order_by("node_id", "created_at", "pk"):
        chosen[forecast.node_id] = {f: getattr(forecast, f) for f in
                                    ("node_id", "bin", "confidence", "probabilities", "abstained", "created_at")}
    return chosen


def test_the_dashboard_says_what_it_said_before(busy_run, monkeypatch):
    now = run_dashboard(run=busy_run)
    with monkeypatch.context() as patched:
        patched.setattr(explorer, "_forecasts_by_node", _forecasts_by_node_before)
        before = run_dashboard(run=SearchRun.objects.get(pk=busy_run.pk))  # the whole state loaded, as before
    assert now == before
    pairs = {p["key"]: p for p in now["pairs"]}
    assert set(pairs) == {"a", "b", "d", "e"}                       # c abstained last, f has none, g and h unmeasured
    assert pairs["a"]["forecast_bin"] == 5 and pairs["a"]["forecast_confidence"] == 0.8  # the latest, not the first
    assert pairs["b"]["forecast_bin"] == 7 and pairs["b"]["forecast_confidence"] == 1.0  # the later row of the tie
    assert pairs["e"]["forecast_log_speedup"] is None
    assert not pairs["a"]["after_first_measurement"] and pairs["b"]["after_first_measurement"]
    assert now["times"]["compile_batches"] == 19 and now["times"]["prefetched_batches"] == 17
    assert now["times"]["compile_share"] == pytest.approx(0.25)


def test_the_dashboard_page_reads_only_the_times_of_the_driver_state(client, members, busy_run):
    client.force_login(members["viewer"])
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("run-dashboard", args=[busy_run.pk]))
    assert response.status_code == 200
    assert response.context["dashboard"]["times"]["compile_batches"] == 19
    reading_state = [q["sql"] for q in queries.captured_queries if "driver_state" in q["sql"]]
    assert reading_state, "the times come from the database"
    for sql in reading_state:
        # Every mention is a key lookup (PostgreSQL: "driver_state" -> 'times'; SQLite: JSON_EXTRACT("driver_state",
        # '$."times"')), never the whole column.
        assert not WHOLE_STATE.search(sql), sql
    assert any("times" in sql for sql in reading_state)


def test_the_dashboard_reads_no_forecast_reasoning_and_only_measured_nodes_latest(busy_run):
    with CaptureQueriesContext(connection) as queries:
        chosen = explorer._forecasts_by_node(busy_run)
    assert len(queries.captured_queries) == 1
    sql = queries.captured_queries[0]["sql"]
    assert "reasoning" not in sql and "surrogate" not in sql and "latency_s" not in sql
    measured = dict(Node.objects.filter(run=busy_run, key__in="abcdef").values_list("key", "pk"))
    assert set(chosen) == {measured[k] for k in "abcde"}
    assert chosen[measured["a"]]["bin"] == 5 and chosen[measured["b"]]["probabilities"] == onehot(7)
    if connection.vendor == "postgresql":
        assert "DISTINCT ON" in sql  # one row a node from the database


def test_a_run_with_no_state_or_no_times_has_no_times(node):
    run = node.run
    SearchRun.objects.filter(pk=run.pk).update(driver_state=None)
    assert run_dashboard(run=SearchRun.objects.defer("driver_state").get(pk=run.pk))["times"] is None
    SearchRun.objects.filter(pk=run.pk).update(driver_state={"tree": {}})
    assert run_dashboard(run=SearchRun.objects.defer("driver_state").get(pk=run.pk))["times"] is None
