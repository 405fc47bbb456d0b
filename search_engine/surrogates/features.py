# Over 400 lines on purpose: every feature a saved model reads, so the model and its features change together.
"""Numeric features of a forecast request, shared by the learned and the roofline surrogates.

From the source (after a small preprocessor applies the variant's #defines): memory operations,
vector widths, shared memory, barriers, unrolling, literal loop trip counts, shuffles, atomics,
tensor-core intrinsics. From the compiler: registers, spills, shared memory. From the launch plan
evaluated at the problem's sizes: block and grid sizes, waves, an occupancy estimate. From the
hardware and the roofline formulas: bandwidth, peak, intensity, the reference's distance to the
roofline. Candidate features also appear as differences against the reference.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from functools import lru_cache

import numpy as np

from klexpr import ExpressionError, evaluate
from search_engine.candidates import Candidate

# Hopper-class defaults when the hardware dict does not say (an H200: 132 SMs, 4.8 TB/s).
DEFAULT_HARDWARE = {"sm_count": 132, "memory_bandwidth_gbs": 4800.0, "fp32_tflops": 67.0,
                    "max_threads_per_sm": 2048, "registers_per_sm": 65536, "shared_per_sm_bytes": 233472,
                    "max_blocks_per_sm": 32, "compute_capability": "9.0"}

_MACRO_DEPTH = 8
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)\s*(.*)$")

# The tokens the source counts read: identifiers and the punctuation counted ("[", "?", "/", "%").
# Numbers and other punctuation are never looked up, so they are not collected (a third of the work);
# an identifier is matched the same as by [A-Za-z_]\w*|\d+|\S, whose \d+ only kept digits apart.
_COUNTED_TOKEN = re.compile(r"[A-Za-z_]\w*|[\[?/%]")
# A word boundary written after the first literal (a look-behind) rather than before it: the same
# matches, but a pattern that starts with a literal lets the regex engine skip to it (10x faster).
_CONST_PTR = re.compile(r"const(?<!\wconst)\s+\w+\s*\*")
_GRID_STRIDE = re.compile(r"gridDim\.x\s*\*\s*blockDim\.x|blockDim\.x\s*\*\s*gridDim\.x")
_EXTERN_SHARED = re.compile(r"extern\s+__shared__")
_PRAGMA_UNROLL = re.compile(r"#pragma\s+unroll")
_VECTOR = {"float4", "int4", "uint4", "double2", "float2", "int2", "half2", "__half2", "__nv_bfloat162"}
_VECTOR4 = {"float4", "int4", "uint4"}
_HALF = {"half", "__half", "__nv_bfloat16", "half2", "__half2"}
_FAST = {"__expf", "__logf", "__sinf", "__cosf", "__fdividef", "__powf", "__fmaf_rn", "__frcp_rn", "__fsqrt_rn",
         "rsqrtf"}
_TENSOR = {"wmma", "mma_sync", "ldmatrix", "wgmma", "load_matrix_sync", "store_matrix_sync"}
_CP_ASYNC = {"__pipeline_memcpy_async", "memcpy_async", "pipeline"}
_LOAD_BYTES = {"float4": 16, "int4": 16, "uint4": 16, "double2": 16, "float2": 8, "int2": 8, "uint2": 8,
               "double": 8, "half2": 4, "__half2": 4, "__nv_bfloat162": 4}

SOURCE_COUNTS = ["index_ops", "vector_types", "vector4", "reinterpret", "shared_decl", "extern_shared",
                 "syncthreads", "syncwarp", "pragma_unroll", "for_loops", "while_loops", "branches", "ternaries",
                 "shuffles", "atomics", "tensor_core", "ldg", "restrict", "const_ptr", "cp_async", "half_types",
                 "fast_intrinsics", "fma", "kernels", "device_functions", "grid_stride", "launch_bounds",
                 "thread_idx", "double_math", "divisions_mod"]


def _count_source(code: str, counts: Counter) -> dict[str, float]:
    """The SOURCE_COUNTS of prepared code, given the count of each of its tokens."""

    def total(names) -> int:
        return sum(counts.get(n, 0) for n in names)

    shuffles = atomics = 0
    for token, count in counts.items():  # one pass for both prefixes
        if token[:6] == "__shfl":
            shuffles += count
        elif token[:6] == "atomic":
            atomics += count

    values = {
        "index_ops": counts.get("[", 0), "vector_types": total(_VECTOR), "vector4": total(_VECTOR4),
        "reinterpret": counts.get("reinterpret_cast", 0), "shared_decl": counts.get("__shared__", 0),
        "extern_shared": len(_EXTERN_SHARED.findall(code)), "syncthreads": counts.get("__syncthreads", 0),
        "syncwarp": counts.get("__syncwarp", 0), "pragma_unroll": len(_PRAGMA_UNROLL.findall(code)),
        "for_loops": counts.get("for", 0), "while_loops": counts.get("while", 0), "branches": counts.get("if", 0),
        "ternaries": counts.get("?", 0), "shuffles": shuffles, "atomics": atomics,
        "tensor_core": total(_TENSOR) + code.count("mma.sync"), "ldg": counts.get("__ldg", 0),
        "restrict": counts.get("__restrict__", 0), "const_ptr": len(_CONST_PTR.findall(code)),
        "cp_async": total(_CP_ASYNC) + code.count("cp.async"), "half_types": total(_HALF),
        "fast_intrinsics": total(_FAST), "fma": counts.get("fmaf", 0) + counts.get("fma", 0),
        "kernels": counts.get("__global__", 0), "device_functions": counts.get("__device__", 0),
        "grid_stride": len(_GRID_STRIDE.findall(code)), "launch_bounds": counts.get("__launch_bounds__", 0),
        "thread_idx": counts.get("threadIdx", 0), "double_math": counts.get("double", 0),
        "divisions_mod": counts.get("/", 0) + counts.get("%", 0),
    }
    return {k: float(v) for k, v in values.items()}


_FOR_HEADER = re.compile(r"for(?<!\wfor)\s*\(\s*(?:int|unsigned|long|size_t|auto)?\s*\w+\s*=\s*(\d+)\s*;\s*\w+\s*(<=?)\s*(\d+)\s*;")

SOURCE_FEATURES = SOURCE_COUNTS + ["lines", "literal_loops", "max_trip", "sum_trip", "log_product_trip",
                                           "shared_static_bytes"]
LAUNCH_FEATURES = ["launches", "threads_per_block", "grid_blocks", "log_total_threads", "dyn_shared_bytes",
                   "block_dims", "grid_dims", "waves", "tail_efficiency", "work_per_thread_log"]
COMPILER_FEATURES = ["registers", "static_shared_bytes", "spill_stores", "spill_loads", "stack_bytes",
                     "occupancy", "blocks_per_sm", "compile_option_fast_math", "compile_option_maxrreg"]
# Memory-level parallelism, the usual limit of memory-bound kernels (Little's law): the threads
# resident on an SM, the widest load type, and their product with the literal trip counts.
PARALLELISM_FEATURES = ["sm_fill", "log_resident_threads_per_sm", "load_bytes", "log_bytes_in_flight_per_sm"]
HARDWARE_FEATURES = ["sm_count", "bandwidth_gbs", "fp32_tflops", "cc_major"]
PROBLEM_FEATURES = ["log_flops", "log_bytes", "log_intensity", "log_roofline_ms", "log_reference_headroom",
                    "log_reference_ms"]
# From the reference's Nsight Compute profile (ForecastRequest.reference_profile), the same for every candidate of
# a problem: how near its rooflines the reference runs and how its loads are served. Whether a staged tile can
# beat loads through the cache turns on the last (docs/search.md, "The reference's profile as features").
# Read only by LearnedSurrogate(reference_profile=True); NaN where the reference was not profiled.
REFERENCE_PROFILE_COUNTERS = {
    "ref_l1_hit_pct": "l1tex__t_sector_hit_rate.pct",
    "ref_l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "ref_dram_pct_of_peak": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "ref_sm_pct_of_peak": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "ref_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "ref_long_scoreboard_per_issue": "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
}
REFERENCE_PROFILE_FEATURES = list(REFERENCE_PROFILE_COUNTERS) + ["ref_sectors_per_load", "ref_log_dram_over_roofline"]
# Of those, the four that follow from the reference's access pattern and launch and read nearly alike on GPUs of one
# chip with different memory (an H100 and an H200); the other four follow the memory's speed (docs/search.md,
# "Counters that carry from one card to another"). LearnedSurrogate(reference_counters="portable") reads these only.
PORTABLE_REFERENCE_PROFILE_FEATURES = ["ref_l1_hit_pct", "ref_occupancy_pct", "ref_sectors_per_load",
                                       "ref_log_dram_over_roofline"]
# LearnedSurrogate(reference_counters=...): which of the reference's counters its model reads
REFERENCE_COUNTER_SETS = {"all": REFERENCE_PROFILE_FEATURES, "portable": PORTABLE_REFERENCE_PROFILE_FEATURES}
# LearnedSurrogate(reference_profile=...) of the app and the benchmarks (surrogates.learned reads these): the
# reference's Nsight Compute counters as features, chosen by protocol 26 on eleven validation families with the
# counters read on an H100 standing in for the H200 (docs/search.md, "The reference's profile, read on an H100");
# protocol 27 tried the H200's own counters and kept the H100's.
DEFAULT_REFERENCE_PROFILE = True
# LearnedSurrogate(reference_counters=...): "all" eight counters, or the four "portable" ones; "portable" chosen by
# protocol 28 on the eleven validation families (docs/search.md, "Counters that carry from one card to another").
DEFAULT_REFERENCE_COUNTERS = "portable"
# every counter reference_profile_features reads
REFERENCE_PROFILE_INPUTS = tuple(REFERENCE_PROFILE_COUNTERS.values()) + (
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "dram__bytes_read.sum", "dram__bytes_write.sum")


def _preprocess(source: str) -> tuple[str, dict[str, str]]:
    """Apply #define/#if/#ifdef/#elif/#else/#endif of the source to itself; returns code and defines."""
    pieces, defines = _preprocess_pieces(source)
    return "\n".join(pieces), defines


