"""Guard logic on synthetic evidence: each cheat gets a readable reason, honest evidence passes."""
from gpu_runner import guards
from gpu_runner.evidence import Evidence, InputChange, OutputCheck
from gpu_runner.result import Hardware
from gpu_runner.settings import MeasureSettings
from gpu_runner.verdict import judge
from tests.gpu_runner.helpers import saxpy_problem

H200 = Hardware("NVIDIA H200", 132, 150 << 30, 4915.2, 1980.0, 3201.0, "9.0", "580.159", 60 << 20)


def check(**kwargs) -> OutputCheck:
    values = dict(case="default", set_index=0, arg="out", numel=1000, bad=0, unwritten=0, nan=0, max_abs=1e-7,
                  max_rel=1e-7)
    values.update(kwargs)
    return OutputCheck(**values)


def honest(**kwargs) -> Evidence:
    evidence = Evidence(hardware=H200, checks=[check(), check(set_index=1)], post_checks=[check(set_index=-1)],
                        reference_ms=[1.0] * 20, candidate_ms=[0.5] * 20,
                        escape={"event_ms": 0.5, "wall_ms": 0.56, "noop_event_ms": 0.002, "noop_wall_ms": 0.05})
    for key, value in kwargs.items():
        setattr(evidence, key, value)
    return evidence


def verdict(evidence: Evidence, problem=None):
    problem = problem or saxpy_problem(n=1 << 26)
    return judge(problem, evidence, MeasureSettings(), backend="cupy", seed=7)


def test_honest_evidence_is_ok_with_the_speedup_of_the_medians():
    result = verdict(honest())
    assert result.status == "ok" and result.speedup == 2.0 and result.seed == 7
    assert result.reference.n == 20 and result.candidate.median_ms == 0.5


def test_it_rejects_a_candidate_that_writes_nothing():
    result = verdict(honest(checks=[check(unwritten=1000, first_bad=0)]))
    assert result.status == "rejected-guard" and "wrote none of output 'out'" in result.reason


def test_it_rejects_a_candidate_that_writes_only_part_of_the_output():
    result = verdict(honest(checks=[check(unwritten=250, first_bad=750)]))
    assert result.status == "rejected-guard" and "only 75.0%" in result.reason and "index 750" in result.reason


def test_it_rejects_a_candidate_that_modifies_its_input():
    result = verdict(honest(input_changes=[InputChange("default", 0, "x", "candidate")]))
    assert result.status == "rejected-guard" and "modifies its input 'x'" in result.reason


def test_a_reference_that_modifies_inputs_is_a_spec_problem_not_the_candidates():
    result = verdict(honest(input_changes=[InputChange("default", 0, "x", "reference")]))
    assert result.status == "unavailable" and "reference" in result.reason


def test_it_rejects_results_memoised_from_an_earlier_input_set():
    result = verdict(honest(checks=[check(), check(set_index=1, bad=990)], memoised=["out:0"]))
    assert result.status == "rejected-guard" and "memoised" in result.reason and "input set 1" in result.reason


def test_wrong_values_without_memoisation_are_a_correctness_failure():
    result = verdict(honest(checks=[check(bad=3, max_abs=0.5, first_bad=17, cand_value=1.5, ref_value=1.0)]))
    assert result.status == "failed-correctness"
    assert "3 of 1000" in result.reason and "index 17" in result.reason and "got 1.5, expected 1.0" in result.reason


def test_it_rejects_a_candidate_whose_output_goes_stale_during_timing():
    result = verdict(honest(post_checks=[check(set_index=-1, bad=1000)]))
    assert result.status == "rejected-guard" and "After the timed runs" in result.reason


def test_it_rejects_work_that_escapes_the_timer():
    escape = {"event_ms": 0.05, "wall_ms": 4.0, "noop_event_ms": 0.002, "noop_wall_ms": 0.05}
    result = verdict(honest(escape=escape))
    assert result.status == "rejected-guard" and "escapes the timer" in result.reason
    assert guards.timer_escape({"event_ms": 2.0, "wall_ms": 2.3, "noop_event_ms": 0.01, "noop_wall_ms": 0.06},
                               margin_ms=0.5, ratio=1.0) is None


def test_it_rejects_a_time_below_the_roofline_bound():
    problem = saxpy_problem(n=1 << 26)       # 805 MB at 4.9 TB/s: at least 0.164 ms
    floor_ms, _ = guards.roofline_floor_ms(problem, problem.default_case, H200)
    assert 0.15 < floor_ms < 0.18
    result = verdict(honest(reference_ms=[0.25] * 20, candidate_ms=[0.05] * 20), problem)
    assert result.status == "rejected-guard" and "roofline" in result.reason
    assert verdict(honest(reference_ms=[0.25] * 20, candidate_ms=[0.19] * 20), problem).status == "ok"


def test_runtime_errors_and_timeouts_fail_only_with_their_cause():
    result = verdict(Evidence(hardware=H200, error_kind="illegal-address", phase="validate:default:0",
                              error_message="CUDA_ERROR_ILLEGAL_ADDRESS"))
    assert result.status == "failed-runtime" and "illegal memory address" in result.reason
    result = verdict(Evidence(hardware=H200, error_kind="timeout", phase="validate:default:0",
                              error_message="the kernel did not finish within 10 s"))
    assert result.status == "failed-timeout" and "10 s" in result.reason


def test_the_source_scanner_ignores_comments_and_names_the_line():
    assert guards.scan_source("// child<<<1,1>>>()\n/* cudaLaunchDevice */\n__global__ void k(){}") is None
    reason = guards.scan_source("__global__ void k(){\n  cudaStreamCreateWithFlags(&s, 0);\n}")
    assert "line 2" in reason and "cudaStreamCreateWithFlags" in reason
    assert "quoted path" in guards.scan_source('#include "/etc/passwd"\n')
    assert guards.scan_source("#include <cuda_fp16.h>\n") is None
