"""Problem pages: the list, uploading a reference kernel (good, broken, too big, wrong type), one problem's page."""
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from kernellab.models import Problem
from kernellab.services.problems import ProblemRejected
from tests.samples import SIMPLE_REFERENCE, SIMPLE_SPEC

pytestmark = pytest.mark.django_db


BROKEN_REFERENCE = """
extern "C" __global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] +;
}
"""


def login(client, user):
    client.force_login(user)
    return client


def test_the_problem_list_shows_the_workspaces_problems(client, members, problem):
    response = login(client, members["viewer"]).get(reverse("problem-list", args=["team"]))
    assert response.status_code == 200
    assert "Vector scale" in response.content.decode()
    assert "Upload a reference kernel" not in response.content.decode()


def test_an_outsider_cannot_see_the_problem_list(client, members, problem):
    response = login(client, members["outsider"]).get(reverse("problem-list", args=["team"]))
    assert response.status_code == 404


def test_the_problem_page_shows_highlighted_source_spec_and_roofline(client, members, problem):
    response = login(client, members["viewer"]).get(reverse("problem-detail", args=[problem.pk]))
    body = response.content.decode()
    assert response.status_code == 200
    assert 'class="hl"' in body  # pygments output
    assert "scale" in body and "ceil_div(N, 256)" in body
    # 8*N bytes at the H200's 4800 GB/s: 8 MiB / 4.8e12 B/s = 0.0017 ms
    assert "0.0017 ms" in body
    assert "datasheet" in body


def test_the_problem_page_lists_its_runs(client, members, run):
    response = login(client, members["viewer"]).get(reverse("problem-detail", args=[run.problem_id]))
    assert f"/runs/{run.pk}/" in response.content.decode()


def test_a_rejected_upload_shows_compile_errors_against_the_source_lines(client, members, workspace, monkeypatch):
    def reject(**kwargs):
        raise ProblemRejected("The reference kernel does not compile at line 4: expected an expression", [{"line": 4, "message": "expected an expression"}])

    monkeypatch.setattr("kernellab.services.problems.problem_check", reject)
    response = login(client, members["engineer"]).post(
        reverse("problem-upload", args=["team"]), {"spec_toml": SIMPLE_SPEC, "reference_source": BROKEN_REFERENCE}
    )
    body = response.content.decode()
    assert response.status_code == 400
    assert "does not compile at line 4" in body and "Nothing was saved" in body
    assert 'href="#src-4"' in body          # the error links to its line
    assert 'class="hll"' in body            # and the line is marked in the source
    assert not Problem.objects.exists()


def test_an_upload_of_the_wrong_file_type_is_refused_before_any_check(client, members, workspace, monkeypatch):
    monkeypatch.setattr("kernellab.services.problems.problem_check", lambda **kw: pytest.fail("checked a refused upload"))
    response = login(client, members["engineer"]).post(
        reverse("problem-upload", args=["team"]),
        {
            "spec_file": SimpleUploadedFile("problem.toml", SIMPLE_SPEC.encode()),
            "reference_file": SimpleUploadedFile("reference.exe", b"MZ\x00\x00binary"),
        },
    )
    assert response.status_code == 400
    assert "reference.cu must be a .cu or .cuh file" in response.content.decode()
    assert not Problem.objects.exists()


def test_an_upload_over_the_size_limit_is_refused(client, members, workspace, settings):
    settings.KERNELLAB_UPLOAD_MAX_BYTES = 1024
    response = login(client, members["engineer"]).post(
        reverse("problem-upload", args=["team"]),
        {"spec_toml": SIMPLE_SPEC, "reference_file": SimpleUploadedFile("reference.cu", b"// x\n" * 400)},
    )
    assert response.status_code == 400
    assert "the limit is 1 KiB" in response.content.decode()
    assert not Problem.objects.exists()


def test_a_binary_file_named_cu_is_refused(client, members, workspace):
    response = login(client, members["engineer"]).post(
        reverse("problem-upload", args=["team"]),
        {"spec_toml": SIMPLE_SPEC, "reference_file": SimpleUploadedFile("reference.cu", b"\x7fELF\x00\x01")},
    )
    assert response.status_code == 400
    assert "binary file" in response.content.decode()


