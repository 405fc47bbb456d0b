"""Where a run's GPU budget use (SearchRun.gpu_used) is counted.

A page only reads it: an ended run's count is stored where it changes (the run ends, by the search's finish or fail
or a person's cancel; a measurement ends; a request is rejected after the end), and the runs that ended before that
rule were recounted once by a migration. And a person who measures again a node the search has already measured,
while the search runs, uses the GPU budget like any measurement a person asks for: the search counts it, once, and
the count of the ended run does not count it again."""
import importlib
from unittest import mock

import pytest

from kernellab.models import Node, NodeState, RunStatus, SearchRun, Verification, VerificationState
from kernellab.services.runs import run_cancel
from kernellab.services.search import run_advance
from kernellab.services.verifications import (
    HAND_COUNTED_KEY,
    new_claim_token,
    run_gpu_use,
    verification_approve,
    verification_claim,
    verification_fail,
    verification_reject,
    verification_request,
)
from tests.kernellab.test_gpu_use_count import (  # noqa: F401 - fixtures
    BUDGET,
    MANUAL_BUDGET,
    _verify_by_hand,
    finished,
    manual,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("embedded_setup")]


def _stored(run) -> int:
    return SearchRun.objects.get(pk=run.pk).gpu_used


def _counted_by_search(run) -> int:
    return SearchRun.objects.get(pk=run.pk).driver_state["counters"]["measurements_requested"]


def _gpu_changes(run) -> list[int]:
    """The budget uses the explorer was told of between steps (change kind "gpu"), in order."""
    from kernellab.models import RunChange

    return [c.payload["used"] for c in RunChange.objects.filter(run=run, kind="gpu").order_by("seq")]


def _measured_node(run) -> Node:
    return Node.objects.filter(run=run, state=NodeState.MEASURED).exclude(key="0").order_by("pk").first()


def _nothing_runs_by_itself():
    """The worker and the search take their messages by hand here (the tests of test_gpu_use_count do the same)."""
    from kernellab.celery import app

    app.conf.task_always_eager = False
    return (mock.patch("kernellab.tasks.verification_execute.apply_async"),
            mock.patch("kernellab.tasks.search_run_advance.apply_async"))


def _take_the_gpu_and_fail(verification) -> None:
    claimed = verification_claim(verification_id=verification.pk, token=new_claim_token())
    assert claimed is not None
    assert verification_fail(verification=claimed, reason="the worker lost its GPU")


# ---- a page only reads ---------------------------------------------------------------------------------------------

def test_opening_an_ended_runs_pages_never_writes_its_count(client, finished, members):
    _verify_by_hand(finished, members["engineer"], ["1"])
    assert _stored(finished) == BUDGET + 1  # stored when the measurement ended
    SearchRun.objects.filter(pk=finished.pk).update(gpu_used=BUDGET + 7)  # a count this test set, to see any write
    client.force_login(members["viewer"])
    for url in (f"/runs/{finished.pk}/", f"/runs/{finished.pk}/dashboard/", f"/w/{finished.problem.workspace.slug}/runs/",
                f"/runs/{finished.pk}/tree.json"):
        assert client.get(url).status_code == 200, url
        assert _stored(finished) == BUDGET + 7, url
    # The split is still read from the rows: one by hand, the rest as the stored count says.
    gpu = run_gpu_use(run=SearchRun.objects.get(pk=finished.pk))
    assert (gpu["used"], gpu["by_hand"], gpu["by_search"], gpu["measured"]) == (BUDGET + 7, 1, BUDGET + 6, BUDGET + 1)
    assert _stored(finished) == BUDGET + 7


def test_opening_a_cancelled_runs_page_never_writes_its_count(client, manual, members):
    run_cancel(run=manual, user=members["engineer"])
    assert _stored(manual) == 4  # stored at the cancel: its 2 unmeasured requests gave their reservation back
    SearchRun.objects.filter(pk=manual.pk).update(gpu_used=6)
    client.force_login(members["viewer"])
    assert client.get(f"/runs/{manual.pk}/").status_code == 200
    assert client.get(f"/runs/{manual.pk}/dashboard/").status_code == 200
    assert _stored(manual) == 6


