"""An ended run's GPU budget use (SearchRun.gpu_used) is stored where it changes: when the run ends, when a
measurement ends, when a request is rejected after the end (services.verifications.run_gpu_recount). A page used to
correct it when it read it; it only reads now, so the runs that ended before are recounted once here, by the rule for
a run whose search kept no record of the measurements people asked for (their saved states have none): the
search's saved count, less its requests cancelled with the run or rejected after the end, plus what people measured
after the end (done or failed); a run whose search never saved a step, every measurement that took the GPU. (A run
with the record, should one have ended already, counts instead what people measured that the search never counted.)
The rule is copied here (a migration keeps the one it ran with)."""

from django.db import migrations
from django.db.models import Q

ENDED = ("finished", "cancelled", "failed")
GPU_TAKEN = ("done", "failed")
RECORD = "counted_by_hand"  # services.verifications.HAND_COUNTED_KEY


def recount_ended_runs(apps, schema_editor):
    SearchRun = apps.get_model("kernellab", "SearchRun")
    RunChange = apps.get_model("kernellab", "RunChange")
    Verification = apps.get_model("kernellab", "Verification")
    runs = (SearchRun.objects.filter(status__in=ENDED)
            .values_list("pk", "gpu_used", "updated_at", "driver_state__counters__measurements_requested",
                         f"driver_state__{RECORD}"))
    for run_id, stored, updated_at, counted, record in runs.iterator():
        rows = Verification.objects.filter(node__run_id=run_id)
        taken = rows.filter(state__in=GPU_TAKEN)
        if not isinstance(counted, int) or isinstance(counted, bool):
            used = taken.count()
        else:
            ended = (RunChange.objects.filter(run_id=run_id, kind="run").order_by("-seq")
                     .values_list("created_at", flat=True).first()) or updated_at
            released = rows.exclude(requested_by_policy="").filter(
                Q(state="cancelled") | Q(state="rejected", decided_at__gt=ended)).count()
            if isinstance(record, list):
                outside = taken.filter(requested_by_policy="").exclude(pk__in=record)
            else:
                outside = taken.filter(created_at__gt=ended)
            used = counted - min(counted, released) + outside.count()
        if used != stored:
            SearchRun.objects.filter(pk=run_id).update(gpu_used=used)


class Migration(migrations.Migration):

    dependencies = [
        ('kernellab', '0012_problem_reference_measurements'),
    ]

    operations = [
        migrations.RunPython(recount_ended_runs, migrations.RunPython.noop),
    ]