def test_a_viewer_cannot_upload(client, members, workspace):
    response = login(client, members["viewer"]).post(
        reverse("problem-upload", args=["team"]), {"spec_toml": SIMPLE_SPEC, "reference_source": SIMPLE_REFERENCE}
    )
    assert response.status_code == 403
    assert "engineer role or above" in response.content.decode()
    assert not Problem.objects.exists()


def test_an_engineer_uploads_a_kernel_that_compiles(client, members, workspace):
    response = login(client, members["engineer"]).post(
        reverse("problem-upload", args=["team"]),
        {
            "spec_file": SimpleUploadedFile("problem.toml", SIMPLE_SPEC.encode()),
            "reference_file": SimpleUploadedFile("reference.cu", SIMPLE_REFERENCE.encode()),
        },
    )
    problem = Problem.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("problem-detail", args=[problem.pk])
    assert problem.created_by == members["engineer"]
    assert problem.reference.compiler_facts  # nvcc's ptxas facts were kept


def test_a_kernel_that_does_not_compile_is_refused_with_its_line(client, members, workspace):
    response = login(client, members["engineer"]).post(
        reverse("problem-upload", args=["team"]), {"spec_toml": SIMPLE_SPEC, "reference_source": BROKEN_REFERENCE}
    )
    body = response.content.decode()
    assert response.status_code == 400
    assert "line 4" in body
    assert not Problem.objects.exists()


def _saxpy_with_reference_profile(settings, workspace, tmp_path, profile):
    from pathlib import Path

    from kernellab.services.problems import problem_load_bundled
    from tests.samples import problem_with_reference_profile

    source = Path(__file__).resolve().parents[1] / "gpu_runner" / "problems" / "saxpy"
    records = problem_with_reference_profile(source, tmp_path / "problems", profile)
    settings.KERNELLAB_PROBLEMS_DIR = str(tmp_path / "problems")
    settings.DATA_DIR = tmp_path
    return next(p for p in problem_load_bundled(workspace=workspace) if p.name == "saxpy"), records


def test_the_problem_page_shows_the_recorded_references_time_counters_and_expert_notes(client, members, workspace,
                                                                                       settings, tmp_path):
    import gzip
    import json
    from pathlib import Path

    # a real Nsight Compute profile of a memory-bound kernel (a maxpool2d variant recorded on the H200)
    records = Path(__file__).resolve().parents[2] / "kernellab" / "problems" / "maxpool2d" / "records" / "h200.jsonl.gz"
    with gzip.open(records, "rt") as handle:
        profile = next(r["profiler"] for r in map(json.loads, handle) if r.get("profiler"))
    saxpy, recorded = _saxpy_with_reference_profile(settings, workspace, tmp_path, profile)
    body = login(client, members["viewer"]).get(reverse("problem-detail", args=[saxpy.pk])).content.decode()
    reference = next(r for r in recorded if r["variant"] == "reference")
    assert "The reference as recorded on the NVIDIA H200" in body
    assert f"{reference['reference']['median_ms']:.4f} ms" in body
    assert "% of the roofline bound above, so no candidate can be more than" in body and "× faster at this size" in body
    assert "Its Nsight Compute counters" in body and "L1 hit rate, %" in body
    assert f"{profile['l1tex__t_sector_hit_rate.pct']:.2f}" in body
    # the page says which counters the forecasts read: the default set's, and no other
    import html

    from search_engine.surrogates.features import DEFAULT_REFERENCE_COUNTERS, REFERENCE_COUNTER_SETS

    from kernellab.selectors.problems import COUNTERS_READ_NOTES, REFERENCE_COUNTER_LABELS

    table = body[body.index('id="reference-counters"'):]
    table = table[:table.index("</table>")]
    rows = {html.unescape(row.split("</th>")[0]): "read by the forecasts" in row for row in table.split("<th>")[1:]}
    assert rows == {REFERENCE_COUNTER_LABELS[name]: name in REFERENCE_COUNTER_SETS[DEFAULT_REFERENCE_COUNTERS]
                    for name in REFERENCE_COUNTER_LABELS if REFERENCE_COUNTER_LABELS[name] in rows}
    assert sum(rows.values()) == len(REFERENCE_COUNTER_SETS[DEFAULT_REFERENCE_COUNTERS])
    assert html.escape(COUNTERS_READ_NOTES[DEFAULT_REFERENCE_COUNTERS]) in body
    assert "Expert notes" in body and 'class="note sev-' in body and "a plain device-to-device copy reaches (86%" in body


