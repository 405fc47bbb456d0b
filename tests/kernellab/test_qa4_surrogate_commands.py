"""QA round 4, the surrogate commands: what evaluate_surrogate and train_surrogate can tell from their arguments is
refused before any row is read, trained or forecast, in one sentence.

1. evaluate_surrogate --heldout refuses a --kernelbench folder that does not exist or holds no KernelBench task
   (the torch backend's records were dropped silently), and a ValueError from reading the rows is a sentence;
2. train_surrogate --surrogate llm with an endpoint that cannot be reached is one sentence with what to check;
3. evaluate_surrogate --recalibration is read and checked before forecasting, and refused for a surrogate other
   than the one it was fitted for;
4. train_surrogate --exclude-problem refuses a name that is no problem of the dataset, listing them;
5. --heldout --out is checked first and its folders made, --batch-size and --timeout must be positive,
   --loo --recalibrate needs three problems before any model is trained, and --heldout refuses the flags it
   does not read;
6. evaluate_surrogate --heldout reports crps_uniform beside crps_roofline.
"""
from __future__ import annotations

import json
import re
import socket
from dataclasses import replace

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from search_engine.lab.datasets import write_dataset
from tests.lab.helpers import synthetic_rows
from tests.llm_stub import Answer, ChatServer, forecast_answer

pytestmark = pytest.mark.timeout(120)

GOOD = json.dumps({"reasoning": "fine", "probabilities": [0, 0, 0, 0.2, 0.6, 0.2, 0, 0], "predicted_bin": 5})


@pytest.fixture
def dataset(tmp_path, data_dir):
    path = tmp_path / "three.jsonl"
    write_dataset(path, synthetic_rows({"a": [0.5, 1.0, 2.0], "b": [0.6, 1.1, 2.2], "c": [0.7, 1.2, 2.4]}))
    return path


@pytest.fixture
def two_problems(tmp_path, data_dir):
    path = tmp_path / "two.jsonl"
    write_dataset(path, synthetic_rows({"a": [0.5, 1.0, 2.0], "b": [0.6, 1.1, 2.2]}))
    return path


@pytest.fixture
def no_forecasting(monkeypatch):
    """Any forecast or training fails the test: the arguments must be refused before the first row is forecast."""
    from kernellab.management.commands import evaluate_surrogate, train_surrogate

    def forecast(*args, **kwargs):
        raise AssertionError("rows were forecast before the arguments were checked")

    monkeypatch.setattr(evaluate_surrogate, "forecast_rows", forecast)
    monkeypatch.setattr(evaluate_surrogate, "loo_forecasts", forecast)
    monkeypatch.setattr(train_surrogate, "forecast_rows", forecast)


@pytest.fixture
def no_heldout_rows(monkeypatch):
    """Reading the held-out rows fails the test: the arguments must be refused before any work."""
    from search_engine.lab import program_rows

    def rows(**kwargs):
        raise AssertionError("the held-out rows were read before the arguments were checked")

    monkeypatch.setattr(program_rows, "program_rows", rows)


@pytest.fixture
def kernelbench(tmp_path):
    """A folder holding one KernelBench task, as the check wants."""
    folder = tmp_path / "kernelbench"
    (folder / "level1").mkdir(parents=True)
    (folder / "level1" / "10_Some_task.py").write_text("import torch\n")
    return folder


@pytest.fixture
def cuda_l1():
    from kernellab.selectors.kernelbench import cuda_l1_dir

    if not (cuda_l1_dir() / "h100.jsonl").is_file():
        pytest.skip(f"CUDA-L1 is not at {cuda_l1_dir()}")
    return cuda_l1_dir()


def closed_port_url() -> str:
    with socket.socket() as sock:  # a port nobody listens on: every request fails at once
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def prompt_version() -> str:
    """The LLM surrogate's prompt version, the last part of its id (llm@MODEL/VERSION)."""
    import inspect

    from search_engine.surrogates.llm import LLMSurrogate

    return inspect.signature(LLMSurrogate.__init__).parameters["prompt_version"].default


def _evaluate(*args):
    call_command("evaluate_surrogate", *args)


# ---- 1. --kernelbench ---------------------------------------------------------------------------------------------

def test_heldout_refuses_a_kernelbench_folder_that_does_not_exist_before_any_work(tmp_path, no_heldout_rows):
    missing = tmp_path / "nonexist" / "kb"
    out = tmp_path / "y.json"
    with pytest.raises(CommandError) as raised:
        _evaluate("--heldout", "--cuda-l1", str(tmp_path), "--kernelbench", str(missing), "--out", str(out))
    assert str(raised.value) == f"KernelBench's folder {missing} does not exist; name it with --kernelbench."
    assert not out.exists()


