"""serve's local worker listens on the queue runs of its GPU's model send to: gpu.h100 for an H100 of any memory or
form factor, as the run form's target and the scale-out launcher name it (QA round 4: it was gpu.h100-80gb-hbm3, a queue
no run sends to, so a local H100 never measured anything)."""
import subprocess

import pytest

from gpu_runner.result import gpu_model_slug


@pytest.mark.parametrize("name, queue", [("NVIDIA H200", "gpu.h200"), ("NVIDIA H100 80GB HBM3", "gpu.h100"),
                                         ("NVIDIA H100 PCIe", "gpu.h100"), ("NVIDIA A100-SXM4-80GB", "gpu.a100"),
                                         ("NVIDIA GeForce RTX 4090", "gpu.rtx4090"), ("NVIDIA L40S", "gpu.l40s")])
def test_the_local_worker_queue_is_the_gpu_models(monkeypatch, name, queue):
    from kernellab.management.commands import serve

    monkeypatch.setattr("gpu_runner.gpu_present", lambda: True)
    monkeypatch.setattr(serve.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=name + "\n", stderr=""))
    assert serve.local_gpu_queue() == queue


def test_the_queue_is_the_one_a_run_targeting_that_model_sends_to():
    from kernellab.models import SearchRun

    assert SearchRun(target_gpu=gpu_model_slug("NVIDIA H100 80GB HBM3"), backend="auto").gpu_queue == "gpu.h100"


def test_the_launcher_names_models_as_serve_does():
    from tests.scripts import loaded_script
    from pathlib import Path

    launcher = Path(__file__).resolve().parents[2] / "benchmarks" / "scaleout_launch.py"
    with loaded_script(launcher, "scaleout_launch_models") as module:
        assert module.model_slug("NVIDIA A100-SXM4-80GB") == "a100" and module.model_slug is gpu_model_slug
