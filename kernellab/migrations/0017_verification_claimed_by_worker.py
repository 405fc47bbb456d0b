# Which Celery worker holds a verification's claim, so that a claim whose worker was killed is taken over at once
# (its worker restarting under the same name, or its heartbeat going quiet) instead of after KERNELLAB_STALE_RUNNING_S.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('kernellab', '0016_run_form_sent_once'),
    ]

    operations = [
        migrations.AddField(
            model_name='verification',
            name='claimed_by',
            field=models.CharField(blank=True, db_index=True, default='', max_length=200),
        ),
    ]
