"""KernelBench solutions through the runner: what a candidate of a PyTorch problem is, which backend
measures it, the bundled problems' recorded H200 answers, and the replayed generator (CPU; the torch
backend's own GPU test is marked gpu)."""
from pathlib import Path

import pytest

from gpu_runner import Candidate, Runner
from gpu_runner.spec import SpecError, load_problem
from search_engine.candidates import candidate_hash
from search_engine.generators.base import ProposalContext
from search_engine.generators.replayed import RecordedSolution, ReplayedGenerator

PROBLEMS = Path(__file__).resolve().parents[2] / "kernellab" / "problems"
BUNDLED = ("kb_bias_gelu", "kb_layernorm", "kb_matmul_relu", "kb_row_softmax")


def solution(problem, path: Path) -> Candidate:
    return Candidate.from_dict({"source": path.read_text(), "launch": [], "name": path.stem}, problem)


def test_a_kernelbench_solution_is_a_candidate_with_no_launch_plan_and_anything_else_is_refused_with_a_sentence():
    problem = load_problem(PROBLEMS / "kb_row_softmax")
    assert solution(problem, PROBLEMS / "kb_row_softmax" / "candidates" / "warp_online.py").launch == ()
    with pytest.raises(SpecError, match="defines no class ModelNew"):
        Candidate.from_dict({"source": problem.reference.source.replace("class Model(", "class Other("),
                             "launch": []}, problem)
    with pytest.raises(SpecError, match="no launch plan"):
        Candidate.from_dict({"source": problem.reference.source, "launch": [],
                             "compile_options": ["-use_fast_math"]}, problem)


def test_a_pytorch_problem_goes_to_the_torch_backend_on_a_gpu_and_is_unavailable_on_the_static_one():
    problem = load_problem(PROBLEMS / "kb_layernorm")
    assert Runner(backend="cupy").backend_for(problem).name == "torch"
    assert Runner(backend="pycuda").backend_for(problem).name == "torch"
    reference = Candidate.from_dict({"source": problem.reference.source, "launch": []}, problem)
    result = Runner(backend="static").measure(problem, reference)
    assert result.status == "unavailable"
    assert result.reason.startswith("The static backend cannot run a PyTorch reference")
    broken = {"source": "import torch\nsrc = '#include </etc/passwd>'\nclass ModelNew:\n    def forward(self, x):\n"
                        "        return x\n", "launch": []}
    report = Runner(backend="replay").check(problem, Candidate.from_dict(broken, problem))
    assert not report.ok and "passwd" in report.log


@pytest.mark.parametrize("name", BUNDLED)
def test_every_bundled_candidate_replays_its_recorded_h200_measurement(name):
    problem = load_problem(PROBLEMS / name)
    runner = Runner(backend="replay", records_root=str(PROBLEMS))
    candidates = sorted((PROBLEMS / name / "candidates").glob("*.py"))
    assert len(candidates) >= 2
    for path in candidates:
        result = runner.measure(problem, solution(problem, path))
        assert result.backend == "replay" and result.status != "unavailable", (path.name, result.reason)
        assert result.reference is not None and result.reference.median_ms > 0
        if result.status == "ok":
            assert result.speedup == pytest.approx(result.reference.median_ms / result.candidate.median_ms, rel=0.05)
    reference = runner.measure(problem, Candidate.from_dict({"source": problem.reference.source, "launch": []},
                                                            problem))
    assert reference.status == "ok" and reference.speedup == 1.0


def test_the_pytorch_rewrite_of_bias_gelu_is_recorded_as_doing_no_work_of_its_own():
    problem = load_problem(PROBLEMS / "kb_bias_gelu")
    result = Runner(backend="replay", records_root=str(PROBLEMS)).measure(
        problem, solution(problem, PROBLEMS / "kb_bias_gelu" / "candidates" / "pytorch_rewrite.py"))
    assert result.status == "rejected-guard"
    assert result.reason.startswith("No kernel of the solution's own ran in ModelNew.forward")


def test_the_replayed_generator_proposes_recorded_solutions_in_order_skipping_known_ones_then_nothing():
    solutions = [RecordedSolution(source=f"# solution {i}\nclass ModelNew: pass\n", label=f"s{i}") for i in range(3)]
    generator = ReplayedGenerator(solutions, "a test dataset")
    known = {candidate_hash({"source": solutions[0].source, "launch": [], "temps": [], "compile_options": []})}
    context = ProposalContext(node_id=0, parent={}, reference={}, known_hashes=known)
    first = generator.propose(context, 1)
    assert [p.candidate["name"] for p in first] == ["replayed s1"]
    assert first[0].rationale.startswith("Replayed from a test dataset: s1.")
    known |= {candidate_hash(p.candidate) for p in first}
    assert [p.candidate["name"] for p in generator.propose(context, 5)] == ["replayed s2"]
    known |= {candidate_hash({"source": solutions[2].source, "launch": []})}
    assert generator.propose(ProposalContext(node_id=0, parent={}, reference={}, known_hashes=known), 5) == []


@pytest.mark.gpu
def test_the_torch_backend_measures_a_bundled_candidate_on_the_gpu(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[gpu-torch]')")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU for torch")
    from gpu_runner.backends.torch import TorchBackend

    problem = load_problem(PROBLEMS / "kb_row_softmax")
    with Runner(backend=TorchBackend(build_root=tmp_path)) as runner:
        result = runner.measure(problem, solution(problem, PROBLEMS / "kb_row_softmax" / "candidates" /
                                                  "warp_online.py"), timeout_s=280)
        assert result.status == "ok", result.reason
        assert result.backend == "torch" and result.speedup > 0.2
        reference = runner.measure(problem, Candidate.from_dict({"source": problem.reference.source,
                                                                 "launch": []}, problem), timeout_s=120)
        assert reference.status == "ok" and "baselines: cuda_graph" in reference.reason
