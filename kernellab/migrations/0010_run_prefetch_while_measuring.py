from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('kernellab', '0009_run_compile_share_target'),
    ]

    operations = [
        migrations.AddField(
            model_name='searchrun',
            name='prefetch_while_measuring',
            field=models.BooleanField(default=False),
        ),
    ]
