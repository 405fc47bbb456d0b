"""QA bug 7: the GPU measurements a run used are one count on every page. A finished run is never advanced again, so
the search never counted what people measured by hand after its end: the dashboard (which counts finished
verifications) said 7 where the run's page and the run list said 4 / 4. And the reference (the root) stays exactly
1.0x when it is measured again: that measurement times it against itself and is shown as the noise it is."""
import re

import pytest
from django.db.models import Count

from kernellab.models import Measurement, Node, NodeState, RunStatus, SearchRun, Verification, VerificationState
from kernellab.selectors.explorer import run_dashboard, run_tree_snapshot
from kernellab.services.runs import run_create
from kernellab.services.verifications import run_gpu_use, verification_request

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("embedded_setup")]

BUDGET = 4


@pytest.fixture
def finished(saxpy, members):
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=BUDGET, children_per_step=3, max_gpu_per_step=2)
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED and run.gpu_used == BUDGET, run.status_reason
    return run


def _verify_by_hand(run, user, keys):
    for key in keys:
        verification = verification_request(node=Node.objects.get(run=run, key=key), user=user)
        verification.refresh_from_db()
        assert verification.state == VerificationState.DONE  # eager: the replay answered at once


def _counts_on_pages(client, run) -> dict:
    explorer = client.get(f"/runs/{run.pk}/").content.decode()
    dashboard = client.get(f"/runs/{run.pk}/dashboard/").content.decode()
    listing = client.get(f"/w/{run.problem.workspace.slug}/runs/").content.decode()
    return {
        "explorer": int(re.search(r'data-count="gpu-used">(\d+) / \d+<', explorer).group(1)),
        "dashboard": int(re.search(r"(\d+) GPU measurements? used", dashboard).group(1)),
        "list": int(re.search(rf'<a href="/runs/{run.pk}/">.*?<td>(\d+) / \d+', listing, re.S).group(1)),
        "snapshot": client.get(f"/runs/{run.pk}/tree.json").json()["counters"]["measurements_requested"],
        "explorer_page": explorer, "dashboard_page": dashboard, "list_page": listing,
    }


def test_measurements_by_hand_after_the_end_are_one_count_on_every_page(client, finished, members):
    # QA's steps: node 1 twice, another node, and the root, all after the run finished.
    others = list(Node.objects.filter(run=finished).exclude(key__in=["0", "1"]).exclude(state=NodeState.FAILED_COMPILE)
                  .values_list("key", flat=True))
    _verify_by_hand(finished, members["engineer"], ["1", "1", others[0], "0"])
    finished.refresh_from_db()
    done = run_dashboard(run=finished)["counts"]["gpu_measurements"]
    assert done == BUDGET + 4
    assert finished.gpu_used == done  # counted when each measurement ended, not left at the search's 4
    gpu = run_gpu_use(run=finished)
    assert {key: gpu[key] for key in ("used", "budget", "by_search", "by_hand", "over")} == {
        "used": BUDGET + 4, "budget": BUDGET, "by_search": BUDGET, "by_hand": 4, "over": 4}
    assert gpu["measured"] == BUDGET + 4 and gpu["reserved"] == gpu["cancelled"] == gpu["released"] == 0
    client.force_login(members["viewer"])
    pages = _counts_on_pages(client, finished)
    assert {pages[k] for k in ("explorer", "dashboard", "list", "snapshot")} == {BUDGET + 4}
    said = f"({BUDGET} by the search, 4 by hand outside the search: 4 over the budget of {BUDGET})"
    assert said in pages["explorer_page"] and said in pages["dashboard_page"]
    assert "over the budget" in pages["list_page"]


def test_a_failed_measurement_by_hand_after_the_end_is_counted_too(finished, members):
    from kernellab.services.verifications import new_claim_token, verification_claim, verification_fail
    from kernellab.celery import app

    app.conf.task_always_eager = False  # the worker takes the message by hand here
    from unittest import mock

    with mock.patch("kernellab.tasks.verification_execute.apply_async"), \
            mock.patch("kernellab.tasks.search_run_advance.apply_async"):
        verification = verification_request(node=Node.objects.get(run=finished, key="1"), user=members["engineer"])
        claimed = verification_claim(verification_id=verification.pk, token=new_claim_token())
        assert verification_fail(verification=claimed, reason="the worker lost its GPU")
    finished.refresh_from_db()
    assert finished.gpu_used == BUDGET + 1 == run_dashboard(run=finished)["counts"]["gpu_measurements"]


