"""The login throttle (kernellab/forms.py `_ThrottledLogin`, kernellab/services/login_throttle.py): every spelling
that logs in as one account shares that account's counter (audit finding 1), and behind the TLS proxy each client
counts on its own, so no one can lock another person out (finding 2)."""
import pytest
from django.core.cache import cache

from kernellab.services.login_throttle import _key

pytestmark = pytest.mark.django_db

REFUSED = "Too many failed log-ins for this user name from your address"


@pytest.fixture
def throttle(settings):
    settings.KERNELLAB_LOGIN_MAX_FAILURES = 3
    settings.KERNELLAB_LOGIN_LOCKOUT_S = 600
    cache.clear()
    yield
    cache.clear()


def _login(client, username: str, password: str, path: str = "/accounts/login/", **meta):
    meta.setdefault("REMOTE_ADDR", "203.0.113.7")
    return client.post(path, {"username": username, "password": password}, **meta)


# --- 1. look-alike user names ------------------------------------------------------------------------------------

def test_the_counter_is_keyed_on_the_name_as_log_in_reads_it():
    # fullwidth letters, a fullwidth capital, the feminine ordinal (NFKC: "a"), surrounding spaces, capitals
    for spelling in ("ｅｎｇｉｎｅｅｒ", "Ｅngineer", "enginｅer", " engineer ", "ENGINEER"):
        assert _key(username=spelling, address="203.0.113.7") == _key(username="engineer", address="203.0.113.7")
    assert _key(username="ªppr", address="x") == _key(username="appr", address="x")
    assert _key(username="engineer", address="x") != _key(username="engineer2", address="x")


def test_a_look_alike_spelling_of_a_locked_name_is_refused_too(client, members, throttle):
    """It used to get a fresh counter and log in: ｅｎｇｉｎｅｅｒ authenticates as engineer (UsernameField's NFKC)."""
    for _ in range(3):
        assert "did not match" in _login(client, "engineer", "wrong-password").content.decode()
    for spelling in ("ｅｎｇｉｎｅｅｒ", "enginｅer", "Engineer"):
        refused = _login(client, spelling, "pw-engineer-123")
        assert refused.status_code == 200 and REFUSED in refused.content.decode(), spelling
    assert "_auth_user_id" not in client.session


def test_failures_under_several_spellings_add_up(client, members, throttle):
    for spelling in ("ｅngineer", "eｎgineer", "enｇineer"):
        assert "did not match" in _login(client, spelling, "wrong-password").content.decode()
    assert REFUSED in _login(client, "engineer", "pw-engineer-123").content.decode()
    assert "_auth_user_id" not in client.session


def test_the_admin_log_in_counts_look_alikes_together_too(client, members, throttle):
    for spelling in ("ａdmin", "aｄmin", "adｍin"):
        client.post("/admin/login/", {"username": spelling, "password": "wrong"}, REMOTE_ADDR="203.0.113.7")
    refused = client.post("/admin/login/", {"username": "ａｄｍｉｎ", "password": "pw-admin-123"}, REMOTE_ADDR="203.0.113.7")
    assert REFUSED in refused.content.decode()


# --- 2. behind the TLS proxy -------------------------------------------------------------------------------------

PROXY = "10.0.0.1"


def test_behind_the_proxy_an_attacker_cannot_lock_out_a_user_at_another_address(client, members, throttle, settings):
    """Every request came from the proxy's REMOTE_ADDR, so 3 failures from anyone locked the name for everyone."""
    settings.KERNELLAB_BEHIND_TLS_PROXY = True
    for _ in range(3):
        _login(client, "engineer", "wrong-password", REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="203.0.113.7")
    victim = _login(client, "engineer", "pw-engineer-123", REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="198.51.100.9")
    assert victim.status_code == 302
    client.logout()
    # the attacker stays locked, whatever they write in front of the entry the proxy appended
    for forwarded in ("203.0.113.7", "198.51.100.9, 203.0.113.7", "198.51.100.9,203.0.113.7"):
        attacker = _login(client, "engineer", "pw-engineer-123", REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR=forwarded)
        assert REFUSED in attacker.content.decode(), forwarded


def test_behind_the_proxy_without_the_header_the_proxy_address_counts(client, members, throttle, settings):
    settings.KERNELLAB_BEHIND_TLS_PROXY = True
    for _ in range(3):
        _login(client, "engineer", "wrong-password", REMOTE_ADDR=PROXY)
    assert REFUSED in _login(client, "engineer", "pw-engineer-123", REMOTE_ADDR=PROXY).content.decode()


def test_without_the_proxy_setting_a_client_written_header_is_ignored(client, members, throttle, settings):
    settings.KERNELLAB_BEHIND_TLS_PROXY = False
    for n in range(3):
        _login(client, "engineer", "wrong-password", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}")
    refused = _login(client, "engineer", "pw-engineer-123", HTTP_X_FORWARDED_FOR="192.0.2.99")
    assert REFUSED in refused.content.decode()
