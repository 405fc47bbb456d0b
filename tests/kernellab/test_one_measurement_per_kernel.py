"""A kernel is measured once per run: not again when the search asks after a person did, not again for a
second node with the same kernel; and an approval reaches the search at once, not when its measurement ends."""
from __future__ import annotations

import pytest

from kernellab.models import ApprovalMode, Measurement, Node, NodeState, Verification, VerificationState
from kernellab.services.kernels import kernel_get_or_create
from kernellab.services.runs import run_create
from kernellab.services.verifications import (
    verification_approve,
    verification_enqueue_for_policy,
    verification_pending_for_policy,
    verification_request,
)
from tests.llm_stub import recorded_saxpy_variants

pytestmark = pytest.mark.django_db(transaction=True)


def tree(problem, user, *, children: int, approval_mode=ApprovalMode.AUTO, same_kernel: bool = True):
    run = run_create(problem=problem, user=user, generator="template", surrogate="roofline", backend="replay",
                     approval_mode=approval_mode, start=False)
    root = Node.objects.create(run=run, key="0", kernel=problem.reference, origin="root", state=NodeState.MEASURED,
                               speedup=1.0)
    variants = recorded_saxpy_variants()
    nodes = []
    for i in range(children):
        variant = variants[0 if same_kernel else i]
        kernel = kernel_get_or_create(candidate={"source": variant["source"], "launch": variant["launch"],
                                                 "name": f"v{i}"})
        nodes.append(Node.objects.create(run=run, key=str(i + 1), parent=root, kernel=kernel, depth=1,
                                         state=NodeState.FORECAST))
    return run, nodes


def test_the_search_asking_after_a_persons_finished_measurement_measures_nothing_more(saxpy, members):  # noqa: F811
    run, (node,) = tree(saxpy, members["engineer"], children=1)
    first = verification_request(node=node, user=members["engineer"])
    first.refresh_from_db()
    assert first.state == VerificationState.DONE  # eager: the replay answered at once
    again = verification_enqueue_for_policy(node=node, reason="the policy asked")
    assert again.pk == first.pk
    assert Verification.objects.filter(node=node).count() == 1
    assert Measurement.objects.filter(kernel=node.kernel).count() == 1


def test_a_second_node_with_the_same_kernel_reuses_the_first_ones_measurement(saxpy, members):  # noqa: F811
    run, (one, two) = tree(saxpy, members["engineer"], children=2)
    verification_enqueue_for_policy(node=one, reason="the policy asked")
    reused = verification_enqueue_for_policy(node=two, reason="the policy asked")
    one.refresh_from_db()
    two.refresh_from_db()
    assert Measurement.objects.filter(kernel=one.kernel).count() == 1
    assert reused.state == VerificationState.DONE and reused.measurement is not None
    assert "reused node 1" in reused.progress
    assert two.state == one.state == NodeState.MEASURED and two.speedup == one.speedup


def test_a_manual_run_reuses_a_measured_twin_without_asking_an_approver(saxpy, members):  # noqa: F811
    run, (one, two) = tree(saxpy, members["engineer"], children=2, approval_mode=ApprovalMode.MANUAL)
    pending = verification_pending_for_policy(node=one, reason="the policy asked")
    verification_approve(verification=pending, user=members["approver"])
    reused = verification_pending_for_policy(node=two, reason="the policy asked")
    assert reused.state == VerificationState.DONE
    assert not Verification.objects.filter(node=two, state=VerificationState.PENDING).exists()


def test_different_kernels_are_each_measured(saxpy, members):  # noqa: F811
    run, (one, two) = tree(saxpy, members["engineer"], children=2, same_kernel=False)
    verification_enqueue_for_policy(node=one, reason="the policy asked")
    second = verification_enqueue_for_policy(node=two, reason="the policy asked")
    second.refresh_from_db()
    assert second.measurement is not None and "reused" not in second.progress


def test_an_approval_wakes_the_search_at_once(saxpy, members, monkeypatch):  # noqa: F811
    from kernellab import tasks
    from kernellab.celery import app

    app.conf.task_always_eager = False
    sent = []
    monkeypatch.setattr(tasks.search_run_advance, "apply_async", lambda args, **kw: sent.append(("advance", args)))
    monkeypatch.setattr(tasks.verification_execute, "apply_async", lambda args, **kw: sent.append(("measure", args)))
    run, (node,) = tree(saxpy, members["engineer"], children=1, approval_mode=ApprovalMode.MANUAL)
    pending = verification_pending_for_policy(node=node, reason="the policy asked")
    verification_approve(verification=pending, user=members["approver"])
    assert ("measure", [pending.pk]) in sent
    assert ("advance", [run.pk]) in sent
