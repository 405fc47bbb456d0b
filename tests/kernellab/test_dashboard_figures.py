"""QA bugs 6 and 7 on a run's dashboard.

6: under replay no measurement is timed on a GPU, yet the page said "measurements 0.0 s for 0 timed: compiling was
100% of the two". It now says the measurements were answered from recorded data, and never gives a share of a 0 s
total.
7: the energy chart drew one point of 40 measured nodes on axes from -0.5 (runtime and energy are never negative) and
never said why the others were missing. Its axes now start at 0, its note says how many measured nodes have an
energy reading and why the others have none, and with none it says so instead of drawing an empty chart."""
from __future__ import annotations

import pytest
from django.urls import reverse

from kernellab.figures import NO_ENERGY, run_dashboard_figures
from kernellab.models import Measurement, Node, NodeState, SearchRun, Verification, VerificationState
from kernellab.selectors.explorer import run_dashboard

pytestmark = pytest.mark.usefixtures("embedded_setup")


def _dashboard(energy_points: list[tuple[str, float, float]]) -> dict:
    """run_dashboard's shape with nothing but the energy series filled in."""
    return {
        "bins": {"names": [f"b{i}" for i in range(1, 9)], "edges": [0.5, 0.8, 0.95, 1.05, 1.25, 1.6, 2.5]},
        "progress": {"gpu": [], "best": [], "candidates": [], "per_gpu": []},
        "pairs": [], "confusion": [[0] * 8 for _ in range(8)],
        "reliability": {"confidence": [], "accuracy": [], "count": []},
        "risk_coverage": {"coverage": [], "risk": [], "aurc": None},
        "energy": {"key": [k for k, _, _ in energy_points], "runtime_ms": [ms for _, ms, _ in energy_points],
                   "j_per_call": [j for _, _, j in energy_points], "speedup": [1.2] * len(energy_points),
                   "pareto": [True] * len(energy_points)},
    }


# -- 7: the figure builder ---------------------------------------------------------------------------------------


def test_the_energy_chart_starts_both_axes_at_zero():
    figure = run_dashboard_figures(_dashboard([("7", 0.0123, 0.0031)]))["chart-energy"]["figure"]
    layout = figure["layout"]
    assert layout["xaxis"]["rangemode"] == "tozero" and layout["yaxis"]["rangemode"] == "tozero"
    assert layout["xaxis"]["title"]["text"] == "median runtime (ms)"
    assert layout["yaxis"]["title"]["text"] == "energy per call (J)"


def test_the_energy_chart_says_how_many_measured_nodes_have_an_energy_reading_and_why_the_others_do_not():
    coverage = {"measured": 40, "with_energy": 1, "replayed_without": 39, "energy_failed": 0, "without": 0}
    chart = run_dashboard_figures(_dashboard([("7", 0.0123, 0.0031)]), energy_coverage=coverage)["chart-energy"]
    assert "figure" in chart
    from kernellab.figures import energy_note
    assert chart["note"] == ("1 of the 40 measured nodes has an energy reading: 39 were answered from recorded data "
                             "that has no energy reading.")
    mixed = {"measured": 5, "with_energy": 2, "replayed_without": 0, "energy_failed": 1, "without": 2}
    assert energy_note(mixed, drawn=2) == ("2 of the 5 measured nodes have an energy reading: 1 was measured on a GPU "
                                           "whose energy reading failed; 2 were measured without an energy reading.")
    assert energy_note({"measured": 3, "with_energy": 3}, drawn=3) == "All 3 measured nodes have an energy reading."


def test_with_no_energy_reading_the_chart_is_a_sentence_not_an_empty_plot():
    coverage = {"measured": 40, "with_energy": 0, "replayed_without": 40, "energy_failed": 0, "without": 0}
    chart = run_dashboard_figures(_dashboard([]), energy_coverage=coverage)["chart-energy"]
    assert chart == {"empty": "None of the 40 measured nodes has an energy reading: 40 were answered from recorded "
                              "data that has no energy reading, so there is nothing to draw."}
    nothing_measured = {"measured": 0, "with_energy": 0, "replayed_without": 0, "energy_failed": 0, "without": 0}
    assert run_dashboard_figures(_dashboard([]), energy_coverage=nothing_measured)["chart-energy"] == {"empty": NO_ENERGY}
    assert run_dashboard_figures(_dashboard([]))["chart-energy"] == {"empty": NO_ENERGY}  # no coverage given


# -- 7: the page -----------------------------------------------------------------------------------------------


