"""A whole search run through the database port, the Celery tasks (eager) and the replay backend,
on real H200 measurements of a small templated family."""
from pathlib import Path

import pytest

from kernellab.models import ApprovalMode, Measurement, Node, NodeState, RunStatus, Verification, VerificationState
from kernellab.services.runs import run_create
from kernellab.services.search import node_add_human_child, run_advance
from kernellab.services.verifications import verification_approve

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("embedded_setup")]

RECORDED = Path(__file__).resolve().parents[1] / "gpu_runner" / "problems"


def test_an_automatic_run_measures_on_replay_and_reports_a_measured_best(saxpy, members):
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=6, children_per_step=3, max_gpu_per_step=2)
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED, run.status_reason
    assert run.gpu_used <= 6
    measured = Node.objects.filter(run=run, state=NodeState.MEASURED).exclude(origin="root")
    assert measured.exists()
    assert run.best_node is not None and run.best_node.state == NodeState.MEASURED
    assert run.best_speedup == pytest.approx(max(n.speedup for n in measured) if max(n.speedup for n in measured) > 1 else 1.0)
    assert all(m.backend == "replay" for m in Measurement.objects.filter(problem=saxpy))
    seqs = list(run.changes.values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


def test_a_manual_run_waits_for_an_approver_and_continues_after(saxpy, members):
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=4, children_per_step=2, approval_mode=ApprovalMode.MANUAL)
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING
    pending = list(Verification.objects.filter(node__run=run, state=VerificationState.PENDING))
    assert pending and all(v.node.state == NodeState.AWAITING_APPROVAL for v in pending)
    verification_approve(verification=pending[0], user=members["approver"])
    node = Node.objects.get(pk=pending[0].node_id)
    assert node.state in (NodeState.MEASURED, NodeState.FAILED_RUNTIME, NodeState.FAILED_CORRECTNESS)
    assert Verification.objects.get(pk=pending[0].pk).state == VerificationState.DONE


def test_a_resumed_run_continues_from_its_saved_state(saxpy, members):
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=30, children_per_step=2, start=False)
    run.status = RunStatus.RUNNING
    run.save()
    from kernellab.services import search

    search.STEPS_PER_ADVANCE, saved = 1, search.STEPS_PER_ADVANCE
    try:
        from kernellab.celery import app

        app.conf.task_always_eager = False  # advance by hand, one step at a time
        run_advance(run_id=run.pk)
        state = type(run).objects.get(pk=run.pk).driver_state
        nodes_before = Node.objects.filter(run=run).count()
        assert state["step"] >= 1 and nodes_before == len(state["tree"]["nodes"])
        run_advance(run_id=run.pk)
        after = type(run).objects.get(pk=run.pk).driver_state
        assert after["step"] >= state["step"]
        assert Node.objects.filter(run=run).count() == len(after["tree"]["nodes"])
    finally:
        search.STEPS_PER_ADVANCE = saved


def test_a_hand_written_child_is_checked_forecast_and_verified(saxpy, members):
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=3, children_per_step=2)
    root = Node.objects.get(run=run, origin="root")
    source = run.problem.reference.source.replace("a * x[i] + y[i]", "y[i] + a * x[i]")
    child = node_add_human_child(node=root, user=members["engineer"], source=source)
    assert child.origin == "human" and child.parent_id == root.pk
    assert child.forecasts.exists()
    assert Verification.objects.filter(node=child).exists()


def test_a_hand_written_child_that_does_not_compile_is_recorded_as_such(saxpy, members):
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=3, children_per_step=2)
    root = Node.objects.get(run=run, origin="root")
    broken = run.problem.reference.source.replace(";", "", 1)
    child = node_add_human_child(node=root, user=members["engineer"], source=broken)
    assert child.state == NodeState.FAILED_COMPILE
    assert child.kernel.compile_errors and child.kernel.compile_errors[0]["line"]


