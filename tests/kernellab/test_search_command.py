"""manage.py search: a problem folder or an uploaded problem searched headless, through the web
app's run services, on the replay backend with the recorded H200 measurements of saxpy."""
import io
import json
import shutil
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from kernellab.models import Node, NodeState, Problem, RunStatus, SearchRun

pytestmark = pytest.mark.django_db(transaction=True)

SAXPY = Path(__file__).resolve().parents[1] / "gpu_runner" / "problems" / "saxpy"


@pytest.fixture
def lab(settings, tmp_path, members):
    settings.DATA_DIR = tmp_path / "data"  # the bundled problems stay: the learned surrogate trains on them
    return members


def _search(*args) -> str:
    out = io.StringIO()
    call_command("search", *args, stdout=out)
    return out.getvalue()


def test_a_problem_folder_is_uploaded_searched_on_replay_and_reported(lab, tmp_path):
    printed = _search(str(SAXPY), "--backend", "replay", "--budget", "6", "--surrogate", "roofline",
                      "--out", str(tmp_path / "report"))
    run = SearchRun.objects.get()
    assert run.problem.name == "saxpy" and not run.problem.bundled
    assert run.status == RunStatus.FINISHED, run.status_reason
    assert run.generator == "template" and run.backend == "replay" and run.gpu_budget == 6
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    measured = Node.objects.filter(run=run, state=NodeState.MEASURED).exclude(origin="root")
    assert report["run_id"] == run.pk
    assert report["candidates_measured"] == measured.count() > 0
    assert report["candidates_generated"] == Node.objects.filter(run=run).exclude(origin="root").count()
    assert report["measurements_requested"] <= 6
    best = max(measured, key=lambda n: n.speedup)
    if best.speedup > 1:
        assert report["best_speedup"] == pytest.approx(best.speedup)
        assert report["best_source"] == best.kernel.source and "saxpy_family" in report["best_source"]
    assert report["wall_s"] >= report["compile_s"] + report["measure_s"] - 1e-6
    assert "measured" in printed and f"/runs/{run.pk}/" in printed
    assert (tmp_path / "report" / "report.txt").read_text().startswith("Search of saxpy")


def test_progress_is_one_line_per_step_and_one_at_the_end_when_not_on_a_terminal(lab):
    printed = _search(str(SAXPY), "--backend", "replay", "--budget", "4", "--surrogate", "roofline")
    steps = [line for line in printed.splitlines() if line.lstrip().startswith(tuple("0123456789")) and "step " in line]
    run = SearchRun.objects.get()
    assert len(steps) == run.driver_state["step"] and "\r" not in printed
    done = [line for line in printed.splitlines() if " done, " in line]
    assert len(done) == 1 and done[0].startswith(f"100% done, {run.driver_state['step']} step")


def test_an_uploaded_problem_is_found_by_name_and_searched_again_in_a_second_run(lab):
    _search(str(SAXPY), "--backend", "replay", "--budget", "2", "--surrogate", "roofline")
    _search("saxpy", "--backend", "replay", "--budget", "2", "--surrogate", "roofline")
    assert Problem.objects.count() == 1 and SearchRun.objects.count() == 2
    assert all(run.status == RunStatus.FINISHED for run in SearchRun.objects.all())


def test_a_time_budget_ends_the_run_and_says_so(lab):
    _search(str(SAXPY), "--backend", "replay", "--seconds", "0.001", "--surrogate", "roofline", "--generator", "transform")
    run = SearchRun.objects.get()
    assert run.status == RunStatus.FINISHED
    assert "time budget of 0.001 s is spent" in run.status_reason
    assert run.driver_state["step"] == 1


@pytest.mark.parametrize("option, field, value", [("--parents", "parents_per_step", 2),
                                                   ("--min-children", "min_children_per_step", 8),
                                                   ("--compile-share", "compile_share_target", 0.25)])
