"""A forecast has one name per part from the surrogate to the browser: `probabilities` and `bin` on a
forecast (search engine, its events, the database), `forecast_bin` and `forecast_confidence` on a node
(the database, the tree's JSON, explorer.js)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse

from kernellab.models import Forecast, Node, RunChange
from kernellab.services.changes import node_changed, node_payload
from search_engine.surrogates.base import Forecast as EngineForecast

ROOT = Path(__file__).resolve().parents[2]


def test_the_engines_forecast_and_the_stored_forecast_name_their_parts_alike():
    engine = EngineForecast.from_probabilities([0, 0, 0, 0, 0.7, 0.3, 0, 0], surrogate="learned@1").to_dict()
    stored = {field.name for field in Forecast._meta.get_fields()}
    assert {"probabilities", "bin", "confidence", "surrogate", "reasoning", "abstained"} <= set(engine) & stored
    assert engine["bin"] == 5 and "probs" not in engine and "predicted_bin" not in stored


def test_a_forecast_saved_under_its_old_name_still_loads():
    assert EngineForecast.from_dict({"probs": [0.0, 1.0], "bin": 2, "confidence": 1.0}).probabilities == (0.0, 1.0)


def test_the_tree_json_names_a_nodes_forecast_as_the_node_does(client, members, node):
    node.forecast_bin, node.forecast_confidence = 6, 0.8
    node.save()
    payload = node_payload(node)
    assert payload["forecast_bin"] == 6 and payload["forecast_confidence"] == 0.8
    assert "bin" not in payload and "confidence" not in payload
    client.force_login(members["viewer"])
    snapshot = client.get(reverse("run-tree", args=[node.run_id])).json()
    shown = next(n for n in snapshot["nodes"] if n["key"] == node.key)
    assert shown["forecast_bin"] == 6 and shown["forecast_confidence"] == 0.8
    script = (ROOT / "static" / "js" / "explorer.js").read_text()
    assert "n.forecast_bin" in script and not re.search(r"\b[nm]\.(bin|confidence)\b", script)


@pytest.mark.django_db(transaction=True)
def test_the_migration_renames_the_bin_of_stored_forecasts_and_of_recorded_node_changes(node):
    before = [("kernellab", "0005_columns_for_run_settings_and_no_unwritten_fields")]
    after = [("kernellab", "0006_one_name_for_a_forecasts_bin")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    old.get_model("kernellab", "Forecast").objects.create(node_id=node.pk, surrogate="learned@1", predicted_bin=4,
                                                          probabilities=[0, 0, 0, 1, 0, 0, 0, 0])
    old_change = old.get_model("kernellab", "RunChange")
    recorded = old_change.objects.create(run_id=node.run_id, seq=900, kind="node",
                                         payload={"key": node.key, "bin": 4, "confidence": 0.9, "state": "forecast"})
    status = old_change.objects.create(run_id=node.run_id, seq=901, kind="run", payload={"status": "running"})
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(after)
    _migrate_to_the_latest()
    assert Forecast.objects.get(node=node).bin == 4
    assert RunChange.objects.get(pk=recorded.pk).payload == {"key": node.key, "forecast_bin": 4,
                                                             "forecast_confidence": 0.9, "state": "forecast"}
    assert RunChange.objects.get(pk=status.pk).payload == {"status": "running"}


def test_a_recorded_change_carries_the_nodes_forecast_under_the_nodes_names(node):
    Node.objects.filter(pk=node.pk).update(forecast_bin=3, forecast_confidence=0.5)
    node.refresh_from_db()
    change = node_changed(node=node, kind="forecast")
    assert change.payload["forecast_bin"] == 3 and change.payload["forecast_confidence"] == 0.5


def _migrate_to_the_latest() -> None:
    """Leave the database as the other tests expect it."""
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