def _preprocess_pieces(source: str) -> tuple[list[str], dict[str, str]]:
    """_preprocess's code as the pieces it joins with newlines: runs of code lines (the same string
    objects for every variant of a family) and the directive lines kept."""
    knob_lines, body = _split_knob_defines(source)
    defines: dict[str, str] = {}
    out: list[str] = []
    stack: list[tuple[bool, bool]] = []  # (this branch active, some branch already taken)
    active = True
    for code, directive, rest, line in _source_lines(knob_lines) + _body_lines(body):
        if directive is None:
            if active:
                out.append(code)
            continue
        if directive in ("if", "ifdef", "ifndef"):
            if directive == "ifdef":
                cond = rest.split()[0] in defines if rest else False
            elif directive == "ifndef":
                cond = rest.split()[0] not in defines if rest else True
            else:
                cond = _condition(rest, defines)
            stack.append((active, cond))
            active = active and cond
        elif directive == "elif":
            if not stack:
                continue
            parent, taken = stack[-1]
            cond = not taken and _condition(rest, defines)
            stack[-1] = (parent, taken or cond)
            active = parent and cond
        elif directive == "else":
            if not stack:
                continue
            parent, taken = stack[-1]
            stack[-1] = (parent, True)
            active = parent and not taken
        elif directive == "endif":
            if stack:
                parent, _ = stack.pop()
                active = parent
        elif directive == "define" and active:
            parts = rest.split(None, 1)
            if parts and "(" not in parts[0]:
                defines[parts[0]] = parts[1].strip() if len(parts) > 1 else "1"
        elif directive == "undef" and active:
            defines.pop(rest.split()[0] if rest else "", None)
        elif active:
            out.append(line)  # pragmas and includes stay
    return out, defines