def test_the_dashboard_shows_the_search_memory(saxpy, members, client):
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=4, children_per_step=2)
    lessons = list(run.lessons.values_list("text", flat=True))
    assert lessons, "a finished run has lessons"
    client.force_login(members["viewer"])
    page = client.get(f"/runs/{run.pk}/dashboard/")
    assert page.status_code == 200
    assert lessons[0].encode()[:40] in page.content.replace(b"&gt;", b">").replace(b"&#x27;", b"'")


def test_the_dashboard_marks_the_time_energy_pareto_front(run, members):
    from kernellab.models import Measurement
    from kernellab.selectors.explorer import run_dashboard
    from kernellab.services.kernels import kernel_get_or_create

    points = {"a": (1.0, 0.5), "b": (2.0, 0.2), "c": (2.5, 0.6)}  # c is slower and costlier than b
    for key, (ms, joules) in points.items():
        kernel = kernel_get_or_create(candidate={"source": f"// {key}", "launch": [], "name": key})
        Node.objects.create(run=run, key=key, kernel=kernel, state=NodeState.MEASURED, speedup=1 / ms)
        Measurement.objects.create(kernel=kernel, problem=run.problem, status="ok", backend="replay", speedup=1 / ms,
                                   candidate_stats={"median_ms": ms}, energy={"j_per_call": joules})
    energy = run_dashboard(run=run)["energy"]
    on_front = dict(zip(energy["key"], energy["pareto"]))
    assert on_front == {"a": True, "b": True, "c": False}


def test_an_energy_capped_objective_penalises_kernels_above_the_cap(run):
    from kernellab.services.search import objective_result

    run.objective = "time-energy-cap"
    run.energy_cap_j = 0.01
    run.save()
    fast_but_hungry = {"status": "ok", "speedup": 2.0, "energy": {"j_per_call": 0.02}}
    within = {"status": "ok", "speedup": 1.5, "energy": {"j_per_call": 0.005}}
    assert objective_result(run, fast_but_hungry)["speedup"] == pytest.approx(2.0 * 0.25)
    assert objective_result(run, within)["speedup"] == 1.5
    unknown = objective_result(run, {"status": "ok", "speedup": 1.2, "energy": None})
    assert unknown["speedup"] == 1.2 and "no energy reading" in unknown["reason"]


def test_a_learned_surrogate_run_stores_each_revised_forecast_beside_the_first(saxpy, members):
    from kernellab.models import Forecast

    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="learned",
                     backend="replay", gpu_budget=8, children_per_step=4, max_gpu_per_step=2)
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED, run.status_reason
    state = run.driver_state
    revised_nodes = [n for n in state["tree"]["nodes"] if n["state"] in ("forecast", "accepted-by-forecast")]
    assert state["counters"].get("forecast_revisions", 0) > 0
    # The newest stored forecast of a node still standing on a forecast is the driver's, revised or not
    # (a revision that moves no probability by 0.05 or more and keeps the bin is not stored again).
    for entry in revised_nodes:
        node = Node.objects.get(run=run, key=str(entry["id"]))
        latest = Forecast.objects.filter(node=node).order_by("-pk").first()
        assert latest.bin == entry["forecast"]["bin"]
        assert latest.probabilities == pytest.approx(entry["forecast"]["probabilities"], abs=0.05)
    assert Forecast.objects.filter(node__run=run).count() > Node.objects.filter(run=run).exclude(origin="root").count() - \
        Node.objects.filter(run=run, state=NodeState.FAILED_COMPILE).count()
    # The recorded-data model is built to mix in the ranking prior at the app's weight (here no other
    # problem has records, so there is nothing to fit it on; tests/search_engine/test_ranker.py fits it).
    from kernellab.services.surrogates import learned_surrogate
    from search_engine.surrogates.ranker import APP_WEIGHT

    model = learned_surrogate(exclude_problem=saxpy.name, gpu=run.target_gpu)
    assert APP_WEIGHT > 0 and model.ranker_weight == APP_WEIGHT and model._ranker is None


