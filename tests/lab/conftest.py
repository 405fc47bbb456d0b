"""Fixtures shared by the lab's tests."""
import json

import pytest

from tests.llm_stub import ChatServer, forecast_answer


@pytest.fixture
def fake_endpoint():
    """An OpenAI-compatible endpoint that forecasts bin 5 with a forced tool call; `requests` lists what it was asked."""
    arguments = json.dumps({"reasoning": "fine", "probabilities": [0, 0, 0, 0.2, 0.6, 0.2, 0, 0], "predicted_bin": 5})
    usage = {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050}
    with ChatServer(lambda request: forecast_answer(arguments, usage=usage)) as server:
        yield server
