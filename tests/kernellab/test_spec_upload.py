"""Uploading a spec: every mistake at once with its problem.toml line, the form kept after a
refusal, the launch checked against the kernel's signature, and the help the page gives."""
import html
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from gpu_runner import parse_problem
from gpu_runner.compiler import ToolMissing, find_tool
from kernellab.models import Problem
from kernellab.spec_guide import ROLE_EXAMPLES, TEMPLATE_REFERENCE, TEMPLATE_TOML
from tests.samples import SIMPLE_REFERENCE, SIMPLE_SPEC

pytestmark = pytest.mark.django_db

# Three mistakes: an unknown dtype (line 15), a grid of no expressions (line 33) and a launch that
# passes two arguments to the three-parameter kernel (line 36).
BAD_SPEC = (SIMPLE_SPEC.replace('dtype = "float32"\nshape = ["N"]\n\n[[args]]\nname = "y"',
                                'dtype = "float23"\nshape = ["N"]\n\n[[args]]\nname = "y"')
            .replace('grid = ["ceil_div(N, 256)"]', "grid = []")
            .replace('args = ["x", "y", "n"]', 'args = ["x", "y"]'))


def upload(client, user, **data):
    client.force_login(user)
    return client.post(reverse("problem-upload", args=["team"]), data)


def line_of(text: str, fragment: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if fragment in line)


def test_a_spec_with_three_mistakes_lists_all_three_with_their_lines(client, members, workspace):
    response = upload(client, members["engineer"], spec_toml=BAD_SPEC, reference_source=SIMPLE_REFERENCE)
    body = html.unescape(response.content.decode())
    assert response.status_code == 400
    assert "The problem spec has 3 mistakes" in body and "Nothing was saved." in body
    dtype_line, grid_line, args_line = (line_of(BAD_SPEC, 'float23'), line_of(BAD_SPEC, "grid = []"),
                                        line_of(BAD_SPEC, 'args = ["x", "y"]'))
    assert f'href="#spec-{dtype_line}">line {dtype_line}</a>: <code>args[0] (\'x\').dtype</code>' in body
    assert f'href="#spec-{grid_line}">line {grid_line}</a>: <code>launch[0].grid</code>' in body
    assert f'href="#spec-{args_line}">line {args_line}</a>: <code>launch[0].args</code>' in body
    assert "the step passes 2 arguments ('x', 'y') but kernel scale (line 1) takes 3" in body
    # the shown spec marks exactly those lines
    marked = body.split("problem.toml, with the lines to fix marked", 1)[1]
    assert marked.count('class="hll"') == 3
    assert [re.sub(r"<[^>]+>", "", chunk.split("\n", 1)[0]) for chunk in marked.split('<span class="hll">')[1:]] == [
        'dtype = "float23"', "grid = []", 'args = ["x", "y"]']
    assert not Problem.objects.filter(workspace=workspace).exists()


def test_a_refused_upload_keeps_what_was_typed(client, members, workspace):
    response = upload(client, members["engineer"], spec_toml=BAD_SPEC, reference_source=SIMPLE_REFERENCE)
    form = response.context["form"]
    assert form["spec_toml"].value() == BAD_SPEC
    assert form["reference_source"].value() == SIMPLE_REFERENCE


def test_a_refused_uploaded_file_comes_back_in_the_text_box_to_edit(client, members, workspace):
    spec_file = SimpleUploadedFile("problem.toml", BAD_SPEC.encode(), content_type="text/plain")
    response = upload(client, members["engineer"], spec_file=spec_file, reference_source=SIMPLE_REFERENCE)
    body = response.content.decode()
    assert response.status_code == 400
    assert response.context["form"]["spec_toml"].value() == BAD_SPEC
    assert html.escape('name = "x"', quote=True) in body.split('name="spec_toml"', 1)[1].split("</textarea>", 1)[0]
    assert "The text of problem.toml is now in the boxes below" in body


