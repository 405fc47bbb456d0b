from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('kernellab', '0010_run_prefetch_while_measuring'),
    ]

    operations = [
        migrations.AddField(
            model_name='searchrun',
            name='conformal_target',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='searchrun',
            name='retrain_every',
            field=models.PositiveIntegerField(default=10),
        ),
    ]