def test_a_run_screens_its_screening_width_at_the_root_and_measures_only_a_few(saxpy, members):
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=3, children_per_step=2, max_gpu_per_step=1, max_steps=2,
                     screening_width=16)
    run.refresh_from_db()
    assert run.screening_width == 16
    assert run.driver_state["settings"]["root_children"] == 16  # a resumed run screens alike
    root = Node.objects.get(run=run, origin="root")
    # The reference's expansion proposed and forecast 16 variants; only the budget's 3 were measured.
    assert Node.objects.filter(run=run, parent=root).count() >= 16
    assert Node.objects.filter(run=run, state=NodeState.MEASURED).exclude(origin="root").count() <= 3
    assert run.gpu_used <= 3


@pytest.mark.parametrize("kwargs, message", [
    ({"screening_width": 5000}, r"between 0 \(off\) and 4,096"),
    ({"screening_width": 100, "generator": "llm"}, "every screened candidate is an LLM call"),
])
def test_a_screening_width_out_of_range_is_refused(saxpy, members, kwargs, message, settings):
    from kernellab.config import LLMEndpoint
    from kernellab.services.errors import ServiceError

    # (an LLM endpoint is configured: without one, that is what an LLM generator is refused for first)
    settings.KERNELLAB_LLM = LLMEndpoint(base_url="http://127.0.0.1:9/v1", api_key="k", surrogate_model=None,
                                         generator_model="m")

    with pytest.raises(ServiceError, match=message):
        run_create(problem=saxpy, user=members["engineer"], **{"generator": "template", **kwargs})


@pytest.mark.parametrize("field, value, message", [
    ("parents_per_step", 0, "Parents per step must be between 1 and 16"),
    ("parents_per_step", 17, "Parents per step must be between 1 and 16"),
    ("min_children_per_step", -1, r"minimum children per step must be between 0 \(off\) and 256"),
    ("min_children_per_step", 257, r"minimum children per step must be between 0 \(off\) and 256"),
    ("compile_share_target", 0.01, r"compile share target must be 0 \(off\) or between 0.05 and 0.9"),
    ("compile_share_target", 1.0, r"compile share target must be 0 \(off\) or between 0.05 and 0.9"),
    ("conformal_target", 0.0, "error rate must lie strictly between 0 and 1"),
    ("conformal_target", 1.0, "error rate must lie strictly between 0 and 1"),
    ("retrain_every", 0, "relearn every 1 to 1,000 measurements"),
    ("retrain_every", 1001, "relearn every 1 to 1,000 measurements"),
])
def test_a_step_width_out_of_range_is_refused(saxpy, members, field, value, message):
    from kernellab.services.errors import ServiceError

    with pytest.raises(ServiceError, match=message):
        run_create(problem=saxpy, user=members["engineer"], generator="template", **{field: value})
    assert not type(saxpy).objects.get(pk=saxpy.pk).runs.exists()


@pytest.mark.parametrize("field, default, value", [("parents_per_step", 1, 3), ("min_children_per_step", 0, 16),
                                                   ("compile_share_target", 0.0, 0.25), ("retrain_every", 10, 3)])
def test_a_run_keeps_its_step_width_in_its_settings_and_saved_state(saxpy, members, field, default, value):
    from kernellab.services.run_context import RunContext
    from kernellab.services.runs import run_transition

    plain = run_create(problem=saxpy, user=members["engineer"], generator="template", start=False)
    assert getattr(plain, field) == default and getattr(RunContext(plain).search_settings(), field) == default
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=4, children_per_step=2, start=False, **{field: value})
    assert getattr(run, field) == value and getattr(RunContext(run).search_settings(), field) == value
    run_transition(run=run, user=members["engineer"], action="start")
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED, run.status_reason
    assert run.driver_state["settings"][field] == value  # a resumed run expands alike


def test_a_runs_conformal_target_reaches_its_policy_and_its_saved_state(saxpy, members):
    from kernellab.services.run_context import RunContext
    from kernellab.services.runs import run_transition

    plain = run_create(problem=saxpy, user=members["engineer"], generator="template", start=False)
    assert plain.conformal_target is None and RunContext(plain).search_settings().policy.conformal_target is None
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=4, children_per_step=2, start=False, conformal_target=0.2)
    assert RunContext(run).search_settings().policy.conformal_target == 0.2
    run_transition(run=run, user=members["engineer"], action="start")
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED, run.status_reason
    assert run.driver_state["settings"]["policy"]["conformal_target"] == 0.2


