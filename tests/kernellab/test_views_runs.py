"""Run pages: the creation form with working defaults, pause/resume/cancel, and the dashboard."""
import pytest
from django.urls import reverse

from kernellab.models import Forecast, Measurement, Node, NodeState, SearchRun, Verification, VerificationState

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def embedded(settings):
    """The embedded setup these pages are written for (no Redis: "auto" means replay without a GPU),
    whatever services the machine running the tests offers."""
    settings.KERNELLAB_REDIS_URL = ""


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    """Starting a run enqueues the search task; these tests look at the rows, not at a worker."""
    sent = []
    monkeypatch.setattr("kernellab.tasks.search_run_advance.apply_async", lambda *a, **k: sent.append((a, k)))
    monkeypatch.setattr("kernellab.tasks.verification_execute.apply_async", lambda *a, **k: sent.append((a, k)))
    return sent


def _defaults(form) -> dict:
    data = {name: field.initial for name, field in form.fields.items() if field.initial is not None}
    data["start"] = "on"
    return data


@pytest.mark.parametrize("gpu", ["0", "1"])
def test_the_form_offers_defaults_that_create_a_run(client, members, recorded, django_capture_on_commit_callbacks, monkeypatch, gpu):
    from kernellab.services.workers import worker_heartbeat_record

    monkeypatch.setenv("KERNELLAB_GPU", gpu)  # gpu_runner.gpu_present() honours it
    if gpu == "1":
        worker_heartbeat_record(hostname="gpu0@box", queues=["gpu.h200"])
    client.force_login(members["engineer"])
    page = client.get(reverse("run-new", args=[recorded.pk]))
    data = _defaults(page.context["form"])
    # the problem has no knobs: the recipes, with the step settings measured on own kernels
    assert data["generator"] == "recipes" and data["surrogate"] == "roofline"
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("run-new", args=[recorded.pk]), data)
    run = SearchRun.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("run-explorer", args=[run.pk])
    # Without a GPU here, only replay has a worker (the local one) to answer verifications.
    assert run.status == "running" and run.generator == "recipes" and run.backend == ("auto" if gpu == "1" else "replay")
    assert (run.children_per_step, run.screening_width, run.parents_per_step, run.min_children_per_step,
            run.max_gpu_per_step, run.compile_share_target) == (16, 32, 4, 16, 8, 0.25)


def test_a_problem_with_knobs_starts_from_the_search_the_benchmark_measures(client, members, recorded, monkeypatch):
    from kernellab.models import Problem

    monkeypatch.setenv("KERNELLAB_GPU", "0")
    Problem.objects.filter(pk=recorded.pk).update(family_source="#define BLOCK 256\n")
    client.force_login(members["engineer"])
    page = client.get(reverse("run-new", args=[recorded.pk]))
    initial = {name: field.initial for name, field in page.context["form"].fields.items()}
    assert initial["generator"] == "template" and initial["surrogate"] == "learned"
    # search_engine.search_settings.TEMPLATE_SEARCH: benchmarks/search_bench.py's defaults
    assert (initial["confidence_threshold"], initial["conformal_target"], initial["children_per_step"],
            initial["screening_width"], initial["max_gpu_per_step"], initial["retrain_every"]) == (0.5, 0.2, 16, 256, 2, 5)
    assert (initial["parents_per_step"], initial["min_children_per_step"], initial["compile_share_target"]) == (1, 0, 0.0)
    assert client.post(reverse("run-new", args=[recorded.pk]), _defaults(page.context["form"])).status_code == 302
    run = SearchRun.objects.get()
    assert (run.confidence_threshold, run.conformal_target, run.retrain_every) == (0.5, 0.2, 5)
    explorer = client.get(reverse("run-explorer", args=[run.pk])).content.decode()
    assert "then at the confidence whose trusted forecasts erred at most 20% of the time on this run" in explorer
    assert "surrogate relearns every 5" in explorer


