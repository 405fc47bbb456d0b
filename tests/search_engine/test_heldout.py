"""The held-out test set: frozen by name, refused by recorded-data training."""

from __future__ import annotations

import pytest

from search_engine.heldout import HeldOutTaskError, is_held_out
from search_engine.surrogates.base import ForecastRequest
from search_engine.surrogates.learned import LearnedSurrogate

SOURCE = "__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }"
LAUNCH = [{"kernel": "k", "block": ["256"], "grid": ["n / 256"]}]


def rows_of(problem: str, n: int = 12) -> list[dict]:
    return [{"reference": {"source": SOURCE, "launch": LAUNCH},
             "candidate": {"source": f"#define ITEMS {i}\n{SOURCE}", "launch": LAUNCH},
             "problem": {"name": problem, "sizes": {"n": 1 << 20}}, "speedup": 0.5 + 0.25 * i,
             "problem_name": problem} for i in range(n)]


def test_every_fifth_kernelbench_task_is_held_out_and_the_recorded_families_are_not():
    assert is_held_out("kb1_10_3d_tensor_matrix_multiplication") and is_held_out("kb2_5_matmul_bias")
    assert not is_held_out("kb1_12_matmul_with_diagonal_matrices") and not is_held_out("kb3_1_mlp")
    for family in ("conv2d", "gemv", "histogram256", "reduce_sum", "rmsnorm", "sgemm", "softmax", "transpose"):
        assert not is_held_out(family)


def test_training_refuses_rows_of_a_held_out_task_by_row_group_or_request():
    held = rows_of("kb1_15_matmul_for_lower_triangular_matrices")
    with pytest.raises(HeldOutTaskError, match="kb1_15_matmul_for_lower_triangular_matrices.*held-out"):
        LearnedSurrogate(seed=0).fit(rows_of("kb1_14_matmul_for_upper_triangular_matrices") + held)
    named_by_group = rows_of("anything")
    with pytest.raises(HeldOutTaskError):
        LearnedSurrogate(seed=0).fit(named_by_group, groups=["kb4_20_x"] * len(named_by_group))
    as_requests = [{"request": ForecastRequest(reference=r["reference"], candidate=r["candidate"],
                                               problem=r["problem"]), "speedup": r["speedup"]} for r in held]
    with pytest.raises(HeldOutTaskError):
        LearnedSurrogate(seed=0).fit(as_requests)


def test_training_on_tasks_outside_the_held_out_set_goes_ahead():
    rows = rows_of("kb1_14_matmul_for_upper_triangular_matrices") + rows_of("softmax")
    model = LearnedSurrogate(seed=0).fit(rows, groups=[r["problem_name"] for r in rows])
    assert model.trained_rows == len(rows)
