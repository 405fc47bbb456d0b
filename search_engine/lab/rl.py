"""RL-ready export and the three GPU Forecasters rewards in the form a GRPO trainer takes.

An example is the LLM surrogate's own prompt (search_engine.prompts.forecast_messages, so training
and inference read the same text) in TRL's conversational form, with the true bin as a column:
    {"prompt": [{"role": "system", ...}, {"role": "user", ...}], "true_bin": 5, ...}

Rewards follow TRL's reward-function signature, `reward(completions, **kwargs) -> list[float]`,
where TRL passes every other dataset column as a keyword list aligned with the completions (here
`true_bin`). A completion is the model's text (or, in the conversational form, a list of messages
whose last assistant message is read); it is parsed exactly as the LLM surrogate parses an answer,
and an unparsable answer scores 0:
    correctness = 1[predicted bin = true bin]
    brier       = correctness + (1 - Brier)
    crps        = correctness + (1 - CRPS)
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from search_engine import scoring
from search_engine.bins import DEFAULT_BINS, BinTable
from search_engine.lab.datasets import row_id, row_problem, row_request, row_speedup
from search_engine.prompts import AnswerError, forecast_messages, parse_forecast


def rl_example(row: dict, bins: BinTable = DEFAULT_BINS) -> dict:
    return {
        "prompt": forecast_messages(row_request(row), bins),
        "true_bin": int(row["true_bin"]),
        "speedup": row_speedup(row),
        "problem": row_problem(row),
        "id": row_id(row),
        "source": row.get("source", ""),
    }


def rl_examples(rows: Iterable[dict], bins: BinTable = DEFAULT_BINS) -> list[dict]:
    return [rl_example(r, bins) for r in rows]


def completion_text(completion: Any) -> str:
    """The answer text of a completion: a string, or the last message of a conversational completion."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _message_text(completion)
    if isinstance(completion, (list, tuple)) and completion:
        return _message_text(completion[-1])
    return ""


def _message_text(message: Any) -> str:
    if not isinstance(message, dict):
        return str(message)
    content = message.get("content")
    calls = message.get("tool_calls") or []
    if calls:
        arguments = (calls[0].get("function") or {}).get("arguments")
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments)
        return arguments or ""
    if isinstance(content, list):  # content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def parse_answer(completion: Any, bins: BinTable = DEFAULT_BINS) -> tuple[list[float] | None, int | None]:
    """(probabilities, predicted bin) as the LLM surrogate reads them, or (None, None) when unparsable."""
    try:
        parsed = parse_forecast(None, completion_text(completion), bins)
    except AnswerError:
        return None, None
    return parsed.probabilities, parsed.predicted_bin


def _rewards(kind: str, completions: list, true_bin: list, bins: BinTable) -> list[float]:
    if len(true_bin) != len(completions):
        raise ValueError("The true_bin column must have one value per completion.")
    out = []
    for completion, truth in zip(completions, true_bin):
        probabilities, predicted = parse_answer(completion, bins)
        out.append(scoring.reward(kind, probabilities, predicted, int(truth), bins.n_bins))
    return out


def correctness_reward(completions: list, true_bin: list, **kwargs) -> list[float]:
    """1 when the most probable bin is the true bin, else 0 (unparsable: 0)."""
    return _rewards("correctness", completions, true_bin, DEFAULT_BINS)


def brier_reward(completions: list, true_bin: list, **kwargs) -> list[float]:
    """correctness + (1 - Brier) (unparsable: 0)."""
    return _rewards("brier", completions, true_bin, DEFAULT_BINS)


def crps_reward(completions: list, true_bin: list, **kwargs) -> list[float]:
    """correctness + (1 - CRPS) (unparsable: 0)."""
    return _rewards("crps", completions, true_bin, DEFAULT_BINS)


REWARD_FUNCTIONS = {"correctness": correctness_reward, "brier": brier_reward, "crps": crps_reward}