def test_a_step_width_option_is_passed_to_the_run_and_its_search(lab, option, field, value):
    _search(str(SAXPY), "--backend", "replay", "--budget", "2", "--surrogate", "roofline", option, str(value))
    run = SearchRun.objects.get()
    assert run.status == RunStatus.FINISHED, run.status_reason
    assert getattr(run, field) == value and run.driver_state["settings"][field] == value


@pytest.mark.parametrize("option, value, message", [("--parents", "0", "Parents per step must be between 1 and 16"),
                                                    ("--min-children", "257",
                                                     "minimum children per step must be between 0"),
                                                    ("--compile-share", "1.5", "compile share target must be 0")])
def test_a_step_width_option_out_of_range_is_refused_by_the_command(lab, option, value, message):
    with pytest.raises(CommandError, match=message):
        _search(str(SAXPY), "--backend", "replay", "--budget", "2", option, value)
    assert not SearchRun.objects.exists() and not Problem.objects.exists()


def test_a_changed_folder_with_the_name_of_an_uploaded_problem_is_refused(lab, tmp_path):
    _search(str(SAXPY), "--backend", "replay", "--budget", "1", "--surrogate", "roofline")
    changed = tmp_path / "saxpy"
    shutil.copytree(SAXPY, changed)
    (changed / "reference.cu").write_text((SAXPY / "reference.cu").read_text().replace("a * x[i]", "x[i] * a"))
    with pytest.raises(CommandError, match="already has a different problem named saxpy"):
        _search(str(changed), "--backend", "replay", "--budget", "1")


def test_a_folder_file_that_is_not_utf8_is_refused_in_a_sentence_naming_it(lab, tmp_path):
    """A Latin-1 comment in reference.cu was a UnicodeDecodeError traceback (the web form said "not UTF-8 text")."""
    folder = tmp_path / "saxpy"
    shutil.copytree(SAXPY, folder)
    (folder / "reference.cu").write_bytes(b"// caf\xe9\n" + (SAXPY / "reference.cu").read_bytes())
    with pytest.raises(CommandError, match=r"reference\.cu is not UTF-8 text: byte 0xe9 on line 1 \(save it as UTF-8\)"):
        _search(str(folder), "--backend", "replay", "--budget", "1")
    assert not SearchRun.objects.exists()


def test_a_folder_whose_spec_has_a_byte_order_mark_is_the_same_problem_the_next_time(lab, tmp_path):
    folder = tmp_path / "saxpy"
    shutil.copytree(SAXPY, folder)
    (folder / "problem.toml").write_text("\ufeff" + (SAXPY / "problem.toml").read_text())
    for _ in range(2):
        _search(str(folder), "--backend", "replay", "--budget", "1", "--surrogate", "roofline")
    assert SearchRun.objects.count() == 2 and len({run.problem_id for run in SearchRun.objects.all()}) == 1


def test_an_unknown_problem_names_the_ones_there_are(lab):
    with pytest.raises(CommandError, match="has no problem 'nope'"):
        _search("nope")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_progress_is_one_bar_redrawn_in_place(lab):
    out = _Terminal()
    call_command("search", str(SAXPY), "--backend", "replay", "--budget", "4", "--surrogate", "roofline", stdout=out)
    bars = out.getvalue().split("\r")[1:]
    assert len(bars) == SearchRun.objects.get().driver_state["step"] + 1   # and once more when the search has ended
    assert bars[-1].startswith("[" + "#" * 30 + "] done, ") and "GPU 4/4  " in bars[-1]


