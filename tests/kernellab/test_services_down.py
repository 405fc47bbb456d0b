"""QA: with Redis (broker and cache) or PostgreSQL down, a person gets a sentence, not a 500.

1. Starting or resuming a run commits "running" and then sends the search task; a broker that cannot be reached
   leaves the run running with a status_reason saying so (the beat's sweep advances it later) and the page answers.
2. The login throttle counts failures in the cache; a cache that cannot be reached lets the log-in through.
3. start-up's check names PostgreSQL's own reason (connection refused) at once, not the pool's 10-second timeout.
"""
import socket
import time

import pytest
import redis.exceptions
from django.core.cache import cache
from django.urls import reverse
from kombu.exceptions import OperationalError as KombuOperationalError

from kernellab.models import SearchRun

BROKER_DOWN = [
    KombuOperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
    redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
    ConnectionRefusedError(111, "Connection refused"),
]


@pytest.fixture
def broker_down(settings, monkeypatch, request):
    """The embedded setup (a run's "auto" backend is replay), with every publish failing as a stopped Redis makes it."""
    settings.KERNELLAB_REDIS_URL = ""
    monkeypatch.setenv("KERNELLAB_GPU", "0")
    error = request.param

    def refuse(*args, **kwargs):
        raise error

    monkeypatch.setattr("kernellab.tasks.search_run_advance.apply_async", refuse)
    return error


