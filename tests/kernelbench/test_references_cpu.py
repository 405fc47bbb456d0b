"""KernelBench-format references executed on the CPU (torch is in the dev extra; these skip with a reason
where it is missing): every bundled reference runs and draws fresh inputs per seed, the bundled PyTorch-level
rewrite computes the same function as its reference within KernelBench's tolerance and runs the same ops
(what the guard reports as "the reference's own ops"), and a wrong program is caught by the same comparison."""
from pathlib import Path

import pytest

from gpu_runner.kernelbench import parse_program
from gpu_runner.kernelbench_verdict import own_kernel_names, work_ops

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[dev]')")

PROBLEMS = Path(__file__).resolve().parents[2] / "kernellab" / "problems"
BUNDLED = sorted(p for p in PROBLEMS.glob("kb_*") if (p / "reference.py").is_file())


def _run(source: str, model_class: str, seed: int, rows: int | None = None):
    """Build the program's model (seed 0) and run it on the inputs of `seed`, their first `rows` rows if given."""
    from gpu_runner.pytorch_worker import _load_program

    module, _ = _load_program(source, f"cpu_{model_class}", None)
    torch.manual_seed(0)
    model = getattr(module, model_class)(*module.get_init_inputs()).eval()
    torch.manual_seed(seed)
    inputs = [t[:rows] if rows else t for t in module.get_inputs()]
    with torch.no_grad():
        return model, inputs, model(*inputs)


@pytest.mark.parametrize("folder", BUNDLED, ids=[p.name for p in BUNDLED])
def test_each_bundled_reference_runs_on_the_cpu_with_fresh_inputs_per_draw(folder):
    source = (folder / "reference.py").read_text()
    parse_program(source)
    _, first_inputs, first = _run(source, "Model", seed=1)
    _, again_inputs, again = _run(source, "Model", seed=1)
    _, other_inputs, other = _run(source, "Model", seed=2)
    assert torch.isfinite(first).all()
    assert torch.equal(first, again) and all(torch.equal(a, b) for a, b in zip(first_inputs, again_inputs))
    assert not torch.equal(first, other)


def test_the_bundled_pytorch_rewrite_matches_its_reference_with_the_same_ops_and_a_wrong_one_does_not():
    from gpu_runner.pytorch_worker import _aten_ops, _compare

    folder = PROBLEMS / "kb_bias_gelu"
    reference, rewrite = (folder / "reference.py").read_text(), (folder / "candidates" / "pytorch_rewrite.py").read_text()
    assert own_kernel_names(rewrite) == (set(), set())
    for seed in (1, 2):
        model, inputs, expected = _run(reference, "Model", seed, rows=256)   # rows are independent here
        solution, _, got = _run(rewrite, "ModelNew", seed, rows=256)
        assert _compare(got, expected, 1e-2, torch)["ok"]
    with torch.no_grad():
        ops = work_ops(dict(_aten_ops(lambda: solution(*inputs), torch)))
        assert ops == work_ops(dict(_aten_ops(lambda: model(*inputs), torch))) and "gelu" in ops
    wrong = _compare(torch.relu(inputs[0]), expected, 1e-2, torch)
    assert not wrong["ok"] and wrong["bad"] > 0 and wrong["poison"] == 0
