"""PyTorch-reference problems on the web tier: the upload page, import_kernelbench and the problem page."""
import gzip
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from kernellab.models import Problem
from kernellab.services.problems import problem_import_kernelbench, problem_spec
from tests.kernelbench.test_program_parsing import RELU

pytestmark = pytest.mark.django_db


@pytest.fixture
def kernelbench_tree(tmp_path):
    (tmp_path / "level1").mkdir()
    (tmp_path / "level2").mkdir()
    (tmp_path / "level1" / "19_ReLU.py").write_text(RELU)
    (tmp_path / "level1" / "3_Broken.py").write_text("import torch\n")
    (tmp_path / "level2" / "7_Fused.py").write_text(RELU.replace("torch.relu(x)", "torch.relu(x) * 2"))
    return tmp_path


def test_a_pasted_kernelbench_program_becomes_a_problem_shown_highlighted_with_its_sizes(client, members):
    client.force_login(members["engineer"])
    response = client.post(reverse("problem-upload-pytorch", args=["team"]), {"name": "my_relu", "program": RELU})
    problem = Problem.objects.get(name="my_relu")
    assert response.status_code == 302
    assert problem_spec(problem).reference.kind == "pytorch"
    page = client.get(reverse("problem-detail", args=[problem.pk])).content.decode()
    assert "Reference program (PyTorch, KernelBench format)" in page
    assert 'class="hl"' in page and "get_init_inputs" in page
    assert "batch_size=16" in page and "dim=2048" in page
    assert "No H200 measurements of LLM-written solutions are recorded for this task." in page


def test_a_program_without_model_is_refused_with_the_sentence_and_the_text_kept(client, members):
    client.force_login(members["engineer"])
    program = RELU.replace("class Model(", "class Net(")
    response = client.post(reverse("problem-upload-pytorch", args=["team"]), {"name": "bad", "program": program})
    body = response.content.decode()
    assert response.status_code == 400
    assert "The program defines no class Model. Nothing was saved." in body
    assert "class Net(nn.Module)" in body
    assert not Problem.objects.filter(name="bad").exists()


def test_a_viewer_cannot_upload_a_pytorch_reference(client, members):
    client.force_login(members["viewer"])
    response = client.post(reverse("problem-upload-pytorch", args=["team"]), {"name": "my_relu", "program": RELU})
    assert response.status_code == 403
    assert not Problem.objects.filter(name="my_relu").exists()


def test_import_kernelbench_imports_a_level_reports_refusals_and_skips_what_is_there(workspace, kernelbench_tree):
    first = problem_import_kernelbench(workspace=workspace, path=kernelbench_tree, level=1)
    assert [p.name for p in first.imported] == ["kb1_19_relu"]
    assert first.refused == [(str(kernelbench_tree / "level1" / "3_Broken.py"), "The program defines no class Model.")]
    again = problem_import_kernelbench(workspace=workspace, path=kernelbench_tree)
    assert [p.name for p in again.imported] == ["kb2_7_fused"]
    assert again.present == ["kb1_19_relu"]
    stored = Problem.objects.get(name="kb1_19_relu")
    assert stored.title == "KernelBench L1 19: ReLU"
    assert "level = 1" in stored.spec_toml and "task = 19" in stored.spec_toml
    assert stored.reference.source == RELU


def test_the_import_command_prints_its_counts_and_refuses_a_missing_folder(workspace, kernelbench_tree, capsys):
    call_command("import_kernelbench", str(kernelbench_tree), "--level", "2")
    assert "Imported 1 KernelBench task(s)" in capsys.readouterr().out
    with pytest.raises(CommandError, match="does not exist"):
        call_command("import_kernelbench", str(kernelbench_tree / "nowhere"))
    with pytest.raises(CommandError, match="No KernelBench task files .* of level 5"):
        call_command("import_kernelbench", str(kernelbench_tree), "--level", "5")


def test_the_problem_page_compares_recorded_h200_speedups_with_the_authors(client, members, workspace, settings,
                                                                          tmp_path):
    from kernellab.services.problems import problem_create_pytorch

    problem = problem_create_pytorch(workspace=workspace, user=None, program_source=RELU, name="kb1_19_relu")
    records = tmp_path / "kernelbench" / "records"
    records.mkdir(parents=True)
    lines = [{"problem": "kb1_19_relu", "variant": "reference", "status": "ok", "reference": {"median_ms": 0.5},
              "baselines": {"cuda_graph": {"median_ms": 0.25}, "torch_compile": {"median_ms": 0.125}},
              "hardware": {"name": "NVIDIA H200"}},
             {"problem": "kb1_19_relu", "variant": "cuda-l1:1", "solution_gpus": ["h100", "a100"], "status": "ok",
              "speedup": 0.8, "authors_speedup": {"h100": 1.9, "a100": 2.4}, "reason": "Correct."},
             {"problem": "kb1_19_relu", "variant": "cuda-l1:2", "solution_gpus": ["l40"], "status": "rejected-guard",
              "speedup": 1.35, "authors_speedup": {"l40": 1.2}, "reason": "A PyTorch-level rewrite: ..."}]
    lines[0]["reference_vs_kernelbench"] = "same model, other sizes or inputs"
    with gzip.open(records / "h200.jsonl.gz", "wt") as handle:
        handle.write("\n".join(json.dumps(line) for line in lines) + "\n")
    settings.KERNELLAB_PROBLEMS_DIR = str(tmp_path)
    client.force_login(members["viewer"])
    page = client.get(reverse("problem-detail", args=[problem.pk])).content.decode()
    assert "LLM-written solutions on the H200" in page
    assert "0.80× <small>(slower than eager)</small>" in page
    assert "1.90×" in page and "2.40×" in page and "h100, a100" in page
    assert "Baselines: cuda_graph 0.2500 ms · torch_compile 0.1250 ms" in page
    # a guard's rejection keeps its measured speedup beside the verdict that says why it was rejected
    assert "rejected-guard" in page and "1.35×" in page
    assert "CUDA-L1&#x27;s copy of this task&#x27;s reference: same model, other sizes or inputs" in page
