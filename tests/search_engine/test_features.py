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


# ---- the cold path's shortcuts give what the plain definitions give (surrogate throughput, issue 20) ----

def _plain_fold(code: str) -> str:
    import re

    previous = None
    while previous != code:
        previous = code
        code = re.sub(r"\b(\d+)\s*\*\s*(\d+)\b", lambda m: str(int(m.group(1)) * int(m.group(2))), code)
        code = re.sub(r"\((\d+)\)", r"\1", code)
    return code


@pytest.mark.parametrize("code", ["x1*2*3", "(2)*(3)*4", "a[4 * 8] + 12*x + 3 *\n 5", "9*9f + 7*7 + 1_2*3",
                                  "(((4)))*2", "int v = 6*7;\nint w = (3) * (4)*5;"])
def test_literal_products_fold_as_the_plain_rewrite_folds_them(code):
    from search_engine.surrogates.features import _fold_products

    assert _fold_products(code) == _plain_fold(code)


def test_a_macro_is_replaced_where_it_stands_as_a_word_and_not_inside_a_longer_name():
    from search_engine.surrogates.features import _prepared

    code = _prepared("#define BM 64\n#define M 2\nint XBM = BM; int BM_2 = BM * M; int m = M;\n")
    assert code.strip() == "int XBM = 64; int BM_2 = 128; int m = 2;"


def test_counted_patterns_need_a_word_start_as_before():
    assert _feature("__global__ void k(const float *x) { for (int i = 0; i < 8; i++) {} }", "const_ptr") == 1
    assert _feature("__global__ void k(float *x, unconst float *y) {}", "const_ptr") == 0
    assert _feature("__global__ void k() { xfor (int i = 0; i < 8; i++) {} }", "literal_loops") == 0
    assert _feature("__global__ void k() { for (int i = 0; i < 8; i++) {} }", "literal_loops") == 1


def test_variants_of_one_family_read_their_own_branches_although_the_body_is_read_once():
    body = ("#if defined(ALGO_wide) && VEC == 4\n__global__ void k(float4 *x) { for (int i = 0; i < 2; i++) {} }\n"
            "#elif VEC == 2 // a comment that ends the line\n"
            "__global__ void k(float2 *x) { for (int i = 0; i < 16; i++) {} }\n"
            "#else\n/* several\n   lines */ __global__ void k(float *x) { for (int i = 0; i < VEC; i++) {} }\n#endif\n")
    trips = {}
    for header in ("#define VEC 4\n#define ALGO_wide 1\n", "#define VEC 2\n#define ALGO_narrow 1\n",
                   "#define VEC 4\n#define ALGO_narrow 1\n", "#define VEC 8\n", "#define VEC 4 // four\n#define ALGO_wide 1\n"):
        trips[header] = (_feature(header + body, "max_trip"), _feature(header + body, "vector4"))
    assert list(trips.values()) == [(2, 1), (16, 0), (4, 0), (8, 0), (2, 1)]


def test_a_batch_gives_each_request_the_row_it_gets_alone():
    """features_matrix works out what a batch's requests share once; requests of two problems and two
    launch plans in one batch still get their own rows."""
    import numpy as np

    from search_engine.surrogates.base import ForecastRequest
    from search_engine.surrogates.features import features_matrix, request_features

    source = "#define ITEMS {}\n__global__ void k(const float *x, float *y) {{ for (int i = 0; i < ITEMS; i++) y[i] = x[i]; }}"
    reference = {"source": source.format(1), "launch": [{"kernel": "k", "block": ["256"], "grid": ["n / 256"]}]}
    other_reference = {"source": source.format(2), "launch": [{"kernel": "k", "block": ["128"], "grid": ["n / 128"]}]}
    problems = [{"sizes": {"n": 1 << 20}, "roofline": {"bytes": "8 * n"}},
                {"sizes": {"n": 1 << 16}, "roofline": {"bytes": "8 * n"}}]
    requests = []
    for i in range(12):
        block = 64 * (1 + i % 3)
        requests.append(ForecastRequest(
            reference=reference if i % 2 else other_reference, problem=problems[i % 4 // 2],
            candidate={"source": source.format(i), "launch": [{"kernel": "k", "block": [str(block)], "grid": [f"n / {block}"]}]},
            reference_ms=0.5 if i % 2 else 0.25))
    alone = np.vstack([request_features(q) for q in requests])
    np.testing.assert_array_equal(features_matrix(requests), alone)
    assert len({tuple(np.nan_to_num(row)) for row in alone}) == len(requests)


@pytest.mark.parametrize("source", [
    # a product split by a directive: "3 *" in one piece, "5" in the next
    "#define A 4\nint x = 3 *\n#if A == 4\n5;\n#else\n6;\n#endif\n",
    "#define A 4\nint y = (2)\n#if A\n* 7;\n#endif\n",
    # a macro next to a directive, and one that is not a plain name
    "#define N 8\n#pragma unroll\nfor (int i = 0; i < N*2; i++) {}\n#define M (N * 4)\nint z = M;\n",
    "#define A-B 3\nint w = A-B * 2;\n",
])
def test_code_prepared_piece_by_piece_is_the_code_prepared_whole(source):
    from search_engine.surrogates import features

    code, defines = features._preprocess(source)
    assert features._prepared(source) == _plain_fold(features._substitute_defines(code, defines))


def test_a_product_split_by_a_directive_is_still_folded():
    from search_engine.surrogates.features import _prepared

    assert "int x = 15;" in _prepared("#define A 4\nint x = 3 *\n#if A == 4\n5;\n#else\n6;\n#endif\n").replace("\n", "")


def test_source_counts_summed_over_pieces_are_those_of_every_token_of_the_code():
    """_source_facts counts only the tokens _count_source reads, piece by piece; a token that
    _count_source comes to read without being added to _LOOKED_UP would make this fail."""
    from collections import Counter
    from pathlib import Path

    from search_engine.surrogates import features

    folder = Path(__file__).resolve().parents[2] / "kernellab" / "problems"
    sources = [p.read_text() for p in sorted(folder.glob("*/*.cu"))]
    sources.append("#define W 4\n__global__ void k(float4 *x, double *d) {\n#if W == 4\n"
                   "  float v = __shfl_xor_sync(0xffffffff, x[0].x, 1) ? __expf(1.0f) : 2 / 3 % 4;\n#endif\n"
                   "  atomicAdd(d, 1.0); __syncthreads(); wmma::mma_sync(a, b, c, d);\n}\n")
    assert len(sources) > 10
    for source in sources:
        code = features._prepared(source)
        every = Counter(features._COUNTED_TOKEN.findall(code))
        plain = features._count_source(code, every)
        facts, load = features._source_facts.__wrapped__(source)
        assert [facts[features.SOURCE_FEATURES.index(name)] for name in features.SOURCE_COUNTS] == \
            [plain[name] for name in features.SOURCE_COUNTS]
        assert load == features._widest_load(every)
