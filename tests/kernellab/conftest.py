"""Fixtures shared by the kernellab tests: a problem with recorded measurements, and the recorded saxpy problem."""
from pathlib import Path

import pytest

RECORDED = Path(__file__).resolve().parents[1] / "gpu_runner" / "problems"


@pytest.fixture
def recorded(problem, settings, tmp_path):
    """The problem as a bundled one with recorded H200 measurements (what replay needs)."""
    import gzip

    folder = tmp_path / "problems" / problem.name / "records"
    folder.mkdir(parents=True)
    with gzip.open(folder / "h200.jsonl.gz", "wt") as handle:
        handle.write("")
    settings.KERNELLAB_PROBLEMS_DIR = str(tmp_path / "problems")
    problem.bundled = True
    problem.save()
    return problem


@pytest.fixture
def saxpy(settings, workspace, tmp_path):
    """The bundled saxpy problem with its recorded H200 measurements (the replay answers at once), Celery eager;
    after the test Celery is no longer eager nor propagating (a run may have turned that on)."""
    from kernellab.services.problems import problem_load_bundled

    settings.KERNELLAB_PROBLEMS_DIR = str(RECORDED)
    settings.DATA_DIR = tmp_path
    settings.CELERY_TASK_ALWAYS_EAGER = True
    from kernellab.celery import app

    app.conf.task_always_eager = True
    yield next(p for p in problem_load_bundled(workspace=workspace) if p.name == "saxpy")
    app.conf.task_always_eager = False
    app.conf.task_eager_propagates = False