def test_a_run_saved_before_parents_per_step_resumes_with_one_parent_per_step(saxpy, members):
    from search_engine.search_settings import SearchSettings

    from kernellab.celery import app
    from kernellab.services import search

    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=30, children_per_step=2, start=False)
    run.status = RunStatus.RUNNING
    run.save()
    search.STEPS_PER_ADVANCE, saved = 1, search.STEPS_PER_ADVANCE
    try:
        app.conf.task_always_eager = False  # advance by hand, one step at a time
        run_advance(run_id=run.pk)
        state = type(run).objects.get(pk=run.pk).driver_state
        del state["settings"]["parents_per_step"]  # as a run saved before the setting existed
        assert SearchSettings.from_dict(state["settings"]).parents_per_step == 1
        type(run).objects.filter(pk=run.pk).update(driver_state=state)
        run_advance(run_id=run.pk)
        resumed = type(run).objects.get(pk=run.pk)
        assert resumed.status != RunStatus.FAILED, resumed.status_reason
        # The driver loaded the old state and saved it again with the default.
        assert resumed.driver_state["settings"].get("parents_per_step") == 1
    finally:
        search.STEPS_PER_ADVANCE = saved


def test_a_run_compiles_its_next_step_while_its_measurements_wait_for_the_gpu_worker(saxpy, members, monkeypatch):
    from kernellab import tasks

    held: list[int] = []   # verifications sent to the GPU worker's queue, run here only when the test says so
    monkeypatch.setattr(tasks.verification_execute, "apply_async", lambda args, queue=None, **kw: held.append(args[0]))
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=8, children_per_step=3, max_gpu_per_step=2,
                     prefetch_while_measuring=True)
    run.refresh_from_db()
    # the first step's measurements are out; the next step's children are made and compiled meanwhile
    assert held and run.status == RunStatus.WAITING
    prefetched = run.driver_state["prefetched"]
    assert prefetched["created"] and run.driver_state["times"]["prefetched_batches"] == 1
    keys = {str(n) for n in prefetched["created"]}
    assert Node.objects.filter(run=run, key__in=keys).count() == len(keys)
    assert not Node.objects.filter(run=run, key__in=keys, state__in=[NodeState.QUEUED, NodeState.MEASURED]).exists()
    while held:
        for pk in held[:]:
            held.remove(pk)
            tasks.verification_execute.apply(args=[pk])
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED, run.status_reason
    assert run.gpu_used <= 8 and run.driver_state["times"]["prefetched_batches"] >= 2
    # the prefetched children were forecast and decided once their step's results were in
    assert Node.objects.filter(run=run, key__in=keys).exclude(state=NodeState.PROPOSED).count() == len(keys)


