"""QA bug 7: the GPU measurements a run used are one count on every page. A finished run is never advanced again, so
the search never counted what people measured by hand after its end: the dashboard (which counts finished
verifications) said 7 where the run's page and the run list said 4 / 4. And the reference (the root) stays exactly
1.0x when it is measured again: that measurement times it against itself and is shown as the noise it is."""
import re

import pytest

from kernellab.models import Measurement, Node, NodeState, RunStatus, SearchRun, Verification, VerificationState
from kernellab.selectors.explorer import run_dashboard, run_tree_snapshot
from kernellab.services.runs import run_create
from kernellab.services.problems import problem_load_bundled
from kernellab.services.verifications import run_gpu_use, verification_request
from tests.kernellab.test_search_run import RECORDED

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("embedded_setup")]

BUDGET = 4


@pytest.fixture
def saxpy(settings, workspace, tmp_path):
    """The recorded saxpy problem with eager Celery, as in test_search_run: the replay answers at once."""
    settings.KERNELLAB_PROBLEMS_DIR = str(RECORDED)
    settings.DATA_DIR = tmp_path
    settings.CELERY_TASK_ALWAYS_EAGER = True
    from kernellab.celery import app

    app.conf.task_always_eager = True
    yield next(p for p in problem_load_bundled(workspace=workspace) if p.name == "saxpy")
    app.conf.task_always_eager = False


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
    assert run_gpu_use(run=finished) == {"used": BUDGET + 4, "budget": BUDGET, "by_search": BUDGET, "by_hand": 4,
                                         "over": 4}
    client.force_login(members["viewer"])
    pages = _counts_on_pages(client, finished)
    assert {pages[k] for k in ("explorer", "dashboard", "list", "snapshot")} == {BUDGET + 4}
    said = f"({BUDGET} by the search, 4 by hand after the run ended: 4 over the budget of {BUDGET})"
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


def test_a_count_left_behind_by_the_old_rule_heals_when_a_page_reads_it(client, finished, members):
    _verify_by_hand(finished, members["engineer"], ["1", "2"])
    SearchRun.objects.filter(pk=finished.pk).update(gpu_used=BUDGET)  # what the code before this fix left
    client.force_login(members["viewer"])
    assert client.get(f"/runs/{finished.pk}/").status_code == 200
    assert SearchRun.objects.get(pk=finished.pk).gpu_used == BUDGET + 2
    assert run_gpu_use(run=SearchRun.objects.get(pk=finished.pk))["by_hand"] == 2  # and counting again adds nothing
    assert SearchRun.objects.get(pk=finished.pk).gpu_used == BUDGET + 2


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
