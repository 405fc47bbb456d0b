"""Fixtures for the search_engine tests (the LLM server fixture is in tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.search_engine.fakes import space, true_speedup


@pytest.fixture
def family_space():
    return space()


@pytest.fixture
def best_possible_speedup():
    values = [true_speedup(k) for k in space().all_valid()]
    return max(v for v in values if not isinstance(v, str))
