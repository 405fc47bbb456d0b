"""Shared fixtures: a workspace with one member per role, an outsider, a small problem and a run;
the llama.cpp server (Gemma 3 270M) that the llm-marked tests talk to, started once per session."""
from __future__ import annotations

import pytest

from tests.samples import SIMPLE_REFERENCE, SIMPLE_SPEC


@pytest.fixture(autouse=True)
def _fast_password_hashing(request):
    # Each fixture user costs a full PBKDF2 hash otherwise (seconds per test on two cores). Where
    # pytest-django is absent (a GPU machine running only tests/gpu_runner) there is nothing to hash.
    if not request.config.pluginmanager.hasplugin("django"):
        return
    request.getfixturevalue("settings").PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def embedded_setup(settings):
    """The embedded setup (no Redis: a run's "auto" backend means replay without a GPU), whatever
    services the machine running the tests offers; for tests written about that setup."""
    settings.KERNELLAB_REDIS_URL = ""


@pytest.fixture
def data_dir(settings, tmp_path):
    """settings.DATA_DIR as a fresh, empty folder "data" in the test's tmp_path."""
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    return settings.DATA_DIR


@pytest.fixture
def workspace(db):
    from kernellab.models import Workspace

    return Workspace.objects.create(name="Team", slug="team")


@pytest.fixture
def members(workspace, django_user_model):
    from kernellab.models import Membership, Role

    users = {}
    for role in Role.values:
        user = django_user_model.objects.create_user(username=role, password="pw-" + role + "-123")
        Membership.objects.create(workspace=workspace, user=user, role=role)
        users[role] = user
    users["outsider"] = django_user_model.objects.create_user(username="outsider", password="pw-outsider-123")
    return users


@pytest.fixture
def problem(workspace):
    from kernellab.models import Problem
    from kernellab.services.kernels import kernel_get_or_create

    reference = kernel_get_or_create(
        candidate={
            "source": SIMPLE_REFERENCE,
            "launch": [{"kernel": "scale", "grid": ["ceil_div(N, 256)"], "block": [256], "shared": "0", "args": ["x", "y", "n"]}],
            "name": "vector_scale reference",
        }
    )
    return Problem.objects.create(
        workspace=workspace, name="vector_scale", title="Vector scale", spec_toml=SIMPLE_SPEC, reference=reference
    )


@pytest.fixture
def run(problem, members):
    from kernellab.services.runs import run_create

    return run_create(problem=problem, user=members["engineer"], generator="transform", start=False)


@pytest.fixture
def node(run):
    from kernellab.models import Node, NodeState
    from kernellab.services.kernels import kernel_get_or_create

    kernel = kernel_get_or_create(
        candidate={"source": SIMPLE_REFERENCE.replace("2.0f", "2.0f + 0.0f"), "launch": run.problem.reference.launch, "name": "child"}
    )
    root = Node.objects.create(run=run, key="n0", kernel=run.problem.reference, origin="root", state=NodeState.MEASURED, speedup=1.0)
    return Node.objects.create(run=run, key="n1", parent=root, kernel=kernel, depth=1, state=NodeState.FORECAST)


@pytest.fixture(scope="session")
def llm_server(tmp_path_factory):
    """base_url and model of a llama.cpp server running Gemma 3 270M on a free local port."""
    from tests.search_engine.llm_server import MODEL_ALIAS, start_server

    process, base_url, log = start_server(tmp_path_factory.mktemp("llm"))
    yield {"base_url": base_url, "model": MODEL_ALIAS}
    process.terminate()
    try:
        process.wait(timeout=20)
    except Exception:
        process.kill()
    log.close()
