"""QA round 3 (area kb), runs and their pages: a run whose LLM endpoint fails every call pauses saying why and what
to check, on the web and in `manage.py search` (finding 2); a run whose LLM budget is spent with every call failed
says why the last one did (2); the command-line report counts failed proposals with their reasons (3); no status,
change or page shows the endpoint's credentials (4); a recorded kernel the model copies is measured from the
recording (7); a PyTorch task with nothing to replay is offered no run (9)."""
import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from kernellab.config import LLMEndpoint
from kernellab.models import Node, NodeState, RunChange, RunStatus, SearchRun
from kernellab.services.runs import run_create
from tests.llm_stub import Answer, ChatServer, recorded_saxpy_variants, text_answer
from tests.kernelbench.test_replayed_run import KERNELBENCH_FREE_RELU as RELU  # no task: no CUDA-L1 solution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

SAXPY = Path(__file__).resolve().parents[1] / "gpu_runner" / "problems" / "saxpy"


def endpoint(base_url: str, **kw) -> LLMEndpoint:
    return LLMEndpoint(base_url=base_url, api_key="sk-KEYSECRET", surrogate_model="stubsur", generator_model="stubgen",
                       **{"timeout_s": 2.0, "max_retries": 0, **kw})


def status(code: int, message: str):
    return lambda request: Answer("", "", {"error": {"message": message}}, status=code)


def _search(*args) -> str:
    out = io.StringIO()
    call_command("search", *args, stdout=out)
    return out.getvalue()


# ---- 2. an endpoint that fails every call pauses the run -------------------------------------------------

@pytest.mark.parametrize("code, says, check", [
    (404, "answered HTTP 404 for model stubgen: no such model", "check KERNELLAB_GENERATOR_MODEL and OPENAI_BASE_URL"),
    (401, "refused the API key (HTTP 401): no such model", "check OPENAI_API_KEY"),
    (500, "answered HTTP 500 to 3 calls in a row: no such model", "check the server's logs"),
    (429, "answered HTTP 429 to 3 calls in a row: no such model", "check the server's rate limits"),
])
def test_a_run_whose_endpoint_answers_every_call_with_an_error_pauses_saying_what_to_check(
        saxpy, settings, members, client, code, says, check):
    with ChatServer(status(code, "no such model")) as server:
        settings.KERNELLAB_LLM = endpoint(server.base_url)
        run = run_create(problem=saxpy, user=members["engineer"], generator="llm", surrogate="roofline",
                         backend="replay", gpu_budget=5, llm_call_budget=500, children_per_step=1)
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED, run.status_reason
    # one clause after the status ("Paused"), short enough for the status line's 160 characters
    assert run.status_reason == f"the LLM endpoint {server.base_url} {says}; {check}"
    assert len(run.status_reason) <= 160
    assert run.llm_calls == 3 and len(server.requests) == 3  # not the budget of 500
    client.force_login(members["viewer"])
    assert check in client.get(f"/runs/{run.pk}/").content.decode().replace("&#x27;", "'")


def test_a_run_whose_llm_budget_is_spent_with_every_call_failed_says_why_the_last_did(saxpy, settings, members):
    with ChatServer(lambda request: text_answer("I would unroll the inner loop; that should be faster.")) as server:
        settings.KERNELLAB_LLM = endpoint(server.base_url)
        run = run_create(problem=saxpy, user=members["engineer"], generator="llm", surrogate="roofline",
                         backend="replay", gpu_budget=5, llm_call_budget=6, children_per_step=2)
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED
    assert run.status_reason == ("the budget of 6 LLM calls is spent and every call failed, the last because the "
                                 "answer holds no CUDA code block")


def test_the_command_line_search_reports_the_pause_and_exits_with_it(saxpy, settings, members, tmp_path):
    with ChatServer(status(404, "no such model")) as server:
        settings.KERNELLAB_LLM = endpoint(server.base_url)
        with pytest.raises(CommandError) as raised:
            out = io.StringIO()
            try:
                call_command("search", str(SAXPY), "--backend", "replay", "--generator", "llm", "--surrogate",
                             "roofline", "--budget", "3", "--children", "1", "--out", str(tmp_path / "r"),
                             stdout=out)
            finally:
                printed = out.getvalue()
    run = SearchRun.objects.get()
    assert run.status == RunStatus.PAUSED
    assert f"Search of saxpy (run {run.pk}, workspace " in printed
    assert f"): paused, the LLM endpoint {server.base_url} answered HTTP 404" in printed
    assert str(raised.value) == f"The search paused: {run.status_reason}; then resume run {run.pk} from the web app."
    assert "check KERNELLAB_GENERATOR_MODEL and OPENAI_BASE_URL" in str(raised.value)
    assert json.loads((tmp_path / "r" / "report.json").read_text())["status_reason"] == run.status_reason


# ---- 3. the command-line report counts failed proposals ---------------------------------------------------

def test_the_command_line_report_counts_failed_proposals_with_their_most_common_reasons(saxpy, settings, members,
                                                                                      tmp_path):
    with ChatServer(lambda request: text_answer("I would unroll the inner loop; that should be faster.")) as server:
        settings.KERNELLAB_LLM = endpoint(server.base_url, call_budget=6)
        printed = _search(str(SAXPY), "--backend", "replay", "--generator", "llm", "--surrogate", "roofline",
                          "--budget", "3", "--children", "2", "--out", str(tmp_path / "r"))
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["proposals_failed"] == 6 == report["counters"]["failed_proposals"]
    assert report["proposal_failure_reasons"] == [["The answer holds no CUDA code block.", 6]]
    assert "  proposals failed: 6 (6× The answer holds no CUDA code block)\n" in printed
    assert "every call failed, the last because the answer holds no CUDA code block" in printed
    assert (tmp_path / "r" / "report.txt").read_text() in printed


