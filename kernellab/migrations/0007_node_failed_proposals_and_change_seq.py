"""Failed proposals move from the driver's saved state onto their nodes (a node panel no longer decodes
the run's whole saved tree), and each node keeps the number of the last change about it."""

from django.db import migrations, models


def copy_failed_proposals(apps, schema_editor):
    from search_engine.saved_state import SavedSearch

    SearchRun = apps.get_model("kernellab", "SearchRun")
    Node = apps.get_model("kernellab", "Node")
    for run_id, state in SearchRun.objects.filter(driver_state__isnull=False).values_list("pk", "driver_state").iterator():
        saved = SavedSearch(state)
        for node_id in saved.node_ids():
            failures = saved.failed_proposals(node_id)
            if failures:
                Node.objects.filter(run_id=run_id, key=str(node_id)).update(failed_proposals=failures[-200:])


class Migration(migrations.Migration):

    dependencies = [
        ('kernellab', '0006_one_name_for_a_forecasts_bin'),
    ]

    operations = [
        migrations.AddField(
            model_name='node',
            name='change_seq',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='node',
            name='failed_proposals',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.RunPython(copy_failed_proposals, migrations.RunPython.noop),
    ]
