"""Source features read the macros of a candidate, including those a careless or hostile answer writes."""
import time

import pytest

from search_engine.surrogates.features import SOURCE_FEATURES, source_features


def _feature(source: str, name: str) -> float:
    return float(source_features(source)[SOURCE_FEATURES.index(name)])


def test_loop_bounds_written_as_chains_of_macros_and_if_conditions_are_worked_out():
    source = ("#define WIDTH 4\n#define STEPS (WIDTH * 2)\n#define TRIPS STEPS\n"
              "#if TRIPS > 6\n__global__ void k(float *x) { for (int i = 0; i < TRIPS; i++) x[i] = 0; }\n"
              "#else\n__global__ void k(float *x) { for (int i = 0; i < 3; i++) x[i] = 0; }\n#endif\n")
    assert _feature(source, "max_trip") == 8


@pytest.mark.timeout(20)
def test_macros_that_refer_to_each_other_are_read_as_unknown_instead_of_hanging_the_worker():
    source = ("#define A (B + B + B)\n#define B (A + A + A)\n#if A > 1\n#endif\n"
              "__global__ void k(float *x) { for (int i = 0; i < 16; i++) x[i] = A; }\n")
    started = time.perf_counter()
    assert _feature(source, "max_trip") == 16
    assert time.perf_counter() - started < 1.0


def test_a_condition_the_expression_language_refuses_counts_as_false_without_building_it():
    source = ('#define HUGE 18446744073709551616\n'
              '#if HUGE * HUGE > 0\n__device__ void a(float *x) { for (int i = 0; i < 64; i++) x[i] = 0; }\n#endif\n'
              '#if "ab" * 50000000\n__device__ void b(float *x) { for (int i = 0; i < 32; i++) x[i] = 0; }\n#endif\n'
              "__global__ void k(float *x) { for (int i = 0; i < 5; i++) x[i] = 0; }\n")
    assert _feature(source, "max_trip") == 5