# transaction=True: on_commit callbacks run at the commit, inside the request, as they do when serving
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("broker_down", BROKER_DOWN, indirect=True, ids=["kombu", "redis", "oserror"])
def test_start_and_resume_with_the_broker_down_answer_with_a_sentence(client, members, recorded, run, broker_down):
    client.force_login(members["engineer"])
    url = reverse("run-action", args=[run.pk])
    response = client.post(url, {"action": "start"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'data-status="running"' in page and "The worker queue could not be reached" in page
    run.refresh_from_db()
    assert run.status == "running"
    assert run.status_reason.startswith("The worker queue could not be reached (")
    assert "Connection refused" in run.status_reason and run.status_reason.endswith("the run will start when it is back.")

    client.post(url, {"action": "pause"}, HTTP_HX_REQUEST="true")
    response = client.post(url, {"action": "resume"})  # without htmx: back to the explorer
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == "running" and run.status_reason.startswith("The worker queue could not be reached")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("broker_down", BROKER_DOWN[:1], indirect=True, ids=["kombu"])
def test_create_and_start_with_the_broker_down_leads_to_the_run(client, members, recorded, broker_down):
    client.force_login(members["engineer"])
    page = client.get(reverse("run-new", args=[recorded.pk]))
    data = {name: field.initial for name, field in page.context["form"].fields.items() if field.initial is not None}
    data["start"] = "on"
    response = client.post(reverse("run-new", args=[recorded.pk]), data)
    run = SearchRun.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("run-explorer", args=[run.pk])
    assert run.status == "running" and run.status_reason.startswith("The worker queue could not be reached")


@pytest.mark.django_db(transaction=True)
def test_a_published_advance_leaves_the_reason_alone(client, members, recorded, run, settings, monkeypatch):
    settings.KERNELLAB_REDIS_URL = ""
    monkeypatch.setenv("KERNELLAB_GPU", "0")
    sent = []
    monkeypatch.setattr("kernellab.tasks.search_run_advance.apply_async", lambda *a, **k: sent.append((a, k)))
    client.force_login(members["engineer"])
    client.post(reverse("run-action", args=[run.pk]), {"action": "start"}, HTTP_HX_REQUEST="true")
    run.refresh_from_db()
    assert run.status == "running" and run.status_reason == "" and sent == [((), {"args": [run.pk], "queue": "search"})]


# --- 2. the login throttle ---------------------------------------------------------------------------------------

class _DownCache:
    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6380. Connection refused.")
        return fail


@pytest.fixture
def cache_down(monkeypatch):
    monkeypatch.setattr("kernellab.services.login_throttle.cache", _DownCache())
    monkeypatch.setattr("kernellab.services.login_throttle._warned", False, raising=False)


def test_the_throttle_functions_fail_open_when_the_cache_is_down(cache_down, caplog):
    from kernellab.services.login_throttle import login_failure_record, login_failures_clear, login_throttle_check

    attempt = {"username": "engineer", "address": "203.0.113.7"}
    with caplog.at_level("WARNING", logger="kernellab.services.login_throttle"):
        login_throttle_check(**attempt)
        assert login_failure_record(**attempt) == 0
        login_failures_clear(**attempt)
        login_throttle_check(**attempt)
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "log-ins are not throttled" in warnings[0].getMessage()


@pytest.mark.django_db
def test_log_in_succeeds_and_fails_politely_with_the_cache_down(client, members, cache_down):
    wrong = client.post("/accounts/login/", {"username": "engineer", "password": "wrong-password"}, REMOTE_ADDR="203.0.113.7")
    assert wrong.status_code == 200 and "did not match" in wrong.content.decode()
    right = client.post("/accounts/login/", {"username": "engineer", "password": "pw-engineer-123"}, REMOTE_ADDR="203.0.113.7")
    assert right.status_code == 302 and "_auth_user_id" in client.session


@pytest.mark.django_db
def test_the_throttle_still_counts_when_the_cache_works(client, members, settings):
    from kernellab.services.login_throttle import LoginThrottled, login_failure_record, login_throttle_check

    settings.KERNELLAB_LOGIN_MAX_FAILURES = 2
    cache.clear()
    attempt = {"username": "engineer", "address": "203.0.113.8"}
    assert login_failure_record(**attempt) == 1 and login_failure_record(**attempt) == 2
    with pytest.raises(LoginThrottled):
        login_throttle_check(**attempt)
    cache.clear()


# --- 3. PostgreSQL unreachable at start-up -----------------------------------------------------------------------

def test_an_unreachable_postgres_is_named_at_once_not_after_the_pool_timeout(monkeypatch, settings, django_db_blocker):
    import django.db
    from django.db.utils import ConnectionHandler

    from kernellab.config import StartupError, check_services

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket closes
    handler = ConnectionHandler({"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": "none", "USER": "nobody", "HOST": "127.0.0.1",
        "PORT": port, "CONN_MAX_AGE": 0,
        "OPTIONS": {"pool": {"min_size": 0, "max_size": 2, "timeout": 10.0, "max_idle": 60.0}},
    }})
    connection = handler["default"]
    monkeypatch.setattr(django.db, "connection", connection)
    monkeypatch.setenv("DATABASE_URL", f"postgresql://nobody@127.0.0.1:{port}/none")
    settings.KERNELLAB_REDIS_URL = ""
    started = time.monotonic()
    try:
        with django_db_blocker.unblock(), pytest.raises(StartupError) as caught:
            check_services()
    finally:
        connection.close_pool()
    elapsed = time.monotonic() - started
    message = str(caught.value)
    assert message.startswith("DATABASE_URL: cannot open the database (")
    assert "Connection refused" in message and "couldn't get a connection" not in message, message
    assert elapsed < 5, elapsed


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("error", BROKER_DOWN, ids=["kombu", "redis", "oserror"])
def test_a_measurement_asked_for_with_the_broker_down_stays_queued_for_the_beat(node, members, monkeypatch, error,
                                                                                  caplog):
    # (the request is committed; its task is sent by the beat's stale requeue once the broker answers)
    from kernellab.models import Verification, VerificationState
    from kernellab.services.verifications import verification_request

    def refuse(*args, **kwargs):
        raise error

    monkeypatch.setattr("kernellab.tasks.verification_execute.apply_async", refuse)
    monkeypatch.setattr("kernellab.tasks.search_run_advance.apply_async", refuse)
    verification = verification_request(node=node, user=members["engineer"])
    assert Verification.objects.get(pk=verification.pk).state == VerificationState.QUEUED
    assert "could not be queued" in caplog.text and "the beat will send it later" in caplog.text
