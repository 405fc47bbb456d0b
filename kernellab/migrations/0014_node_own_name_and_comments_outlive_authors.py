"""Each node gets its own name, which pages show instead of its Kernel row's: that row is shared by every node
with the same content, in any workspace, and kept the name of whoever stored the content first (a hand-written
kernel's "by <someone>" showed on another workspace's node). The names are copied from each run's saved search,
which holds every node's candidate as its maker named it; the root is its problem's reference.

A comment now outlives its author's account: deleting a user keeps their comments, by a removed user."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

BATCH = 500


def _saved_names(state) -> dict[str, str]:
    """Node key -> the name its candidate had in a run's saved search (both versions of the state keep it)."""
    names = {}
    for raw in ((state or {}).get("tree") or {}).get("nodes") or []:
        if isinstance(raw, dict) and "id" in raw:
            name = (raw.get("candidate") or {}).get("name")
            if isinstance(name, str) and name:
                names[str(raw["id"])] = name
    return names


def name_nodes(apps, schema_editor):
    SearchRun = apps.get_model("kernellab", "SearchRun")
    Node = apps.get_model("kernellab", "Node")
    runs = SearchRun.objects.filter(pk__in=Node.objects.values("run_id")).order_by("pk")
    for run_id, problem_name, state in runs.values_list("pk", "problem__name", "driver_state").iterator(chunk_size=20):
        saved = _saved_names(state)
        named = []
        rows = Node.objects.filter(run_id=run_id, name="").values_list("pk", "key", "origin", "author__username")
        for pk, key, origin, author in rows.iterator():
            if origin == "root":
                name = f"{problem_name} reference"
            else:
                name = saved.get(key) or (f"by {author}" if origin == "human" and author else "")
            if name:
                named.append(Node(pk=pk, name=name[:200]))
        Node.objects.bulk_update(named, ["name"], batch_size=BATCH)


class Migration(migrations.Migration):

    dependencies = [
        ('kernellab', '0013_recount_gpu_used_of_ended_runs'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='node',
            name='name',
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AlterField(
            model_name='comment',
            name='author',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.RunPython(name_nodes, migrations.RunPython.noop),
    ]