# ---- 4. credentials in the endpoint's address ---------------------------------------------------------------

def test_no_status_change_or_page_shows_the_endpoints_credentials(saxpy, settings, members, client):
    settings.KERNELLAB_LLM = endpoint("http://qa:URLSECRETPW@127.0.0.1:9/v1?token=QUERYSECRET", max_retries=1)
    run = run_create(problem=saxpy, user=members["engineer"], generator="llm", surrogate="roofline",
                     backend="replay", gpu_budget=5, llm_call_budget=500, children_per_step=1)
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED
    assert run.status_reason == ("the LLM endpoint http://127.0.0.1:9/v1 did not answer: Connection error; "
                                 "check OPENAI_BASE_URL and that the server runs")
    payloads = json.dumps(list(RunChange.objects.filter(run=run).values_list("payload", flat=True)))
    client.force_login(members["viewer"])
    page = client.get(f"/runs/{run.pk}/").content.decode()
    for shown in (run.status_reason, payloads, page):
        assert "URLSECRETPW" not in shown and "QUERYSECRET" not in shown and "KEYSECRET" not in shown
    assert "http://127.0.0.1:9/v1" in page


# ---- 7. a recorded kernel copied by the model is measured from the recording -----------------------------

def test_recorded_kernels_the_model_returns_are_found_by_the_replay_lookup(saxpy, settings, members):
    variants = recorded_saxpy_variants()[:4]
    served = []

    def answer(request):
        variant = variants[len(served) % len(variants)]
        served.append(variant)
        # as a model writes it: the closing fence on a line of its own, after the file's own final newline
        return text_answer(f"Rationale: knobs {variant['knobs']}\n```cuda\n{variant['source']}\n```\n"
                           f"```json\n{json.dumps(variant['launch'])}\n```")

    with ChatServer(answer) as server:
        settings.KERNELLAB_LLM = endpoint(server.base_url)
        run = run_create(problem=saxpy, user=members["engineer"], generator="llm", surrogate="roofline",
                         backend="replay", gpu_budget=4, llm_call_budget=4, children_per_step=4)
    run.refresh_from_db()
    children = Node.objects.filter(run=run).exclude(origin="root")
    assert children.count() == 4
    assert not children.filter(state=NodeState.NOT_RECORDED).exists(), [(n.state, n.state_reason) for n in children]
    sources = {n.kernel.source for n in children.select_related("kernel")}
    assert sources == {v["source"] for v in variants}
    assert children.filter(state=NodeState.MEASURED).exists()


# ---- 9. a PyTorch task with nothing to replay ----------------------------------------------------------------



def test_a_pytorch_task_without_recorded_solutions_says_so_and_offers_no_run(settings, workspace, members, client,
                                                                            tmp_path):
    from kernellab.forms import RunCreateForm
    from kernellab.services.problems import problem_create_pytorch

    settings.DATA_DIR = tmp_path
    problem = problem_create_pytorch(workspace=workspace, user=members["engineer"], program_source=RELU,
                                     name="19_relu_copy")
    sentence = ("19_relu_copy has no recorded solutions to replay (no bundled candidates, no CUDA-L1 solutions of its "
                "KernelBench task, no rows in this workspace's lab datasets), so a search run of it could propose "
                "nothing.").replace("19_relu_copy", problem.title)
    form = RunCreateForm(problem=problem)
    assert form.fields["generator"].choices == [] and not form.can_propose
    assert form.fields["generator"].help_text == sentence
    posted = RunCreateForm({"generator": "replayed", "surrogate": "none", "confidence_threshold": 0.6,
                            "gpu_budget": 4, "children_per_step": 2, "max_gpu_per_step": 1, "max_steps": 5,
                            "approval_mode": "auto", "target_gpu": "h200", "backend": "replay", "objective": "time",
                            "feedback": "notes", "seed": 0}, problem=problem)
    assert not posted.is_valid() and posted.non_field_errors() == [sentence] and "generator" not in posted.errors
    client.force_login(members["engineer"])
    page = client.get(f"/problems/{problem.pk}/").content.decode()
    assert "Start a search run" not in page
    assert 'id="no-recorded-solutions"' in page and "so a search run of it could propose nothing." in page
    form_page = client.get(f"/problems/{problem.pk}/runs/new").content.decode()
    assert "has no recorded solutions to replay" in form_page
    assert '<button type="submit" disabled>Create run</button>' in form_page


def test_a_pytorch_task_with_recorded_solutions_is_offered_the_replayed_generator_only(settings, workspace, members,
                                                                                      client, tmp_path):
    from kernellab.forms import RunCreateForm
    from kernellab.services.problems import problem_load_bundled

    settings.DATA_DIR = tmp_path
    layernorm = next(p for p in problem_load_bundled(workspace=workspace) if p.name == "kb_layernorm")
    form = RunCreateForm(problem=layernorm)
    assert [value for value, _ in form.fields["generator"].choices] == ["replayed"] and form.can_propose
    client.force_login(members["engineer"])
    page = client.get(f"/problems/{layernorm.pk}/").content.decode()
    assert "Start a search run" in page and "no-recorded-solutions" not in page
    with pytest.raises(CommandError, match=r"The llm generator cannot search .*; choose replayed\.$"):
        _search("kb_layernorm", "--backend", "replay", "--generator", "llm")
