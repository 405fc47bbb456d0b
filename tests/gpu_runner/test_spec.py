from pathlib import Path

import pytest

from gpu_runner import Candidate, SpecError, load_problem, parse_problem
from gpu_runner.candidate import check_candidate, reference_candidate
from gpu_runner.spec import KernelLaunch, MemsetStep
from tests.gpu_runner.helpers import PROBLEMS, reduce_problem, saxpy_problem

REFERENCE = (PROBLEMS / "saxpy" / "reference.cu").read_text()
FAMILY = (PROBLEMS / "saxpy" / "family.cu").read_text()
TOML = (PROBLEMS / "saxpy" / "problem.toml").read_text()


def parse(text: str):
    return parse_problem(text, REFERENCE, FAMILY)


def test_it_loads_a_problem_folder_with_sizes_args_launch_tolerance_roofline_and_family():
    problem = load_problem(PROBLEMS / "saxpy")
    assert problem.name == "saxpy"
    assert [c.name for c in problem.sizes] == ["default", "odd"]
    assert [a.role for a in problem.args] == ["input", "input", "output", "scalar", "scalar"]
    assert problem.arg("y").init == "uniform" and problem.arg("x").init == "normal"
    step = problem.reference.launch[0]
    assert isinstance(step, KernelLaunch)
    assert step.resolve({"N": 1000}) == ((4, 1, 1), (256, 1, 1), 0)
    assert problem.tolerance_for("float32").rtol == 1e-5
    assert problem.tolerance_for("float16").rtol == 1e-2      # the default for an unnamed dtype
    assert problem.roofline.bytes.evaluate({"N": 10}) == 120
    assert set(problem.family.knobs) == {"BLOCK", "ITEMS", "VEC"}
    assert problem.folder == PROBLEMS / "saxpy"


def test_a_memset_step_and_a_vendor_table_are_read():
    problem = reduce_problem()
    assert problem.reference.launch[0] == MemsetStep("out", 0)
    assert problem.vendor.kind == "cupy_sum" and problem.vendor.inputs == ("x",) and problem.vendor.output == "out"


@pytest.mark.parametrize("change, field, fragment", [
    (("name = \"saxpy\"", "name = \"Sax Py\""), "problem.name", "slug"),
    (("[sizes]\ndefault = { N = 16777216 }", "[sizes]\ndefault = { N = -1 }"), "sizes.default.N", "positive"),
    (("odd = { N = 1000003 }", "odd = { M = 3 }"), "sizes.odd", "first case names"),
    (("role = \"output\"", "role = \"result\""), "args[2] ('out').role", "must be one of"),
    (("dtype = \"float32\"\nshape = [\"N\"]\ninit = \"uniform\"", "dtype = \"float128\"\nshape = [\"N\"]"),
     "args[1] ('y').dtype", "float128"),
    (("shape = [\"N\"]\ninit = \"uniform\"", "shape = [\"N * K\"]"), "args[1] ('y').shape[0]", "unknown name 'K'"),
    (("init = \"uniform\"", "init = \"gaussian\""), "args[1] ('y').init", "gaussian"),
    (("value = \"2.5\"", "shape = [\"N\"]"), "args[3] ('a').value", "needs a value"),
    (("kernel = \"saxpy\"\n", "kernel = \"sax-py\"\n"), "launch[0].kernel", "C identifier"),
    (("grid = [\"ceil_div(N, 256)\"]", "grid = []"), "launch[0].grid", "1 to 3"),
    (("grid = [\"ceil_div(N, 256)\"]", "grid = [\"open('x')\"]"), "launch[0].grid[0]", "not allowed"),
    (("args = [\"x\", \"y\", \"out\", \"a\", \"n\"]\n\n[tolerance]", "args = [\"x\", \"z\"]\n\n[tolerance]"),
     "launch[0].args[1]", "unknown argument 'z'"),
    (("float32 = { rtol = 1e-5, atol = 1e-6 }", "float32 = { rtol = -1 }"), "tolerance.float32.rtol", "non-negative"),
    (("float32 = { rtol = 1e-5, atol = 1e-6 }", "complex64 = { rtol = 1 }"), "tolerance.complex64", "not a dtype"),
    (("bytes = \"12*N\"", "bytes = \"12*Q\""), "roofline.bytes", "unknown name 'Q'"),
    (("knobs = { BLOCK", "knobs = { N = [1], BLOCK"), "family.knobs.N", "name of a size"),
    (("ITEMS = [1, 2, 4]", "ITEMS = [1, 1]"), "family.knobs.ITEMS", "twice"),
    (("constraints = [\"BLOCK*ITEMS*VEC <= 4096\"]", "constraints = [\"BLOCK <= FOO\"]"),
     "family.constraints[0]", "unknown name 'FOO'"),
    (("[problem]", "[problme]\nx=1\n[problem]"), "problme", "unknown table"),
])
def test_a_bad_spec_names_the_field_and_what_is_wrong(change, field, fragment):
    old, new = change
    assert old in TOML, old
    with pytest.raises(SpecError) as info:
        parse(TOML.replace(old, new, 1))
    assert info.value.field == field
    assert fragment in info.value.message


