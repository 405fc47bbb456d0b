"""Operations the browser tests (and the explorer benchmarks) run inside the server's database.

They run in a separate process (feeder.py) configured like the server, so that the test process
never opens the server's database itself. Each takes and returns JSON-able values."""
from __future__ import annotations

import time

PASSWORDS = {role: f"pw-{role}-browser" for role in ("viewer", "engineer", "approver", "admin")}

from tests.samples import SIMPLE_REFERENCE, SIMPLE_SPEC

LAUNCH = [{"kernel": "scale", "grid": ["ceil_div(N, 256)"], "block": [256], "shared": "0", "args": ["x", "y", "n"]}]


def setup() -> dict:
    from django.contrib.auth import get_user_model

    from kernellab.models import Membership, Problem, Workspace
    from kernellab.services.kernels import kernel_get_or_create

    workspace, _ = Workspace.objects.get_or_create(slug="team", defaults={"name": "Team"})
    User = get_user_model()
    for role, password in PASSWORDS.items():
        user = User.objects.filter(username=role).first() or User.objects.create_user(username=role, password=password)
        Membership.objects.get_or_create(workspace=workspace, user=user, defaults={"role": role})
    reference = kernel_get_or_create(candidate={"source": SIMPLE_REFERENCE, "launch": LAUNCH, "name": "vector_scale reference"})
    problem, _ = Problem.objects.get_or_create(
        workspace=workspace, name="vector_scale",
        defaults={"title": "Vector scale", "spec_toml": SIMPLE_SPEC, "reference": reference, "description": "y = 2x over N floats"},
    )
    return {"workspace": workspace.slug, "problem": problem.pk}


def create_run(*, approval_mode: str = "auto", name: str = "", with_root: bool = True, backend: str = "auto") -> int:
    from django.contrib.auth import get_user_model

    from kernellab.models import Node, NodeState, Problem
    from kernellab.services.changes import node_changed
    from kernellab.services.runs import run_create

    problem = Problem.objects.get(name="vector_scale")
    user = get_user_model().objects.get(username="engineer")
    run = run_create(problem=problem, user=user, generator="transform", approval_mode=approval_mode, name=name, start=False,
                     backend=backend)
    if with_root:
        root = Node.objects.create(run=run, key="n0", kernel=problem.reference, origin="root", state=NodeState.MEASURED, speedup=1.0, value=1.0)
        node_changed(node=root)
    return run.pk


def _variant_source(key: str, factor: str) -> str:
    return SIMPLE_REFERENCE.replace("2.0f * x[i]", f"2.0f * x[i] * {factor}f /* {key} */")


def add_node(*, run: int, key: str, parent: str, state: str = "forecast", speedup: float | None = None, bin: int | None = None,
             confidence: float | None = None, probabilities: list | None = None, reasoning: str = "", rationale: str = "",
             name: str = "", factor: str = "1.0") -> float:
    """A generator's candidate with its forecast, recorded like the search does; returns the commit time."""
    from django.db import transaction

    from kernellab.models import Forecast, Node, SearchRun
    from kernellab.services.changes import node_changed
    from kernellab.services.kernels import kernel_get_or_create

    with transaction.atomic():
        search_run = SearchRun.objects.get(pk=run)
        parent_node = Node.objects.get(run=search_run, key=parent)
        kernel = kernel_get_or_create(candidate={"source": _variant_source(key, factor), "launch": LAUNCH, "name": name or f"variant {key}"})
        node = Node.objects.create(
            run=search_run, key=key, parent=parent_node, kernel=kernel, name=name or f"variant {key}",
            depth=parent_node.depth + 1, state=state, speedup=speedup,
            forecast_bin=bin, forecast_confidence=confidence, rationale=rationale,
        )
        if probabilities:
            Forecast.objects.create(node=node, surrogate="learned@test", probabilities=probabilities,
                                    bin=bin, confidence=confidence, reasoning=reasoning)
        node_changed(node=node)
    return time.time()