def test_a_launch_with_four_arguments_for_a_three_parameter_kernel_is_refused(client, members, workspace):
    spec = SIMPLE_SPEC.replace('args = ["x", "y", "n"]', 'args = ["x", "y", "n", "x"]')
    response = upload(client, members["engineer"], spec_toml=spec, reference_source=SIMPLE_REFERENCE)
    body = html.unescape(response.content.decode())
    assert response.status_code == 400
    assert "The problem spec is not valid: launch[0].args: the step passes 4 arguments" in body
    assert "kernel scale (line 1) takes 3: scale(const float* x, float* y, int n)" in body
    assert not Problem.objects.exists()


def test_a_scalar_passed_where_the_kernel_takes_a_pointer_is_refused_naming_both_types(client, members, workspace):
    spec = SIMPLE_SPEC.replace('args = ["x", "y", "n"]', 'args = ["x", "n", "y"]')
    response = upload(client, members["engineer"], spec_toml=spec, reference_source=SIMPLE_REFERENCE)
    body = html.unescape(response.content.decode())
    assert "argument 'n' (int32 scalar) does not fit parameter 2 'y' of kernel scale (line 1), declared 'float* y'" in body
    assert "argument 'y' (float32 output) does not fit parameter 3 'n'" in body


def test_a_forbidden_include_and_an_oversized_case_are_still_refused(client, members, workspace):
    response = upload(client, members["engineer"], spec_toml=SIMPLE_SPEC,
                      reference_source='#include "/etc/passwd"\n' + SIMPLE_REFERENCE)
    assert response.status_code == 400 and "reference.cu" in response.content.decode()
    huge = SIMPLE_SPEC.replace("default = { N = 1048576 }", "default = { N = 274877906944 }")
    response = upload(client, members["engineer"], spec_toml=huge, reference_source=SIMPLE_REFERENCE)
    body = html.unescape(response.content.decode())
    assert "more than the per-problem memory cap" in body
    assert not Problem.objects.exists()


def test_the_upload_page_offers_a_template_role_examples_and_the_spec_reference(client, members, workspace):
    client.force_login(members["engineer"])
    body = html.unescape(client.get(reverse("problem-upload", args=["team"])).content.decode())
    assert reverse("spec-reference") in body
    for role in ("input", "output", "inout", "scalar", "temp"):
        assert f'id="role-{role}"' in body
    assert 'kernel = "scale"' in body
    prefilled = client.get(reverse("problem-upload", args=["team"]) + "?template=1")
    assert prefilled.context["form"]["spec_toml"].value() == TEMPLATE_TOML


def test_the_template_and_every_role_example_are_valid_specs():
    assert parse_problem(TEMPLATE_TOML, TEMPLATE_REFERENCE).name == "scale"
    for example in ROLE_EXAMPLES:
        # each example as the first argument of the template's kernel, with the parameter it documents
        renamed = example.toml.replace('name = "', 'name = "extra_', 1)
        spec = TEMPLATE_TOML.replace("[[args]]", renamed + "[[args]]", 1).replace(
            'args = ["x", "y", "a", "n"]', f'args = ["{_name(renamed)}", "x", "y", "a", "n"]')
        parameter = example.parameter.rsplit(" ", 1)[0] + " " + _name(renamed)
        source = TEMPLATE_REFERENCE.replace("void scale(", f"void scale({parameter}, ")
        assert parse_problem(spec, source).args[0].role == example.role


def _name(toml: str) -> str:
    return toml.split('name = "', 1)[1].split('"', 1)[0]


def test_the_spec_reference_page_renders_the_docs(client, members):
    client.force_login(members["viewer"])
    response = client.get(reverse("spec-reference"))
    body = response.content.decode()
    assert response.status_code == 200
    assert "<h1" in body and "Problem spec reference" in body
    assert "The launch is checked against the kernel" in body
    assert "<table>" in body and "<script" not in body.split("spec-reference", 1)[1].split("</article>")[0]


