"""Labels that say what happened: a replay miss, the reference, measurements of another backend,
the replay label on every page, and the energy chart against its nodes."""
import pytest
from django.urls import reverse

from kernellab.models import Measurement, Node, NodeState, Verification, VerificationState
from kernellab.selectors.explorer import node_measurements, run_dashboard

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr("kernellab.tasks.search_run_advance.apply_async", lambda *a, **k: None)
    monkeypatch.setattr("kernellab.tasks.verification_execute.apply_async", lambda *a, **k: None)


def _claimed(node, members):
    from kernellab.services.verifications import verification_claim, verification_request

    verification = verification_request(node=node, user=members["engineer"])
    return verification_claim(verification_id=verification.pk, token="t")


def test_a_replay_miss_is_not_in_the_recorded_data_rather_than_a_failed_kernel(client, members, node):
    from search_engine.events import EventKind, StateChanged
    from search_engine.node_states import NodeState as SearchNodeState

    from kernellab.services.run_context import RunContext
    from kernellab.services.search_port import DatabasePort
    from kernellab.services.verifications import verification_finish

    verification = _claimed(node, members)
    verification_finish(verification=verification, result={
        "status": "unavailable", "backend": "replay",
        "reason": "The replay dataset has no measurement of this source (problem 'vector_scale', hash abc)."})
    node.refresh_from_db()
    assert node.state == NodeState.NOT_RECORDED and node.get_state_display() == "Not in the recorded data"
    # The search then tells the database the node failed; the miss keeps its own label.
    DatabasePort(RunContext(node.run)).publish(StateChanged(
        type=EventKind.STATE_CHANGED, node_id=node.key, state=SearchNodeState.FAILED_CORRECTNESS,
        previous=SearchNodeState.QUEUED, reason="unavailable", pruned=False))
    node.refresh_from_db()
    assert node.state == NodeState.NOT_RECORDED
    client.force_login(members["viewer"])
    queue = client.get(reverse("verification-queue", args=[node.run.workspace.slug])).content.decode()
    assert "<td>Not in the recorded data</td>" in queue and "Failed correctness" not in queue


def test_a_node_shows_only_measurements_from_a_backend_of_its_runs_kind(members, node):
    from kernellab.services.runs import run_create

    common = {"kernel": node.kernel, "problem": node.run.problem}
    Measurement.objects.create(status="unavailable", backend="replay", reason="not recorded", **common)
    Measurement.objects.create(status="ok", backend="cupy", speedup=1.3, **common)
    node.run.backend = "cupy"
    node.run.save()
    assert [m.backend for m in node_measurements(node=node)] == ["cupy"]
    replay_run = run_create(problem=node.run.problem, user=members["engineer"], generator="transform", backend="replay", start=False)
    other = Node.objects.create(run=replay_run, key="n1", kernel=node.kernel, depth=1, state=NodeState.FORECAST)
    assert [m.backend for m in node_measurements(node=other)] == ["replay"]


def test_the_energy_chart_plots_only_what_the_nodes_panel_shows(client, members, node):
    node.run.backend = "cupy"
    node.run.save()
    node.state, node.speedup = NodeState.MEASURED, 1.5
    node.save()
    common = {"kernel": node.kernel, "problem": node.run.problem, "status": "ok", "speedup": 1.5,
              "candidate_stats": {"median_ms": 0.5}}
    # Another (replay) run of the same source recorded energy; this run's GPU measurement did not.
    Measurement.objects.create(backend="replay", energy={"j_per_call": 0.02}, **common)
    mine = Measurement.objects.create(backend="cupy", energy=None, **common)
    Verification.objects.create(node=node, state=VerificationState.DONE, measurement=mine)
    assert run_dashboard(run=node.run)["energy"]["key"] == []
    client.force_login(members["viewer"])
    panel = client.get(reverse("node-panel", args=[node.run.pk, node.key]), HTTP_HX_REQUEST="true").content.decode()
    assert "energy not measured" in " ".join(panel.split()) and "0.02000 J" not in panel


@pytest.mark.parametrize("page", ["home", "problem-list", "problem-detail", "discoveries", "run-explorer"])
def test_the_replay_label_is_on_every_page_while_no_gpu_worker_listens(client, members, run, page, monkeypatch):
    from kernellab.services.workers import worker_heartbeat_record

    monkeypatch.setenv("KERNELLAB_GPU", "0")
    client.force_login(members["viewer"])
    args = {"home": [], "discoveries": [], "problem-list": [run.workspace.slug], "problem-detail": [run.problem.pk],
            "run-explorer": [run.pk]}[page]
    url = reverse(page, args=args)
    assert 'id="replay-label"' in client.get(url, follow=True).content.decode()
    worker_heartbeat_record(hostname="gpu0@box", queues=["gpu.h200"])
    assert 'id="replay-label"' not in client.get(url, follow=True).content.decode()


def test_a_run_that_measured_nothing_shows_no_best_in_lists(client, members, node):
    root = node.parent
    node.run.best_node, node.run.best_speedup = root, 1.0
    node.run.save()
    client.force_login(members["viewer"])
    listing = client.get(reverse("run-list", args=[node.run.workspace.slug])).content.decode()
    assert "1.00×" not in listing
    problems = client.get(reverse("problem-list", args=[node.run.workspace.slug])).content.decode()
    assert "1.00×" not in problems