def test_a_rejected_or_unanswered_request_after_the_end_is_not_counted(finished, members):
    from kernellab.services.verifications import verification_reject

    SearchRun.objects.filter(pk=finished.pk).update(approval_mode="manual")
    node = Node.objects.get(run=finished, key="1")
    node.run.refresh_from_db()
    pending = verification_request(node=node, user=members["engineer"])
    assert run_gpu_use(run=SearchRun.objects.get(pk=finished.pk))["used"] == BUDGET
    verification_reject(verification=pending, user=members["approver"], reason="not needed")
    assert run_gpu_use(run=SearchRun.objects.get(pk=finished.pk))["used"] == BUDGET


def test_the_reference_stays_exactly_one_and_its_measurement_is_shown_as_noise(client, finished, members):
    _verify_by_hand(finished, members["engineer"], ["0"])
    root = Node.objects.get(run=finished, key="0")
    measurement = Measurement.objects.filter(kernel=root.kernel, problem=finished.problem).latest("pk")
    assert measurement.speedup != 1.0  # the replay's recorded noise: 0.9944
    assert root.speedup == 1.0 and root.value == 1.0 and root.state == NodeState.MEASURED
    assert "measured against itself" in root.state_reason and "stays 1.0" in root.state_reason
    snapshot = run_tree_snapshot(run=finished)
    assert next(n for n in snapshot["nodes"] if n["key"] == "0")["speedup"] == 1.0
    client.force_login(members["viewer"])
    panel = client.get(f"/runs/{finished.pk}/nodes/0/", HTTP_HX_REQUEST="true").content.decode()
    noise = abs(measurement.speedup - 1) * 100
    assert f"the reference against itself: {noise:.2f}% timing noise" in panel


def test_a_candidate_measured_again_takes_its_new_measurement(finished, members):
    node = Node.objects.filter(run=finished, state=NodeState.MEASURED).exclude(key="0").first()
    _verify_by_hand(finished, members["engineer"], [node.key])
    latest = Verification.objects.filter(node=node).latest("pk").measurement
    node.refresh_from_db()
    assert node.speedup == latest.speedup  # only the reference is pinned at 1.0


# QA bug 5: "GPU used" counted requests that were never measured. A request reserves its share of the budget when it
# is made (gpu_used is the budget's use); the pages say how many were measured and how many only wait, and a
# cancelled run gives back what its unmeasured requests reserved.

MANUAL_BUDGET = 8


def _approve_until(run, approver, measured: int) -> None:
    from kernellab.services.verifications import verification_approve

    while Verification.objects.filter(node__run=run, state=VerificationState.DONE).count() < measured:
        pending = Verification.objects.filter(node__run=run, state=VerificationState.PENDING).order_by("pk").first()
        assert pending is not None, "the search asked for too few measurements"
        verification_approve(verification=pending, user=approver)  # eager: the replay answers, the run steps on


@pytest.fixture
def manual(saxpy, members):
    """A manual-approval run as QA's run 3: four measurements approved and made, two more awaiting approval."""
    from kernellab.models import ApprovalMode

    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=MANUAL_BUDGET, children_per_step=4, max_gpu_per_step=2,
                     approval_mode=ApprovalMode.MANUAL)
    _approve_until(run, members["approver"], 4)
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING
    assert Verification.objects.filter(node__run=run, state=VerificationState.PENDING).count() == 2
    return run