# ---- the run's end stores the count ---------------------------------------------------------------------------------

def test_the_searchs_finish_stores_the_ended_runs_count(manual, members):
    """A person's measurement ends while the search takes its last step: the search never hears of it, so the
    finish stores it in the count (no page has to open for the run list to say it)."""
    from search_engine.driver import SearchDriver, StepReport

    execute, advance = _nothing_runs_by_itself()
    with execute, advance:
        again = verification_request(node=_measured_node(manual), user=members["engineer"])
        verification_approve(verification=again, user=members["approver"])
        for pending in Verification.objects.filter(node__run=manual, state=VerificationState.PENDING):
            verification_reject(verification=pending, user=members["approver"], reason="not worth it")

        def last_step(driver):
            _take_the_gpu_and_fail(again)  # meanwhile, on the GPU
            return StepReport(step=driver.step_count, status="exhausted")

        with mock.patch.object(SearchDriver, "step", last_step):
            assert run_advance(run_id=manual.pk) == "finished"
    run = SearchRun.objects.get(pk=manual.pk)
    assert run.status == RunStatus.FINISHED
    assert _counted_by_search(run) == 4  # the two rejections gave their reservations back
    assert run.gpu_used == 5  # the search's 4 and the measurement it never heard of
    gpu = run_gpu_use(run=run)
    assert (gpu["used"], gpu["measured"], gpu["by_search"], gpu["by_hand"], gpu["rejected"]) == (5, 5, 4, 1, 2)


def test_a_failed_run_stores_its_count_when_it_fails(manual, members):
    from kernellab.services.runs import run_transition

    execute, advance = _nothing_runs_by_itself()
    with execute, advance:
        again = verification_request(node=_measured_node(manual), user=members["engineer"])
        verification_approve(verification=again, user=members["approver"])
        _take_the_gpu_and_fail(again)  # the search is not advanced: it never hears of it
        assert _stored(manual) == 6
        run_transition(run=manual, action="fail", reason="the search stopped on an internal error")
    assert _stored(manual) == 7  # the search's 6 (2 still awaiting an approver) and the person's measurement


# ---- a person's measurement of a node the search has measured, while it runs -------------------------------------

def test_measuring_again_by_hand_while_the_search_runs_is_counted_once_also_after_the_end(client, manual, members):
    assert (_stored(manual), _counted_by_search(manual)) == (6, 6)
    measured, root = _measured_node(manual), Node.objects.get(run=manual, key="0")
    for used, node in ((6, measured), (7, root)):
        again = verification_request(node=node, user=members["engineer"])
        assert _stored(manual) == used  # awaiting approval: a person's request counts once it has taken the GPU
        verification_approve(verification=again, user=members["approver"])  # eager: measured, the run advanced
        assert Verification.objects.get(pk=again.pk).state == VerificationState.DONE
        assert _stored(manual) == _counted_by_search(manual) == used + 1
    assert _gpu_changes(manual) == [7, 8]  # the explorer's counter moved with each, without a step
    run = SearchRun.objects.get(pk=manual.pk)
    assert run.status == RunStatus.WAITING  # the search still waits for its own two requests
    assert run.gpu_used == _counted_by_search(run) == 8  # its 6 and the 2 measured again: the budget is spent
    assert len(run.driver_state[HAND_COUNTED_KEY]) == 2
    run_advance(run_id=manual.pk)  # advanced again: nothing is counted twice
    assert _stored(manual) == _counted_by_search(manual) == 8
    gpu = run_gpu_use(run=SearchRun.objects.get(pk=manual.pk))
    assert (gpu["used"], gpu["measured"], gpu["pending"], gpu["by_hand"]) == (8, 6, 2, 0)

    run_cancel(run=manual, user=members["engineer"])
    run = SearchRun.objects.get(pk=manual.pk)
    gpu = run_gpu_use(run=run)
    # The 6 measured (4 by the search's requests, 2 again by hand) and none of the 2 cancelled requests; the search
    # counted the 2 measured again, so they are not counted again as measured by hand outside it.
    assert (run.gpu_used, gpu["measured"], gpu["cancelled"], gpu["released"], gpu["by_hand"]) == (6, 6, 2, 2, 0)
    client.force_login(members["viewer"])
    page = client.get(f"/runs/{manual.pk}/").content.decode()
    assert f'data-count="gpu-used">6 / {MANUAL_BUDGET}<' in page


