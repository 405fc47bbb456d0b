"""Uploading a spec: every mistake at once with its problem.toml line, the form kept after a
refusal, the launch checked against the kernel's signature, and the help the page gives."""
import html
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from gpu_runner import parse_problem
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