# A rendered variant is its family's source behind one "#define KNOB value" line per knob. Those
# lines hold no comment, so the rest of the source is read (comments, lines, directives) once per
# family, and each variant only walks its directives.
_KNOB_DEFINE = re.compile(r"[ \t]*#[ \t]*define[ \t]+[A-Za-z_][A-Za-z0-9_]*(?:[ \t]+[A-Za-z0-9_.+\-]+)?[ \t]*\n")


def _split_knob_defines(source: str) -> tuple[list[str], str]:
    """The leading plain #define lines of a source (no comment can start in them), and the rest."""
    lines, position = [], 0
    while match := _KNOB_DEFINE.match(source, position):
        lines.append(source[position:match.end() - 1])
        position = match.end()
    return lines, source[position:]


def _source_lines(lines: list[str]) -> tuple[tuple, ...]:
    """(code, None, None, None) for each run of code lines, (None, directive, rest, line) for each
    directive line."""
    items, code = [], []
    for line in lines:
        match = _DIRECTIVE.match(line) if "#" in line else None
        if not match:
            code.append(line)
            continue
        if code:
            items.append(("\n".join(code), None, None, None))
            code = []
        items.append((None, match.group(1), match.group(2).strip(), line))
    if code:
        items.append(("\n".join(code), None, None, None))
    return tuple(items)


@lru_cache(maxsize=64)
def _body_lines(body: str) -> tuple[tuple, ...]:
    return _source_lines(_COMMENT.sub(" ", body).splitlines())


_DEFINED = re.compile(r"defined\s*\(\s*(\w+)\s*\)|defined\s+(\w+)")


def _condition(text: str, defines: dict[str, str]) -> bool:
    # The variants of a family repeat the same conditions over a few macro values: the rewritten
    # expression and its value are cached by what they depend on, not by source.
    tested = _defined_names(text)
    expr, names = _condition_expression(text, tuple(name in defines for name in tested))
    resolved: dict[str, object] = {}
    values = tuple((name, _define_value(name, defines, resolved=resolved)) for name in names)
    return _condition_value(expr, values)


