from __future__ import annotations

from search_engine.experts import warps
from tests.search_engine.experts import captured


def notes(name, **kw):
    return captured.by(captured.notes_for(name, **kw), "warps")


def test_lane_divergent_branches_idle_half_the_lanes():
    (note,) = notes("branches__by_lane")
    assert note.severity == "critical"
    assert note.evidence["smsp__thread_inst_executed_per_inst_executed.ratio"] < warps.DIVERGENT_THREADS
    assert note.evidence["smsp__sass_branch_targets_threads_divergent.sum"] > 0


def test_divergence_is_measured_without_the_extra_metrics_too():
    (note,) = notes("branches__by_lane", drop_extras=True)
    assert note.severity == "critical"


def test_warp_uniform_branches_are_silent():
    assert not notes("branches__by_warp")


def test_contended_global_atomics_get_privatisation_advice():
    (note,) = notes("histogram256__global_atomics")
    assert note.severity == "warning" and note.evidence["global_atomics_heavy"]
    assert "private copy" in note.advice
    assert note.evidence["stall_share"] > warps.STALL_SHARE


def test_a_shared_memory_histogram_waiting_on_loads_gets_load_advice_not_atomics_advice():
    (note,) = notes("histogram256__reference")
    assert not note.evidence["global_atomics_heavy"]
    assert "long_scoreboard" in " ".join(note.evidence)
    assert "independent loads" in note.advice


def test_stall_reasons_are_not_reported_for_a_kernel_at_dram_speed():
    # memory-bound at 87% of DRAM peak: waiting on loads is expected there.
    assert not notes("reduce_sum__atomic_vec4")
