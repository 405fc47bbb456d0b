"""The bundled CuTe hgemm problem (issue 23) in the app: its page, and a search run replayed from its H200
records (kernellab/problems/hgemm/records/h200.jsonl.gz)."""
import gzip
import json
from pathlib import Path

import pytest
from django.urls import reverse

from kernellab.models import Measurement, Node, NodeState, RunStatus
from kernellab.services.problems import problem_load_bundled
from kernellab.services.runs import run_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("embedded_setup")]

RECORDS = Path(__file__).resolve().parents[2] / "kernellab" / "problems" / "hgemm" / "records" / "h200.jsonl.gz"


@pytest.fixture
def hgemm(settings, workspace, tmp_path):
    settings.DATA_DIR = tmp_path
    settings.CELERY_TASK_ALWAYS_EAGER = True
    from kernellab.celery import app

    app.conf.task_always_eager = True
    yield next(p for p in problem_load_bundled(workspace=workspace) if p.name == "hgemm")
    app.conf.task_always_eager = False


def test_the_hgemm_page_shows_the_cute_family_and_a_tensor_core_bound(client, members, hgemm):
    client.force_login(members["viewer"])
    response = client.get(reverse("problem-detail", args=[hgemm.pk]))
    body = response.content.decode()
    assert response.status_code == 200
    assert "hgemm_cute" in body and "cpasync_barrier_arrive_noinc" in body and "warpgroup_reg_alloc" in body
    # 2 x 4096^3 = 137.44 GFLOP at the datasheet H200's fp16 tensor-core rate (4096 FLOP a clock on each of
    # 132 SMs at 1.98 GHz), not at its fp32 rate (67 TFLOP/s, which would give 2.0545 ms).
    assert "137.44 GFLOP at 1071 TFLOP/s" in body and "0.1284 ms" in body and "2.0545 ms" not in body


def test_a_search_run_on_hgemm_replays_its_h200_records(hgemm, members):
    recorded = [json.loads(line) for line in gzip.open(RECORDS, "rt")]
    speedups = {r["speedup"] for r in recorded if r["status"] == "ok"}
    run = run_create(problem=hgemm, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=6, children_per_step=3, max_gpu_per_step=2)
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED, run.status_reason
    measured = Node.objects.filter(run=run, state=NodeState.MEASURED).exclude(origin="root")
    assert measured.exists() and run.best_node is not None
    measurements = list(Measurement.objects.filter(problem=hgemm))
    assert measurements and all(m.backend == "replay" and m.status == "ok" for m in measurements)
    # Every answer is one of the H200's recorded measurements, with the hardware it was taken on.
    assert all(m.speedup in speedups and m.hardware["name"] == "NVIDIA H200" for m in measurements)
    assert run.best_speedup == max(n.speedup for n in measured)