def test_the_recipes_generator_writes_the_vectorised_kernel_into_the_tree(lab, tmp_path):
    printed = _search(str(SAXPY), "--backend", "replay", "--budget", "3", "--surrogate", "roofline", "--generator", "recipes",
            "--out", str(tmp_path / "report"))
    run = SearchRun.objects.get()
    children = Node.objects.filter(run=run).exclude(origin="root").select_related("kernel")
    names = {n.kernel.as_candidate()["name"]: n.kernel.source for n in children}
    vectorised = [source for name, source in names.items() if name.startswith("recipe vectorise: ")]
    assert vectorised and all("kl_load<VEC>" in source for source in vectorised)
    # saxpy has a [family]: the cures share the tree with the template of its own knobs.
    assert {name.split(":")[0] for name in names if name.startswith("recipe ")} == {
        "recipe vectorise", "recipe grid-stride", "recipe read-only-path"}
    assert all(name.startswith("recipe ") or "=" in name for name in names)
    root = Node.objects.get(run=run, origin="root")
    from kernellab.selectors.explorer import node_failed_proposals

    assert sorted(f["reason"] for f in node_failed_proposals(node=root)) == sorted([
        "The warp-per-row recipe (for one thread per row) cannot apply: the row's code has no loop over its columns at its top level.",
        "The column-tile recipe (for one thread per column) cannot apply: the column's code has no loop over its rows at its top level.",
        "The halo-tile recipe (for no reuse of a stencil's loads) cannot apply: the kernel does not begin by computing x and y "
        "from blockIdx, blockDim and threadIdx.",
        "The row-window recipe (for many loads per output of a stencil's neighbourhood sum) cannot apply: the kernel "
        "does not begin by computing x and y from blockIdx, blockDim and threadIdx.",
        "The row-block recipe (for one pixel per thread) cannot apply: the kernel does not begin by computing x and y "
        "from blockIdx, blockDim and threadIdx.",
        "The row-cache recipe (for passes that read the same row again) cannot apply: no two loops at the kernel's "
        "top level walk the same columns, so nothing is read twice.",
        "The unroll recipe (for loops without unrolling) cannot apply: the kernel has no for loop to unroll."])
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    # The recorded H200 data never measured these kernels: replay says so rather than guess.
    misses = Node.objects.filter(run=run, state=NodeState.NOT_RECORDED).count()
    assert report["candidates_not_recorded"] == misses > 0
    # The progress counts the GPU slots the misses spent, and says how many measured nothing.
    last = [line for line in printed.splitlines() if line.startswith("100% done, ")][-1]
    assert f"GPU {run.gpu_used}/3 ({misses} not recorded)" in last, last
    assert report["winning_recipe"] is None


def _saxpy_without_family(tmp_path):
    """saxpy's folder without its [family] and family.cu: a kernel without knobs, as a user's own is."""
    folder = tmp_path / "saxpy"
    shutil.copytree(SAXPY, folder)
    (folder / "family.cu").unlink()
    spec = (folder / "problem.toml").read_text()
    (folder / "problem.toml").write_text(spec[:spec.index("[family]")])
    return folder


def test_auto_knobs_give_a_problem_without_a_family_knobs_the_template_generator_explores(lab, tmp_path):
    folder = _saxpy_without_family(tmp_path)
    printed = _search(str(folder), "--backend", "replay", "--budget", "3", "--surrogate", "roofline", "--auto-knobs")
    assert "Knobs found in the kernel: BLOCK [64, 96, 128, 192, 256, 384, 512, 768, 1024]" in printed
    run = SearchRun.objects.get()
    assert run.generator == "template" and "[[family.launch]]" in run.problem.spec_toml
    blocks = {n.kernel.as_candidate()["launch"][0]["block"][0] for n in Node.objects.filter(run=run).exclude(origin="root")}
    assert len(blocks) > 1


def test_a_kernel_without_knobs_is_searched_by_the_recipes_with_the_own_kernel_settings(lab, tmp_path):
    from kernellab.services.runs import OWN_KERNEL_DEFAULTS

    folder = _saxpy_without_family(tmp_path)
    _search(str(folder), "--backend", "replay", "--budget", "2", "--parents", "2")
    run = SearchRun.objects.get()
    for field, value in OWN_KERNEL_DEFAULTS.items():       # what was not given is the problem's default
        assert getattr(run, field) == (2 if field == "parents_per_step" else value), field
    settings = run.driver_state["settings"]
    assert settings["compile_share_target"] == 0.25 and settings["policy"]["max_gpu_per_step"] == 8
    names = [n.kernel.as_candidate()["name"] for n in Node.objects.filter(run=run).exclude(origin="root")]
    assert names and all(name.startswith("recipe ") for name in names)