def test_counters_a_stand_in_gpu_read_are_named_on_the_problem_page(client, members, workspace, settings, tmp_path):
    import gzip
    import json

    saxpy, recorded = _saxpy_with_reference_profile(settings, workspace, tmp_path,
                                                    {"l1tex__t_sector_hit_rate.pct": 61.5})
    body = login(client, members["viewer"]).get(reverse("problem-detail", args=[saxpy.pk])).content.decode()
    assert "Its Nsight Compute counters" in body and "standing in for" not in body
    path = next(tmp_path.glob("problems/saxpy/records/*.jsonl.gz"))
    records = [r | {"profiler_hardware": {"name": "NVIDIA H100 80GB HBM3"}} if r["variant"] == "reference" else r
               for r in recorded]
    with gzip.open(path, "wt") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in records))
    body = login(client, members["viewer"]).get(reverse("problem-detail", args=[saxpy.pk])).content.decode()
    assert "Read on an NVIDIA H100 80GB HBM3, standing in for the NVIDIA H200 its time was recorded on" in body
    assert "61.50" in body


def test_a_reference_recorded_without_a_profile_says_how_to_add_one(client, members, workspace, settings, tmp_path):
    saxpy, _ = _saxpy_with_reference_profile(settings, workspace, tmp_path, {})
    body = login(client, members["viewer"]).get(reverse("problem-detail", args=[saxpy.pk])).content.decode()
    assert "The reference as recorded on the" in body
    assert "was not profiled when it was recorded" in body and "Its Nsight Compute counters" not in body


def test_a_problem_without_a_recording_shows_no_recorded_reference(client, members, problem):
    body = login(client, members["viewer"]).get(reverse("problem-detail", args=[problem.pk])).content.decode()
    assert "The reference as recorded" not in body


def _csrf_client(user):
    """A client that checks CSRF tokens like a browser's requests are checked: the form is read before
    the view runs, in the CSRF middleware."""
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def _token(client, url) -> str:
    client.get(url)
    return client.cookies["csrftoken"].value


