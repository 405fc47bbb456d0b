"""PostgreSQL connections are pooled per process, with sizes from the environment."""
import pytest

from kernellab import config


@pytest.fixture
def postgres_url(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgresql://kl@db.example:5432/kernellab")
    for name in ("KERNELLAB_DB_POOL_MIN", "KERNELLAB_DB_POOL_MAX", "KERNELLAB_DB_POOL_TIMEOUT_S", "KERNELLAB_DB_POOL_IDLE_S"):
        monkeypatch.delenv(name, raising=False)


def test_a_team_database_is_pooled_and_connections_go_back_after_each_request(postgres_url, tmp_path):
    settings = config.database_settings(tmp_path)
    assert settings["OPTIONS"]["pool"]["min_size"] == 2 and settings["OPTIONS"]["pool"]["max_size"] == 8
    assert settings["CONN_MAX_AGE"] == 0  # Django refuses persistent connections with a pool


def test_pool_sizes_come_from_the_environment(postgres_url, monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELLAB_DB_POOL_MIN", "3")
    monkeypatch.setenv("KERNELLAB_DB_POOL_MAX", "20")
    monkeypatch.setenv("KERNELLAB_DB_POOL_TIMEOUT_S", "4")
    pool = config.database_settings(tmp_path)["OPTIONS"]["pool"]
    assert (pool["min_size"], pool["max_size"], pool["timeout"]) == (3, 20, 4.0)


def test_a_pool_maximum_of_zero_turns_pooling_off(postgres_url, monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELLAB_DB_POOL_MAX", "0")
    settings = config.database_settings(tmp_path)
    assert "pool" not in settings.get("OPTIONS", {}) and settings["CONN_MAX_AGE"] == 60


def test_a_minimum_above_the_maximum_is_refused_with_a_sentence(postgres_url, monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELLAB_DB_POOL_MIN", "9")
    monkeypatch.setenv("KERNELLAB_DB_POOL_MAX", "4")
    with pytest.raises(config.StartupError, match=r"KERNELLAB_DB_POOL_MIN \(9\) must not exceed KERNELLAB_DB_POOL_MAX \(4\)"):
        config.database_settings(tmp_path)


def test_sqlite_is_never_pooled(monkeypatch, tmp_path):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert "pool" not in config.database_settings(tmp_path)["OPTIONS"]