@lru_cache(maxsize=1024)
def _defined_names(text: str) -> tuple[str, ...]:
    """The macros a #if condition tests with defined(), in order."""
    return tuple(m.group(1) or m.group(2) for m in _DEFINED.finditer(text))


@lru_cache(maxsize=4096)
def _condition_expression(text: str, defined: tuple[bool, ...]) -> tuple[str, tuple[str, ...]]:
    """A #if condition as an expression (defined() answered by `defined`, C operators rewritten),
    and the macro names it reads."""
    answers = iter(defined)
    expr = _DEFINED.sub(lambda m: "1" if next(answers) else "0", text)
    expr = expr.replace("&&", " and ").replace("||", " or ")
    expr = re.sub(r"!(?!=)", " not ", expr)
    expr = re.sub(r"(?<!/)/(?!/)", "//", expr)
    expr = re.sub(r"(\d+)[uUlL]+\b", r"\1", expr)
    return expr, tuple(sorted(set(re.findall(r"[A-Za-z_]\w*", expr)) - {"and", "or", "not"}))


@lru_cache(maxsize=4096)
def _condition_value(expr: str, values: tuple) -> bool:
    try:
        return bool(evaluate(expr, dict(values)))
    except ExpressionError:
        return False


def _define_value(name: str, defines: dict[str, str], depth: int = 0, resolved: dict | None = None):
    """The number a macro stands for; 0 when it is not an integer expression or when resolving it goes
    deeper than _MACRO_DEPTH (macros that refer to each other would otherwise never finish).
    `resolved` remembers macros already worked out, so each is expanded once."""
    resolved = {} if resolved is None else resolved
    if name in resolved:
        return resolved[name]
    value = defines.get(name)
    if value is None or depth > _MACRO_DEPTH:
        return 0
    try:
        result = int(value.rstrip("uUlL"), 0)
    except ValueError:
        names = {k: _define_value(k, defines, depth + 1, resolved) for k in set(re.findall(r"[A-Za-z_]\w*", value))}
        try:
            result = evaluate(value.replace("/", "//"), names)
        except ExpressionError:
            result = 0
    resolved[name] = result
    return result


def _numeric_defines(defines: dict[str, str]) -> dict[str, int]:
    numeric = {}
    resolved: dict[str, object] = {}
    for name in defines:
        value = _define_value(name, defines, resolved=resolved)
        if isinstance(value, int) and not isinstance(value, bool):
            numeric[name] = value
    return numeric


def _substitute_defines(code: str, defines: dict[str, str], numeric: dict[str, int] | None = None) -> str:
    numeric = _numeric_defines(defines) if numeric is None else numeric
    if not numeric:
        return code

    def substitute(match: re.Match) -> str:
        start = match.start()
        if start and (code[start - 1].isalnum() or code[start - 1] == "_"):  # inside a longer name
            return match.group(1)
        return str(numeric[match.group(1)])

    return _macro_pattern(tuple(sorted(numeric, key=len, reverse=True))).sub(substitute, code)


@lru_cache(maxsize=256)
def _macro_pattern(names: tuple[str, ...]) -> re.Pattern:
    """The names as whole words. The leading word boundary is checked by the caller: a pattern that
    starts with the names' first letters lets the regex engine skip to them, one that starts with
    a boundary tries every position (the same matches, as a name cannot start inside another word)."""
    return re.compile("(" + "|".join(re.escape(n) for n in names) + r")\b")


_PRODUCT = re.compile(r"(\d)(?<!\w\d)(\d*)\s*\*\s*(\d+)\b")  # \b(\d+)\s*\*\s*(\d+)\b, starting with a digit
_PARENTHESISED_NUMBER = re.compile(r"\((\d+)\)")


def _fold_products(code: str) -> str:
    """Fold literal products such as 4*8 so that loop bounds read as numbers."""
    while True:
        code, products = _PRODUCT.subn(lambda m: str(int(m.group(1) + m.group(2)) * int(m.group(3))), code)
        code, parentheses = _PARENTHESISED_NUMBER.subn(r"\1", code)
        if not products and not parentheses:
            return code


# Everything read from one source, prepared once and cached per source. The cache holds more sources
# than the largest recorded family has variants (1,014, sgemm) and than a run forecasts, so a family's
# warm pass never evicts what it is about to read again, and it stays bounded.
SOURCE_CACHE_SIZE = 4096


def _prepared(source: str) -> str:
    """The code the compiler sees: directives applied, numeric macros substituted, literal products folded."""
    return "\n".join(_prepared_pieces(source))