# What QA uploaded: a vector add, its spec and (for the family tests) a template with one knob.
VADD_SPEC = """[problem]
name = "vadd"
title = "Vector add"

[sizes]
default = { N = 16777216 }

[[args]]
name = "a"
role = "input"
dtype = "float32"
shape = ["N"]

[[args]]
name = "b"
role = "input"
dtype = "float32"
shape = ["N"]

[[args]]
name = "c"
role = "output"
dtype = "float32"
shape = ["N"]

[[args]]
name = "n"
role = "scalar"
dtype = "int32"
value = "N"

[[launch]]
kernel = "vadd"
grid = ["ceil_div(N, 256)"]
block = [256]
shared = "0"
args = ["a", "b", "c", "n"]
"""
VADD_REFERENCE = """#define BLOCK 256
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""
VADD_FAMILY_TABLE = """
[family]
source = "family.cu"
knobs = { A = [1, 2, 4, 8, 16, 32] }
constraints = []

[[family.launch]]
kernel = "vadd"
grid = ["ceil_div(N, 256)"]
block = [256]
shared = "0"
args = ["a", "b", "c", "n"]
"""
VADD_FAMILY = VADD_REFERENCE.replace("#define BLOCK 256\n", "").replace("a[i] + b[i];", "a[i] + b[i] + A;")

try:
    find_tool("nvcc")
    HAVE_NVCC = True
except ToolMissing:
    HAVE_NVCC = False
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="the upload compiles the kernels with nvcc, not installed here")


def refusal(response) -> str:
    assert response.status_code == 400
    assert not Problem.objects.exists()
    return html.unescape(response.content.decode())


@needs_nvcc
def test_a_kernel_without_extern_c_is_refused_at_upload_with_the_sentence_measurements_give(client, members, workspace):
    body = refusal(upload(client, members["engineer"], spec_toml=VADD_SPEC,
                          reference_source=VADD_REFERENCE.replace('extern "C" ', "")))
    assert ("reference.cu: The kernel 'vadd' is not in the compiled module; declare it extern \"C\" __global__. "
            "Nothing was saved.") in body
    assert 'href="#src-2">line 2</a>' in body        # the kernel's line, marked in the source
    assert upload(client, members["engineer"], spec_toml=VADD_SPEC, reference_source=VADD_REFERENCE).status_code == 302


@pytest.mark.parametrize("old, new, message", [
    ("block = [256]", "block = [2048]", "launch[0].block: gives block (2048, 1, 1), 2048 threads per block, for size "
                                        "case 'default'; the limit is 1024 threads per block on the H100 and H200"),
    ('grid = ["ceil_div(N, 256)"]', 'grid = ["1", "N"]', "launch[0].grid: gives grid y = 16777216 for size case "
                                                          "'default'; the limit for grid y is 65535"),
    ('grid = ["ceil_div(N, 256)"]', 'grid = ["N*N"]', "launch[0].grid: gives grid x = 281474976710656 for size case "
                                                       "'default'; the limit for grid x is 2147483647"),
    ('shared = "0"', 'shared = "4*N"', "launch[0].shared: asks for 67108864 bytes (64 MiB) of dynamic shared memory "
                                       "for size case 'default'; the limit is 232448 bytes (227 KiB) per block"),
    ("N = 16777216", "N = 3000000000", "args[3] ('n').value: gives 3000000000 for size case 'default', outside the "
                                       "range of the int32 scalar (-2147483648 to 2147483647)"),
])
def test_launch_settings_and_scalars_beyond_the_gpus_limits_are_refused_at_upload(client, members, workspace,
                                                                                  old, new, message):
    spec = VADD_SPEC.replace(old, new)
    body = refusal(upload(client, members["engineer"], spec_toml=spec, reference_source=VADD_REFERENCE))
    assert f"The problem spec is not valid: {message}" in body
    line = line_of(spec, new if "value" not in message else 'value = "N"')
    assert f'href="#spec-{line}">line {line}</a>' in body


@needs_nvcc
def test_a_family_whose_template_does_not_compile_is_refused_at_upload(client, members, workspace):
    body = refusal(upload(client, members["engineer"], spec_toml=VADD_SPEC + VADD_FAMILY_TABLE,
                          reference_source=VADD_REFERENCE,
                          family_source=VADD_FAMILY.replace("a[i] + b[i] + A;", "a[i] + b[i] + A +;")))
    assert "[family]: The variant A=1 does not compile" in body and "Nothing was saved." in body


@needs_nvcc
def test_a_family_that_no_setting_of_its_knobs_satisfies_is_refused_at_upload(client, members, workspace):
    spec = VADD_SPEC + VADD_FAMILY_TABLE.replace("constraints = []", 'constraints = ["A > 100"]')
    body = refusal(upload(client, members["engineer"], spec_toml=spec, reference_source=VADD_REFERENCE,
                          family_source=VADD_FAMILY))
    assert "[family]: No setting of these knobs satisfies the constraints in every size case." in body


def test_a_family_whose_every_variant_breaks_a_launch_limit_is_refused_at_upload_with_the_limit(client, members,
                                                                                               workspace):
    # (refused before anything compiles: no nvcc needed)
    spec = VADD_SPEC + VADD_FAMILY_TABLE.replace("block = [256]", 'block = ["256*A*8"]').replace(
        'grid = ["ceil_div(N, 256)"]', 'grid = ["ceil_div(N, 256*A*8)"]')
    body = refusal(upload(client, members["engineer"], spec_toml=spec, reference_source=VADD_REFERENCE,
                          family_source=VADD_FAMILY))
    assert ("every setting that satisfies the constraints breaks a CUDA launch limit, for instance A=1: gives block "
            "(2048, 1, 1), 2048 threads per block, for size case 'default'; the limit is 1024 threads per block") in body
    line = line_of(spec, 'block = ["256*A*8"]')
    assert f'href="#spec-{line}">line {line}</a>' in body, body[body.find("every setting") - 400:][:900]


@needs_nvcc
def test_a_family_with_valid_variants_that_compile_is_saved(client, members, workspace):
    response = upload(client, members["engineer"], spec_toml=VADD_SPEC + VADD_FAMILY_TABLE,
                      reference_source=VADD_REFERENCE, family_source=VADD_FAMILY)
    assert response.status_code == 302
    assert Problem.objects.get().family_source == VADD_FAMILY


@pytest.mark.parametrize("key, length, limit", [("name", 150, 100), ("title", 300, 200)])
def test_a_name_or_title_longer_than_its_column_is_refused_with_the_limit(client, members, workspace, key, length,
                                                                          limit):
    old = 'name = "vadd"' if key == "name" else 'title = "Vector add"'
    spec = VADD_SPEC.replace(old, f'{key} = "{"v" * length}"')
    body = refusal(upload(client, members["engineer"], spec_toml=spec, reference_source=VADD_REFERENCE))
    assert f"The problem spec is not valid: problem.{key}: is {length} characters long; the limit is {limit} characters" \
        in body
    line = line_of(spec, f"{key} = ")
    assert f'href="#spec-{line}">line {line}</a>' in body


def test_a_spec_and_sources_saved_with_a_byte_order_mark_are_read(client, members, workspace):
    bom = "\ufeff"
    response = upload(client, members["engineer"], spec_toml=bom + VADD_SPEC,
                      reference_file=SimpleUploadedFile("reference.cu", (bom + VADD_REFERENCE).encode()))
    assert response.status_code == 302, html.unescape(response.content.decode())
    problem = Problem.objects.get()
    assert problem.spec_toml == VADD_SPEC and problem.reference.source == VADD_REFERENCE


def test_a_spec_file_with_a_byte_order_mark_is_read(client, members, workspace):
    response = upload(client, members["engineer"], reference_source=VADD_REFERENCE,
                      spec_file=SimpleUploadedFile("problem.toml", b"\xef\xbb\xbf" + VADD_SPEC.encode()))
    assert response.status_code == 302
    assert Problem.objects.get().spec_toml == VADD_SPEC


def test_a_spec_nested_thousands_deep_is_the_uploads_fault_not_the_servers(client, members, workspace):
    spec = "deep = " + "[" * 3000 + "]" * 3000 + "\n" + VADD_SPEC  # tomllib recurses once per bracket
    body = refusal(upload(client, members["engineer"], spec_toml=spec, reference_source=VADD_REFERENCE))
    assert "The upload nests too deeply to be read" in body and "nothing was saved" in body
    assert "cannot run on this server" not in body


def test_refused_compile_options_are_named_at_the_specs_field_and_line_every_one_listed(client, members, workspace):
    spec = VADD_SPEC.replace('title = "Vector add"\n', 'title = "Vector add"\ncompile_options = ["-ccbin", "/bin/x", '
                                                      '"-Xcompiler", "-O2", "-O3"]\n')
    body = refusal(upload(client, members["engineer"], spec_toml=spec, reference_source=VADD_REFERENCE))
    assert "problem.compile_options" in body and "candidate.compile_options" not in body
    assert "-ccbin" in body and "-Xcompiler" in body  # every refused option, not the first alone
    line = line_of(spec, "compile_options")
    assert f'href="#spec-{line}">line {line}</a>' in body


def test_a_reference_with_a_host_launcher_is_refused_at_upload_with_its_line(client, members, workspace):
    """A host wrapper that launches the kernel itself compiles, so it was saved, and then every measurement of the
    reference and of each child was rejected by the runner's guard (QA, fourth pass)."""
    launcher = ("\nvoid launch_scale(const float* x, float* y, int n) {\n"
                "    scale<<<(n + 255) / 256, 256>>>(x, y, n);\n}\n")
    source = SIMPLE_REFERENCE + launcher
    response = upload(client, members["engineer"], spec_toml=SIMPLE_SPEC, reference_source=source)
    body = html.unescape(response.content.decode())
    assert response.status_code == 400 and "Nothing was saved." in body
    line = line_of(source, "<<<")
    assert (f"reference.cu: The source launches a kernel itself ('<<<', from a host function or from device code) "
            f"at line {line}; KernelLab launches the kernels itself, from the problem's launch steps") in body
    assert not Problem.objects.exists()
    # what the runner's guard says of the same source, word for word: the upload refuses what a run would reject
    from gpu_runner.guards import scan_source

    assert scan_source(source) in body