def test_heldout_refuses_a_kernelbench_folder_without_a_task(tmp_path, no_heldout_rows):
    folder = tmp_path / "kb"
    (folder / "level1").mkdir(parents=True)
    (folder / "level1" / "README.md").write_text("no tasks here\n")
    (folder / "level1" / "helper.py").write_text("\n")
    with pytest.raises(CommandError) as raised:
        _evaluate("--heldout", "--cuda-l1", str(tmp_path), "--kernelbench", str(folder))
    assert str(raised.value) == (f"KernelBench's folder {folder} holds no KernelBench task "
                                 "(level<N>/<number>_<name>.py); name KernelBench's checkout with --kernelbench.")


def test_heldout_refuses_a_kernelbench_path_that_is_a_file(tmp_path, no_heldout_rows):
    a_file = tmp_path / "kb.tar"
    a_file.write_text("")
    with pytest.raises(CommandError) as raised:
        _evaluate("--heldout", "--cuda-l1", str(tmp_path), "--kernelbench", str(a_file))
    assert str(raised.value) == (f"KernelBench's folder {a_file} is a file, not a folder; name the folder with "
                                 "--kernelbench.")


def test_a_value_error_reading_the_heldout_rows_is_a_sentence(tmp_path, kernelbench, monkeypatch):
    from search_engine.lab import program_rows

    def rows(**kwargs):
        raise ValueError(f"KernelBench's folder {kernelbench} cannot be read.")

    monkeypatch.setattr(program_rows, "program_rows", rows)
    (tmp_path / "h100.jsonl").write_text("")  # a CUDA-L1 folder with one of its files, so the rows are read
    with pytest.raises(CommandError, match=r"^KernelBench's folder .* cannot be read\.$"):
        _evaluate("--heldout", "--cuda-l1", str(tmp_path), "--kernelbench", str(kernelbench))


def test_a_cuda_l1_folder_without_its_files_is_refused_before_the_rows_are_read(tmp_path, kernelbench, monkeypatch):
    from search_engine.lab import program_rows

    def rows(**kwargs):
        raise AssertionError("the rows were read")

    monkeypatch.setattr(program_rows, "program_rows", rows)
    with pytest.raises(CommandError, match=r"^CUDA-L1's folder .* holds none of its files \(a100\.jsonl, .*\)\. "
                                           r"Name the folder with --cuda-l1\.$"):
        _evaluate("--heldout", "--cuda-l1", str(tmp_path), "--kernelbench", str(kernelbench))


# ---- 2. train_surrogate with an unreachable endpoint --------------------------------------------------------------

def test_train_surrogate_with_an_endpoint_nobody_listens_on_is_one_sentence(dataset, tmp_path, settings):
    settings.KERNELLAB_LLM = replace(settings.KERNELLAB_LLM, max_retries=0)
    url = closed_port_url()
    out = tmp_path / "recalibration.json"
    with pytest.raises(CommandError) as raised:
        call_command("train_surrogate", "--dataset", str(dataset), "--surrogate", "llm", "--llm-model", "m",
                     "--base-url", url, "--no-cache", "--timeout", "2", "--concurrency", "1", "--out", str(out))
    assert str(raised.value) == (f"The LLM endpoint {url} did not answer: Connection error; check --base-url and "
                                 "that the server runs (no recalibration was saved).")
    assert not out.exists()


def test_train_surrogate_with_an_endpoint_that_refuses_the_key_names_openai_api_key(dataset, tmp_path, settings):
    settings.KERNELLAB_LLM = replace(settings.KERNELLAB_LLM, max_retries=0)
    refuse = Answer("", "", {"error": {"message": "Incorrect API key provided"}}, status=401)
    out = tmp_path / "recalibration.json"
    with ChatServer(lambda request: refuse) as server:
        with pytest.raises(CommandError) as raised:
            call_command("train_surrogate", "--dataset", str(dataset), "--surrogate", "llm", "--llm-model", "m",
                         "--base-url", server.base_url, "--no-cache", "--concurrency", "1", "--out", str(out))
    message = str(raised.value)
    assert message.startswith(f"The LLM endpoint {server.base_url} refused the API key (HTTP 401)")
    assert message.endswith("; check OPENAI_API_KEY (no recalibration was saved).")
    assert not out.exists()