def _prepared_pieces(source: str) -> list[str]:
    """_prepared's code as the pieces it joins with newlines (one piece where it was folded whole).

    Piece by piece: a macro name never spans the newline between two pieces, so substituting each
    piece gives the whole code's substitution, and a piece with the same macro values is substituted
    and folded once. A literal product could span a newline ("4 *" then "8"): then the whole code is
    folded as one."""
    pieces, defines = _preprocess_pieces(source)
    numeric = _numeric_defines(defines)
    names = frozenset(numeric)
    if not _plain_names(names):
        return [_fold_products(_substitute_defines("\n".join(pieces), defines, numeric))]
    substituted = [_substituted_piece(piece, numeric, names) for piece in pieces]
    folded = [_folded_piece(piece) for piece in substituted]
    if _products_may_cross(folded):
        return [_fold_products("\n".join(substituted))]
    return folded


_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PIECE_NAME = re.compile(r"[A-Za-z_]\w*")


def _substituted_piece(piece: str, numeric: dict[str, int], names: frozenset[str]) -> str:
    used = _piece_macros(piece, names)
    return _substitute_piece(piece, tuple((name, numeric[name]) for name in used)) if used else piece


@lru_cache(maxsize=256)
def _plain_names(names: frozenset[str]) -> bool:
    return all(_PLAIN_NAME.fullmatch(name) for name in names)


@lru_cache(maxsize=SOURCE_CACHE_SIZE)
def _piece_macros(piece: str, names: frozenset[str]) -> tuple[str, ...]:
    """The macro names (of `names`) that a piece may hold, sorted: a family's variants define the same
    names with other values, so this is worked out once per piece."""
    return tuple(sorted(_piece_names(piece) & names))


@lru_cache(maxsize=SOURCE_CACHE_SIZE)
def _piece_names(piece: str) -> frozenset[str]:
    """Every word of a piece that could be a macro name (a superset of those a substitution replaces)."""
    return frozenset(_PIECE_NAME.findall(piece))


@lru_cache(maxsize=SOURCE_CACHE_SIZE)
def _substitute_piece(piece: str, used: tuple[tuple[str, int], ...]) -> str:
    return _substitute_defines(piece, {}, dict(used))


@lru_cache(maxsize=SOURCE_CACHE_SIZE)
def _folded_piece(piece: str) -> str:
    return _fold_products(piece)


@lru_cache(maxsize=SOURCE_CACHE_SIZE)
def _piece_ends(piece: str) -> tuple[str, str] | None:
    text = piece.strip()
    return (text[0], text[-1]) if text else None


def _products_may_cross(pieces: list[str]) -> bool:
    """Whether a literal product could span the newline between two folded pieces: a digit then a
    "*" there, or a "*" then a digit (blank pieces between them do not count). Folding only turns
    ")" into digits and keeps digits and "*" at a piece's ends, so what holds after folding each
    piece held at every step of folding the whole."""
    last = None
    for piece in pieces:
        ends = _piece_ends(piece)
        if ends is None:
            continue
        first = ends[0]
        if last is not None and ((last == "*" and first.isalnum()) or (last.isalnum() and first == "*")):
            return True
        last = ends[1]
    return False


@lru_cache(maxsize=SOURCE_CACHE_SIZE)
def _source_facts(source: str) -> tuple[tuple[float, ...], float]:
    """(the SOURCE_FEATURES values, the widest load type in bytes) of a source."""
    pieces = _prepared_pieces(source)
    code = "\n".join(pieces)
    tokens = _looked_up_tokens(pieces)
    values = _count_source(code, tokens)
    values["lines"] = float(code.count("\n") + 1)
    trips = []
    for start, op, end in _FOR_HEADER.findall(code):
        trip = int(end) - int(start) + (1 if op == "<=" else 0)
        if trip > 0:
            trips.append(trip)
    values["literal_loops"] = float(len(trips))
    values["max_trip"] = float(max(trips)) if trips else 0.0
    values["sum_trip"] = float(sum(trips))
    values["log_product_trip"] = float(sum(math.log(t) for t in trips))
    shared = 0
    for m in re.finditer(r"__shared__\s+(?:__align__\(\d+\)\s*)?(\w+)\s+\w+((?:\s*\[\s*\d+\s*\])+)", code):
        size = {"double": 8, "float4": 16, "int4": 16, "half": 2, "__half": 2, "char": 1}.get(m.group(1), 4)
        for dim in re.findall(r"\d+", m.group(2)):
            size *= int(dim)
        shared += size
    values["shared_static_bytes"] = float(shared)
    return tuple(values[n] for n in SOURCE_FEATURES), _widest_load(tokens)


