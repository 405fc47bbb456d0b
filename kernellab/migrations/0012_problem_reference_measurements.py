from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('kernellab', '0011_run_conformal_target_retrain_every'),
    ]

    operations = [
        migrations.AddField(
            model_name='problem',
            name='reference_measurements',
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