def test_bad_toml_and_missing_tables_are_spec_errors():
    with pytest.raises(SpecError, match="not valid TOML"):
        parse("[problem\nname=")
    with pytest.raises(SpecError, match=r"\[sizes\] table is missing"):
        parse("[problem]\nname = 'x'\n")
    with pytest.raises(SpecError) as info:
        parse(TOML.replace("role = \"output\"", "role = \"input\""))
    assert info.value.field == "args" and "nothing to compare" in info.value.message


def test_a_launch_that_gives_a_non_integer_grid_fails_for_the_size_case():
    with pytest.raises(SpecError) as info:
        parse(TOML.replace("grid = [\"ceil_div(N, 256)\"]", "grid = [\"N / 256\"]", 1))
    assert info.value.field == "launch[0]" and "not an integer" in info.value.message and "odd" in info.value.message


def test_a_family_without_its_template_source_is_an_error():
    with pytest.raises(SpecError) as info:
        parse_problem(TOML, REFERENCE, None)
    assert info.value.field == "family.source"


def test_a_missing_reference_file_is_named(tmp_path):
    (tmp_path / "problem.toml").write_text(TOML.replace('reference = "reference.cu"', 'reference = "ref.cu"'))
    with pytest.raises(SpecError) as info:
        load_problem(tmp_path)
    assert info.value.field == "problem.reference" and "ref.cu" in info.value.message


def test_vendor_kind_and_inputs_are_checked():
    text = (PROBLEMS / "reduce_sum" / "problem.toml").read_text()
    source = (PROBLEMS / "reduce_sum" / "reference.cu").read_text()
    with pytest.raises(SpecError, match="vendor.kind"):
        parse_problem(text.replace("cupy_sum", "cudnn_conv"), source)
    with pytest.raises(SpecError, match="vendor.inputs"):
        parse_problem(text.replace('kind = "cupy_sum"', 'kind = "cublas_sgemm"'), source)
    with pytest.raises(SpecError, match="cublas_sgemv takes 2 input"):
        parse_problem(text.replace('kind = "cupy_sum"', 'kind = "cublas_sgemv"'), source)
    gemv = load_problem(Path(__file__).resolve().parents[2] / "kernellab" / "problems" / "gemv")
    assert (gemv.vendor.kind, gemv.vendor.inputs, gemv.vendor.output) == ("cublas_sgemv", ("A", "x"), "y")
    with pytest.raises(SpecError, match="cupy_dot takes 2 input"):
        parse_problem(text.replace('kind = "cupy_sum"', 'kind = "cupy_dot"'), source)
    dot = load_problem(Path(__file__).resolve().parents[2] / "kernellab" / "problems" / "dot")
    assert (dot.vendor.kind, dot.vendor.inputs, dot.vendor.output) == ("cupy_dot", ("x", "y"), "out")


def test_a_candidate_dict_round_trips_and_is_checked_against_the_problem():
    problem = saxpy_problem()
    data = {"source": REFERENCE, "name": "copy",
            "launch": [{"memset": "out", "value": 0},
                       {"kernel": "saxpy", "grid": ["ceil_div(N, 128)"], "block": [128], "shared": "0",
                        "args": ["x", "y", "out", "a", "n"]}],
            "temps": [{"name": "scratch", "dtype": "float32", "shape": ["N"]}],
            "compile_options": ["-maxrregcount=64", "--use_fast_math"], "knobs": None}
    candidate = Candidate.from_dict(data, problem)
    again = Candidate.from_dict(candidate.to_dict(), problem)
    assert again == candidate
    assert candidate.kernel_names == ["saxpy"]
    assert len(candidate.source_hash) == 64


@pytest.mark.parametrize("patch, field", [
    ({"launch": [{"kernel": "saxpy", "grid": ["ceil_div(N, BLOCK)"], "block": [128], "args": []}]},
     "candidate.launch[0].grid[0]"),
    ({"launch": [{"kernel": "saxpy", "grid": [1], "block": [128], "args": ["q"]}]}, "candidate.launch[0].args[0]"),
    ({"launch": [{"memset": "x"}]}, "candidate.launch[0].memset"),
    ({"compile_options": ["-o", "/etc/passwd"]}, "candidate.compile_options"),
    ({"temps": [{"name": "x", "dtype": "float32", "shape": ["N"]}]}, "candidate.temps"),
    ({"source": ""}, "candidate.source"),
    ({"extra": 1}, "candidate.extra"),
])
def test_a_bad_candidate_is_a_spec_error_naming_the_field(patch, field):
    problem = saxpy_problem()
    data = {"source": REFERENCE, "launch": [{"kernel": "saxpy", "grid": [1], "block": [1], "args": []}], **patch}
    with pytest.raises(SpecError) as info:
        Candidate.from_dict(data, problem)
    assert info.value.field == field


