import os

from django.apps import AppConfig

# Pools a forked child inherited from its parent: kept referenced and never used, because closing
# or collecting them would end the parent's PostgreSQL sessions on the sockets both share.
_inherited_pools: list = []


def _forget_inherited_database_pools() -> None:
    """After a fork (Celery's prefork workers), start with no pool: the child opens its own."""
    try:
        from django.db.backends.postgresql.base import DatabaseWrapper
    except ImportError:  # psycopg is not installed: SQLite only, nothing pooled
        return
    pools = getattr(DatabaseWrapper, "_connection_pools", None)
    if not pools:
        return
    _inherited_pools.extend(pools.values())
    pools.clear()
    from django.db import connections

    for wrapper in connections.all(initialized_only=True):
        if wrapper.connection is not None:
            _inherited_pools.append(wrapper.connection)
            wrapper.connection = None


class KernelLabConfig(AppConfig):
    name = "kernellab"
    verbose_name = "KernelLab"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from kernellab import checks  # noqa: F401 - registers the deploy checks
        os.register_at_fork(after_in_child=_forget_inherited_database_pools)
