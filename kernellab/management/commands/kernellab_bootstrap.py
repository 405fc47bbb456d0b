"""Prepare the embedded setup: a demo workspace and account, and the bundled problems."""
from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils.text import slugify

from kernellab.management.database import require_migrated_database
from kernellab.models import Membership, Role, Workspace
from kernellab.services.problems import problem_load_bundled


def credentials_file(username: str) -> Path:
    """Where the password bootstrap made for `username` is kept: one file a user, so that bootstrapping another user
    never shows (or replaces) this one's; the default user's is demo-credentials.txt, as it always was."""
    return Path(settings.DATA_DIR) / f"{username}-credentials.txt"


def credentials_read(path: Path, username: str) -> str | None:
    """The password in `path` when the file is `username`'s (its first line), else None: a file another user's
    bootstrap wrote, or an unreadable one, is rewritten rather than shown as this user's login."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    return lines[1] if len(lines) >= 2 and lines[0] == username and lines[1] else None


def credentials_write(path: Path, username: str, password: str) -> None:
    """The file written whole (readable by its owner only) and then put in place: never a half-written login."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(f"{username}\n{password}\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class Command(BaseCommand):
    help = "Create the demo workspace and account (printed) and load the bundled problems."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="demo")
        parser.add_argument("--workspace", default="Demo")

    def handle(self, *args, username: str, workspace: str, **options):
        username = self._username(username)
        name, slug = self._workspace(workspace)
        require_migrated_database()
        with transaction.atomic():
            ws, loaded, password, new_password = self._bootstrap(username=username, name=name, slug=slug)
        # Written once the transaction has committed: a bootstrap that failed leaves the file as it was.
        if new_password:
            path = credentials_file(username)
            try:
                credentials_write(path, username, password)
            except OSError as exc:
                self.stdout.write(self.style.SUCCESS(f"Demo account: user {username}  password {password}"))
                raise CommandError(f"Cannot write {path}: {exc.strerror or exc}; the password above is not kept "
                                   "anywhere else.") from None
        self.stdout.write(f"Loaded {len(loaded)} bundled problem(s) into workspace {ws.name}.")
        self.stdout.write(self.style.SUCCESS(f"Demo account: user {username}  password {password}"))

    def _username(self, username: str) -> str:
        """The user name as the log-in page would take it (the user model's own field and validator), or a sentence."""
        User = get_user_model()
        field = User._meta.get_field(User.USERNAME_FIELD)
        username = User.normalize_username(username)
        if not username.strip():
            raise CommandError("--username cannot be empty; give a user name such as demo.")
        try:
            field.clean(username, None)
        except ValidationError:
            raise CommandError(f"--username {username!r} is not a valid user name: use letters, digits and "
                               f"@ . + - _ only, at most {field.max_length} characters.") from None
        return username

    def _workspace(self, workspace: str) -> tuple[str, str]:
        """(name, slug): the slug is what the workspace's addresses (/w/<slug>/) are made of."""
        name = workspace.strip()
        slug = slugify(name)
        field = Workspace._meta.get_field("slug")
        if not slug:
            raise CommandError(f"--workspace {workspace!r} has no ASCII letter or digit to make its address "
                               "(/w/<slug>/) from; give a name such as Demo or My Team.")
        if len(name) > Workspace._meta.get_field("name").max_length or len(slug) > field.max_length:
            raise CommandError(f"--workspace is too long: at most {field.max_length} characters.")
        return name, slug

    def _bootstrap(self, *, username: str, name: str, slug: str):
        """(workspace, problems loaded, password, whether the password is new and the file must be written)."""
        ws = Workspace.objects.filter(slug=slug).first() or Workspace.objects.filter(name=name).first()
        if ws is None:
            ws = Workspace.objects.create(slug=slug, name=name)
        elif not re.fullmatch(r"[-a-zA-Z0-9_]+", ws.slug):
            ws.slug = slug  # made by an earlier bootstrap from the name as it was ("my team"): no page could link it
            ws.save(update_fields=["slug"])
        User = get_user_model()
        user = User.objects.filter(**{User.USERNAME_FIELD: username}).first()
        password = credentials_read(credentials_file(username), username) if user is not None else None
        new_password = password is None
        if new_password:
            password = secrets.token_urlsafe(9)
            if user is None:
                user = User.objects.create_user(username=username, password=password, is_staff=True, is_superuser=True)
            else:
                user.set_password(password)
                user.save()
        Membership.objects.update_or_create(workspace=ws, user=user, defaults={"role": Role.ADMIN})
        loaded = problem_load_bundled(workspace=ws)
        return ws, loaded, password, new_password
