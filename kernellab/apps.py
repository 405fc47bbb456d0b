from django.apps import AppConfig


class KernelLabConfig(AppConfig):
    name = "kernellab"
    verbose_name = "KernelLab"
    default_auto_field = "django.db.models.BigAutoField"
