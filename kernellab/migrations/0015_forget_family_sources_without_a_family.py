"""Problems uploaded with a family.cu but no [family] table in problem.toml kept the file (the upload now refuses
such a pair). The runner never read it, but every check that asks "does this problem have a family?" reads the stored
file (the Knobs page, the run form's template generator, `./kl search --auto-knobs`), so such a problem could never get
knobs. The file is cleared where the spec has no [family]."""
import tomllib

from django.db import migrations


def forget(apps, schema_editor):
    Problem = apps.get_model("kernellab", "Problem")
    for problem in Problem.objects.exclude(family_source="").only("pk", "spec_toml"):
        try:
            has_family = "family" in tomllib.loads(problem.spec_toml)
        except tomllib.TOMLDecodeError:
            continue  # a spec this code cannot read: left as it is
        if not has_family:
            Problem.objects.filter(pk=problem.pk).update(family_source="")


class Migration(migrations.Migration):
    dependencies = [("kernellab", "0014_node_own_name_and_comments_outlive_authors")]
    operations = [migrations.RunPython(forget, migrations.RunPython.noop)]
