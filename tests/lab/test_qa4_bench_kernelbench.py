"""A KernelBench folder that does not exist or holds no task is refused in one sentence naming it (QA round 4):
before, the rows of KernelBench tasks lost their references and were left out without a word, and
benchmarks/surrogate_heldout.py printed other figures and met every goal."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from search_engine.lab.program_rows import kernelbench_tasks, program_rows, torch_record_rows
from tests.scripts import loaded_script

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "surrogate_heldout.py"


def kernelbench(folder: Path) -> Path:
    (folder / "level1").mkdir(parents=True)
    (folder / "level1" / "5_Softmax_of_ReLU.py").write_text("class Model: pass\n")
    return folder


def records(folder: Path) -> Path:
    """A torch backend's records file with one candidate of KernelBench level 1 task 5."""
    path = folder / "records" / "h200.jsonl.gz"
    path.parent.mkdir(parents=True)
    with gzip.open(path, "wt") as handle:
        handle.write(json.dumps({"problem": "kb1_5_softmax_of_relu", "variant": "llm:1", "status": "ok",
                                 "speedup": 1.5, "source": "class ModelNew: pass\n",
                                 "hardware": {"name": "NVIDIA H200"}}) + "\n")
    return path


def test_a_folder_that_does_not_exist_is_refused_naming_it_and_none_given_reads_none(tmp_path):
    missing = tmp_path / "nonexist" / "kb"
    with pytest.raises(ValueError) as raised:
        kernelbench_tasks(missing)
    assert str(raised.value) == f"The KernelBench folder {missing} does not exist."
    with pytest.raises(ValueError, match="does not exist"):   # not a row quietly dropped
        torch_record_rows(records(tmp_path), missing)
    # A folder that holds tasks gives them; none given (None) gives none, and no error.
    tasks = kernelbench_tasks(kernelbench(tmp_path / "kb"))
    assert tasks == {(1, 5): ("kb1_5_softmax_of_relu", "class Model: pass\n")}
    assert len(torch_record_rows(tmp_path / "records" / "h200.jsonl.gz", tmp_path / "kb")) == 1
    assert kernelbench_tasks(None) == {}
    with pytest.raises(ValueError, match="does not exist"):
        program_rows(cuda_l1_dir=None, kernelbench_dir=missing, records=[tmp_path / "records" / "h200.jsonl.gz"])


@pytest.mark.parametrize("layout", ["empty", "file", "repository root", "no task file"])
def test_a_folder_without_a_task_is_refused_naming_it(tmp_path, layout):
    folder = tmp_path / "kb"
    if layout == "file":
        folder.write_text("not a folder\n")
        expected = f"The KernelBench folder {folder} is a file, not a folder."
    else:
        folder.mkdir()
        if layout == "repository root":   # the checkout's root, whose KernelBench/ holds the levels
            kernelbench(folder / "KernelBench")
        elif layout == "no task file":
            (folder / "level1").mkdir()
            (folder / "level1" / "README.md").write_text("tasks\n")
            (folder / "level1" / "helpers.py").write_text("\n")
        expected = (f"The KernelBench folder {folder} holds no KernelBench task "
                    "(no file level<N>/<number>_<name>.py).")
    with pytest.raises(ValueError) as raised:
        kernelbench_tasks(folder)
    assert str(raised.value) == expected


def test_the_held_out_benchmark_refuses_a_wrong_kernelbench_folder_before_any_work(tmp_path, monkeypatch, capsys):
    pytest.importorskip("lightgbm")
    (tmp_path / "cuda-l1").mkdir()
    out = tmp_path / "result.json"
    with loaded_script(BENCHMARK, "qa4_surrogate_heldout_under_test") as module:
        monkeypatch.setattr(module, "load_rows", lambda args: pytest.fail("rows were read before the check"))
        with pytest.raises(SystemExit) as raised:
            module.main(["--cuda-l1", str(tmp_path / "cuda-l1"), "--kernelbench", str(tmp_path / "nonexist"),
                         "--no-compile", "--out", str(out)])
    assert raised.value.code == 2
    assert f"error: The KernelBench folder {tmp_path / 'nonexist'} does not exist." in capsys.readouterr().err
    assert not out.exists()


def test_a_cuda_l1_folder_without_its_files_is_refused_naming_them(tmp_path):
    """A folder that exists but holds no <gpu>.jsonl gave no CUDA-L1 row and no word about it."""
    from search_engine.lab.program_rows import CUDA_L1_GPUS, check_cuda_l1, cuda_l1_rows

    (tmp_path / "cuda-l1").mkdir()
    (tmp_path / "cuda-l1" / "README.md").write_text("not the data")
    with pytest.raises(ValueError, match=r"holds none of its files \(a100\.jsonl, h100\.jsonl"):
        cuda_l1_rows(tmp_path / "cuda-l1")
    (tmp_path / "cuda-l1" / f"{CUDA_L1_GPUS[-1]}.jsonl").write_text("")
    check_cuda_l1(tmp_path / "cuda-l1")  # one file of the five is data enough
