"""RL export and rewards: the surrogate's prompt text, TRL's reward signature, unparsable answers score 0."""
from __future__ import annotations

import json

import pytest

from search_engine import scoring
from search_engine.lab.datasets import row_request
from search_engine.lab.rl import (REWARD_FUNCTIONS, brier_reward, correctness_reward, crps_reward, rl_examples)
from search_engine.prompts import forecast_messages
from tests.lab.helpers import synthetic_rows

PROBS = [0.0, 0.0, 0.0, 0.1, 0.6, 0.2, 0.1, 0.0]  # most probable: bin 5


def _answer(probabilities=PROBS, bin_=5) -> str:
    return "Reasoning first.\n```json\n" + json.dumps(
        {"reasoning": "vectorised loads", "probabilities": probabilities, "predicted_bin": bin_}) + "\n```"


def test_an_example_is_the_llm_surrogates_own_prompt_with_the_true_bin():
    rows = synthetic_rows({"a": [1.2, 3.0]})
    examples = rl_examples(rows)
    assert examples[0]["prompt"] == forecast_messages(row_request(rows[0]))
    assert [e["true_bin"] for e in examples] == [5, 7]
    assert examples[1]["prompt"][0]["role"] == "system" and "submit_forecast" in examples[1]["prompt"][0]["content"]


def test_rewards_for_a_right_a_wrong_and_an_unparsable_answer():
    completions = [_answer(), _answer(), "I think it is fast.", _answer([0.5, 0.5], 1)]
    true_bin = [5, 6, 5, 1]
    assert correctness_reward(completions, true_bin=true_bin) == [1.0, 0.0, 0.0, 0.0]
    brier = brier_reward(completions, true_bin=true_bin)
    assert brier[0] == pytest.approx(1 + 1 - scoring.brier(PROBS, 5))
    assert brier[1] == pytest.approx(0 + 1 - scoring.brier(PROBS, 6))
    assert brier[2] == 0.0 and brier[3] == 0.0  # no answer; two probabilities instead of eight
    crps = crps_reward(completions, true_bin=true_bin)
    assert crps[1] == pytest.approx(1 - scoring.crps(PROBS, 6))
    # a far-off forecast scores less CRPS reward than a near one, both wrong
    near = crps_reward([_answer([0, 0, 0, 0, 0, 1.0, 0, 0], 6)], true_bin=[7])[0]
    far = crps_reward([_answer([1.0, 0, 0, 0, 0, 0, 0, 0], 1)], true_bin=[7])[0]
    assert near > far


def test_rewards_read_conversational_completions_and_the_dataset_column():
    completion = [{"role": "assistant", "content": _answer()}]
    scores = REWARD_FUNCTIONS["correctness"]([completion, completion], true_bin=[5, 4],
                                             prompts=[[], []], id=["a", "b"])
    assert scores == [1.0, 0.0]


def test_rewards_refuse_a_true_bin_column_of_the_wrong_length():
    with pytest.raises(ValueError, match="one value per completion"):
        correctness_reward([_answer()], true_bin=[5, 5])