# ---- a refused search leaves nothing behind -----------------------------------------------------
def _without_records(tmp_path, folder, name):
    """A problem folder without its recorded measurements: on a machine without a GPU nothing can measure it."""
    copy = tmp_path / name
    shutil.copytree(folder, copy)
    shutil.rmtree(copy / "records")
    return copy


def _uploaded(folder, lab):
    """The problem in `folder` uploaded, with its records if it has any, as an earlier search would have."""
    from kernellab.models import Workspace
    from kernellab.services.headless_search import folder_records_copy, problem_from_folder

    problem = problem_from_folder(workspace=Workspace.objects.get(), user=lab["admin"], folder=folder)
    folder_records_copy(problem=problem, folder=folder)
    return problem


@pytest.fixture
def no_gpu(monkeypatch):
    """No GPU here, whatever machine runs the tests: the GPU backends cannot measure."""
    monkeypatch.setattr("gpu_runner.gpu_present", lambda: False)


@pytest.mark.parametrize("backend", ["auto", "replay", "cupy", "pycuda"])
def test_a_backend_that_cannot_measure_an_uploaded_problem_leaves_no_run(lab, tmp_path, no_gpu, embedded_setup, backend):
    problem = _uploaded(_without_records(tmp_path, SAXPY, "saxpy"), lab)
    with pytest.raises(CommandError, match="backend cannot measure SAXPY") as refused:
        _search("saxpy", "--backend", backend, "--budget", "2")
    # no "choose a backend that can" when none can: what would make the search possible instead
    assert str(refused.value).endswith("No backend can measure it here (no GPU, and no recorded measurements to replay): "
                                       "search it on a machine with a GPU, or put its recorded measurements in the "
                                       "problem folder's records/h200.jsonl.gz.")
    assert not SearchRun.objects.exists()
    assert Problem.objects.get() == problem


@pytest.mark.parametrize("backend", ["replay", "cupy"])
def test_a_refused_search_of_a_folder_uploads_nothing(lab, tmp_path, settings, no_gpu, backend):
    with pytest.raises(CommandError, match=f"The {backend} backend cannot measure"):
        _search(str(_without_records(tmp_path, SAXPY, "saxpy")), "--backend", backend, "--budget", "2")
    assert not Problem.objects.exists() and not SearchRun.objects.exists()
    assert not (settings.DATA_DIR / "records").exists()


def test_replay_refused_on_a_machine_with_a_gpu_names_the_backends_that_measure(lab, tmp_path, monkeypatch):
    monkeypatch.setattr("gpu_runner.gpu_present", lambda: True)
    with pytest.raises(CommandError, match=r"no recorded measurements for this problem\. This machine has a GPU: "
                                           r"search with --backend auto or cupy or pycuda\.$"):
        _search(str(_without_records(tmp_path, SAXPY, "saxpy")), "--backend", "replay", "--budget", "2")


def test_a_gpu_backend_refused_for_a_recorded_problem_points_at_replay(lab, no_gpu):
    """A recorded problem: "no backend can measure it here" was false (QA round 4)."""
    with pytest.raises(CommandError, match=r"^The pycuda backend cannot measure SAXPY: this machine has no GPU, .*\. It "
                                           r"has recorded measurements: search with --backend replay to search them on "
                                           r"this machine\.$"):
        _search(str(SAXPY), "--backend", "pycuda", "--budget", "2")  # a folder's own records/
    _search(str(SAXPY), "--backend", "replay", "--budget", "1", "--surrogate", "roofline")
    with pytest.raises(CommandError, match=r"It has recorded measurements: search with --backend replay"):
        _search("saxpy", "--backend", "cupy", "--budget", "2")  # the uploaded problem's copied records


