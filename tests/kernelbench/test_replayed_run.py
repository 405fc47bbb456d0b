"""A whole run over a bundled KernelBench-format problem with no LLM and no GPU: the replayed generator
proposes the problem's recorded candidates and the replay backend answers with their H200 measurements."""
from pathlib import Path

import pytest
from django.urls import reverse

from kernellab.models import Measurement, Node, NodeState, Problem, RunStatus
from kernellab.selectors.kernelbench import cuda_l1_dir, recorded_solutions
from kernellab.services.problems import problem_create_pytorch, problem_load_bundled
from kernellab.services.runs import run_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def layernorm(settings, workspace, tmp_path):
    settings.DATA_DIR = tmp_path
    settings.CELERY_TASK_ALWAYS_EAGER = True
    from kernellab.celery import app

    app.conf.task_always_eager = True
    yield next(p for p in problem_load_bundled(workspace=workspace) if p.name == "kb_layernorm")
    app.conf.task_always_eager = False


KERNELBENCH = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "kernelbench"


def test_a_replayed_run_over_a_kernelbench_problem_measures_every_recorded_candidate_labelled_replayed(
        layernorm, members, client):
    run = run_create(problem=layernorm, user=members["engineer"], generator="replayed", surrogate="none",
                     backend="replay", gpu_budget=6, children_per_step=2)
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED, run.status_reason
    children = Node.objects.filter(run=run).exclude(origin="root")
    assert sorted(n.kernel.name for n in children) == ["replayed bundled candidate block_two_pass",
                                                       "replayed bundled candidate warp_two_pass"]
    assert {n.origin for n in children} == {"replayed"}
    assert all(n.state == NodeState.MEASURED for n in children)
    speedups = sorted(round(n.speedup, 3) for n in children)
    assert speedups == [0.826, 1.151]   # the H200 records of the two candidates
    assert run.best_speedup == pytest.approx(1.151, abs=1e-3)
    assert {m.backend for m in Measurement.objects.filter(problem=layernorm)} == {"replay"}
    client.force_login(members["viewer"])
    page = client.get(reverse("run-explorer", args=[run.pk])).content.decode()
    assert 'id="replayed-label"' in page and "Replayed: recorded solutions, no LLM" in page
    node = children.first()
    panel = client.get(reverse("node-panel", args=[run.pk, node.key]), HTTP_HX_REQUEST="true").content.decode()
    assert "a recorded solution, not written in this run" in panel


def test_a_replayed_run_with_the_learned_surrogate_forecasts_each_candidate_with_the_program_surrogate(
        layernorm, members):
    pytest.importorskip("lightgbm")
    from kernellab.models import Forecast

    run = run_create(problem=layernorm, user=members["engineer"], generator="replayed", surrogate="learned",
                     backend="replay", gpu_budget=6, children_per_step=2)
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED, run.status_reason
    forecasts = Forecast.objects.filter(node__run=run)
    assert forecasts.exists() and {f.surrogate.split("@")[0] for f in forecasts} == {"learned-program"}
    assert all(abs(sum(f.probabilities) - 1) < 1e-6 for f in forecasts)


def test_the_replayed_generator_reads_an_imported_tasks_cuda_l1_solutions_in_place(workspace, members):
    if not (cuda_l1_dir() / "h100.jsonl").is_file() or not (KERNELBENCH / "level1").is_dir():
        pytest.skip(f"the CUDA-L1 and KernelBench datasets are not at {cuda_l1_dir()} and {KERNELBENCH}")
    file = next((KERNELBENCH / "level1").glob("50_*.py"))
    problem = problem_create_pytorch(workspace=workspace, user=members["engineer"], program_source=file.read_text(),
                                     name="kb1_50", level=1, task=50)
    solutions, dataset = recorded_solutions(problem=problem)
    assert 1 <= len(solutions) <= 5 and dataset.startswith("CUDA-L1")
    assert len({s.source for s in solutions}) == len(solutions)
    assert all(s.label.startswith("CUDA-L1 ") and "class ModelNew" in s.source for s in solutions)


def test_a_whole_run_over_an_imported_kernelbench_task_replays_its_cuda_l1_solutions_on_cpu(settings, workspace,
                                                                                           members, tmp_path):
    task = KERNELBENCH / "level1" / "52_Argmin_over_a_dimension.py"
    if not (cuda_l1_dir() / "h100.jsonl").is_file() or not task.is_file():
        pytest.skip(f"the CUDA-L1 and KernelBench datasets are not at {cuda_l1_dir()} and {KERNELBENCH}")
    from kernellab.celery import app
    from kernellab.services.problems import problem_import_kernelbench

    settings.DATA_DIR = tmp_path
    settings.CELERY_TASK_ALWAYS_EAGER = app.conf.task_always_eager = True
    try:
        summary = problem_import_kernelbench(workspace=workspace, path=task)
        assert summary.with_recordings == 1
        problem = summary.imported[0]
        run = run_create(problem=problem, user=members["engineer"], generator="replayed", surrogate="none",
                         backend="replay", gpu_budget=6, children_per_step=3)
    finally:
        app.conf.task_always_eager = False
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED, run.status_reason
    children = list(Node.objects.filter(run=run).exclude(origin="root"))
    assert children and all(n.origin == "replayed" and n.kernel.name.startswith("replayed CUDA-L1 ") for n in children)
    measurements = Measurement.objects.filter(problem=problem)
    assert measurements.exists() and {m.backend for m in measurements} == {"replay"}
    assert all(m.status != "unavailable" for m in measurements), [m.reason for m in measurements]


