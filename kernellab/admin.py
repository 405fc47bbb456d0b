from django.contrib import admin

from kernellab import models
from kernellab.forms import AdminLoginForm

admin.site.login_form = AdminLoginForm


class MembershipInline(admin.TabularInline):
    model = models.Membership
    extra = 1


@admin.register(models.Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "created_at")
    prepopulated_fields = {"slug": ("name",)}
    inlines = [MembershipInline]


@admin.register(models.Kernel)
class KernelAdmin(admin.ModelAdmin):
    # A Kernel's name is the one its first writer gave (any workspace); a node's own name is Node.name.
    list_display = ("name", "content_hash", "created_at")
    search_fields = ("name", "content_hash")


@admin.register(models.Problem)
class ProblemAdmin(admin.ModelAdmin):
    list_display = ("name", "title", "workspace", "bundled")
    list_filter = ("workspace", "bundled")

    def get_readonly_fields(self, request, obj=None):
        # A stored problem's name, workspace, spec and sources are what its runs, its recorded measurements
        # (<root>/<name>/records/) and the bundled problems' loading are keyed by: renaming one here would cut it off
        # from its recordings and have the next bootstrap add the bundled problem again. Its title and description
        # may change; a different spec is a new problem (upload it).
        if obj is None:
            return ()
        return ("workspace", "name", "spec_toml", "family_source", "reference", "bundled", "reference_measurements",
                "created_by")


@admin.register(models.SearchRun)
class SearchRunAdmin(admin.ModelAdmin):
    list_display = ("pk", "problem", "status", "generator", "surrogate", "gpu_used", "best_speedup", "created_at")
    list_filter = ("status", "generator", "surrogate")
    readonly_fields = ("change_seq", "driver_state")


@admin.register(models.Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ("key", "name", "run", "state", "speedup", "forecast_bin", "forecast_confidence", "is_discovery")
    list_filter = ("state", "is_discovery")
    raw_id_fields = ("parent", "kernel", "run")


@admin.register(models.Forecast)
class ForecastAdmin(admin.ModelAdmin):
    list_display = ("node", "surrogate", "bin", "confidence", "abstained")
    raw_id_fields = ("node",)


@admin.register(models.Measurement)
class MeasurementAdmin(admin.ModelAdmin):
    list_display = ("pk", "problem", "status", "speedup", "backend", "gpu_model", "created_at")
    list_filter = ("status", "backend")
    raw_id_fields = ("kernel",)


@admin.register(models.ExpertNote)
class ExpertNoteAdmin(admin.ModelAdmin):
    list_display = ("expert", "severity", "finding")
    raw_id_fields = ("measurement",)


@admin.register(models.Verification)
class VerificationAdmin(admin.ModelAdmin):
    list_display = ("pk", "node", "state", "queue", "attempts", "approver", "created_at")
    list_filter = ("state", "queue")
    raw_id_fields = ("node", "measurement")


@admin.register(models.Comment)
class CommentAdmin(admin.ModelAdmin):
    list_display = ("node", "author", "created_at")
    raw_id_fields = ("node",)


@admin.register(models.Discovery)
class DiscoveryAdmin(admin.ModelAdmin):
    list_display = ("node", "auto", "marked_by", "parent_speedup", "child_speedup")
    raw_id_fields = ("node",)


@admin.register(models.RunChange)
class RunChangeAdmin(admin.ModelAdmin):
    list_display = ("run", "seq", "kind", "created_at")
    raw_id_fields = ("run",)
