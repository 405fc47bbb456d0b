"""A run's settings are columns, and the model holds only fields something writes: the screening
width and the LLM call budget moved out of SearchRun.extra, with the runs that had them."""
from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse

from kernellab.models import Forecast, Node, SearchRun

BEFORE = [("kernellab", "0004_worker_heartbeats_and_honest_states")]
AFTER = [("kernellab", "0005_columns_for_run_settings_and_no_unwritten_fields")]


@pytest.mark.django_db(transaction=True)
def test_the_migration_moves_the_screening_width_and_llm_budget_of_existing_runs_into_columns(run):
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps.get_model("kernellab", "SearchRun")
    old.objects.filter(pk=run.pk).update(extra={"root_children": 256, "llm_call_budget": 40, "llm_calls": 7})
    plain = old.objects.create(problem_id=run.problem_id, extra={})
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    moved = old_state_after(executor).objects.get(pk=run.pk)
    untouched = old_state_after(executor).objects.get(pk=plain.pk)
    _migrate_to_the_latest()
    assert (moved.screening_width, moved.llm_call_budget, moved.llm_calls) == (256, 40, 7)
    assert (untouched.screening_width, untouched.llm_call_budget, untouched.llm_calls) == (0, None, 0)


def old_state_after(executor):
    return executor.loader.project_state(AFTER).apps.get_model("kernellab", "SearchRun")


def test_no_field_is_left_that_nothing_writes():
    assert not {"visits", "prior"} & {f.name for f in Node._meta.get_fields()}
    assert not {"surrogate_version", "against"} & {f.name for f in Forecast._meta.get_fields()}
    assert "extra" not in {f.name for f in SearchRun._meta.get_fields()}


def test_the_run_page_shows_the_screening_width_and_the_llm_calls_from_their_columns(client, members, run):
    SearchRun.objects.filter(pk=run.pk).update(screening_width=64, llm_call_budget=30, llm_calls=12)
    client.force_login(members["viewer"])
    html = client.get(reverse("run-explorer", args=[run.pk])).content.decode()
    assert "(64 screened at the root)" in html
    assert '<strong id="llm-calls">12 / 30</strong>' in html


def test_the_run_page_shows_parents_per_step_only_when_more_than_one(client, members, run):
    client.force_login(members["viewer"])
    html = client.get(reverse("run-explorer", args=[run.pk])).content.decode()
    assert "parents per step" not in html
    SearchRun.objects.filter(pk=run.pk).update(parents_per_step=4)
    html = client.get(reverse("run-explorer", args=[run.pk])).content.decode()
    assert "children per parent · 4 parents per step" in html


def test_the_run_page_shows_the_minimum_children_per_step_only_when_set(client, members, run):
    client.force_login(members["viewer"])
    html = client.get(reverse("run-explorer", args=[run.pk])).content.decode()
    assert "at least" not in html
    SearchRun.objects.filter(pk=run.pk).update(parents_per_step=2, min_children_per_step=16)
    html = client.get(reverse("run-explorer", args=[run.pk])).content.decode()
    assert "children per parent · 2 parents per step · at least 16 children per step" in html
    assert "compiling kept near" not in html
    SearchRun.objects.filter(pk=run.pk).update(compile_share_target=0.25)
    html = client.get(reverse("run-explorer", args=[run.pk])).content.decode()
    assert "at least 16 children per step · compiling kept near 25% of a step" in html


def test_the_panel_shows_the_latest_forecast_of_a_node_once_it_is_revised(client, members, node):
    Forecast.objects.create(node=node, surrogate="learned@1", probabilities=[0, 0, 0, 0, 1.0, 0, 0, 0], bin=5,
                            confidence=1.0)
    Forecast.objects.create(node=node, surrogate="learned@1", probabilities=[0, 0, 0, 0, 0, 0, 1.0, 0], bin=7,
                            confidence=0.9)
    client.force_login(members["viewer"])
    html = client.get(reverse("node-panel", args=[node.run_id, node.key])).content.decode()
    assert "learned@1, against the reference" in html and "bin 7 at confidence 0.90" in html


def _migrate_to_the_latest() -> None:
    """Leave the database as the other tests expect it."""
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
