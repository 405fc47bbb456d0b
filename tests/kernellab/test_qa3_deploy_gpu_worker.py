"""QA3 deploy finding 5: a worker on a gpu.* queue on a host without a usable GPU answered every run set to "auto"
from recorded data (KERNELLAB_RUNNER_BACKEND=auto falls back to replay), its heartbeat took the replay label off
every page, its answers were stored with the recording's "NVIDIA H200" as if measured here, and a measured node's
panel showed "Measurements (0)" because the run's backend (auto) excluded replayed answers.

Now such a worker refuses to start with one sentence (unless KERNELLAB_RUNNER_BACKEND names a GPU backend, or
the queue is replay); a replayed answer on a gpu.* queue says in its hardware that it was recorded; a gpu.* worker
whose answers came from recorded data leaves the replay label on; and a node lists what its run's verifications
produced, whatever the run's backend says.
"""
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.urls import reverse
from django.utils import timezone

from kernellab.models import Measurement, NodeState, Verification, VerificationState, WorkerHeartbeat

ROOT = Path(__file__).resolve().parents[2]


# ---- a gpu.* worker without a GPU refuses to start ---------------------------------------------------------

@pytest.mark.parametrize("queues,backend,gpu,refused", [
    (["gpu.h200"], "auto", "0", True),
    (["search", "replay", "gpu.h100"], "auto", "0", True),
    (["gpu.h200"], "replay", "0", True),
    (["gpu.h200"], "static", "0", True),
    (["gpu.h200"], "cupy", "0", False),    # a GPU that is there but not found: measured, or failed with the reason
    (["gpu.h200"], "torch", "0", False),
    (["gpu.h200"], "auto", "1", False),    # a GPU: it measures
    (["search", "replay"], "auto", "0", False),  # recorded data is the replay queue's
])
def test_which_workers_refuse(monkeypatch, settings, queues, backend, gpu, refused):
    from kernellab.celery import gpu_worker_refusal

    monkeypatch.setenv("KERNELLAB_GPU", gpu)
    settings.KERNELLAB_RUNNER_BACKEND = backend
    sentence = gpu_worker_refusal(queues)
    assert bool(sentence) == refused
    if refused:
        queue = next(q for q in queues if q.startswith("gpu."))
        assert sentence.startswith(f"this worker consumes {queue} but no GPU is usable here (KERNELLAB_GPU=0")
        assert f"KERNELLAB_RUNNER_BACKEND={backend}" in sentence and "-Q replay" in sentence


