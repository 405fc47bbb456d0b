"""KERNELLAB_RUNNER_BACKEND, KERNELLAB_COMPILE_ENGINE, KERNELLAB_WEB_PROCESSES and KERNELLAB_MALLOC_TRIM_S are
checked at start-up like the other variables: a bad value stops `manage.py check` and `manage.py serve` with one
sentence naming it."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernellab import config

ROOT = Path(__file__).resolve().parents[2]


def manage(args, env_extra, tmp_path, timeout=120):
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"} and not k.startswith("KERNELLAB_")}
    env.update({"KERNELLAB_DATA_DIR": str(tmp_path), **env_extra})
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("variable,value,sentence", [
    ("KERNELLAB_RUNNER_BACKEND", "bogus",
     "KERNELLAB_RUNNER_BACKEND must be auto, cupy, pycuda, static, replay or torch, not 'bogus'."),
    ("KERNELLAB_COMPILE_ENGINE", "bogus", "KERNELLAB_COMPILE_ENGINE must be auto or nvcc, not 'bogus'."),
    ("KERNELLAB_WEB_PROCESSES", "abc", "KERNELLAB_WEB_PROCESSES must be a whole number, not 'abc'."),
    ("KERNELLAB_MALLOC_TRIM_S", "abc", "KERNELLAB_MALLOC_TRIM_S must be a number, not 'abc'."),
])
def test_a_bad_value_stops_check_with_one_sentence(tmp_path, variable, value, sentence):
    result = manage(["check"], {variable: value}, tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == f"KernelLab cannot start: {sentence}"


def test_serve_with_a_bad_web_process_count_stops_without_a_traceback(tmp_path):
    """It used to reach serve's int() and end in a ValueError traceback."""
    result = manage(["serve", "--no-worker", "--port", "0"], {"KERNELLAB_WEB_PROCESSES": "abc"}, tmp_path)
    assert result.returncode == 2
    assert "KERNELLAB_WEB_PROCESSES must be a whole number, not 'abc'." in result.stderr
    assert "Traceback" not in result.stderr


def test_runner_backend_accepts_what_the_runner_accepts(monkeypatch):
    from gpu_runner.runner import BACKENDS, Runner

    monkeypatch.delenv("KERNELLAB_RUNNER_BACKEND", raising=False)
    assert config.runner_backend() == "auto"
    for name in ("auto", *BACKENDS):
        monkeypatch.setenv("KERNELLAB_RUNNER_BACKEND", f" {name.upper()} ")
        assert config.runner_backend() == name
        Runner(backend=name)  # the value settings hands the Runner is one it takes
    monkeypatch.setenv("KERNELLAB_RUNNER_BACKEND", "cuda")
    with pytest.raises(config.StartupError, match="KERNELLAB_RUNNER_BACKEND"):
        config.runner_backend()


def test_compile_engine_accepts_exactly_what_nvrtc_accepts(monkeypatch):
    """config.COMPILE_ENGINES is a copy of what gpu_runner.nvrtc.choose_engine takes: both must agree."""
    from gpu_runner.nvrtc import choose_engine

    source = "__global__ void k(float* x) { __shared__ float s[32]; s[0] = x[0]; x[0] = s[0]; }"  # nvcc either way
    monkeypatch.delenv("KERNELLAB_COMPILE_ENGINE", raising=False)
    assert config.compile_engine() == "auto"
    for value in (*config.COMPILE_ENGINES, " NVCC ", ""):
        monkeypatch.setenv("KERNELLAB_COMPILE_ENGINE", value)
        config.compile_engine()
        assert choose_engine(source).name == "nvcc"
    for value in ("nvrtc", "bogus"):
        monkeypatch.setenv("KERNELLAB_COMPILE_ENGINE", value)
        with pytest.raises(config.StartupError, match="KERNELLAB_COMPILE_ENGINE"):
            config.compile_engine()
        with pytest.raises(ValueError, match="KERNELLAB_COMPILE_ENGINE"):
            choose_engine(source)


def test_web_processes(monkeypatch):
    monkeypatch.delenv("KERNELLAB_WEB_PROCESSES", raising=False)
    assert config.web_processes() == 1
    monkeypatch.setenv("KERNELLAB_WEB_PROCESSES", "4")
    assert config.web_processes() == 4
    monkeypatch.setenv("KERNELLAB_WEB_PROCESSES", "0")
    with pytest.raises(config.StartupError, match="KERNELLAB_WEB_PROCESSES must be at least 1"):
        config.web_processes()


def test_a_bad_llm_address_is_named_without_its_credentials(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "ftp://team:S3CRETPW@llm.internal/v1?key=TOKEN42")
    with pytest.raises(config.StartupError) as refused:
        config.llm_endpoint()
    message = str(refused.value)
    assert "ftp://llm.internal/v1" in message and "S3CRETPW" not in message and "TOKEN42" not in message