def test_a_learned_surrogate_cached_by_an_earlier_version_forecasts_with_todays_run_local_settings(settings, tmp_path):
    from kernellab.services import surrogates
    from search_engine.surrogates.learned import (DEFAULT_CALIBRATED_MOMENTS, DEFAULT_LOCAL_INCUMBENT,
                                                  DEFAULT_LOCAL_MODEL, DEFAULT_LOCAL_NOVELTY, DEFAULT_LOCAL_PRIOR_ROWS,
                                                  DEFAULT_LOCAL_REACH, DEFAULT_MIXTURE,
                                                  DEFAULT_ORDER_PRIOR_ROWS, DEFAULT_POOLED_SPREAD,
                                                  DEFAULT_SPREAD_PRIOR_ROWS, DEFAULT_WEIGH_CALIBRATED,
                                                  LearnedSurrogate)
    from tests.search_engine.test_surrogates import family_rows

    settings.DATA_DIR = tmp_path
    old = LearnedSurrogate().fit(family_rows()[:60])
    del old.__dict__["local_novelty"], old.__dict__["mixture"], old.__dict__["local_reach"]  # saved before them
    old.local_prior_rows = 24.0  # saved with the odds protocol 12 chose and the test took back
    old.order_prior_rows = None  # saved before protocol 15 chose the recalibration
    old.weigh_calibrated = False  # saved before protocol 16 chose the weight against the recalibrated model
    old.spread_prior_rows = None  # saved before protocol 17 chose the rescaled spread
    del old.__dict__["calibrated_moments"], old.__dict__["pooled_spread"]  # saved before protocol 18 chose them
    old.local_incumbent = not DEFAULT_LOCAL_INCUMBENT  # saved with the other value of protocol 19's setting
    old.local_model = "gp" if DEFAULT_LOCAL_MODEL == "forest" else "forest"  # and of protocol 30's
    path = surrogates.learned_cache_path(exclude_problem="nothing", gpu="H200")
    old.save(path)
    loaded = LearnedSurrogate.load(path)
    # loaded as such, it forecasts as it used to
    assert (loaded.local_novelty, loaded.mixture, loaded.local_reach, loaded.local_prior_rows,
            loaded.order_prior_rows, loaded.weigh_calibrated, loaded.spread_prior_rows, loaded.calibrated_moments,
            loaded.pooled_spread) == (0.0, False, None, 24.0, None, False, None, "bins", False)
    surrogates.forget_learned(exclude_problem="nothing", gpu="H200")
    try:
        model = surrogates.learned_surrogate(exclude_problem="nothing", gpu="H200")
        assert model.trained_rows == old.trained_rows  # the cached model, not a new one
        assert model.local_novelty == DEFAULT_LOCAL_NOVELTY > 0
        assert model.mixture is DEFAULT_MIXTURE is True
        assert model.local_reach == DEFAULT_LOCAL_REACH == 1.0
        assert model.local_prior_rows == DEFAULT_LOCAL_PRIOR_ROWS == 8.0
        assert model.order_prior_rows == DEFAULT_ORDER_PRIOR_ROWS == 8.0
        assert model.weigh_calibrated is DEFAULT_WEIGH_CALIBRATED is True
        assert model.spread_prior_rows == DEFAULT_SPREAD_PRIOR_ROWS == 3.0
        assert model.calibrated_moments == DEFAULT_CALIBRATED_MOMENTS == "level"
        assert model.pooled_spread is DEFAULT_POOLED_SPREAD is True
        assert model.local_incumbent is DEFAULT_LOCAL_INCUMBENT
        assert model.local_model == DEFAULT_LOCAL_MODEL
    finally:
        surrogates.forget_learned(exclude_problem="nothing", gpu="H200")


def test_a_run_of_a_bundled_problem_forecasts_with_its_recorded_references_compiler_facts(saxpy, members):
    """The learned surrogate's rows of a recording carry its reference record's compiler facts; the app never compiles a
    bundled problem's reference, so a run read none and forecast every candidate-vs-reference difference as unknown."""
    import gzip
    import json

    from kernellab.services.run_context import RunContext
    from kernellab.services.search import _load_driver
    from kernellab.services.search_port import DatabasePort

    with gzip.open(RECORDED / "saxpy" / "records" / "h200.jsonl.gz", "rt") as handle:
        recorded = next(r for r in map(json.loads, handle) if r.get("variant") == "reference")["compiler"]
    assert not saxpy.reference.compiler_facts and recorded["registers"] == 12
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=4, children_per_step=2, start=False)
    context = RunContext(run)
    assert context.reference_compiler_facts == recorded
    driver = _load_driver(run, DatabasePort(context))
    assert driver.forecast_request(next(iter(driver.tree.nodes))).reference_compiler_facts == recorded
    # and the reference time is the recording's one, which every training row of it carries
    from kernellab.datasets import recorded_rows

    assert {r["reference_ms"] for r in recorded_rows(RECORDED / "saxpy")} == {context.reference_ms}


