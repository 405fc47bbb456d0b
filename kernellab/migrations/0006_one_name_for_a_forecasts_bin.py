"""A forecast's bin is `bin` everywhere (it was predicted_bin here, bin in the search engine); a node's
forecast is `forecast_bin` and `forecast_confidence` in the changes the browser reads, as on the node."""
from django.db import migrations

NODE_KEYS = {"bin": "forecast_bin", "confidence": "forecast_confidence"}


def _rename_keys(apps, renames: dict[str, str]) -> None:
    RunChange = apps.get_model("kernellab", "RunChange")
    changed = []
    for change in RunChange.objects.filter(kind__in=("node", "forecast", "discovery")).only("pk", "payload").iterator():
        payload = change.payload or {}
        if any(old in payload for old in renames):
            change.payload = {renames.get(key, key): value for key, value in payload.items()}
            changed.append(change)
        if len(changed) >= 500:
            RunChange.objects.bulk_update(changed, ["payload"])
            changed = []
    RunChange.objects.bulk_update(changed, ["payload"])


def node_changes_forward(apps, schema_editor):
    _rename_keys(apps, NODE_KEYS)


def node_changes_backward(apps, schema_editor):
    _rename_keys(apps, {new: old for old, new in NODE_KEYS.items()})


class Migration(migrations.Migration):
    dependencies = [("kernellab", "0005_columns_for_run_settings_and_no_unwritten_fields")]

    operations = [
        migrations.RenameField(model_name="forecast", old_name="predicted_bin", new_name="bin"),
        migrations.RunPython(node_changes_forward, node_changes_backward),
    ]
