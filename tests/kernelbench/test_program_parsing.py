"""KernelBench programs read with ast on the web tier: shape, sizes and the sentences a user reads."""
from pathlib import Path

import pytest

from gpu_runner.kernelbench import ProgramError, parse_program, task_name
from gpu_runner.spec import PytorchReference, SpecError, parse_problem, reference_kind

KERNELBENCH = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "kernelbench"

RELU = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)

batch_size = 16
dim = 1024 * 2
shape = (batch_size, dim)

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
'''

SPEC = '''[problem]
name = "relu"
kind = "pytorch"
reference = "reference.py"
'''


def test_a_kernelbench_program_gives_its_forward_parameters_and_integer_sizes():
    program = parse_program(RELU)
    assert program.forward_params == ("x",)
    assert program.sizes == {"batch_size": 16, "dim": 2048}
    assert program.constants["shape"] == (16, 2048)


def test_a_program_without_model_says_so_and_points_to_the_solution_upload():
    with pytest.raises(ProgramError, match="defines no class Model .it defines ModelNew"):
        parse_program(RELU.replace("class Model(", "class ModelNew("))


def test_a_program_without_get_inputs_is_refused_with_what_kernelbench_needs_it_for():
    with pytest.raises(ProgramError, match=r"no function get_inputs\(\); KernelBench calls it"):
        parse_program(RELU.replace("def get_inputs", "def make_inputs"))


def test_a_model_without_forward_is_refused_with_its_line():
    with pytest.raises(ProgramError, match="Class Model at line 4 has no forward method") as caught:
        parse_program(RELU.replace("def forward", "def run"))
    assert caught.value.line == 4


def test_a_reference_that_runs_code_on_import_is_refused_but_a_solution_may_build_its_extension():
    with pytest.raises(ProgramError, match="Line 20 runs a statement when the program is loaded"):
        parse_program(RELU + "print('hello')\n")
    solution = RELU.replace("class Model(", "class ModelNew(") + "try:\n    ext = load_inline(name='x')\nexcept Exception:\n    ext = None\n"
    assert parse_program(solution, model_class="ModelNew").uses_load_inline


def test_python_that_does_not_parse_names_its_line():
    with pytest.raises(ProgramError, match="not valid Python: .* at line 2"):
        parse_program("import torch\nclass Model(:\n")


def test_task_files_get_a_slug_and_a_title_with_their_level():
    assert task_name("19_ReLU.py", 1) == ("kb1_19_relu", "KernelBench L1 19: ReLU")
    assert task_name("my_op.py") == ("kb_my_op", "KernelBench: my op")


def test_a_pytorch_spec_reads_as_a_problem_with_a_pytorch_reference_and_kernelbench_tolerance():
    problem = parse_problem(SPEC, RELU)
    assert isinstance(problem.reference, PytorchReference)
    assert problem.reference.kind == "pytorch"
    assert problem.default_case.sizes == {"batch_size": 16, "dim": 2048}
    assert problem.tolerance_for("float32").atol == 0.01 and problem.tolerance_for("float32").rtol == 0.01
    assert reference_kind(SPEC) == "pytorch" and reference_kind("[problem]\nname='x'\n") == "cuda"


def test_a_pytorch_spec_reports_every_mistake_at_once():
    with pytest.raises(SpecError) as caught:
        parse_problem(SPEC.replace('"relu"', '"Re-LU"') + "[launch]\n", "import torch\n")
    fields = [e.field for e in caught.value.errors]
    assert fields == ["launch", "problem.name", "problem.reference"]


@pytest.mark.skipif(not KERNELBENCH.is_dir(), reason="the KernelBench dataset is not beside the project")
def test_every_kernelbench_task_of_levels_one_to_three_reads():
    files = sorted(KERNELBENCH.glob("level*/*.py"))
    assert len(files) == 250
    for file in files:
        assert parse_program(file.read_text()).forward_params, file


def test_a_program_nested_thousands_deep_is_a_sentence_not_a_crash():
    deep = "x = " + " + ".join(["1"] * 3000) + "\n"  # the walk over the sizes would recurse 3,000 deep
    with pytest.raises(ProgramError, match="nests too deeply to be read"):
        parse_program(deep + RELU)