def test_a_runs_driver_reads_the_references_recorded_profile_and_keeps_it_in_its_saved_state(settings, workspace,
                                                                                             members, tmp_path):
    from kernellab.services.problems import problem_load_bundled
    from kernellab.services.run_context import RunContext
    from kernellab.services.search import _load_driver
    from search_engine.driver import SearchDriver
    from tests.samples import problem_with_reference_profile

    problems = tmp_path / "problems"
    profile = {"l1tex__t_sector_hit_rate.pct": 33.0, "dram__bytes_read.sum": 2.0e6}
    # (a counter no feature reads is left out of what the run keeps)
    problem_with_reference_profile(RECORDED / "saxpy", problems, {**profile, "sm__cycles_elapsed.avg": 9.0})
    settings.KERNELLAB_PROBLEMS_DIR = str(problems)
    settings.DATA_DIR = tmp_path
    saxpy = next(p for p in problem_load_bundled(workspace=workspace) if p.name == "saxpy")
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=4, children_per_step=2, start=False)
    context = RunContext(run)
    assert context.reference_profile == profile
    from kernellab.services.search_port import DatabasePort

    port = DatabasePort(context)
    driver = _load_driver(run, port)
    assert driver.reference_profile == profile
    node = next(iter(driver.tree.nodes))
    assert driver.forecast_request(node).reference_profile == profile
    again = SearchDriver.from_state(driver.state_dict(), port=port, generator=driver.generator,
                                    surrogate=driver.surrogate)
    assert again.reference_profile == profile


def test_the_learned_surrogate_reads_the_references_counters_only_in_a_run_that_has_them(settings, workspace, members,
                                                                                      tmp_path, monkeypatch):
    """Every recorded family the model learns from carries its reference's counters; a run whose reference was never
    profiled (an uploaded problem) would hand it values it never saw, so it gets the model trained without them."""
    import gzip
    import json

    from kernellab.services import surrogates
    from kernellab.services.problems import problem_load_bundled
    from search_engine.surrogates.learned import DEFAULT_REFERENCE_PROFILE
    from tests.samples import problem_with_reference_profile

    settings.DATA_DIR = tmp_path
    problems = tmp_path / "problems"
    records = problem_with_reference_profile(RECORDED / "saxpy", problems, {"l1tex__t_sector_hit_rate.pct": 33.0})
    settings.KERNELLAB_PROBLEMS_DIR = str(problems)
    saxpy = next(p for p in problem_load_bundled(workspace=workspace) if p.name == "saxpy")
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="learned",
                     backend="replay", gpu_budget=4, children_per_step=2, start=False)
    read = {}
    try:
        read["profiled"] = surrogates.surrogate_for_run(run).reference_profile
        assert surrogates.surrogate_for_run(run, reference_profiled=True).reference_profile == read["profiled"]
        # the same problem, its reference record without counters
        with gzip.open(problems / "saxpy" / "records" / "h200.jsonl.gz", "wt") as handle:
            handle.write("".join(json.dumps({**r, "profiler": {}}) + "\n" for r in records))
        read["not profiled"] = surrogates.surrogate_for_run(run).reference_profile
        assert surrogates.surrogate_for_run(run, reference_profiled=False).reference_profile is False
    finally:
        surrogates.forget_learned(exclude_problem="saxpy", gpu=run.target_gpu)
    assert read == {"profiled": DEFAULT_REFERENCE_PROFILE, "not profiled": False}
    paths = {surrogates.learned_cache_path(exclude_problem="saxpy", gpu="h200", reference_profile=flag)
             for flag in (True, False)}
    assert len(paths) == 2
    # all eight counters and the four portable ones are two feature sets, cached in two files
    from search_engine.surrogates.learned import DEFAULT_REFERENCE_COUNTERS

    assert ("refprofile-portable" in " ".join(p.name for p in paths)) is (DEFAULT_REFERENCE_COUNTERS == "portable")
    other = "all" if DEFAULT_REFERENCE_COUNTERS == "portable" else "portable"
    monkeypatch.setattr("search_engine.surrogates.learned.DEFAULT_REFERENCE_COUNTERS", other)
    assert surrogates.learned_cache_path(exclude_problem="saxpy", gpu="h200", reference_profile=True) not in paths
    assert surrogates.learned_cache_path(exclude_problem="saxpy", gpu="h200", reference_profile=False) in paths
