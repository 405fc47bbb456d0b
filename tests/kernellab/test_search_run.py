"""A whole search run through the database port, the Celery tasks (eager) and the replay backend,
on real H200 measurements of a small templated family."""
from pathlib import Path

import pytest

from kernellab.models import ApprovalMode, Measurement, Node, NodeState, RunStatus, Verification, VerificationState
from kernellab.services.problems import problem_load_bundled
from kernellab.services.runs import run_create
from kernellab.services.search import node_add_human_child, run_advance
from kernellab.services.verifications import verification_approve

pytestmark = pytest.mark.django_db(transaction=True)

RECORDED = Path(__file__).resolve().parents[1] / "gpu_runner" / "problems"


@pytest.fixture
def saxpy(settings, workspace, tmp_path):
    settings.KERNELLAB_PROBLEMS_DIR = str(RECORDED)
    settings.DATA_DIR = tmp_path
    settings.CELERY_TASK_ALWAYS_EAGER = True
    from kernellab.celery import app

    app.conf.task_always_eager = True
    yield next(p for p in problem_load_bundled(workspace=workspace) if p.name == "saxpy")
    app.conf.task_always_eager = False


def test_an_automatic_run_measures_on_replay_and_reports_a_measured_best(saxpy, members):
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=6, children_per_step=3, max_gpu_per_step=2)
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED, run.status_reason
    assert run.gpu_used <= 6
    measured = Node.objects.filter(run=run, state=NodeState.MEASURED).exclude(origin="root")
    assert measured.exists()
    assert run.best_node is not None and run.best_node.state == NodeState.MEASURED
    assert run.best_speedup == pytest.approx(max(n.speedup for n in measured) if max(n.speedup for n in measured) > 1 else 1.0)
    assert all(m.backend == "replay" for m in Measurement.objects.filter(problem=saxpy))
    seqs = list(run.changes.values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


def test_a_manual_run_waits_for_an_approver_and_continues_after(saxpy, members):
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=4, children_per_step=2, approval_mode=ApprovalMode.MANUAL)
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING
    pending = list(Verification.objects.filter(node__run=run, state=VerificationState.PENDING))
    assert pending and all(v.node.state == NodeState.AWAITING_APPROVAL for v in pending)
    verification_approve(verification=pending[0], user=members["approver"])
    node = Node.objects.get(pk=pending[0].node_id)
    assert node.state in (NodeState.MEASURED, NodeState.FAILED_RUNTIME, NodeState.FAILED_CORRECTNESS)
    assert Verification.objects.get(pk=pending[0].pk).state == VerificationState.DONE


def test_a_resumed_run_continues_from_its_saved_state(saxpy, members):
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=30, children_per_step=2, start=False)
    from kernellab.services.runs import run_transition

    run.status = RunStatus.RUNNING
    run.save()
    from kernellab.services import search

    search.STEPS_PER_ADVANCE, saved = 1, search.STEPS_PER_ADVANCE
    try:
        from kernellab.celery import app

        app.conf.task_always_eager = False  # advance by hand, one step at a time
        run_advance(run_id=run.pk)
        state = type(run).objects.get(pk=run.pk).driver_state
        nodes_before = Node.objects.filter(run=run).count()
        assert state["step"] >= 1 and nodes_before == len(state["tree"]["nodes"])
        run_advance(run_id=run.pk)
        after = type(run).objects.get(pk=run.pk).driver_state
        assert after["step"] >= state["step"]
        assert Node.objects.filter(run=run).count() == len(after["tree"]["nodes"])
    finally:
        search.STEPS_PER_ADVANCE = saved


def test_a_hand_written_child_is_checked_forecast_and_verified(saxpy, members):
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=3, children_per_step=2)
    root = Node.objects.get(run=run, origin="root")
    source = run.problem.reference.source.replace("a * x[i] + y[i]", "y[i] + a * x[i]")
    child = node_add_human_child(node=root, user=members["engineer"], source=source)
    assert child.origin == "human" and child.parent_id == root.pk
    assert child.forecasts.exists()
    assert Verification.objects.filter(node=child).exists()


def test_a_hand_written_child_that_does_not_compile_is_recorded_as_such(saxpy, members):
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=3, children_per_step=2)
    root = Node.objects.get(run=run, origin="root")
    broken = run.problem.reference.source.replace(";", "", 1)
    child = node_add_human_child(node=root, user=members["engineer"], source=broken)
    assert child.state == NodeState.FAILED_COMPILE
    assert child.kernel.compile_errors and child.kernel.compile_errors[0]["line"]
