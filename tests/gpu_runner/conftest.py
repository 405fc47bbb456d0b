"""GPU tests (`@pytest.mark.gpu`) skip with a visible reason where there is no NVIDIA GPU."""
from __future__ import annotations

from pathlib import Path

import pytest

from gpu_runner.runner import gpu_present

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    if gpu_present():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU here (no /dev/nvidia* device node or no CuPy); "
                                   "run `pytest -m gpu tests/gpu_runner` on a GPU machine")
    for item in items:
        if "gpu" in item.keywords and HERE in Path(str(item.fspath)).parents:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _private_compile_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path_factory.getbasetemp() / "kl-cache"))
