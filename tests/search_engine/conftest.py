"""Fixtures for the search_engine tests (the LLM server fixture lives in llm_server.py)."""

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




@pytest.fixture(scope="session")
def llm_server(tmp_path_factory):
    """base_url and model of a llama.cpp server running Gemma 3 270M on a free local port."""
    from tests.search_engine.llm_server import MODEL_ALIAS, start_server

    process, base_url, log = start_server(tmp_path_factory.mktemp("llm"))
    yield {"base_url": base_url, "model": MODEL_ALIAS}
    process.terminate()
    try:
        process.wait(timeout=20)
    except Exception:
        process.kill()
    log.close()
