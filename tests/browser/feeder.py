"""A helper process for browser tests and benchmarks: reads one JSON call per line from stdin,
runs the named function of tests.browser.world in the server's database, and answers one line."""
from __future__ import annotations

import json
import os
import sys
import traceback


def main() -> None:
    sys.path.insert(0, os.getcwd())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kernellab.settings")
    import django

    django.setup()
    from tests.browser import world

    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        call = json.loads(line)
        try:
            result = getattr(world, call["fn"])(**call.get("kwargs", {}))
            out.write(json.dumps({"ok": result}) + "\n")
        except Exception as exc:
            out.write(json.dumps({"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
