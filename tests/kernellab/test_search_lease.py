"""A run's lease: renewed by a thread while an advance runs, however long its step takes, so no second worker steps
the run beside it; and short, so that a worker process killed while holding it blocks the run for LEASE_S (two
minutes), not the quarter of an hour it did (a QA deployment's run stood still for 15 minutes after one pool process
was killed)."""
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from kernellab.models import RunStatus, SearchRun
from kernellab.services import search
from kernellab.services.runs import run_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("embedded_setup")]


@pytest.fixture
def running(saxpy, members):
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=4, children_per_step=2, max_gpu_per_step=2, start=False)
    SearchRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
    return SearchRun.objects.get(pk=run.pk)


def _lease_left(run_id: int) -> float:
    until = SearchRun.objects.filter(pk=run_id).values_list("lease_until", flat=True).get()
    return (until - timezone.now()).total_seconds() if until else 0.0


def test_a_long_advance_keeps_its_lease_and_a_second_worker_stays_out(running, monkeypatch):
    monkeypatch.setattr(search, "LEASE_S", 1)
    monkeypatch.setattr(search, "LEASE_RENEW_S", 0.2)
    seen = []

    def slow_advance(run_id):
        deadline = time.monotonic() + 3  # three leases long
        while time.monotonic() < deadline:
            seen.append(search._lease(run_id))  # a second worker's try
            time.sleep(0.3)
        return "stepped"

    monkeypatch.setattr(search, "_advance_leased", slow_advance)
    monkeypatch.setattr(search, "_outside_events_waiting", lambda run: False)
    monkeypatch.setattr("kernellab.tasks.search_run_advance.apply_async", lambda *a, **k: None)
    assert search.run_advance(run_id=running.pk) == "stepped"
    assert len(seen) >= 8 and not any(seen)
    assert SearchRun.objects.get(pk=running.pk).lease_until is None  # let go at the end
    renewed = []
    monkeypatch.setattr(search, "_renew", lambda run_id: renewed.append(run_id))
    with search._lease_kept(running.pk):
        time.sleep(0.5)
    count = len(renewed)
    time.sleep(0.5)
    assert count >= 1 and len(renewed) == count  # the keeper stops with the body


def test_a_dead_holders_lease_blocks_the_run_for_two_minutes_at_most(running, monkeypatch):
    assert search.LEASE_S <= 120 and search.LEASE_RENEW_S * 3 <= search.LEASE_S
    later = []
    monkeypatch.setattr("kernellab.tasks.search_run_advance.apply_async",
                        lambda args, queue=None, countdown=None, **kw: later.append(countdown))
    from kernellab.celery import app

    eager = app.conf.task_always_eager
    app.conf.task_always_eager = False  # workers apart: the redelivered message is put off until the lease has passed
    try:
        assert search._lease(running.pk)  # a worker took the lease, then was killed: nobody renews or lets go of it
        assert search.run_advance(run_id=running.pk) == "another worker is advancing this run"
    finally:
        app.conf.task_always_eager = eager
    assert later and later[0] <= search.LEASE_S + 1
    SearchRun.objects.filter(pk=running.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert search._lease(running.pk)  # once it has passed, the run is taken over
    assert 0 < _lease_left(running.pk) <= search.LEASE_S