def test_a_refused_search_saves_no_auto_knobs(lab, tmp_path, no_gpu):
    problem = _uploaded(_without_records(tmp_path, _saxpy_without_family(tmp_path), "saxpy_no_records"), lab)
    with pytest.raises(CommandError, match="cannot measure"):
        _search("saxpy", "--backend", "replay", "--budget", "2", "--auto-knobs")
    after = Problem.objects.get()
    assert (after.spec_toml, after.family_source) == (problem.spec_toml, "")
    assert not SearchRun.objects.exists()


def test_a_setting_refused_by_the_run_takes_back_the_auto_knobs(lab, tmp_path):
    """Only run_create checks a setting's range, after the knobs are saved: the transaction takes them back."""
    problem = _uploaded(_saxpy_without_family(tmp_path), lab)
    out = io.StringIO()
    with pytest.raises(CommandError, match="Parents per step must be between 1 and 16"):
        call_command("search", "saxpy", "--backend", "replay", "--budget", "2", "--auto-knobs", "--parents", "0",
                     stdout=out)
    assert "Knobs found in the kernel: BLOCK" in out.getvalue()   # saved, then taken back
    after = Problem.objects.get()
    assert (after.spec_toml, after.family_source) == (problem.spec_toml, "")
    assert not SearchRun.objects.exists()


def test_a_setting_refused_by_the_run_takes_back_the_folders_upload_and_records(lab, settings):
    with pytest.raises(CommandError, match="Parents per step must be between 1 and 16"):
        _search(str(SAXPY), "--backend", "replay", "--budget", "2", "--parents", "0")
    assert not Problem.objects.exists() and not SearchRun.objects.exists()
    assert not (settings.DATA_DIR / "records").exists()


# ---- --out ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["a_file", "a_file/report"])
def test_an_out_that_cannot_be_a_folder_is_refused_before_anything_runs(lab, tmp_path, where):
    (tmp_path / "a_file").write_text("not a folder")
    with pytest.raises(CommandError, match="--out .* is a file, not a folder|--out .* cannot be made: .* is a file"):
        _search(str(SAXPY), "--backend", "replay", "--budget", "2", "--out", str(tmp_path / where))
    assert not Problem.objects.exists() and not SearchRun.objects.exists()
    assert (tmp_path / "a_file").read_text() == "not a folder"


def test_a_report_that_cannot_be_written_is_printed_and_said_so_plainly(lab, tmp_path):
    out_folder = tmp_path / "report"
    (out_folder / "report.json").mkdir(parents=True)   # a folder where the report's file would go
    out = io.StringIO()
    with pytest.raises(CommandError, match=f"The report could not be written to {out_folder}: .*; it is printed above"):
        call_command("search", str(SAXPY), "--backend", "replay", "--budget", "2", "--surrogate", "roofline",
                     "--out", str(out_folder), stdout=out)
    run = SearchRun.objects.get()
    assert run.status == RunStatus.FINISHED
    assert f"Search of saxpy (run {run.pk}" in out.getvalue() and f"/runs/{run.pk}/" in out.getvalue()


def test_an_out_folder_that_is_missing_is_made_with_its_parents(lab, tmp_path):
    _search(str(SAXPY), "--backend", "replay", "--budget", "1", "--surrogate", "roofline",
            "--out", str(tmp_path / "new" / "report"))
    assert json.loads((tmp_path / "new" / "report" / "report.json").read_text())["run_id"] == SearchRun.objects.get().pk


# ---- an unknown problem ---------------------------------------------------------------------------
def _many_problems(count):
    from kernellab.models import Workspace
    from kernellab.services.kernels import kernel_get_or_create
    from tests.samples import SIMPLE_REFERENCE, SIMPLE_SPEC

    reference = kernel_get_or_create(candidate={
        "source": SIMPLE_REFERENCE, "name": "scale reference",
        "launch": [{"kernel": "scale", "grid": ["ceil_div(N, 256)"], "block": [256], "shared": "0", "args": ["x", "y", "n"]}]})
    workspace = Workspace.objects.get()
    for i in range(count):
        Problem.objects.create(workspace=workspace, name=f"p{i:02d}", title=f"Problem {i}", spec_toml=SIMPLE_SPEC,
                               reference=reference)


