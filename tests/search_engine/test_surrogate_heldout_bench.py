"""benchmarks/surrogate_heldout.py end to end on a small CUDA-L1-shaped folder: trained outside the
held-out set, scored inside it only, with every key the issue's checks read."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("lightgbm")

from search_engine.heldout import is_held_out  # noqa: E402
from tests.search_engine.test_program_surrogate import REFERENCE, TORCH_ONLY, own_kernel  # noqa: E402


def load_benchmark():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "surrogate_heldout.py"
    spec = importlib.util.spec_from_file_location("surrogate_heldout_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_cuda_l1(folder, tasks) -> None:
    folder.mkdir()
    for gpu, scale in (("h100", 1.2), ("a100", 1.0)):
        with open(folder / f"{gpu}.jsonl", "w") as handle:
            for task in tasks:
                level = 1 + (task % 7) / 10
                entry = {"level_id": 1, "task_id": task, "ref_code": REFERENCE,
                         "custom_code": own_kernel(128 + 128 * (task % 3)),
                         "cuda_graph_code": TORCH_ONLY, "cudnn_code": REFERENCE.replace("Model", "Model "),
                         "score_default": str(round(2.5 * scale * level, 3)), "score_cuda_graph": "2.0",
                         "score_cudnn": str(round(2.4 * scale * level, 3))}
                handle.write(json.dumps(entry) + "\n")


def test_the_benchmark_trains_outside_the_held_out_set_and_reports_inside_it(tmp_path):
    tasks = list(range(2, 42, 2))   # 10, 20, 30, 40 are held out
    write_cuda_l1(tmp_path / "cuda-l1", tasks)
    out = tmp_path / "result.json"
    # A KernelBench folder with one task no record names (a missing folder is refused): the rows are CUDA-L1's alone.
    (tmp_path / "kb" / "level9").mkdir(parents=True)
    (tmp_path / "kb" / "level9" / "1_Unused.py").write_text("")
    assert load_benchmark().main(["--cuda-l1", str(tmp_path / "cuda-l1"), "--kernelbench", str(tmp_path / "kb"),
                                   "--no-compile", "--skip-learned-v1", "--folds", "3", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    for key in ("tasks", "rows", "spearman_within_task", "recovered_at_1pct", "random_at_1pct", "brier",
                "brier_uniform", "brier_roofline", "crps", "crps_roofline", "ece_after_first_measurement",
                "cold_forecasts_per_s"):
        assert key in result
    held = {t for t in result["report"]["ranking"]["spearman_by_task"]}
    assert held and all(is_held_out(t) for t in held)
    assert result["tasks"] == 4 and result["training"]["tasks"] >= 16
    assert result["objective"] in ("regression", "lambdarank") and result["selection"]["chosen"] == result["objective"]
    assert math.isfinite(result["brier"]) and result["random_at_1pct"] < 1
