"""Production settings: check --deploy is clean with the production variables, pages carry a
Content-Security-Policy, and repeated failed log-ins are refused for a while."""
import os
import re
import secrets
import subprocess
import sys

import pytest
from django.core.cache import cache

from kernellab.config import BASE_DIR

PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": secrets.token_urlsafe(64),
    "ALLOWED_HOSTS": "kernellab.example.org",
    "KERNELLAB_HSTS_SECONDS": "31536000",
    "KERNELLAB_HSTS_PRELOAD": "true",
    "KERNELLAB_SSL_REDIRECT": "true",
    "KERNELLAB_SECURE_COOKIES": "true",
    "KERNELLAB_BEHIND_TLS_PROXY": "true",
}


def _check_deploy(tmp_path, variables: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLAB_") and k not in ("DEBUG", "SECRET_KEY")}
    env.update({"KERNELLAB_DATA_DIR": str(tmp_path), **variables})
    return subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                          cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120)


def test_check_deploy_is_clean_with_the_production_variables(tmp_path):
    result = _check_deploy(tmp_path, PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_names_each_tls_setting_left_off(tmp_path):
    tls = ("KERNELLAB_HSTS_SECONDS", "KERNELLAB_SSL_REDIRECT", "KERNELLAB_SECURE_COOKIES")
    result = _check_deploy(tmp_path, {k: v for k, v in PRODUCTION.items() if k not in tls})
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr + result.stdout


@pytest.mark.django_db
def test_pages_carry_a_content_security_policy_with_the_inline_scripts_nonce(client, members, workspace):
    client.force_login(members["viewer"])
    response = client.get(f"/w/{workspace.slug}/verifications/")
    policy = response["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "object-src 'none'" in policy and "frame-ancestors 'none'" in policy
    nonce = re.search(r"script-src 'self' 'nonce-([^']+)'", policy).group(1)
    assert f'<script nonce="{nonce}">' in response.content.decode()
    assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
    assert "Content-Security-Policy" in client.get("/accounts/login/")


@pytest.fixture
def throttle(settings):
    settings.KERNELLAB_LOGIN_MAX_FAILURES = 3
    settings.KERNELLAB_LOGIN_LOCKOUT_S = 600
    cache.clear()
    yield
    cache.clear()


def _login(client, username: str, password: str, address: str = "203.0.113.7"):
    return client.post("/accounts/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


@pytest.mark.django_db
def test_after_three_failures_even_the_right_password_is_refused_for_a_while(client, members, throttle):
    for _ in range(3):
        assert "did not match" in _login(client, "engineer", "wrong-password").content.decode()
    refused = _login(client, "engineer", "pw-engineer-123")
    assert "Too many failed log-ins for this user name from your address; try again in 10 minutes." in refused.content.decode()
    assert "_auth_user_id" not in client.session
    # another address, or another user from the same address, still logs in
    assert _login(client, "engineer", "pw-engineer-123", address="198.51.100.9").status_code == 302
    client.logout()
    assert _login(client, "viewer", "pw-viewer-123").status_code == 302


@pytest.mark.django_db
def test_a_successful_log_in_clears_the_failures(client, members, throttle):
    for _ in range(2):
        _login(client, "engineer", "wrong-password")
    assert _login(client, "engineer", "pw-engineer-123").status_code == 302
    client.logout()
    for _ in range(2):
        _login(client, "engineer", "wrong-password")
    assert _login(client, "engineer", "pw-engineer-123").status_code == 302


@pytest.mark.django_db
def test_the_admin_log_in_is_throttled_too(client, members, throttle):
    for _ in range(3):
        client.post("/admin/login/", {"username": "admin", "password": "wrong"}, REMOTE_ADDR="203.0.113.7")
    refused = client.post("/admin/login/", {"username": "admin", "password": "pw-admin-123"}, REMOTE_ADDR="203.0.113.7")
    assert "Too many failed log-ins" in refused.content.decode()