def test_a_pasted_text_that_was_not_sent_as_utf8_is_refused_not_silently_replaced(client, members, workspace):
    """Django reads a text field's bytes that are not UTF-8 as U+FFFD: a script posting Latin-1 had its reference
    saved with replacement characters, where the same bytes as a file are refused (QA, fourth pass)."""
    boundary = "qa4boundary"
    fields = {"spec_toml": SIMPLE_SPEC.encode(), "reference_source": b"/* caf\xe9 */\n" + SIMPLE_REFERENCE.encode()}
    body = b"".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode() + value + b"\r\n"
                    for name, value in fields.items()) + f"--{boundary}--\r\n".encode()
    client.force_login(members["engineer"])
    response = client.post(reverse("problem-upload", args=["team"]), data=body,
                           content_type=f"multipart/form-data; boundary={boundary}")
    page = html.unescape(response.content.decode())
    assert response.status_code == 400
    assert ("reference.cu was not sent as UTF-8 text: line 1 holds a byte that is not UTF-8 (read as U+FFFD). "
            "Send it as UTF-8, or upload it as a file.") in page
    assert not Problem.objects.exists()
    # a file that is UTF-8 and holds the character itself is the person's text, and is kept
    response = upload(client, members["engineer"], spec_toml=SIMPLE_SPEC,
                      reference_file=SimpleUploadedFile("reference.cu", ("// \ufffd\n" + SIMPLE_REFERENCE).encode()))
    assert response.status_code == 302 and "\ufffd" in Problem.objects.get().reference.source