def test_the_readme_gpu_worker_command_without_a_gpu_stops_with_one_sentence(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"} and not k.startswith("KERNELLAB_")}
    env.update({"KERNELLAB_DATA_DIR": str(tmp_path), "KERNELLAB_GPU": "0", "CUDA_VISIBLE_DEVICES": "0",
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    result = subprocess.run([sys.executable, "-m", "celery", "-A", "kernellab", "worker", "-Q", "gpu.h200",
                             "--concurrency", "1", "-n", "gpu0@%h"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.startswith("KernelLab cannot start:")]
    assert lines == [
        "KernelLab cannot start: this worker consumes gpu.h200 but no GPU is usable here (KERNELLAB_GPU=0, "
        "CUDA_VISIBLE_DEVICES=0), so with KERNELLAB_RUNNER_BACKEND=auto it would answer from recorded data instead "
        "of measuring: start it where the GPU is, serve recorded data with -Q replay, or set "
        "KERNELLAB_RUNNER_BACKEND=cupy if the GPU is there and not found."]
    assert "Traceback" not in result.stderr and "celery@" not in result.stdout  # it never started


# ---- a measured node lists what its verification produced ------------------------------------------------

@pytest.mark.django_db
def test_a_node_of_an_auto_run_answered_from_recorded_data_lists_that_measurement(client, members, node):
    from kernellab.selectors.explorer import node_measurements, run_measurements

    run = node.run
    run.backend = "auto"
    run.save()
    replayed = Measurement.objects.create(kernel=node.kernel, problem=run.problem, status="ok", backend="replay",
                                          speedup=4.25, hardware={"name": "NVIDIA H200"})
    Verification.objects.create(node=node, state=VerificationState.DONE, measurement=replayed, queue="gpu.h200",
                                finished_at=timezone.now())
    node.state, node.speedup = NodeState.MEASURED, 4.25
    node.save()
    assert [m.pk for m in node_measurements(node=node)] == [replayed.pk]
    assert list(run_measurements(run=run).values_list("pk", flat=True)) == [replayed.pk]
    client.force_login(members["viewer"])
    panel = " ".join(client.get(reverse("node-panel", args=[run.pk, node.key]), HTTP_HX_REQUEST="true")
                     .content.decode().split())
    assert "Measurements (1)" in panel and "Not measured on a GPU" not in panel


@pytest.mark.django_db
def test_a_gpu_run_with_gpu_measurements_still_leaves_out_other_runs_replayed_answers(node):
    from kernellab.selectors.explorer import node_measurements

    run = node.run
    run.backend = "auto"
    run.save()
    common = {"kernel": node.kernel, "problem": run.problem, "status": "ok", "speedup": 1.3}
    Measurement.objects.create(backend="replay", **common)  # another (replay) run's answer for the same kernel
    mine = Measurement.objects.create(backend="cupy", **common)
    Verification.objects.create(node=node, state=VerificationState.DONE, measurement=mine, queue="gpu.h200")
    assert [m.pk for m in node_measurements(node=node)] == [mine.pk]


# ---- a replayed answer on a gpu.* queue says it was recorded ---------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("queue,backend,labelled", [("gpu.h200", "replay", True), ("replay", "replay", False),
                                                    ("gpu.h200", "cupy", False)])
def test_the_stored_hardware_of_a_replayed_answer_on_a_gpu_queue_says_recorded(node, monkeypatch, queue, backend,
                                                                              labelled):
    from kernellab.services import measurement

    recorded = {"name": "NVIDIA H200", "sm_count": 132, "memory_bandwidth_gbs": 4814.3}
    answer = {"status": "ok", "backend": backend, "speedup": 4.25, "hardware": dict(recorded),
              "reason": "Correct on 4 input set(s); reference timed 7 s earlier in this worker."}
    fake = SimpleNamespace(measure=lambda *a, **k: SimpleNamespace(to_dict=lambda: dict(answer)))
    monkeypatch.setattr(measurement, "_runner", lambda *a, **k: fake)
    monkeypatch.setattr(measurement, "expert_notes_for", lambda spec, result: [])
    monkeypatch.setattr(measurement, "_profile_reference_once", lambda *a, **k: None)
    verification = Verification.objects.create(node=node, state=VerificationState.RUNNING, queue=queue, attempts=1)
    result, _ = measurement.measure_for_verification(verification)
    if labelled:
        assert result["hardware"]["name"] == "NVIDIA H200 (recorded data, not measured by this worker)"
        assert result["hardware"]["recorded"] is True
        assert result["hardware"]["sm_count"] == 132
        from search_engine.surrogates.program_features import gpu_key

        assert gpu_key(result["hardware"]) == "h200"  # the surrogate still reads an H200's figures
    else:
        assert result["hardware"] == recorded


# ---- the replay label stays while the only gpu.* worker answers from recorded data ------------------------

@pytest.mark.django_db
def test_the_replay_label_stays_while_a_gpu_worker_answers_from_recorded_data(client, members, node, monkeypatch):
    from kernellab.selectors.workers import gpu_queues_with_live_worker

    monkeypatch.setenv("KERNELLAB_GPU", "0")
    now = timezone.now()
    WorkerHeartbeat.objects.create(hostname="gpu0@box", queues=["gpu.h200"], started_at=now, last_seen=now)
    assert gpu_queues_with_live_worker() == {"gpu.h200"}  # nothing answered yet: taken at its word
    common = {"kernel": node.kernel, "problem": node.run.problem, "status": "ok", "speedup": 4.25}
    replayed = Measurement.objects.create(backend="replay", **common)
    Verification.objects.create(node=node, state=VerificationState.DONE, measurement=replayed, queue="gpu.h200",
                                claimed_by="gpu0@box", started_at=timezone.now())
    assert gpu_queues_with_live_worker() == set()
    client.force_login(members["viewer"])
    assert 'id="replay-label"' in client.get(reverse("home"), follow=True).content.decode()
    measured = Measurement.objects.create(backend="cupy", **common)
    Verification.objects.create(node=node, state=VerificationState.DONE, measurement=measured, queue="gpu.h200",
                                claimed_by="gpu0@box", started_at=timezone.now())
    assert gpu_queues_with_live_worker() == {"gpu.h200"}
    assert 'id="replay-label"' not in client.get(reverse("home"), follow=True).content.decode()
