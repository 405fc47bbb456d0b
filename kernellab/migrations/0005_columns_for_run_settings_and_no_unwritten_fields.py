"""A run's screening width and LLM call budget get columns (they were keys of SearchRun.extra), and
fields nothing ever wrote go: Node.visits and Node.prior (the search keeps its visit counts and priors
in its saved state), Forecast.surrogate_version (Forecast.surrogate is already name@version) and
Forecast.against (every forecast is against the reference)."""
from django.db import migrations, models


def extra_to_columns(apps, schema_editor):
    SearchRun = apps.get_model("kernellab", "SearchRun")
    for run in SearchRun.objects.exclude(extra={}).only("pk", "extra").iterator():
        extra = run.extra or {}
        SearchRun.objects.filter(pk=run.pk).update(
            screening_width=int(extra.get("root_children") or 0),
            llm_call_budget=int(extra["llm_call_budget"]) if extra.get("llm_call_budget") else None,
            llm_calls=int(extra.get("llm_calls") or 0),
        )


def columns_to_extra(apps, schema_editor):
    SearchRun = apps.get_model("kernellab", "SearchRun")
    for run in SearchRun.objects.only("pk", "screening_width", "llm_call_budget", "llm_calls").iterator():
        extra = {}
        if run.screening_width:
            extra["root_children"] = run.screening_width
        if run.llm_call_budget:
            extra.update(llm_call_budget=run.llm_call_budget, llm_calls=run.llm_calls)
        if extra:
            SearchRun.objects.filter(pk=run.pk).update(extra=extra)


class Migration(migrations.Migration):
    dependencies = [("kernellab", "0004_worker_heartbeats_and_honest_states")]

    operations = [
        migrations.AddField(model_name="searchrun", name="screening_width", field=models.PositiveIntegerField(default=0)),
        migrations.AddField(model_name="searchrun", name="llm_call_budget",
                            field=models.PositiveIntegerField(blank=True, null=True)),
        migrations.AddField(model_name="searchrun", name="llm_calls", field=models.PositiveIntegerField(default=0)),
        migrations.RunPython(extra_to_columns, columns_to_extra),
        migrations.RemoveField(model_name="searchrun", name="extra"),
        migrations.RemoveField(model_name="node", name="visits"),
        migrations.RemoveField(model_name="node", name="prior"),
        migrations.RemoveField(model_name="forecast", name="surrogate_version"),
        migrations.RemoveField(model_name="forecast", name="against"),
    ]
