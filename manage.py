#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kernellab.settings")
    try:
        from django.core.management import execute_from_command_line

        execute_from_command_line(sys.argv)
    except KeyboardInterrupt:
        # Ctrl-C before a command handles it itself (Django still loading, a migration): a line, not a traceback.
        # Commands that were interrupted mid-work (search, serve) report what they kept before this.
        sys.stderr.write("\nInterrupted.\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
