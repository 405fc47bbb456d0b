from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('kernellab', '0008_run_parents_per_step'),
    ]

    operations = [
        migrations.AddField(
            model_name='searchrun',
            name='compile_share_target',
            field=models.FloatField(default=0.0),
        ),
    ]