def _measured(run, root, key, *, energy=None, backend="replay", observer_errors=None):
    from kernellab.services.kernels import kernel_get_or_create

    kernel = kernel_get_or_create(candidate={"source": f"// {key}\n" + root.kernel.source, "launch": root.kernel.launch,
                                             "name": key})
    node = Node.objects.create(run=run, key=key, parent=root, kernel=kernel, depth=1, state=NodeState.MEASURED, speedup=1.1)
    m = Measurement.objects.create(kernel=kernel, problem=run.problem, status="ok", speedup=1.1, backend=backend,
                                   candidate_stats={"median_ms": 0.9}, energy=energy, observer_errors=observer_errors or {})
    Verification.objects.create(node=node, state=VerificationState.DONE, measurement=m)
    return node


def test_the_dashboard_page_says_how_many_measured_nodes_its_energy_chart_draws(client, members, node):
    run, root = node.run, node.parent
    assert run.backend == "replay"
    _measured(run, root, "a", energy={"j_per_call": 0.003})
    for key in ("b", "c", "d"):
        _measured(run, root, key)  # replayed records without an energy reading
    client.force_login(members["viewer"])
    response = client.get(reverse("run-dashboard", args=[run.pk]))
    chart = response.context["figures"]["chart-energy"]
    assert chart["figure"]["layout"]["yaxis"]["rangemode"] == "tozero"
    note = ("1 of the 4 measured nodes has an energy reading: 3 were answered from recorded data that has no energy "
            "reading.")
    assert chart["note"] == note and response.context["energy_note"] == note
    assert f'<span class="muted" id="energy-note">({note})</span>' in response.content.decode()


def test_a_gpu_run_whose_energy_reading_failed_says_so(client, members, node):
    run, root = node.run, node.parent
    SearchRun.objects.filter(pk=run.pk).update(backend="cupy")
    _measured(run, root, "a", backend="cupy", observer_errors={"nvml": "NVML: not supported on this GPU"})
    client.force_login(members["viewer"])
    chart = client.get(reverse("run-dashboard", args=[run.pk])).context["figures"]["chart-energy"]
    assert chart == {"empty": "The 1 measured node has no energy reading: 1 was measured on a GPU whose energy reading "
                              "failed, so there is nothing to draw."}


# -- 6: the time sentence ----------------------------------------------------------------------------------------

REPLAY_TIMES = {"compile_batches": 7, "compile_s": 4.2, "measurements_timed": 0, "measure_s": 0.0}


def test_under_replay_the_dashboard_says_the_measurements_took_no_gpu_time(client, members, run):
    assert run.backend == "replay"
    SearchRun.objects.filter(pk=run.pk).update(driver_state={"times": REPLAY_TIMES})
    client.force_login(members["viewer"])
    page = " ".join(client.get(reverse("run-dashboard", args=[run.pk])).content.decode().split())
    assert ("Compile checks took 4.2 s in 7 batches; <span id=\"no-gpu-time\">measurements were answered from "
            "recorded data; no GPU time</span>.") in page
    assert "0.0 s for 0 timed" not in page and "compiling was" not in page and "100%" not in page


def test_a_gpu_run_with_no_measurement_timed_gives_no_share_of_a_zero_total(client, members, run):
    SearchRun.objects.filter(pk=run.pk).update(backend="cupy", compile_share_target=0.25,
                                               driver_state={"times": REPLAY_TIMES})
    client.force_login(members["viewer"])
    response = client.get(reverse("run-dashboard", args=[run.pk]))
    page = " ".join(response.content.decode().split())
    assert response.context["times"]["compile_share"] is None
    assert "Compile checks took 4.2 s in 7 batches; no measurement reported its GPU time yet." in page
    assert "compiling was" not in page and "answered from recorded data" not in page


@pytest.mark.django_db(transaction=True)
def test_a_replayed_search_from_start_to_end_gives_an_honest_dashboard(client, members, saxpy):
    """QA's run 1 in small: a search answered by the replay backend, then its dashboard."""
    from kernellab.services.runs import run_create

    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=4, children_per_step=3, max_gpu_per_step=2)
    run.refresh_from_db()
    measured = Node.objects.filter(run=run, state=NodeState.MEASURED).exclude(parent=None).count()
    assert measured and run_dashboard(run=run)["counts"]["gpu_measurements"] >= measured
    client.force_login(members["viewer"])
    response = client.get(reverse("run-dashboard", args=[run.pk]))
    page = " ".join(response.content.decode().split())
    assert "measurements were answered from recorded data; no GPU time" in page
    assert "compiling was" not in page and "0 timed" not in page
    # The saxpy recording has no energy reading: a sentence, not a chart of nothing.
    nodes = f"{measured} measured node{'s' if measured > 1 else ''}"
    lead = f"None of the {nodes} has" if measured > 1 else f"The {nodes} has no"
    assert response.context["figures"]["chart-energy"] == {"empty": (
        f"{lead} {'an ' if measured > 1 else ''}energy reading: {measured} {'were' if measured > 1 else 'was'} "
        "answered from recorded data that has no energy reading, so there is nothing to draw.")}