def test_an_unknown_problem_says_how_many_more_there_are_and_list_names_them_all(lab):
    _many_problems(23)
    with pytest.raises(CommandError, match=r"problems: p00, p01, .*, p19, and 3 more \(--list lists them all\)\.$"):
        _search("nope")
    listed = _search("--list")
    assert all(f"p{i:02d}  (Problem {i})" in listed for i in range(23))


def test_an_unknown_problem_among_few_names_them_all(lab):
    _many_problems(3)
    with pytest.raises(CommandError, match=r"problems: p00, p01, p02\.$"):
        _search("nope")


# ---- the progress and the report agree ------------------------------------------------------------
SOFTMAX = Path(__file__).resolve().parents[2] / "kernellab" / "problems" / "softmax"


def test_the_last_progress_line_shows_the_best_of_the_report(lab, tmp_path):
    """A step's measurements are read by the step after it: the last step's only after the search has ended,
    which the progress shows in one last line with the report's numbers."""
    printed = _search(str(SOFTMAX), "--backend", "replay", "--generator", "recipes", "--surrogate", "roofline",
                      "--budget", "4", "--out", str(tmp_path / "report"))
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    progress = [line for line in printed.splitlines() if line.lstrip().startswith(tuple("0123456789")) and "best " in line]
    last_best = progress[-1].split("best ")[1].split()[0]
    assert report["best_speedup"] is not None and report["best_speedup"] > 1
    assert last_best == f"{report['best_speedup']:.3f}x"
    assert progress[-1].startswith("100% done, ") and f"GPU {report['measurements_requested']}/4" in progress[-1]
    misses = report["candidates_not_recorded"]
    assert (f"/4 ({misses} not recorded)  " if misses else "/4  ") in progress[-1]
    assert f"best: {last_best} (node {report['best_node']})" in printed


# ---- a generator the run form refuses; an interrupted search ---------------------------------------
KERNELBENCH_RELU = '''import torch
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


@pytest.mark.parametrize("generator", ["recipes", "llm", "transform", "template"])
def test_a_kernelbench_task_refuses_the_generators_the_run_form_refuses_before_storing_a_run(lab, workspace, generator):
    from kernellab.services.problems import problem_create_pytorch

    problem_create_pytorch(workspace=workspace, user=None, name="kb_relu",
                           program_source=KERNELBENCH_RELU)
    # (kb_relu is linked to no KernelBench task and has no recorded solutions: no generator could propose anything
    # for it; a task with recorded solutions is told to choose replayed, tests/kernellab/test_qa3_llm_runs.py)
    with pytest.raises(CommandError, match=r"has no recorded solutions to replay .*could propose nothing\.$"):
        _search("kb_relu", "--backend", "replay", "--generator", generator)
    assert not SearchRun.objects.exists()


def test_an_interrupted_search_pauses_its_run_reports_and_exits_130(lab, tmp_path, monkeypatch):
    from kernellab.management.commands import search as command

    def interrupt(self):
        def show(progress):
            raise KeyboardInterrupt
        return show

    monkeypatch.setattr(command.Command, "_progress_printer", interrupt)
    out = io.StringIO()
    with pytest.raises(CommandError, match=r"The search was interrupted; run \d+ is paused") as raised:
        call_command("search", str(SAXPY), "--backend", "replay", "--budget", "6", "--surrogate", "roofline",
                     "--out", str(tmp_path / "report"), stdout=out)
    assert raised.value.returncode == 130
    run = SearchRun.objects.get()
    assert run.status == RunStatus.PAUSED and run.status_reason == "the command-line search was interrupted"
    assert f"Search of saxpy (run {run.pk}" in out.getvalue() and "paused" in out.getvalue()
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["run_id"] == run.pk and report["status"] == "paused"