def test_a_paste_over_the_request_limit_gets_a_page_naming_the_limits_and_nothing_is_saved(members, workspace,
                                                                                            settings):
    client = _csrf_client(members["engineer"])
    url = reverse("problem-upload", args=["team"])
    huge = "// pasted twice\r\n" * (3 * 1024 * 1024 // 17)         # 3 MiB as a browser sends it, CRLF line ends
    assert len(huge.encode()) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    response = client.post(url, {"csrfmiddlewaretoken": _token(client, url), "spec_toml": SIMPLE_SPEC,
                                 "reference_source": huge})
    body = response.content.decode()
    assert response.status_code == 413
    assert f"more than the {settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 1024} KiB" in body
    assert "may be at most 256 KiB" in body and "Back button" in body
    assert not Problem.objects.exists()
    # the same client uploads when the texts fit: the CSRF check still applies
    response = client.post(url, {"csrfmiddlewaretoken": _token(client, url), "spec_toml": SIMPLE_SPEC,
                                 "reference_source": SIMPLE_REFERENCE})
    assert response.status_code == 302


def test_a_paste_over_its_own_limit_but_within_the_requests_gets_the_forms_sentence_and_keeps_the_rest(members,
                                                                                                      workspace):
    client = _csrf_client(members["engineer"])
    url = reverse("problem-upload", args=["team"])
    big = "// pasted\r\n" * (400 * 1024 // 11)
    response = client.post(url, {"csrfmiddlewaretoken": _token(client, url), "spec_toml": SIMPLE_SPEC,
                                 "reference_source": big})
    body = response.content.decode()
    assert response.status_code == 400
    assert f"reference.cu is {len(big.replace(chr(13), '').encode()) // 1024} KiB; the limit is 256 KiB." in body
    assert "Paste the reference kernel" not in body
    assert response.context["form"]["spec_toml"].value() == SIMPLE_SPEC
    assert not Problem.objects.exists()


def test_a_file_over_the_request_limit_still_gets_its_own_sentence(members, workspace):
    client = _csrf_client(members["engineer"])
    url = reverse("problem-upload", args=["team"])
    response = client.post(url, {"csrfmiddlewaretoken": _token(client, url), "spec_toml": SIMPLE_SPEC,
                                 "reference_file": SimpleUploadedFile("reference.cu", b"// x\n" * (1024 * 1024))})
    body = response.content.decode()
    assert response.status_code == 400
    assert "reference.cu is 5120 KiB; the limit is 256 KiB." in body and "Paste the reference kernel" not in body
    assert response.context["form"]["spec_toml"].value() == SIMPLE_SPEC


def test_a_post_over_the_request_limit_without_a_csrf_token_reads_and_saves_nothing(members, workspace):
    client = _csrf_client(members["engineer"])
    response = client.post(reverse("problem-upload", args=["team"]),
                           {"spec_toml": SIMPLE_SPEC, "reference_source": "x" * (3 * 1024 * 1024)})
    assert response.status_code == 413
    assert not Problem.objects.exists()
    # within the limit, the CSRF check answers as before
    response = client.post(reverse("problem-upload", args=["team"]),
                           {"spec_toml": SIMPLE_SPEC, "reference_source": SIMPLE_REFERENCE})
    assert response.status_code == 403


def test_a_program_pasted_over_the_request_limit_gets_the_page_too(members, workspace):
    client = _csrf_client(members["engineer"])
    url = reverse("problem-upload-pytorch", args=["team"])
    response = client.post(url, {"csrfmiddlewaretoken": _token(client, url), "name": "big",
                                 "program": "#" * (3 * 1024 * 1024)})
    assert response.status_code == 413 and "may be at most 256 KiB" in response.content.decode()
    assert not Problem.objects.exists()


@pytest.mark.parametrize("file_field, text_field, name, content, reason, paste", [
    ("reference_file", "reference_source", "reference.exe", b"MZ", "reference.cu must be a .cu or .cuh file",
     "Paste the reference kernel or upload reference.cu."),
    ("spec_file", "spec_toml", "problem.toml", b"\x7fELF\x00", "problem.toml is a binary file, not text.",
     "Paste problem.toml or upload it."),
])
def test_a_refused_file_shows_only_its_reason(client, members, workspace, file_field, text_field, name, content,
                                             reason, paste):
    data = {"spec_toml": SIMPLE_SPEC, "reference_source": SIMPLE_REFERENCE, text_field: "",
            file_field: SimpleUploadedFile(name, content)}
    response = login(client, members["engineer"]).post(reverse("problem-upload", args=["team"]), data)
    body = response.content.decode()
    assert response.status_code == 400
    assert reason in body and paste not in body


def test_a_pytorch_name_or_title_longer_than_its_column_is_refused_with_only_that_reason(client, members, workspace):
    from tests.kernelbench.test_program_parsing import RELU

    url = reverse("problem-upload-pytorch", args=["team"])
    body = login(client, members["engineer"]).post(url, {"name": "n" * 150, "title": "t" * 300,
                                                         "program": RELU}).content.decode()
    assert "The name may be at most 100 characters; this one has 150." in body
    assert "The title may be at most 200 characters; this one has 300." in body
    assert "Name the problem" not in body
    long_file = SimpleUploadedFile("f" * 120 + ".py", RELU.encode())
    body = client.post(url, {"program_file": long_file}).content.decode()
    assert "The file&#x27;s name makes a name of 120 characters; the limit is 100: give a shorter name." in body
    assert not Problem.objects.exists()


def test_a_pytorch_spec_whose_name_is_too_long_for_its_column_is_refused_by_the_service(members, workspace):
    from kernellab.services.problems import problem_create_pytorch
    from tests.kernelbench.test_program_parsing import RELU

    with pytest.raises(ProblemRejected, match="problem.title: is 201 characters long; the limit is 200 characters"):
        problem_create_pytorch(workspace=workspace, user=members["engineer"], program_source=RELU, name="relu",
                               title="t" * 201)
    assert not Problem.objects.exists()


def test_a_typed_pytorch_name_with_other_characters_is_refused_not_rewritten(client, members, workspace):
    from tests.kernelbench.test_program_parsing import RELU

    url = reverse("problem-upload-pytorch", args=["team"])
    response = login(client, members["engineer"]).post(url, {"name": "<b>x</b>", "program": RELU})
    assert response.status_code == 400
    assert "A name is letters, digits and underscores; this one also has &#x27;/&lt;&gt;&#x27;." in \
        response.content.decode()
    assert not Problem.objects.exists()
    # a name taken from the file's name is still made into one
    response = client.post(url, {"program_file": SimpleUploadedFile("my-relu.py", RELU.encode())})
    assert response.status_code == 302 and Problem.objects.get().name == "my_relu"