def test_a_run_of_a_problem_with_knobs_searches_with_the_settings_the_benchmark_measured(members, recorded):
    """The run a user starts from the form's defaults builds the SearchSettings that search_bench.py's surrogate PUCT
    runs with by default: the figures of record describe the app's search, not another one."""
    from pathlib import Path

    from kernellab.models import Problem
    from kernellab.services.run_context import RunContext
    from kernellab.services.runs import run_create, run_defaults
    from tests.scripts import loaded_script

    Problem.objects.filter(pk=recorded.pk).update(family_source="#define BLOCK 256\n")
    problem = Problem.objects.get(pk=recorded.pk)
    defaults = run_defaults(problem=problem)
    run = run_create(problem=problem, user=members["engineer"], start=False, backend="replay", gpu_budget=40,
                     screening_width=256, **defaults)  # the form's screening width for a problem with knobs
    app = RunContext(run).search_settings().to_dict()
    with loaded_script(Path(__file__).resolve().parents[2] / "benchmarks" / "search_bench.py", "bench_settings") as bench:
        args = bench.build_parser().parse_args([])
        measured = bench.search_settings(args, False, seed=run.seed, root_children=args.root_children,
                                         gpu_budget=run.gpu_budget).to_dict()
    # The step-width settings are the app's own (compiling in batches on a real machine; the benchmark's records
    # answer at once); at their defaults here, they change nothing in what a step decides.
    assert app == measured


# field, its initial value for a kernel without knobs (runs.OWN_KERNEL_DEFAULTS), what a page from before the
# field stores (run_create's default), its label, a value to store, one past its maximum and that maximum
STEP_FIELDS = [("parents_per_step", 4, 1, "Parents expanded per step", 2, 17, 16),
               ("min_children_per_step", 16, 0, "Children per step, at least", 8, 257, 256),
               ("compile_share_target", 0.25, 0.0, "Compile share of a step, at most", 0.5, 0.95, 0.9),
               ("retrain_every", 10, 10, "Surrogate relearns every", 5, 1001, 1000),
               ("conformal_target", None, None, "error rate, at most", 0.3, 1.5, 0.99)]


@pytest.mark.parametrize("field, initial, empty, label, value, too_many, maximum", STEP_FIELDS)
def test_the_form_takes_each_step_width_setting_and_the_run_stores_it(client, members, recorded, monkeypatch, field,
                                                                      initial, empty, label, value, too_many, maximum):
    monkeypatch.setenv("KERNELLAB_GPU", "0")
    client.force_login(members["engineer"])
    page = client.get(reverse("run-new", args=[recorded.pk]))
    assert page.context["form"].fields[field].initial == initial
    assert label in page.content.decode()
    data = {**_defaults(page.context["form"]), field: value}
    response = client.post(reverse("run-new", args=[recorded.pk]), data)
    assert response.status_code == 302 and getattr(SearchRun.objects.get(), field) == value


@pytest.mark.parametrize("field, initial, empty, label, value, too_many, maximum", STEP_FIELDS)
def test_the_form_refuses_a_step_width_out_of_range_and_takes_none_as_its_default(client, members, recorded, monkeypatch,
                                                                                  field, initial, empty, label, value,
                                                                                  too_many, maximum):
    monkeypatch.setenv("KERNELLAB_GPU", "0")
    client.force_login(members["engineer"])
    defaults = _defaults(client.get(reverse("run-new", args=[recorded.pk])).context["form"])
    response = client.post(reverse("run-new", args=[recorded.pk]), {**defaults, field: too_many})
    assert response.status_code == 400 and not SearchRun.objects.exists()
    assert f"less than or equal to {maximum}" in response.content.decode()
    defaults.pop(field, None)  # a page from before the field
    response = client.post(reverse("run-new", args=[recorded.pk]), defaults)
    assert response.status_code == 302 and getattr(SearchRun.objects.get(), field) == empty