# ---- 3. --recalibration -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("content, why", [
    (None, "No such file or directory"),
    ("{not json", "it is not JSON"),
    ("[1, 2]", "it is no saved recalibration"),
    ('{"method": "platt"}', "it is no saved recalibration"),
    ('{"method": "temperature", "temperature": -1}', "its temperature is -1, not a positive number"),
    ('{"method": "temperature", "temperature": "1.2"}', "its temperature is '1.2', not a positive number"),
    ('{"method": "isotonic", "floor": 0.001, "maps": [[[0, 1], [0, 1]]]}',
     "an isotonic recalibration has one map per bin (8), and this one has 1"),
    ('{"method": "isotonic", "floor": 0.001, "maps": ' + json.dumps([[[1, 0], [0, 1]]] * 8) + "}",
     "the map of bin 1 is not two equally long lists of numbers"),
    ('{"method": "temperature", "temperature": 1.1, "surrogate": 7}', "its surrogate is 7"),
])
def test_a_recalibration_that_cannot_be_read_is_refused_before_forecasting(dataset, tmp_path, no_forecasting,
                                                                            content, why):
    saved = tmp_path / "recalibration.json"
    if content is not None:
        saved.write_text(content)
    with pytest.raises(CommandError, match=rf"^Cannot read the recalibration {re.escape(str(saved))}: {re.escape(why)}"
                       ) as raised:
        _evaluate("--dataset", str(dataset), "--surrogate", "roofline", "--recalibration", str(saved), "--no-save")
    assert str(raised.value).endswith(".")


def test_a_recalibration_of_another_surrogate_is_refused_naming_both_before_any_request(dataset, tmp_path):
    saved = tmp_path / "roofline-temperature.json"
    saved.write_text(json.dumps({"method": "temperature", "temperature": 1.4, "surrogate": "roofline@1",
                                 "dataset": str(dataset), "rows": 9}))
    with ChatServer(lambda request: forecast_answer(GOOD)) as server:
        with pytest.raises(CommandError) as raised:
            _evaluate("--dataset", str(dataset), "--surrogate", "llm", "--llm-model", "m", "--no-cache",
                      "--base-url", server.base_url, "--recalibration", str(saved), "--no-save")
        assert not server.requests
    llm_id = f"llm@m/{prompt_version()}"
    assert str(raised.value) == (f"The recalibration {saved} was fitted for roofline@1, not for {llm_id}; fit one "
                                 f"for {llm_id} with train_surrogate, or evaluate roofline@1.")


def test_a_recalibration_of_another_model_of_the_same_endpoint_is_refused(dataset, tmp_path, no_forecasting):
    saved = tmp_path / "llm-temperature.json"
    saved.write_text(json.dumps({"method": "temperature", "temperature": 1.4,
                                 "surrogate": f"llm@other/{prompt_version()}"}))
    with pytest.raises(CommandError, match=rf"was fitted for llm@other/{prompt_version()}, not for llm@m/"):
        _evaluate("--dataset", str(dataset), "--surrogate", "llm", "--llm-model", "m", "--no-cache",
                  "--base-url", "http://127.0.0.1:9/v1", "--recalibration", str(saved), "--no-save")


def test_loo_refuses_a_saved_recalibration_it_would_not_apply(dataset, tmp_path, no_forecasting):
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps({"method": "temperature", "temperature": 1.4, "surrogate": "learned@1"}))
    with pytest.raises(CommandError, match=r"^--loo trains a model per problem and --recalibration applies"):
        _evaluate("--dataset", str(dataset), "--loo", "--recalibration", str(saved), "--no-save")


# ---- 4. --exclude-problem -----------------------------------------------------------------------------------------

def test_train_surrogate_refuses_a_problem_the_dataset_does_not_have(dataset, tmp_path):
    out = tmp_path / "learned.pkl"
    with pytest.raises(CommandError) as raised:
        call_command("train_surrogate", "--dataset", str(dataset), "--exclude-problem", "a",
                     "--exclude-problem", "zz", "--out", str(out))
    assert str(raised.value) == "--exclude-problem names no problem of three.jsonl: zz (its problems: a, b, c)."
    assert not out.exists()


def test_train_surrogate_lists_the_first_thirty_problems_and_counts_the_rest(tmp_path, data_dir):
    path = tmp_path / "many.jsonl"
    write_dataset(path, synthetic_rows({f"p{i:02d}": [1.0] for i in range(33)}))
    with pytest.raises(CommandError, match=r"\(its problems: p00, p01, .*, p29 and 3 more\)\.$"):
        call_command("train_surrogate", "--dataset", str(path), "--exclude-problem", "p1",
                     "--out", str(tmp_path / "m.pkl"))


# ---- 5. arguments checked first -----------------------------------------------------------------------------------

def test_heldout_out_in_a_missing_folder_is_written_there(cuda_l1, tmp_path):
    pytest.importorskip("lightgbm")
    out = tmp_path / "missing" / "dir" / "x.json"
    _evaluate("--heldout", "--limit", "40", "--out", str(out))
    assert json.loads(out.read_text())["rows"] <= 40


@pytest.mark.parametrize("where", ["folder", "under a file"])
def test_heldout_refuses_an_out_it_cannot_write_before_any_work(tmp_path, no_heldout_rows, where):
    (tmp_path / "a_file").write_text("")
    out = tmp_path if where == "folder" else tmp_path / "a_file" / "x.json"
    with pytest.raises(CommandError, match=r"^--out .* (is a folder|cannot be written)"):
        _evaluate("--heldout", "--out", str(out))


