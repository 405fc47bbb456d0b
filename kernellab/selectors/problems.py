"""Where problems live on disk."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings


def bundled_dir() -> Path:
    """Where the bundled problems (and their recorded measurements) live."""
    return Path(settings.KERNELLAB_PROBLEMS_DIR)