def add_nodes(*, run: int, nodes: list[dict]) -> float:
    """Many nodes in one transaction (to build a large tree quickly)."""
    from django.db import transaction

    from kernellab.models import Kernel, Node, SearchRun
    from kernellab.services.changes import change_record, node_payload

    search_run = SearchRun.objects.get(pk=run)
    reference = search_run.problem.reference
    with transaction.atomic():
        by_key = {n.key: n for n in Node.objects.filter(run=search_run)}
        for spec in nodes:
            parent = by_key[spec["parent"]]
            node = Node.objects.create(
                run=search_run, key=spec["key"], parent=parent, kernel=reference if spec.get("share_kernel", False) else None,
                depth=parent.depth + 1, state=spec.get("state", "forecast"), speedup=spec.get("speedup"),
                forecast_bin=spec.get("bin"), forecast_confidence=spec.get("confidence"),
            )
            node.parent = parent
            by_key[node.key] = node
            change_record(run=search_run, kind="node", payload=node_payload(node))
    return time.time()


def set_node(*, run: int, key: str, **fields) -> float:
    from django.db import transaction

    from kernellab.models import Node
    from kernellab.services.changes import node_changed

    with transaction.atomic():
        node = Node.objects.select_related("run", "parent", "kernel").get(run_id=run, key=key)
        for name, value in fields.items():
            setattr(node, name, value)
        node.save()
        node_changed(node=node)
    return time.time()


def add_measurement(*, run: int, key: str, speedup: float, notes: list[dict] | None = None) -> int:
    from kernellab.models import Node
    from kernellab.services.verifications import measurement_store

    node = Node.objects.select_related("run__problem", "kernel").get(run_id=run, key=key)
    result = _result(speedup)
    return measurement_store(node=node, result=result, expert_notes=notes or []).pk


def _result(speedup: float) -> dict:
    return {
        "status": "ok", "speedup": speedup, "backend": "replay", "gpu_model": "h200", "seed": 7,
        "reference": {"median_ms": 0.2, "iqr_ms": 0.001, "n": 40},
        "candidate": {"median_ms": round(0.2 / speedup, 5), "iqr_ms": 0.0007, "n": 40},
        "max_abs_error": 0.0, "max_rel_error": 0.0, "energy": {"j_per_call": 0.0021, "mean_w": 395.0},
        "compiler": {"registers": 16, "shared_bytes": 0, "spill_stores": 0, "spill_loads": 0},
    }


def request_verification(*, run: int, key: str) -> int:
    from kernellab.models import Node
    from kernellab.services.verifications import verification_request

    node = Node.objects.select_related("run__problem__workspace", "kernel").get(run_id=run, key=key)
    return verification_request(node=node, policy_reason="forecast below the confidence threshold").pk


def finish_verification(*, run: int, key: str, speedup: float) -> str:
    """Do what the GPU worker does: claim the queued verification, then store its result."""
    from kernellab.models import Verification
    from kernellab.services.verifications import new_claim_token, verification_claim, verification_finish

    row = Verification.objects.filter(node__run_id=run, node__key=key).order_by("-pk").first()
    claimed = row if row.state == "running" else verification_claim(verification_id=row.pk, token=new_claim_token())
    if claimed is None:
        return f"verification {row.pk} could not be claimed (state {row.state})"
    verification_finish(verification=claimed, result=_result(speedup), expert_notes=[
        {"expert": "memory", "severity": "low", "finding": "Loads are already coalesced.", "evidence": {"gld_efficiency": 100}, "advice": "Look elsewhere."}
    ])
    return "done"


def node_state(*, run: int, key: str) -> dict:
    from kernellab.models import Node

    node = Node.objects.get(run_id=run, key=key)
    return {"state": node.state, "speedup": node.speedup, "discovery": node.is_discovery}


def counts() -> dict:
    from kernellab.models import Comment, Discovery, Kernel, Problem, SearchRun

    return {
        "problems": Problem.objects.count(), "kernels": Kernel.objects.count(), "runs": SearchRun.objects.count(),
        "comments": list(Comment.objects.values_list("body", flat=True)),
        "discoveries": list(Discovery.objects.values_list("note", flat=True)),
    }


def run_status(*, run: int) -> str:
    from kernellab.models import SearchRun

    return SearchRun.objects.get(pk=run).status


def last_run() -> int | None:
    from kernellab.models import SearchRun

    return SearchRun.objects.order_by("-pk").values_list("pk", flat=True).first()


def change_seq(*, run: int) -> int:
    from kernellab.models import SearchRun

    return SearchRun.objects.get(pk=run).change_seq