def test_an_uploaded_problem_without_a_gpu_worker_is_told_no_backend_can_measure_it(client, members, problem, monkeypatch):
    monkeypatch.setenv("KERNELLAB_GPU", "0")
    client.force_login(members["engineer"])
    page = client.get(reverse("run-new", args=[problem.pk]))
    html = page.content.decode()
    assert page.context["form"].fields["backend"].widget.choices == []
    assert "No backend can measure Vector scale now" in html
    assert "<strong>replay</strong> is not offered: no recorded measurements for this problem." in html
    assert "<strong>cupy</strong> is not offered: no GPU worker listening on gpu.h200 (never seen)." in html
    assert '<button type="submit" disabled>Create run</button>' in html


def test_a_gpu_backend_is_offered_only_while_a_worker_listens_on_its_queue(client, members, problem, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    from kernellab.models import WorkerHeartbeat
    from kernellab.services.workers import worker_heartbeat_record

    monkeypatch.setenv("KERNELLAB_GPU", "0")
    client.force_login(members["engineer"])
    worker_heartbeat_record(hostname="gpu0@box", queues=["gpu.h200"])
    form = client.get(reverse("run-new", args=[problem.pk])).context["form"]
    assert [name for name, _ in form.fields["backend"].widget.choices] == ["cupy", "pycuda"]
    WorkerHeartbeat.objects.update(last_seen=timezone.now() - timedelta(minutes=3))
    html = client.get(reverse("run-new", args=[problem.pk])).content.decode()
    assert "no GPU worker listening on gpu.h200 (last seen 3\xa0minutes ago)" in html


def test_the_service_refuses_to_start_a_run_that_nothing_can_measure(client, members, problem, monkeypatch):
    from kernellab.services import ServiceError
    from kernellab.services.runs import run_create

    monkeypatch.setenv("KERNELLAB_GPU", "0")
    with pytest.raises(ServiceError, match="The replay backend cannot measure Vector scale: no recorded measurements for this problem"):
        run_create(problem=problem, user=members["engineer"], generator="transform", backend="replay")
    with pytest.raises(ServiceError, match="no GPU worker listening on gpu.h200 \\(never seen\\)"):
        run_create(problem=problem, user=members["engineer"], generator="transform", backend="cupy")
    assert not SearchRun.objects.exists()
    # A form posted anyway (an old page, a script) gets the same sentence.
    client.force_login(members["engineer"])
    response = client.post(reverse("run-new", args=[problem.pk]),
                           {"generator": "transform", "surrogate": "learned", "confidence_threshold": 0.6, "gpu_budget": 10,
                            "children_per_step": 4, "max_gpu_per_step": 2, "max_steps": 10, "approval_mode": "auto",
                            "target_gpu": "h200", "backend": "replay", "objective": "time", "feedback": "notes", "seed": 0,
                            "start": "on"})
    assert response.status_code == 400 and not SearchRun.objects.exists()
    assert "The replay backend cannot measure Vector scale" in response.content.decode()


def test_a_service_refusal_is_shown_as_a_sentence(client, members, problem):
    client.force_login(members["engineer"])
    response = client.post(
        reverse("run-new", args=[problem.pk]),
        {"generator": "template", "surrogate": "learned", "confidence_threshold": 0.6, "gpu_budget": 10, "children_per_step": 4,
         "max_gpu_per_step": 2, "max_steps": 10, "approval_mode": "auto", "target_gpu": "h200", "backend": "auto",
         "objective": "time", "feedback": "notes", "seed": 0},
    )
    assert response.status_code == 400
    assert "The template generator needs a problem with knobs" in response.content.decode()
    assert not SearchRun.objects.exists()


def test_a_viewer_cannot_create_a_run(client, members, problem):
    client.force_login(members["viewer"])
    response = client.post(
        reverse("run-new", args=[problem.pk]),
        {"generator": "transform", "surrogate": "learned", "confidence_threshold": 0.6, "gpu_budget": 10, "children_per_step": 4,
         "max_gpu_per_step": 2, "max_steps": 10, "approval_mode": "auto", "target_gpu": "h200", "backend": "auto",
         "objective": "time", "feedback": "notes", "seed": 0},
    )
    assert response.status_code == 400
    assert "engineer role or above" in response.content.decode()
    assert not SearchRun.objects.exists()


def test_pause_resume_and_cancel_move_the_run(client, members, recorded, run):
    client.force_login(members["engineer"])
    url = reverse("run-action", args=[run.pk])
    client.post(url, {"action": "start"}, HTTP_HX_REQUEST="true")
    response = client.post(url, {"action": "pause"}, HTTP_HX_REQUEST="true")
    assert 'data-status="paused"' in response.content.decode()
    response = client.post(url, {"action": "resume"}, HTTP_HX_REQUEST="true")
    assert 'data-status="running"' in response.content.decode()
    response = client.post(url, {"action": "cancel", "confirmed": "yes"}, HTTP_HX_REQUEST="true")
    assert 'data-status="cancelled"' in response.content.decode()
    response = client.post(url, {"action": "resume"}, HTTP_HX_REQUEST="true")
    assert "The run is cancelled, so it cannot resume." in response.content.decode()
    run.refresh_from_db()
    assert run.status == "cancelled"


def test_cancel_asks_for_confirmation_before_it_cancels(client, members, recorded, run):
    client.force_login(members["engineer"])
    url = reverse("run-action", args=[run.pk])
    client.post(url, {"action": "start"}, HTTP_HX_REQUEST="true")
    explorer = client.get(reverse("run-explorer", args=[run.pk])).content.decode()
    assert 'hx-confirm="Cancel this run? Its queued GPU verifications are cancelled with it' in explorer
    response = client.post(url, {"action": "cancel"})  # a browser without scripts: no dialog
    assert response.status_code == 302 and response["Location"] == reverse("run-cancel", args=[run.pk])
    response = client.post(url, {"action": "cancel"}, HTTP_HX_REQUEST="true")
    assert "Confirm the cancellation first; nothing was cancelled." in response.content.decode()
    run.refresh_from_db()
    assert run.status == "running"
    page = client.get(reverse("run-cancel", args=[run.pk])).content.decode()
    assert 'name="confirmed" value="yes"' in page and "cannot be resumed" in page
    client.post(url, {"action": "cancel", "confirmed": "yes"})
    run.refresh_from_db()
    assert run.status == "cancelled"


def test_cancelling_a_run_leaves_no_verification_queued_and_a_late_message_measures_nothing(members, recorded, run, no_broker):
    from kernellab.models import ApprovalMode
    from kernellab.services.kernels import kernel_get_or_create
    from kernellab.services.runs import run_transition
    from kernellab.services.verifications import verification_claim, verification_request
    from kernellab.tasks import verification_execute

    root = Node.objects.create(run=run, key="0", kernel=run.problem.reference, origin="root", state=NodeState.MEASURED, speedup=1.0)
    nodes = []
    for i in range(3):
        kernel = kernel_get_or_create(candidate={"source": f"// {i}\n" + root.kernel.source, "launch": root.kernel.launch, "name": f"c{i}"})
        nodes.append(Node.objects.create(run=run, key=str(i + 1), parent=root, kernel=kernel, depth=1, state=NodeState.FORECAST))
    queued = [verification_request(node=nodes[0], user=members["engineer"]), verification_request(node=nodes[1], user=members["engineer"])]
    run.approval_mode = ApprovalMode.MANUAL
    run.save()
    pending = verification_request(node=nodes[2], user=members["engineer"])
    assert {v.state for v in Verification.objects.all()} == {"queued", "pending-approval"}
    run_transition(run=run, user=members["engineer"], action="cancel")
    assert set(Verification.objects.values_list("state", flat=True)) == {"cancelled"}
    assert set(Node.objects.filter(pk__in=[n.pk for n in nodes]).values_list("state", flat=True)) == {"cancelled"}
    # The broker may still hold a message for a cancelled verification: the worker finds nothing to claim.
    assert verification_claim(verification_id=queued[0].pk, token="late") is None
    assert verification_execute.run(queued[1].pk) == "nothing to do"
    assert not Measurement.objects.exists()
    assert pending.pk in Verification.objects.filter(state="cancelled").values_list("pk", flat=True)


def test_a_waiting_run_says_why_it_waits(client, members, recorded, run):
    from kernellab.services.kernels import kernel_get_or_create
    from kernellab.services.verifications import verification_request

    run.backend, run.status = "cupy", "waiting"
    run.save()
    root = Node.objects.create(run=run, key="0", kernel=run.problem.reference, origin="root", state=NodeState.MEASURED, speedup=1.0)
    for i in range(2):
        kernel = kernel_get_or_create(candidate={"source": f"// {i}\n" + root.kernel.source, "launch": root.kernel.launch, "name": f"c{i}"})
        node = Node.objects.create(run=run, key=str(i + 1), parent=root, kernel=kernel, depth=1, state=NodeState.FORECAST)
        verification_request(node=node, user=members["engineer"])
    client.force_login(members["viewer"])
    html = client.get(reverse("run-explorer", args=[run.pk])).content.decode()
    assert "2 verifications queued, but no GPU worker listening on gpu.h200 (never seen)." in html
    from kernellab.services.workers import worker_heartbeat_record

    worker_heartbeat_record(hostname="gpu0@box", queues=["gpu.h200"])
    html = client.get(reverse("run-explorer", args=[run.pk]) + "?part=controls").content.decode()
    assert "2 verifications queued on gpu.h200." in html and "no GPU worker" not in html


def test_a_viewer_sees_no_controls_and_is_refused(client, members, run):
    client.force_login(members["viewer"])
    page = client.get(reverse("run-explorer", args=[run.pk]))
    assert 'name="action"' not in page.content.decode()
    response = client.post(reverse("run-action", args=[run.pk]), {"action": "start"}, HTTP_HX_REQUEST="true")
    assert "engineer role or above" in response.content.decode()
    run.refresh_from_db()
    assert run.status == "created"


def _measured_child(run, parent, key, *, speedup, probabilities, confidence, finished_at=None, energy=None):
    from kernellab.services.kernels import kernel_get_or_create

    kernel = kernel_get_or_create(candidate={"source": f"// {key}\n" + parent.kernel.source, "launch": parent.kernel.launch, "name": key})
    node = Node.objects.create(run=run, key=key, parent=parent, kernel=kernel, depth=parent.depth + 1, state=NodeState.MEASURED, speedup=speedup)
    predicted = max(range(8), key=lambda i: probabilities[i]) + 1
    Forecast.objects.create(node=node, surrogate="learned", probabilities=probabilities, bin=predicted, confidence=confidence)
    m = Measurement.objects.create(kernel=kernel, problem=run.problem, status="ok", speedup=speedup, backend="replay",
                                   candidate_stats={"median_ms": 1.0 / speedup, "iqr_ms": 0.01, "n": 30}, energy=energy)
    Verification.objects.create(node=node, state=VerificationState.DONE, finished_at=finished_at, measurement=m)
    return node


def test_the_dashboard_computes_calibration_from_forecasts_and_measurements(client, members, node):
    from django.utils import timezone

    run, root = node.run, node.parent
    now = timezone.now()
    onehot = lambda b: [1.0 if i == b - 1 else 0.0 for i in range(8)]  # noqa: E731
    # Two confident and right (1.2x is bin 5, 3.0x is bin 7), one confident and wrong (0.6x is bin 3, not 6).
    _measured_child(run, root, "a", speedup=1.2, probabilities=onehot(5), confidence=1.0, finished_at=now, energy={"j_per_call": 0.02})
    _measured_child(run, root, "b", speedup=3.0, probabilities=onehot(7), confidence=1.0, finished_at=now, energy={"j_per_call": 0.01})
    _measured_child(run, root, "c", speedup=0.6, probabilities=[0, 0, 0, 0, 0, 0.6, 0.4, 0], confidence=0.6, finished_at=now)
    client.force_login(members["viewer"])
    response = client.get(reverse("run-dashboard", args=[run.pk]))
    dashboard = response.context["dashboard"]
    assert dashboard["progress"]["best"] == [1.2, 3.0, 3.0]
    assert dashboard["confusion"][4][4] == 1 and dashboard["confusion"][6][6] == 1 and dashboard["confusion"][5][2] == 1
    # ECE: bucket (0.9,1] has accuracy 1 at confidence 1; bucket (0.5,0.6] accuracy 0 at 0.6 -> 1/3 * 0.6
    assert dashboard["reliability"]["ece"] == pytest.approx(0.2)
    assert dashboard["risk_coverage"]["risk"] == pytest.approx([0.0, 0.0, 1 / 3])
    assert sorted(dashboard["energy"]["key"]) == ["a", "b"]
    assert "bin accuracy 0.67" in response.content.decode()
    # The forecasts order b > c > a (c's mass sits in bins 6-7), the GPU b > a > c: Spearman 1 - 6*2/(3*8) = 0.5.
    assert dashboard["counts"]["spearman"] == pytest.approx(0.5)
    assert "with a rank correlation of 0.50 against their measurements" in response.content.decode()


def test_the_dashboard_gives_the_ece_of_the_forecasts_made_after_the_runs_first_measurement(client, members, node):
    from datetime import timedelta

    from django.utils import timezone

    run, root = node.run, node.parent
    first = timezone.now()
    # "a" was forecast before anything was measured (confident and wrong: 0.6x is bin 3); "b" and "c" after the
    # first measurement (confident and right), so the later forecasts' ECE is 0 while the run's is 1/3.
    a = _measured_child(run, root, "a", speedup=0.6, probabilities=[0, 0, 0, 0, 0, 1.0, 0, 0], confidence=1.0,
                        finished_at=first)
    b = _measured_child(run, root, "b", speedup=1.2, probabilities=[0, 0, 0, 0, 1.0, 0, 0, 0], confidence=1.0,
                        finished_at=first + timedelta(minutes=2))
    c = _measured_child(run, root, "c", speedup=3.0, probabilities=[0, 0, 0, 0, 0, 0, 1.0, 0], confidence=1.0,
                        finished_at=first + timedelta(minutes=3))
    Forecast.objects.filter(node=a).update(created_at=first - timedelta(minutes=1))
    Forecast.objects.filter(node__in=[b, c]).update(created_at=first + timedelta(minutes=1))
    client.force_login(members["viewer"])
    response = client.get(reverse("run-dashboard", args=[run.pk]))
    reliability = response.context["dashboard"]["reliability"]
    assert reliability["ece"] == pytest.approx(1 / 3)
    assert reliability["ece_after_first"] == pytest.approx(0.0) and reliability["pairs_after_first"] == 2
    assert "0.000 over the 2 forecasts made after the run's first measurement" in response.content.decode()


def test_the_dashboards_rank_correlation_needs_three_kernels_and_an_order_on_both_sides():
    from kernellab.selectors.explorer import forecast_rank_correlation

    def pairs(forecasts, speedups):
        return [{"forecast_log_speedup": f, "speedup": s} for f, s in zip(forecasts, speedups)]

    assert forecast_rank_correlation(pairs([0.1, 0.5, 0.9, 1.2], [1.1, 1.4, 2.0, 3.5])) == pytest.approx(1.0)
    assert forecast_rank_correlation(pairs([0.1, 0.5, 0.9, 1.2], [3.5, 2.0, 1.4, 1.1])) == pytest.approx(-1.0)
    assert forecast_rank_correlation(pairs([0.1, 0.5], [1.1, 1.4])) is None  # two kernels order nothing
    assert forecast_rank_correlation(pairs([0.3, 0.3, 0.3], [1.1, 1.4, 2.0])) is None  # one forecast for all
    assert forecast_rank_correlation(pairs([0.1, 0.5, 0.9], [2.0, 2.0, 2.0])) is None  # one measurement for all
    # Ties share the mean of their ranks, as in scipy's spearmanr: ranks 1.5, 1.5, 3, 4 against 1, 2.5, 2.5, 4
    # have a covariance of 3.75 and variances of 4.5 (sums of products about the mean rank 2.5).
    assert forecast_rank_correlation(pairs([0.1, 0.1, 0.5, 0.9], [1.1, 1.4, 1.4, 2.0])) == pytest.approx(3.75 / 4.5)
    # A forecast without an expected speedup (probabilities that do not fit the bins) is left out, not guessed.
    assert forecast_rank_correlation(pairs([0.1, None, 0.5, 0.9], [1.1, 9.0, 1.4, 2.0])) == pytest.approx(1.0)


def test_a_dashboard_with_too_few_kernels_says_nothing_of_the_forecasts_order(client, members, node):
    from django.utils import timezone

    run, root = node.run, node.parent
    _measured_child(run, root, "a", speedup=1.2, probabilities=[0, 0, 0, 0, 1.0, 0, 0, 0], confidence=1.0,
                    finished_at=timezone.now())
    client.force_login(members["viewer"])
    response = client.get(reverse("run-dashboard", args=[run.pk]))
    assert response.context["dashboard"]["counts"]["spearman"] is None
    assert 'id="forecast-order"' not in response.content.decode()


def test_the_form_compiles_the_next_step_while_the_gpu_measures_unless_unticked(client, members, recorded, monkeypatch):
    monkeypatch.setenv("KERNELLAB_GPU", "0")
    client.force_login(members["engineer"])
    page = client.get(reverse("run-new", args=[recorded.pk]))
    assert page.context["form"].fields["prefetch_while_measuring"].initial is True
    assert "Compile the next step while the GPU measures" in page.content.decode()
    data = _defaults(page.context["form"])
    assert client.post(reverse("run-new", args=[recorded.pk]), data).status_code == 302
    run = SearchRun.objects.get()
    assert run.prefetch_while_measuring
    assert "next step compiled while the GPU measures" in client.get(reverse("run-explorer", args=[run.pk])).content.decode()
    del data["prefetch_while_measuring"]                       # an unticked box posts nothing
    data["submission"] = _defaults(client.get(reverse("run-new", args=[recorded.pk])).context["form"])["submission"]
    assert client.post(reverse("run-new", args=[recorded.pk]), data).status_code == 302
    assert not SearchRun.objects.latest("pk").prefetch_while_measuring


def test_the_dashboard_says_where_the_searchs_time_went(client, members, run):
    client.force_login(members["viewer"])
    assert "Compile checks took" not in client.get(reverse("run-dashboard", args=[run.pk])).content.decode()
    SearchRun.objects.filter(pk=run.pk).update(
        compile_share_target=0.25,
        driver_state={"times": {"compile_batches": 19, "compile_s": 12.0, "measurements_timed": 150, "measure_s": 36.0}})
    response = client.get(reverse("run-dashboard", args=[run.pk]))
    assert response.context["dashboard"]["times"]["compile_share"] == pytest.approx(0.25)
    assert ("Compile checks took 12.0 s in 19 batches, measurements 36.0 s for 150 timed: compiling was 25% of the "
            "two (the run keeps it near 25% by measuring more of a costly batch).") in response.content.decode()
    SearchRun.objects.filter(pk=run.pk).update(
        driver_state={"times": {"compile_batches": 19, "compile_s": 12.0, "measurements_timed": 150, "measure_s": 36.0,
                                "prefetched_batches": 17, "prefetched_compile_s": 10.5}})
    page = client.get(reverse("run-dashboard", args=[run.pk])).content.decode()
    assert "17 of the batches (10.5 s) were compiled while the GPU measured the step before." in page


def test_an_empty_dashboard_says_so(client, members, run):
    client.force_login(members["viewer"])
    response = client.get(reverse("run-dashboard", args=[run.pk]))
    assert response.status_code == 200
    assert response.context["dashboard"]["pairs"] == []


def test_the_form_sent_twice_makes_one_run_started_once(client, members, recorded, django_capture_on_commit_callbacks, no_broker, monkeypatch):
    """A double click, or a browser retrying the post: the page's one-time token makes the second sending land on the
    run the first one made, with a sentence, and the search is queued once."""
    monkeypatch.setenv("KERNELLAB_GPU", "0")
    client.force_login(members["engineer"])
    first_page = client.get(reverse("run-new", args=[recorded.pk]))
    data = _defaults(first_page.context["form"])
    assert len(data["submission"]) == 32 and b'name="submission"' in first_page.content
    with django_capture_on_commit_callbacks(execute=True):
        first = client.post(reverse("run-new", args=[recorded.pk]), data)
    with django_capture_on_commit_callbacks(execute=True):
        second = client.post(reverse("run-new", args=[recorded.pk]), data, follow=True)
    run = SearchRun.objects.get()
    assert first["Location"] == reverse("run-explorer", args=[run.pk])
    assert second.redirect_chain[0][0] == reverse("run-explorer", args=[run.pk])
    assert "already been sent" in second.content.decode()
    assert run.status == "running" and len(no_broker) == 1
    # a new page is a new token: a second run is made
    data = _defaults(client.get(reverse("run-new", args=[recorded.pk])).context["form"])
    client.post(reverse("run-new", args=[recorded.pk]), data)
    assert SearchRun.objects.count() == 2
    # a page from before the token posts none: each sending makes a run, as before
    data.pop("submission")
    client.post(reverse("run-new", args=[recorded.pk]), data)
    client.post(reverse("run-new", args=[recorded.pk]), data)
    assert SearchRun.objects.count() == 4


def test_two_sendings_at_once_make_one_run(members, recorded, monkeypatch):
    """The second sending's look-up ran before the first one's row was written: the unique token turns its insert
    into the first run, read back, not a second run or a 500."""
    from kernellab.services import runs

    monkeypatch.setenv("KERNELLAB_GPU", "0")
    first = runs.run_create(problem=recorded, user=members["engineer"], generator="recipes", surrogate="roofline",
                            backend="replay", submission="ab12", start=False)
    real = runs.run_for_submission
    looked = []

    def raced(**kwargs):
        looked.append(kwargs)
        return None if len(looked) == 1 else real(**kwargs)

    monkeypatch.setattr(runs, "run_for_submission", raced)
    again = runs.run_create(problem=recorded, user=members["engineer"], generator="recipes", surrogate="roofline",
                            backend="replay", submission="ab12", start=False)
    assert again.pk == first.pk and len(looked) == 2 and SearchRun.objects.count() == 1


def test_someone_elses_or_a_made_up_token_is_refused(client, members, recorded, monkeypatch):
    from kernellab.services import ServiceError
    from kernellab.services.runs import run_create

    monkeypatch.setenv("KERNELLAB_GPU", "0")
    run_create(problem=recorded, user=members["engineer"], generator="recipes", surrogate="roofline",
               backend="replay", submission="cafe01", start=False)
    with pytest.raises(ServiceError, match="already sent by someone else"):
        run_create(problem=recorded, user=members["admin"], generator="recipes", surrogate="roofline",
                   backend="replay", submission="cafe01", start=False)
    client.force_login(members["engineer"])
    data = _defaults(client.get(reverse("run-new", args=[recorded.pk])).context["form"])
    data["submission"] = "../etc; drop"
    response = client.post(reverse("run-new", args=[recorded.pk]), data)
    assert response.status_code == 400 and "reload the page" in response.content.decode()
    assert SearchRun.objects.count() == 1