def test_the_reference_is_a_valid_candidate_of_its_own_problem():
    problem = saxpy_problem()
    check_candidate(problem, reference_candidate(problem))


@pytest.mark.parametrize("change, field, marked, fragments", [
    (("block = [256]\nshared", "block = [2048]\nshared"), "launch[0].block", "block = [2048]",
     ["block (2048, 1, 1), 2048 threads per block, for size case 'default'", "the limit is 1024 threads per block"]),
    (("block = [256]\nshared", "block = [2, 2, 128]\nshared"), "launch[0].block", "block = [2, 2, 128]",
     ["block z = 128 for size case 'default'", "the limit for block z is 64"]),
    (("grid = [\"ceil_div(N, 256)\"]", "grid = [\"1\", \"N\"]"), "launch[0].grid", "grid = [\"1\", \"N\"]",
     ["grid y = 16777216 for size case 'default'", "the limit for grid y is 65535"]),
    (("grid = [\"ceil_div(N, 256)\"]", "grid = [\"1\", \"1\", \"N\"]"), "launch[0].grid", "grid = [\"1\", \"1\"",
     ["grid z = 16777216", "the limit for grid z is 65535"]),
    (("grid = [\"ceil_div(N, 256)\"]", "grid = [\"N*N\"]"), "launch[0].grid", "grid = [\"N*N\"]",
     ["grid x = 281474976710656 for size case 'default'", "the limit for grid x is 2147483647"]),
    (("shared = \"0\"\nargs = [\"x\", \"y\", \"out\", \"a\", \"n\"]\n\n[tolerance]",
      "shared = \"4*N\"\nargs = [\"x\", \"y\", \"out\", \"a\", \"n\"]\n\n[tolerance]"), "launch[0].shared",
     "shared = \"4*N\"", ["asks for 67108864 bytes (64 MiB) of dynamic shared memory for size case 'default'",
                          "the limit is 232448 bytes (227 KiB) per block on the H100 and H200"]),
    (("odd = { N = 1000003 }", "odd = { N = 3000000000 }"), "args[4] ('n').value", "value = \"N\"",
     ["gives 3000000000 for size case 'odd', outside the range of the int32 scalar (-2147483648 to 2147483647)"]),
    (("dtype = \"float32\"\nvalue = \"2.5\"", "dtype = \"float16\"\nvalue = \"N\""), "args[3] ('a').value",
     "value = \"N\"\n[[args]]\nname = \"n\"",
     ["gives 16777216 for size case 'default', outside the range of the float16 scalar (-65504 to 65504)"]),
])
def test_a_launch_or_scalar_beyond_the_gpus_limits_is_refused_naming_the_limit_and_size_case(change, field, marked,
                                                                                            fragments):
    old, new = change
    assert old in TOML, old
    spec = TOML.replace(old, new, 1)
    with pytest.raises(SpecError) as info:
        parse(spec)
    error = next(e for e in info.value.errors if e.field == field)
    assert all(fragment in error.message for fragment in fragments), error.message
    assert error.line == spec[:spec.index(marked)].count("\n") + 1   # the line that gives it, for the upload page


def test_a_launch_at_the_gpus_limits_is_accepted():
    spec = (TOML.replace("block = [256]\nshared", "block = [1024]\nshared", 1)
            .replace("shared = \"0\"\nargs = [\"x\", \"y\", \"out\", \"a\", \"n\"]\n\n[tolerance]",
                     "shared = \"232448\"\nargs = [\"x\", \"y\", \"out\", \"a\", \"n\"]\n\n[tolerance]", 1))
    step = parse(spec).reference.launch[0]
    assert step.resolve({"N": 16777216}) == ((65536, 1, 1), (1024, 1, 1), 232448)


def test_a_candidate_beyond_the_limits_is_refused_before_it_runs():
    problem = saxpy_problem()
    data = {"source": REFERENCE, "launch": [{"kernel": "saxpy", "grid": ["ceil_div(N, 2048)"], "block": [2048],
                                             "args": ["x", "y", "out", "a", "n"]}]}
    with pytest.raises(SpecError) as info:
        Candidate.from_dict(data, problem)
    assert info.value.field == "candidate.launch[0].block" and "1024 threads per block" in info.value.message


def test_a_problem_folder_saved_with_a_byte_order_mark_loads(tmp_path):
    for name in ("problem.toml", "reference.cu", "family.cu"):
        (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + (PROBLEMS / "saxpy" / name).read_bytes())
    problem = load_problem(tmp_path)
    assert problem.name == "saxpy" and not problem.reference.source.startswith("\ufeff")
    assert not problem.family.source.startswith("\ufeff")


def test_a_spec_text_that_starts_with_a_byte_order_mark_is_read():
    assert parse("\ufeff" + TOML).name == "saxpy"