def claim_verification(*, run: int, key: str) -> str:
    """The worker takes the queued verification (the node turns to measuring)."""
    from kernellab.models import Verification
    from kernellab.services.verifications import new_claim_token, verification_claim

    row = Verification.objects.filter(node__run_id=run, node__key=key).order_by("-pk").first()
    claimed = verification_claim(verification_id=row.pk, token=new_claim_token())
    return claimed.state if claimed else f"not claimed ({row.state})"


def heartbeat_verification(*, run: int, key: str, progress: str) -> None:
    from kernellab.models import Verification
    from kernellab.services.verifications import verification_heartbeat

    row = Verification.objects.select_related("node__run").filter(node__run_id=run, node__key=key).order_by("-pk").first()
    verification_heartbeat(verification=row, progress=progress)


def session_cookie(*, username: str) -> str:
    """A logged-in session for a websocket client that is not a browser."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    user = get_user_model().objects.get(username=username)
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return session.session_key


def add_node_timed(*, run: int, key: str, parent: str, bin: int = 6, confidence: float = 0.7) -> dict:
    """One forecast node, as the search records it; returns the change's seq and the moment its
    transaction committed (taken before the change is pushed, so delays are not understated)."""
    from django.db import transaction

    from kernellab.models import Node, SearchRun
    from kernellab.services.changes import change_record, node_payload

    committed: list[float] = []
    with transaction.atomic():
        transaction.on_commit(lambda: committed.append(time.time()))
        search_run = SearchRun.objects.get(pk=run)
        parent_node = Node.objects.get(run=search_run, key=parent)
        node = Node.objects.create(run=search_run, key=key, parent=parent_node, depth=parent_node.depth + 1, state="forecast",
                                   forecast_bin=bin, forecast_confidence=confidence)
        change = change_record(run=search_run, kind="node", payload=node_payload(node))
    return {"seq": change.seq, "committed": committed[0]}


def load_bundled() -> list[dict]:
    """The bundled problems, loaded as `kernellab_bootstrap` loads them."""
    from kernellab.models import Workspace
    from kernellab.services.problems import problem_load_bundled

    problem_load_bundled(workspace=Workspace.objects.get(slug="team"))
    from kernellab.models import Problem

    return list(Problem.objects.filter(bundled=True).values("pk", "name"))


def run_transition(*, run: int, action: str, username: str = "engineer") -> str:
    from django.contrib.auth import get_user_model

    from kernellab.models import SearchRun
    from kernellab.services.runs import run_transition as transition

    user = get_user_model().objects.get(username=username)
    return transition(run=SearchRun.objects.get(pk=run), user=user, action=action).status


def comment(*, run: int, key: str, body: str, username: str = "approver") -> int:
    from django.contrib.auth import get_user_model

    from kernellab.models import Node
    from kernellab.services.comments import comment_create

    user = get_user_model().objects.get(username=username)
    node = Node.objects.select_related("run__problem__workspace").get(run_id=run, key=key)
    return comment_create(node=node, author=user, body=body).pk


def worker_heartbeat(*, hostname: str, queues: list[str]) -> None:
    """A GPU worker says it is alive, as a real one does every 15 s."""
    from kernellab.services.workers import worker_heartbeat_record

    worker_heartbeat_record(hostname=hostname, queues=queues)


def worker_forget(*, hostname: str) -> None:
    from kernellab.services.workers import worker_heartbeat_forget

    worker_heartbeat_forget(hostname=hostname)


def queued_verifications(*, run: int) -> list[str]:
    from kernellab.models import Verification

    return sorted(Verification.objects.filter(node__run_id=run).values_list("state", flat=True))


def start_search(*, problem: str, generator: str = "llm", surrogate: str = "roofline", backend: str = "replay",
                 gpu_budget: int = 6, children_per_step: int = 2) -> int:
    """A started run on a bundled problem: its first advance goes to the worker at once."""
    from django.contrib.auth import get_user_model

    from kernellab.models import Problem
    from kernellab.services.runs import run_create

    run = run_create(problem=Problem.objects.get(name=problem), user=get_user_model().objects.get(username="engineer"),
                     generator=generator, surrogate=surrogate, backend=backend, gpu_budget=gpu_budget,
                     children_per_step=children_per_step, name="first steps")
    return run.pk