def test_a_running_manual_run_says_which_of_its_budget_use_is_only_awaiting_approval(client, manual, members):
    gpu = run_gpu_use(run=manual)
    assert (gpu["used"], gpu["measured"], gpu["pending"], gpu["queued"], gpu["reserved"]) == (6, 4, 2, 0, 2)
    client.force_login(members["viewer"])
    pages = _counts_on_pages(client, manual)
    # The budget's use is one number everywhere (the search reserved 6 of 8) ...
    assert pages["explorer"] == pages["list"] == pages["snapshot"] == 6
    # ... and no page calls the two reservations measurements used.
    assert pages["dashboard"] == 4
    assert "4 GPU measurements used, <span id=\"gpu-pending\">2 awaiting approval</span>, of a budget of 8" in pages["dashboard_page"]
    assert "(4 measured; 2 awaiting approval: reserved from the budget, not measured yet)" in pages["explorer_page"]
    assert "6 GPU measurements used" not in pages["dashboard_page"]
    assert "GPU budget use" in pages["list_page"] and ">GPU used<" not in pages["list_page"]


def test_a_cancelled_manual_run_gives_back_what_its_unmeasured_requests_reserved(client, manual, members):
    from kernellab.services.runs import run_cancel

    run_cancel(run=manual, user=members["engineer"])
    manual.refresh_from_db()
    assert manual.status == RunStatus.CANCELLED
    rows = dict(Verification.objects.filter(node__run=manual).order_by().values_list("state").annotate(n=Count("pk")))
    assert rows == {VerificationState.DONE: 4, VerificationState.CANCELLED: 2}
    # Stored at the cancel: the run list, which reads the column, says 4 / 8 at once.
    assert manual.gpu_used == 4
    gpu = run_gpu_use(run=manual)
    assert (gpu["used"], gpu["measured"], gpu["cancelled"], gpu["released"], gpu["reserved"]) == (4, 4, 2, 2, 0)
    assert gpu["by_hand"] == gpu["over"] == 0
    client.force_login(members["viewer"])
    pages = _counts_on_pages(client, manual)
    assert {pages[k] for k in ("explorer", "dashboard", "list", "snapshot")} == {4}
    said = "(2 cancelled with the run before they were measured, not counted)"
    assert said in pages["explorer_page"] and said in pages["dashboard_page"]
    assert "4 GPU measurements used of a budget of 8" in pages["dashboard_page"]


def test_a_request_rejected_after_the_run_ended_is_given_back_and_one_approved_is_counted_once(manual, members):
    from kernellab.services.runs import run_transition
    from kernellab.services.verifications import verification_approve, verification_reject

    run_transition(run=manual, action="fail", reason="the worker lost its GPU")  # the pending requests stay open
    failed = SearchRun.objects.get(pk=manual.pk)
    gpu = run_gpu_use(run=failed)
    assert (gpu["used"], gpu["measured"], gpu["pending"]) == (6, 4, 2)  # still reserved: an approver may still decide
    first, second = Verification.objects.filter(node__run=manual, state=VerificationState.PENDING).order_by("pk")
    verification_reject(verification=first, user=members["approver"], reason="not worth it")
    assert run_gpu_use(run=SearchRun.objects.get(pk=manual.pk))["used"] == 5
    verification_approve(verification=second, user=members["approver"])  # eager: measured now, reserved before
    gpu = run_gpu_use(run=SearchRun.objects.get(pk=manual.pk))
    assert (gpu["used"], gpu["measured"], gpu["by_hand"], gpu["released"]) == (5, 5, 0, 1)


def test_a_request_rejected_while_the_run_was_paused_is_given_back_when_it_is_cancelled(client, manual, members):
    # QA: pause, reject one of the search's two requests (the paused search never hears of it), cancel: the run had
    # measured 4, and both reservations go back, the rejected one too.
    from kernellab.services.runs import run_cancel, run_transition
    from kernellab.services.verifications import verification_reject

    run_transition(run=manual, user=members["engineer"], action="pause")
    first = Verification.objects.filter(node__run=manual, state=VerificationState.PENDING).order_by("pk").first()
    verification_reject(verification=first, user=members["approver"], reason="not worth it")
    run_cancel(run=SearchRun.objects.get(pk=manual.pk), user=members["engineer"])
    run = SearchRun.objects.get(pk=manual.pk)
    gpu = run_gpu_use(run=run)
    assert (run.gpu_used, gpu["measured"], gpu["cancelled"], gpu["rejected"], gpu["released"]) == (4, 4, 1, 1, 2)
    client.force_login(members["viewer"])
    pages = _counts_on_pages(client, manual)
    assert {pages[k] for k in ("explorer", "dashboard", "list", "snapshot")} == {4}