# The tokens _count_source and _widest_load read; the names starting with "__shfl" or "atomic" are
# counted under those two prefixes, which is what _count_source sums. A token _count_source comes to
# read must be added here (tests compare with counting every token of the code).
_LOOKED_UP = tuple(sorted({"[", "?", "/", "%", "reinterpret_cast", "__shared__", "__syncthreads", "__syncwarp",
                           "for", "while", "if", "__ldg", "__restrict__", "fmaf", "fma", "__global__", "__device__",
                           "__launch_bounds__", "threadIdx", "double"}
                          | _VECTOR | _VECTOR4 | _HALF | _FAST | _TENSOR | _CP_ASYNC | set(_LOAD_BYTES)))
_PREFIXES = ("__shfl", "atomic")


def _looked_up_tokens(pieces: list[str]) -> dict[str, int]:
    """The counts of the tokens looked up, summed over the pieces (no token spans the newline
    between two), with the zero ones left out as a Counter of the code's tokens would."""
    total = np.zeros(len(_LOOKED_UP) + len(_PREFIXES), dtype=np.int64)
    for piece in pieces:
        total += _piece_token_counts(piece)
    return {name: int(count) for name, count in zip(_LOOKED_UP + _PREFIXES, total) if count}


@lru_cache(maxsize=SOURCE_CACHE_SIZE)
def _piece_token_counts(piece: str) -> np.ndarray:
    counts = Counter(_COUNTED_TOKEN.findall(piece))
    prefixed = [sum(c for token, c in counts.items() if token[:len(prefix)] == prefix) for prefix in _PREFIXES]
    return np.array([counts.get(name, 0) for name in _LOOKED_UP] + prefixed, dtype=np.int64)


def source_features(source: str) -> np.ndarray:
    return np.asarray(_source_facts(source)[0], dtype=float)


def _hardware(hardware: dict) -> dict:
    merged = dict(DEFAULT_HARDWARE)
    merged.update({k: v for k, v in (hardware or {}).items() if v is not None})
    return merged


def _cc_major(value) -> float:
    try:
        return float(str(value).split(".")[0])
    except ValueError:
        return math.nan