@pytest.mark.parametrize("size", ["0", "-4"])
def test_a_batch_size_below_one_is_refused(dataset, no_forecasting, no_heldout_rows, size):
    message = f"--batch-size must be a positive number of rows, not {size}."
    with pytest.raises(CommandError) as raised:
        _evaluate("--dataset", str(dataset), "--surrogate", "roofline", "--batch-size", size, "--no-save")
    assert str(raised.value) == message
    with pytest.raises(CommandError) as raised:
        _evaluate("--heldout", "--batch-size", size)
    assert str(raised.value) == message


@pytest.mark.parametrize("timeout", ["-1", "0", "nan"])
def test_a_timeout_that_is_no_positive_number_is_refused_by_both_commands(dataset, no_forecasting, timeout):
    llm = ["--surrogate", "llm", "--llm-model", "m", "--base-url", "http://127.0.0.1:9/v1", "--no-cache"]
    with pytest.raises(CommandError, match=r"^--timeout must be a positive number of seconds, not "):
        _evaluate("--dataset", str(dataset), *llm, "--timeout", timeout, "--no-save")
    with pytest.raises(CommandError, match=r"^--timeout must be a positive number of seconds, not "):
        call_command("train_surrogate", "--dataset", str(dataset), *llm, "--timeout", timeout)


def test_loo_with_nested_calibration_on_two_problems_is_refused_before_any_training(two_problems, no_forecasting):
    with pytest.raises(CommandError) as raised:
        _evaluate("--dataset", str(two_problems), "--loo", "--recalibrate", "temperature", "--no-save")
    assert str(raised.value) == ("Leave-one-problem-out with nested calibration (--recalibrate) needs rows of at "
                                 "least three problems; two.jsonl holds 2: a, b.")


def test_a_calibration_split_too_small_to_fit_is_refused_before_forecasting(dataset, no_forecasting):
    with pytest.raises(CommandError) as raised:
        _evaluate("--dataset", str(dataset), "--surrogate", "roofline", "--recalibrate", "temperature",
                  "--calibration-fraction", "0.1", "--no-save")
    assert str(raised.value) == ("--recalibrate needs at least two rows to fit on, and the calibration split "
                                 "(--calibration-fraction 0.1 of the 9 rows) holds 1.")


@pytest.mark.parametrize("flags, named", [
    (["--loo"], "--loo"),
    (["--recalibrate", "temperature"], "--recalibrate"),
    (["--train", "x.jsonl"], "--train"),
    (["--calibration-fraction", "0.5", "--split-by", "problem"], "--calibration-fraction and --split-by"),
    (["--title", "mine"], "--title"),
    (["--price-in", "1", "--price-out", "2"], "--price-in and --price-out"),
    (["--workspace", "team"], "--workspace"),
])
def test_heldout_refuses_the_flags_it_does_not_read(tmp_path, no_heldout_rows, flags, named):
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps({"method": "temperature", "temperature": 1.0}))
    pronoun = "them" if " and " in named else "it"
    with pytest.raises(CommandError) as raised:
        _evaluate("--heldout", *flags)
    assert str(raised.value) == (f"--heldout does not read {named}: leave {pronoun} out, or leave out --heldout and "
                                 "name a --dataset.")
    with pytest.raises(CommandError, match=r"^--heldout does not read --recalibration: "):
        _evaluate("--heldout", "--recalibration", str(saved))


def test_the_heldout_flags_without_heldout_are_refused(dataset, tmp_path, no_forecasting):
    with pytest.raises(CommandError) as raised:
        _evaluate("--dataset", str(dataset), "--surrogate", "roofline", "--out", str(tmp_path / "x.json"),
                  "--kernelbench", str(tmp_path), "--no-save")
    assert str(raised.value) == ("--kernelbench and --out are read with --heldout only (a dataset's report is saved "
                                 "under DATA_DIR/reports): leave them out, or add --heldout.")


# ---- 6. crps_uniform ----------------------------------------------------------------------------------------------

def test_heldout_reports_crps_beside_uniform_and_roofline(cuda_l1, tmp_path, capsys):
    pytest.importorskip("lightgbm")
    from search_engine.lab.heldout_eval import HEADLINE

    out = tmp_path / "heldout.json"
    _evaluate("--heldout", "--limit", "40", "--out", str(out))
    report = json.loads(out.read_text())
    assert {"crps", "crps_uniform", "crps_roofline", "brier_uniform", "brier_roofline"} <= set(HEADLINE)
    assert report["crps_uniform"] == pytest.approx(report["report"]["crps_uniform"]) and report["crps_uniform"] > 0
    assert f"{'crps_uniform':<30}{report['crps_uniform']:.3f}" in capsys.readouterr().out.splitlines()