def test_measured_again_by_hand_while_the_search_runs_and_ended_after_the_run_is_counted_once(manual, members):
    """Asked for while the search ran, on the GPU when the run was cancelled, done after it: the search never
    counted it, the ended run's count does, once (it was asked for before the end)."""
    execute, advance = _nothing_runs_by_itself()
    with execute, advance:
        again = verification_request(node=_measured_node(manual), user=members["engineer"])
        verification_approve(verification=again, user=members["approver"])
        claimed = verification_claim(verification_id=again.pk, token=new_claim_token())
        run_cancel(run=manual, user=members["engineer"])
        assert _stored(manual) == 4  # the 2 requests awaiting approval cancelled; the one on the GPU not done yet
        assert verification_fail(verification=claimed, reason="the worker lost its GPU")
    assert _stored(manual) == 5
    assert _gpu_changes(manual)[-1] == 5  # the explorer's counter moved when the late measurement ended
    assert run_advance(run_id=manual.pk) == "run is cancelled"
    run = SearchRun.objects.get(pk=manual.pk)
    gpu = run_gpu_use(run=run)
    assert (run.gpu_used, gpu["measured"], gpu["by_search"], gpu["by_hand"]) == (5, 5, 4, 1)


def test_a_state_saved_before_the_record_is_not_counted_again(manual, members):
    """A run the search advanced before it kept its record of what people measured: what the search took in then
    (here a node it had not measured, counted by measure_outside) is not counted again as measured again."""
    node = Node.objects.filter(run=manual, state__in=[NodeState.FORECAST, NodeState.ACCEPTED, NodeState.PRUNED]).first()
    assert node is not None
    asked = verification_request(node=node, user=members["engineer"])
    verification_approve(verification=asked, user=members["approver"])
    assert _stored(manual) == _counted_by_search(manual) == 7
    state = SearchRun.objects.get(pk=manual.pk).driver_state
    assert state.pop(HAND_COUNTED_KEY) == [asked.pk]
    SearchRun.objects.filter(pk=manual.pk).update(driver_state=state)  # as the code before the record saved it
    run_advance(run_id=manual.pk)
    run = SearchRun.objects.get(pk=manual.pk)
    assert run.gpu_used == _counted_by_search(run) == 7
    assert run.driver_state[HAND_COUNTED_KEY] == [asked.pk]


# ---- the runs that ended before: a migration recounts them --------------------------------------------------------

def _recount_migration():
    from django.apps import apps

    module = importlib.import_module("kernellab.migrations.0013_recount_gpu_used_of_ended_runs")
    module.recount_ended_runs(apps, None)


def test_the_migration_recounts_a_run_that_ended_before_the_record(finished, members):
    _verify_by_hand(finished, members["engineer"], ["1", "2"])
    state = SearchRun.objects.get(pk=finished.pk).driver_state
    state.pop(HAND_COUNTED_KEY)
    SearchRun.objects.filter(pk=finished.pk).update(gpu_used=BUDGET, driver_state=state)  # what the old code left
    _recount_migration()
    assert _stored(finished) == BUDGET + 2
    _recount_migration()  # and again changes nothing
    assert _stored(finished) == BUDGET + 2


def test_the_migration_recounts_a_cancelled_run_counted_by_an_older_rule(manual, members):
    run_cancel(run=manual, user=members["engineer"])
    SearchRun.objects.filter(pk=manual.pk).update(gpu_used=6)  # "6 / 8", as before cancelled requests were released
    _recount_migration()
    assert _stored(manual) == 4