def test_the_run_form_of_a_kernelbench_problem_offers_the_replayed_generator_and_the_learned_surrogate(
        layernorm, workspace):
    from kernellab.forms import RunCreateForm

    form = RunCreateForm(problem=layernorm)
    assert [value for value, _ in form.fields["generator"].choices] == ["replayed"]
    assert form.fields["generator"].initial == "replayed" and form.fields["surrogate"].initial == "learned"
    cuda = Problem.objects.get(workspace=workspace, name="softmax")   # loaded beside it, a CUDA problem
    assert "replayed" not in [value for value, _ in RunCreateForm(problem=cuda).fields["generator"].choices]


def test_a_run_over_a_cuda_problem_replays_the_candidates_a_lab_dataset_holds_for_it(settings, workspace, members,
                                                                                    tmp_path):
    """The GPU Forecasters layout that import_dataset stores: comparison rows whose pack is the problem."""
    import gzip
    import json

    from gpu_runner import reference_candidate, render_variant
    from kernellab.celery import app
    from kernellab.forms import RunCreateForm
    from kernellab.selectors.lab import lab_datasets_dir
    from kernellab.selectors.problems import bundled_dir
    from kernellab.services.problems import problem_spec
    from search_engine.lab.datasets import comparison_row, write_dataset

    settings.DATA_DIR = tmp_path
    softmax = next(p for p in problem_load_bundled(workspace=workspace) if p.name == "softmax")
    assert "replayed" not in [value for value, _ in RunCreateForm(problem=softmax).fields["generator"].choices]
    spec = problem_spec(softmax)
    with gzip.open(bundled_dir() / "softmax" / "records" / "h200.jsonl.gz", "rt") as handle:
        recorded = [json.loads(line) for line in handle]
    knobs = [r["knobs"] for r in recorded if r.get("knobs") and r.get("status") == "ok"][:3]
    rows = [comparison_row(comparison_id=f"c{i}", pack="softmax", anchor=reference_candidate(spec).to_dict(),
                           candidate=render_variant(spec, k).to_dict(), hardware="NVIDIA H200", speedup=1.5,
                           source="recorded-h200") for i, k in enumerate(knobs)]
    lab_datasets_dir(workspace).mkdir(parents=True)
    write_dataset(lab_datasets_dir(workspace) / "softmax_rows.jsonl", rows)
    assert "replayed" in [value for value, _ in RunCreateForm(problem=softmax).fields["generator"].choices]
    settings.CELERY_TASK_ALWAYS_EAGER = app.conf.task_always_eager = True
    try:
        run = run_create(problem=softmax, user=members["engineer"], generator="replayed", surrogate="none",
                         backend="replay", gpu_budget=5, children_per_step=3)
    finally:
        app.conf.task_always_eager = False
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED, run.status_reason
    children = list(Node.objects.filter(run=run).exclude(origin="root"))
    assert sorted(n.kernel.name for n in children) == [f"replayed lab dataset softmax_rows row c{i} (1.50x on NVIDIA H200)"
                                                       for i in range(3)]
    assert all(n.origin == "replayed" and n.state == NodeState.MEASURED for n in children)


def test_cuda_l1_entries_without_a_solution_are_not_proposed(settings, workspace, tmp_path):
    import json

    rows = [{"level_id": 1, "task_id": 8, "custom_code": "None", "score_default": "1.0"},
            {"level_id": 1, "task_id": 8, "custom_code": "class ModelNew:\n    pass\n", "score_default": "1.3"}]
    (tmp_path / "h100.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    settings.KERNELLAB_CUDA_L1_DIR = str(tmp_path)
    problem = problem_create_pytorch(workspace=workspace, user=None, name="kb1_8_task", level=1, task=8,
                                     program_source=(KERNELBENCH_FREE_RELU))
    solutions, _ = recorded_solutions(problem=problem)
    assert [s.label for s in solutions] == ["CUDA-L1 h100 solution (authors: 1.3x on the H100)"]


KERNELBENCH_FREE_RELU = '''import torch
import torch.nn as nn

N = 1024


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''


def test_a_bundled_kernelbench_problems_page_shows_its_candidates_h200_verdicts(layernorm, members, client):
    client.force_login(members["viewer"])
    page = client.get(reverse("problem-detail", args=[layernorm.pk])).content.decode()
    assert "Its candidates on the H200" in page and "The candidates written for this problem" in page
    assert "bundled:warp_two_pass" in page and "1.15×" in page
    assert "bundled:block_two_pass" in page and "0.83× <small>(slower than eager)</small>" in page
    assert "Baselines: cuda_graph" in page