def launch_features(candidate: Candidate, sizes: dict, hardware: dict, flops: float | None) -> dict:
    hw = _hardware(hardware)
    threads, blocks, dyn_shared = [], [], []
    block_dims = grid_dims = 0
    launches = 0
    for step in candidate.get("launch") or []:
        if "kernel" not in step:
            continue
        launches += 1
        try:
            block = [int(evaluate(b, sizes)) for b in step.get("block") or [1]]
            grid = [int(evaluate(g, sizes)) for g in step.get("grid") or [1]]
            shared = int(evaluate(step.get("shared", "0") or "0", sizes))
        except (ExpressionError, ValueError):
            continue
        threads.append(math.prod(block))
        blocks.append(math.prod(grid))
        dyn_shared.append(shared)
        block_dims = max(block_dims, len(block))
        grid_dims = max(grid_dims, len(grid))
    if not threads:
        return {name: math.nan for name in LAUNCH_FEATURES} | {"launches": float(launches)}
    main = int(np.argmax([t * b for t, b in zip(threads, blocks)]))
    tpb, grid_blocks = threads[main], blocks[main]
    per_sm = max(1, min(hw["max_blocks_per_sm"], hw["max_threads_per_sm"] // max(1, tpb)))
    slots = hw["sm_count"] * per_sm
    waves = grid_blocks / slots
    tail = waves / math.ceil(waves) if waves > 0 else math.nan
    total = sum(t * b for t, b in zip(threads, blocks))
    return {
        "launches": float(launches), "threads_per_block": float(tpb), "grid_blocks": float(grid_blocks),
        "log_total_threads": math.log(max(total, 1)), "dyn_shared_bytes": float(max(dyn_shared)),
        "block_dims": float(block_dims), "grid_dims": float(grid_dims), "waves": waves, "tail_efficiency": tail,
        "work_per_thread_log": math.log(flops / total) if flops and total else math.nan,
    }


def compiler_features(facts: dict | None, candidate: Candidate, threads_per_block: float,
                      dyn_shared: float, hardware: dict) -> dict:
    hw = _hardware(hardware)
    facts = facts or {}
    regs = facts.get("registers")
    static_shared = facts.get("shared_bytes")
    options = " ".join(candidate.get("compile_options") or [])
    out = {
        "registers": float(regs) if regs is not None else math.nan,
        "static_shared_bytes": float(static_shared) if static_shared is not None else math.nan,
        "spill_stores": float(facts.get("spill_stores", math.nan) if facts.get("spill_stores") is not None else math.nan),
        "spill_loads": float(facts.get("spill_loads", math.nan) if facts.get("spill_loads") is not None else math.nan),
        "stack_bytes": float(facts.get("stack_bytes", math.nan) if facts.get("stack_bytes") is not None else math.nan),
        "compile_option_fast_math": 1.0 if "fast_math" in options else 0.0,
        "compile_option_maxrreg": float(re.search(r"maxrregcount=(\d+)", options).group(1))
        if re.search(r"maxrregcount=(\d+)", options) else 0.0,
    }
    tpb = threads_per_block if threads_per_block and not math.isnan(threads_per_block) else math.nan
    if math.isnan(tpb):
        out["occupancy"] = out["blocks_per_sm"] = math.nan
        return out
    limits = [hw["max_blocks_per_sm"], hw["max_threads_per_sm"] // max(1, int(tpb))]
    if regs:
        per_warp = math.ceil(regs * 32 / 256) * 256  # registers are allocated per warp in units of 256
        limits.append(hw["registers_per_sm"] // max(1, per_warp * math.ceil(tpb / 32)))
    shared = (static_shared or 0) + (dyn_shared if not math.isnan(dyn_shared) else 0)
    if shared:
        limits.append(int(hw["shared_per_sm_bytes"] // (shared + 1024)))
    blocks_per_sm = max(0, min(limits))
    out["blocks_per_sm"] = float(blocks_per_sm)
    out["occupancy"] = blocks_per_sm * tpb / hw["max_threads_per_sm"]
    return out


def _widest_load(tokens: Counter) -> float:
    """The widest load type the prepared code names, in bytes (4, a float, when it names none)."""
    widths = [b for t, b in _LOAD_BYTES.items() if t in tokens]
    return float(max(widths)) if widths else 4.0


def _load_bytes(source: str) -> float:
    return _source_facts(source)[1]


def parallelism_features(source: str, launch: dict, comp: dict, hardware: dict) -> dict:
    hw = _hardware(hardware)
    tpb, grid = launch.get("threads_per_block"), launch.get("grid_blocks")
    per_sm = comp.get("blocks_per_sm")
    nan = {name: math.nan for name in PARALLELISM_FEATURES}
    if not tpb or not grid or math.isnan(tpb) or math.isnan(grid):
        return nan
    sms = float(hw["sm_count"])
    blocks = min(per_sm, math.ceil(grid / sms)) if per_sm and not math.isnan(per_sm) else math.ceil(grid / sms)
    resident = max(1.0, blocks * tpb)
    counts, load = _source_facts(source)
    trips = counts[SOURCE_FEATURES.index("max_trip")]
    in_flight = resident * load * max(1.0, min(float(trips), 16.0))
    return {"sm_fill": min(1.0, grid / sms), "log_resident_threads_per_sm": math.log(resident),
            "load_bytes": load, "log_bytes_in_flight_per_sm": math.log(in_flight)}


def problem_features(problem: dict, hardware: dict, reference_ms: float | None) -> dict:
    hw = _hardware(hardware)
    sizes = problem.get("sizes") or {}
    roofline = problem.get("roofline") or {}
    # Either expressions of the sizes under "roofline", or numbers already evaluated under flops/bytes.
    flops = _maybe_eval(roofline.get("flops", problem.get("flops")), sizes)
    bytes_ = _maybe_eval(roofline.get("bytes", problem.get("bytes")), sizes)
    bandwidth = float(hw.get("memory_bandwidth_gbs") or math.nan)
    peak = float(hw.get("fp32_tflops") or math.nan)
    roof_ms = math.nan
    if bytes_ or flops:
        t_mem = (bytes_ or 0) / (bandwidth * 1e9) * 1e3 if bytes_ else 0.0
        t_flop = (flops or 0) / (peak * 1e12) * 1e3 if flops else 0.0
        roof_ms = max(t_mem, t_flop)
    return {
        "log_flops": math.log(flops) if flops else math.nan,
        "log_bytes": math.log(bytes_) if bytes_ else math.nan,
        "log_intensity": math.log(flops / bytes_) if flops and bytes_ else math.nan,
        "log_roofline_ms": math.log(roof_ms) if roof_ms and not math.isnan(roof_ms) else math.nan,
        "log_reference_headroom": math.log(reference_ms / roof_ms)
        if reference_ms and roof_ms and not math.isnan(roof_ms) else math.nan,
        "log_reference_ms": math.log(reference_ms) if reference_ms else math.nan,
    }


def reference_profile_inputs(profile: dict | None) -> dict | None:
    """The counters of a reference profile that its features read (a profile holds several hundred): what a run
    keeps in its saved state. None for no profile."""
    if not profile:
        return None
    return {name: profile[name] for name in REFERENCE_PROFILE_INPUTS if name in profile}


def reference_profile_features(profile: dict | None, problem: dict) -> np.ndarray:
    """REFERENCE_PROFILE_FEATURES of one reference profile ({counter: number}); NaN where a counter is missing.
    ref_sectors_per_load: 32-byte sectors per global load request (4 is a coalesced warp of floats);
    ref_log_dram_over_roofline: log of the DRAM bytes the reference moved over the roofline's bytes (0: it
    moves each byte once, as the roofline assumes)."""
    profile = profile or {}

    def number(name: str) -> float:
        value = profile.get(name)
        return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else math.nan

    row = [number(counter) for counter in REFERENCE_PROFILE_COUNTERS.values()]
    sectors = number("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")
    requests = number("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")
    row.append(sectors / requests if requests > 0 else math.nan)
    moved = number("dram__bytes_read.sum") + number("dram__bytes_write.sum")
    roofline = problem.get("roofline") or {}
    ideal = _maybe_eval(roofline.get("bytes", problem.get("bytes")), problem.get("sizes") or {})
    row.append(math.log(moved / ideal) if ideal and moved > 0 else math.nan)
    return np.array(row, dtype=float)


def _maybe_eval(expression, sizes) -> float | None:
    if expression is None:
        return None
    try:
        value = float(evaluate(expression, sizes))
    except (ExpressionError, ValueError):
        return None
    return value if value > 0 else None


def feature_names() -> list[str]:
    cand = [f"cand_{n}" for n in SOURCE_FEATURES + LAUNCH_FEATURES]
    delta = [f"delta_{n}" for n in SOURCE_FEATURES + LAUNCH_FEATURES]
    return (cand + delta + COMPILER_FEATURES + HARDWARE_FEATURES + PROBLEM_FEATURES + ["delta_registers"]
            + PARALLELISM_FEATURES)


def request_features(request, memo: dict | None = None) -> np.ndarray:
    """One row of features for a ForecastRequest (NaN where something is unknown). `memo` is a dict
    that features_matrix hands to every request of one batch: what the batch's requests share (the
    reference, problem and hardware objects, a launch plan) is worked out once."""
    memo = {} if memo is None else memo
    # By object: a batch's requests share the run's reference, problem and hardware dicts, and the
    # memo lives only as long as the batch, so an id cannot be reused for another object meanwhile.
    context_key = (id(request.reference), id(request.problem), id(request.hardware), request.reference_ms)
    context = memo.get(context_key)
    if context is None:
        context = memo[context_key] = _context_features(request)
    sizes, hw, problem, flops, ref_src, ref_l = context
    cand_src = source_features(request.candidate.get("source", ""))
    launch_key = (context_key, _launch_key(request.candidate.get("launch")))
    cand_launch = memo.get(launch_key)
    if cand_launch is None:
        cand_launch = memo[launch_key] = launch_features(request.candidate, sizes, request.hardware, flops)
    cand_l = np.array([cand_launch[n] for n in LAUNCH_FEATURES])
    comp = compiler_features(request.compiler_facts, request.candidate, cand_launch["threads_per_block"],
                             cand_launch["dyn_shared_bytes"], request.hardware)
    ref_regs = (request.reference_compiler_facts or {}).get("registers")
    parallelism = parallelism_features(request.candidate.get("source", ""), cand_launch, comp, hw)
    hardware = [float(hw["sm_count"]), float(hw["memory_bandwidth_gbs"]), float(hw["fp32_tflops"]),
                _cc_major(hw.get("compute_capability"))]
    row = np.concatenate([
        cand_src, cand_l, cand_src - ref_src, cand_l - ref_l,
        [comp[n] for n in COMPILER_FEATURES], hardware, [problem[n] for n in PROBLEM_FEATURES],
        [comp["registers"] - ref_regs if ref_regs is not None else math.nan],
        [parallelism[n] for n in PARALLELISM_FEATURES],
    ])
    return row.astype(float)


def _context_features(request) -> tuple:
    """What the features of a request take from its reference, problem and hardware."""
    sizes = (request.problem or {}).get("sizes") or {}
    hw = _hardware(request.hardware)
    problem = problem_features(request.problem or {}, request.hardware, request.reference_ms)
    flops = math.exp(problem["log_flops"]) if not math.isnan(problem["log_flops"]) else None
    ref_src = source_features(request.reference.get("source", ""))
    ref_launch = launch_features(request.reference, sizes, request.hardware, flops)
    return sizes, hw, problem, flops, ref_src, np.array([ref_launch[n] for n in LAUNCH_FEATURES])


def _launch_key(launch) -> tuple:
    """A launch plan as a hashable value: the fields launch_features reads from each step."""
    return tuple(("kernel" in step, repr(step.get("block")), repr(step.get("grid")), repr(step.get("shared", "0")))
                 for step in launch or [])


def features_matrix(requests) -> np.ndarray:
    if not requests:
        return np.zeros((0, len(feature_names())))
    memo: dict = {}
    return np.vstack([request_features(r, memo) for r in requests])


def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()
