"""Prepare the embedded setup: a demo workspace and account, and the bundled problems."""
from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from kernellab.management.database import require_migrated_database
from kernellab.models import Membership, Role, Workspace
from kernellab.services.problems import problem_load_bundled


class Command(BaseCommand):
    help = "Create the demo workspace and account (printed) and load the bundled problems."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="demo")
        parser.add_argument("--workspace", default="Demo")

    def handle(self, *args, username: str, workspace: str, **options):
        require_migrated_database()
        with transaction.atomic():
            self._bootstrap(username=username, workspace=workspace)

    def _bootstrap(self, *, username: str, workspace: str) -> None:
        ws, _ = Workspace.objects.get_or_create(slug=workspace.lower(), defaults={"name": workspace})
        credentials = settings.DATA_DIR / "demo-credentials.txt"
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        if user is None or not credentials.exists():
            password = secrets.token_urlsafe(9)
            if user is None:
                user = User.objects.create_user(username=username, password=password, is_staff=True, is_superuser=True)
            else:
                user.set_password(password)
                user.save()
            credentials.write_text(f"{username}\n{password}\n")
            credentials.chmod(0o600)
        Membership.objects.update_or_create(workspace=ws, user=user, defaults={"role": Role.ADMIN})
        loaded = problem_load_bundled(workspace=ws)
        name, password = credentials.read_text().split()
        self.stdout.write(f"Loaded {len(loaded)} bundled problem(s) into workspace {ws.name}.")
        self.stdout.write(self.style.SUCCESS(f"Demo account: user {name}  password {password}"))
