"""A new run's page is alive while the search takes its first steps: the tree shows within 2 s, on the
embedded SQLite and on PostgreSQL, however long a step takes (here each LLM answer takes 3 s)."""
from __future__ import annotations

import os
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from tests.browser.harness import KernelLabServer, login
from tests.browser.world import PASSWORDS
from tests.llm_stub import AnswerCatalogue, StubServer, recorded_saxpy_variants

RECORDED = Path(__file__).resolve().parents[1] / "gpu_runner" / "problems"
SLOW_ANSWER_S = 3.0

pytestmark = pytest.mark.browser


class SlowGoodAnswers(AnswerCatalogue):
    """Every generator answer is a good, recorded kernel, sent after SLOW_ANSWER_S."""

    def generator(self):
        return replace(super().generator(), delay_s=SLOW_ANSWER_S)


def postgres_url() -> str | None:
    base = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    if not base.startswith("postgres"):
        return None
    try:
        import psycopg

        name = f"kl_step_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(base.rsplit("/", 1)[0] + "/postgres", autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return base.rsplit("/", 1)[0] + "/" + name
    except Exception:  # noqa: BLE001 - no server here: the PostgreSQL case skips with this reason
        return None


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_new_runs_page_shows_its_tree_within_two_seconds_while_the_first_steps_run(chromium, database):
    env = {"KERNELLAB_PROBLEMS_DIR": str(RECORDED)}
    if database == "postgresql":
        url = postgres_url()
        if url is None:
            pytest.skip("PostgreSQL is not reachable here (set DATABASE_URL)")
        env["DATABASE_URL"] = url
    catalogue = SlowGoodAnswers(seed=5, variants=recorded_saxpy_variants(), good_share=1.0)
    with StubServer(catalogue) as stub:
        env.update({"OPENAI_BASE_URL": stub.base_url, "OPENAI_API_KEY": "stub", "KERNELLAB_GENERATOR_MODEL": "stub",
                    "KERNELLAB_LLM_TIMEOUT_S": "20"})
        with KernelLabServer(env_extra=env) as server:
            server.feeder("setup")
            server.feeder("load_bundled")
            server.start_worker(["search", "replay"])
            context = chromium.new_context(viewport={"width": 1400, "height": 900})
            page = context.new_page()
            login(page, server, "engineer", PASSWORDS["engineer"])
            run = server.feeder("start_search", problem="saxpy")
            deadline = time.monotonic() + 120
            while not stub.served and time.monotonic() < deadline:
                time.sleep(0.1)  # the worker is inside its first step, waiting on the LLM
            assert stub.served, "the worker never asked the generator"
            for _ in range(3):
                started = time.monotonic()
                page.goto(f"{server.url}/runs/{run}/")
                page.wait_for_function("() => window.klExplorer && window.klExplorer.size >= 1", timeout=30000)
                shown_s = time.monotonic() - started
                assert shown_s < 2.0, f"the tree took {shown_s:.1f} s to show while a step ran"
                time.sleep(1.0)
            page.wait_for_function("() => window.klExplorer.size > 1", timeout=120000)  # the step's children arrive live
            assert page.evaluate("() => window.klExplorer.connected")
            context.close()


def test_a_tree_that_fails_to_load_is_retried_until_it_shows(server, feed, browser_as):
    run = feed("create_run", name="retried tree")
    page = browser_as("viewer")
    failures = []

    def fail_twice(route):
        if len(failures) < 2:
            failures.append(route.request.url)
            route.fulfill(status=500, body="database is locked")
        else:
            route.continue_()

    page.route("**/tree*", fail_twice)
    page.goto(f"{server.url}/runs/{run}/")
    page.wait_for_function("() => window.klExplorer && window.klExplorer.size >= 1", timeout=20000)
    assert len(failures) == 2
    page.wait_for_function("() => window.klExplorer.connected", timeout=20000)
