"""Source and launch transforms for any uploaded kernel: no LLM, no knobs.

Launch configuration (block size, grid shape for grid-stride kernels), __restrict__ and const on
read-only pointers, __ldg loads, unrolling pragmas, __launch_bounds__, and compiler options
(-maxrregcount, --use_fast_math where the tolerance allows). Each proposal applies one transform to
the parent; the caller compiles and validates every proposal like any other candidate.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable

from klexpr import ExpressionError, parse_expression
from search_engine.candidates import Candidate, candidate_hash
from search_engine.generators.base import Proposal, ProposalContext

BLOCK_SIZES = (64, 128, 256, 512, 1024)
UNROLL_FACTORS = (2, 4, 8)
MAXRREG = (32, 64, 128)
WAVES = (1, 2, 4, 8)
LDG_TYPES = {"float", "double", "int", "unsigned", "unsigned int", "long long", "unsigned long long", "char",
             "short", "half", "__half", "__nv_bfloat16", "float2", "float4", "int2", "int4", "uint2", "uint4",
             "double2", "int8_t", "uint8_t", "int32_t", "uint32_t", "int64_t", "uint64_t"}
_KERNEL_HEAD = re.compile(
    r"(__global__\s+)((?:__launch_bounds__\s*\([^)]*\)\s*)?)((?:static\s+|inline\s+)*void\s+)"
    r"((?:__launch_bounds__\s*\([^)]*\)\s*)?)(\w+)\s*\(", re.S)
_ASSIGN = re.compile(r"\s*(?:\+\+|--|[+\-*/%&|^]=|<<=|>>=|=(?!=))")
_FAST_MATH_MIN_RTOL = 1e-5

Transform = tuple[str, Callable[[Candidate], Candidate | None]]


# ---- reading the source -----------------------------------------------------------------------

def _match_close(text: str, open_index: int, open_ch: str, close_ch: str) -> int:
    depth = 0
    for i in range(open_index, len(text)):
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i
    return -1


class KernelSite:
    """Where one __global__ kernel's head, parameter list and body are in the source."""

    def __init__(self, source: str, match: re.Match) -> None:
        self.name = match.group(5)
        self.head_start = match.start()
        self.bounds_before = match.group(2)
        self.bounds_after = match.group(4)
        self.params_open = match.end() - 1
        self.params_close = _match_close(source, self.params_open, "(", ")")
        brace = source.find("{", self.params_close)
        self.body_open = brace
        self.body_close = _match_close(source, brace, "{", "}") if brace != -1 else -1
        self.params_text = source[self.params_open + 1 : self.params_close]
        self.body = source[self.body_open : self.body_close + 1] if self.body_close != -1 else ""
        self.valid = self.params_close != -1 and self.body_close != -1

    @property
    def has_launch_bounds(self) -> bool:
        return bool(self.bounds_before.strip() or self.bounds_after.strip())


def kernel_sites(source: str) -> list[KernelSite]:
    sites = [KernelSite(source, m) for m in _KERNEL_HEAD.finditer(source)]
    return [s for s in sites if s.valid]


def _split_params(text: str) -> list[str]:
    return [p for p in (x.strip() for x in text.split(",")) if p and p != "void"]


def _param_name(param: str) -> str | None:
    match = re.search(r"(\w+)\s*(\[[^\]]*\])?\s*$", param)
    return match.group(1) if match else None


def _pointer_base_type(param: str) -> str:
    decl = re.sub(r"\b(const|__restrict__|__restrict|restrict|volatile)\b", " ", param.split("*")[0])
    return re.sub(r"\s+", " ", decl).strip()


def _is_written(body: str, name: str) -> bool:
    """Conservatively: True unless every use of the pointer is a plain indexed read."""
    for m in re.finditer(rf"(?<![\w.]){re.escape(name)}\b", body):
        before = body[: m.start()].rstrip()
        after_index = m.end()
        rest = body[after_index:]
        if re.match(r"\s*\[", rest):
            open_i = after_index + rest.index("[")
            close_i = _match_close(body, open_i, "[", "]")
            if close_i == -1:
                return True
            if _ASSIGN.match(body, close_i + 1) or before.endswith("&") or before.endswith("++") \
                    or before.endswith("--"):
                return True
            continue
        if re.search(r"reinterpret_cast<\s*const\s+[\w:]+\s*\*\s*>\s*\(\s*$", before):
            continue
        return True
    return False


# ---- transforms ---------------------------------------------------------------------------------

def _with_source(candidate: Candidate, source: str) -> Candidate:
    out = copy.deepcopy(candidate)
    out["source"] = source
    out["knobs"] = None
    return out


def _restrict_const(candidate: Candidate) -> Candidate | None:
    source = candidate["source"]
    edits = []
    for site in kernel_sites(source):
        params = _split_params(site.params_text)
        new_params = []
        for param in params:
            name = _param_name(param)
            if "*" not in param or not name:
                new_params.append(param)
                continue
            updated = param
            if not _is_written(site.body, name) and not re.match(r"\s*const\b", updated) \
                    and updated.count("*") == 1:
                updated = "const " + updated.lstrip()
            if "__restrict__" not in updated and updated.count("*") == 1:
                updated = updated.replace("*", "* __restrict__", 1)
            new_params.append(updated)
        if new_params != params:
            edits.append((site.params_open + 1, site.params_close, ", ".join(new_params)))
    return _with_source(candidate, _apply_edits(source, edits)) if edits else None


def _ldg(candidate: Candidate) -> Candidate | None:
    source = candidate["source"]
    edits = []
    for site in kernel_sites(source):
        body = site.body
        reads = []
        for param in _split_params(site.params_text):
            name = _param_name(param)
            if not name or param.count("*") != 1 or not re.match(r"\s*const\b", param):
                continue
            if _pointer_base_type(param) not in LDG_TYPES or _is_written(body, name):
                continue
            for m in re.finditer(rf"(?<![\w.&]){re.escape(name)}\s*\[", body):
                if body[: m.start()].rstrip().endswith("__ldg(&"):
                    continue
                close_i = _match_close(body, m.end() - 1, "[", "]")
                if close_i != -1:
                    reads.append((m.start(), close_i + 1))
        if not reads:
            continue
        new_body = body
        for start, end in sorted(reads, reverse=True):
            new_body = new_body[:start] + "__ldg(&" + new_body[start:end] + ")" + new_body[end:]
        edits.append((site.body_open, site.body_close + 1, new_body))
    return _with_source(candidate, _apply_edits(source, edits)) if edits else None


def _unroll(factor: int) -> Callable[[Candidate], Candidate | None]:
    def apply(candidate: Candidate) -> Candidate | None:
        source = candidate["source"]
        edits = []
        for site in kernel_sites(source):
            body = site.body
            new_body, count = _insert_unroll(body, factor)
            if count:
                edits.append((site.body_open, site.body_close + 1, new_body))
        return _with_source(candidate, _apply_edits(source, edits)) if edits else None
    return apply


def _insert_unroll(body: str, factor: int) -> tuple[str, int]:
    out, count, last = [], 0, 0
    for m in re.finditer(r"(?m)^([ \t]*)for\s*\(", body):
        previous_line = body[: m.start()].rstrip().rsplit("\n", 1)[-1].strip()
        if previous_line.startswith("#pragma unroll"):
            continue
        header_close = _match_close(body, m.end() - 1, "(", ")")
        header = body[m.end() : header_close] if header_close != -1 else ""
        if "gridDim" in header:
            continue  # a grid-stride loop runs a data-dependent number of times: unrolling it rarely helps
        out.append(body[last : m.start()])
        out.append(f"{m.group(1)}#pragma unroll {factor}\n")
        last = m.start()
        count += 1
    out.append(body[last:])
    return "".join(out), count


def _launch_bounds(min_blocks: int | None) -> Callable[[Candidate], Candidate | None]:
    def apply(candidate: Candidate) -> Candidate | None:
        source = candidate["source"]
        blocks = _literal_block_threads(candidate)
        edits = []
        for site in kernel_sites(source):
            if site.has_launch_bounds or site.name not in blocks:
                continue
            threads = blocks[site.name]
            text = f"__launch_bounds__({threads}{', ' + str(min_blocks) if min_blocks else ''}) "
            at = site.params_open - len(site.name)
            while at > 0 and source[at - 1].isspace():
                at -= 1
            head = source[site.head_start : site.params_open]
            name_at = site.head_start + head.rindex(site.name)
            edits.append((name_at, name_at, text))
        return _with_source(candidate, _apply_edits(source, edits)) if edits else None
    return apply


def _literal_block_threads(candidate: Candidate) -> dict[str, int]:
    """Kernel name -> threads per block, for kernels always launched with one literal block shape."""
    out: dict[str, int | None] = {}
    for step in candidate.get("launch") or []:
        if "kernel" not in step:
            continue
        block = step.get("block") or []
        try:
            threads = 1
            for b in block:
                threads *= int(b)
        except (TypeError, ValueError):
            threads = None
        name = step["kernel"]
        if name in out and out[name] != threads:
            threads = None
        out[name] = threads
    return {k: v for k, v in out.items() if v}


def _bodies(source: str) -> dict[str, str]:
    return {site.name: site.body for site in kernel_sites(source)}


def _block_size(new_size: int) -> Callable[[Candidate], Candidate | None]:
    """1-D blocks with a literal size that the grid expression divides by, in kernels that use blockDim."""
    def apply(candidate: Candidate) -> Candidate | None:
        source = candidate["source"]
        bodies = _bodies(source)
        out = copy.deepcopy(candidate)
        changed = False
        for step in out.get("launch") or []:
            if "kernel" not in step or len(step.get("block") or []) != 1:
                continue
            body = bodies.get(step["kernel"], "")
            try:
                old = int(step["block"][0])
            except (TypeError, ValueError):
                continue
            if old == new_size or "blockDim" not in body:
                continue
            if re.search(rf"(?<![\w.]){old}(?![\w.])", _strip_launch_bounds(body)):
                continue  # the kernel hard-codes the block size (a shared array, a loop bound)
            grid = [str(g) for g in step["grid"]]
            if not re.search(rf"(?<![\w.]){old}(?![\w.])", grid[0]):
                continue
            step["grid"] = [re.sub(rf"(?<![\w.]){old}(?![\w.])", str(new_size), grid[0])] + step["grid"][1:]
            step["block"] = [new_size]
            changed = True
        if not changed:
            return None
        out["source"] = _retarget_launch_bounds(source, out, new_size)
        out["knobs"] = None
        return out
    return apply


def _retarget_launch_bounds(source: str, candidate: Candidate, new_size: int) -> str:
    """A kernel's __launch_bounds__ must allow its new block size."""
    changed = {s["kernel"] for s in candidate.get("launch") or [] if s.get("block") == [new_size]}
    edits = []
    for site in kernel_sites(source):
        if site.name not in changed or not site.has_launch_bounds:
            continue
        head = source[site.head_start : site.params_open]
        new_head = re.sub(r"__launch_bounds__\s*\(\s*\d+", f"__launch_bounds__({new_size}", head)
        edits.append((site.head_start, site.params_open, new_head))
    return _apply_edits(source, edits)


def _strip_launch_bounds(source: str) -> str:
    return re.sub(r"__launch_bounds__\s*\([^)]*\)", "", source)


def _grid_stride_cap(blocks: int) -> Callable[[Candidate], Candidate | None]:
    """Grid-stride kernels may run with fewer blocks than elements: cap the grid at waves of SMs."""
    def apply(candidate: Candidate) -> Candidate | None:
        bodies = _bodies(candidate["source"])
        out = copy.deepcopy(candidate)
        changed = False
        for step in out.get("launch") or []:
            if "kernel" not in step or len(step.get("grid") or []) != 1:
                continue
            body = bodies.get(step["kernel"], "")
            if not re.search(r"gridDim\.x\s*\*\s*blockDim\.x|blockDim\.x\s*\*\s*gridDim\.x", body):
                continue
            expr = str(step["grid"][0])
            try:
                sized = bool(parse_expression(expr).names)
            except ExpressionError:
                continue
            if expr.startswith("min(") or not sized:
                continue
            step["grid"] = [f"min({expr}, {blocks})"]
            changed = True
        if not changed:
            return None
        out["knobs"] = None
        return out
    return apply


def _option(option: str, replaces: str | None = None) -> Callable[[Candidate], Candidate | None]:
    def apply(candidate: Candidate) -> Candidate | None:
        options = list(candidate.get("compile_options") or [])
        if option in options:
            return None
        if replaces:
            options = [o for o in options if not o.startswith(replaces)]
        out = copy.deepcopy(candidate)
        out["compile_options"] = options + [option]
        out["knobs"] = None
        return out
    return apply


def _apply_edits(source: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, text in sorted(edits, key=lambda e: e[0], reverse=True):
        source = source[:start] + text + source[end:]
    return source


def fast_math_allowed(problem: dict) -> bool:
    """Only when every floating tolerance is loose enough for fast-math's reduced precision
    (or when the caller, who knows the tolerances, says so through tolerance_allows_fast_math)."""
    if "tolerance_allows_fast_math" in problem:
        return bool(problem["tolerance_allows_fast_math"])
    tolerance = problem.get("tolerance") or {}
    if not tolerance or "float64" in tolerance:
        return False
    return all(float((t or {}).get("rtol", 0)) >= _FAST_MATH_MIN_RTOL for t in tolerance.values())


class TransformGenerator:
    name = "transform"

    def __init__(self, *, block_sizes=BLOCK_SIZES, unroll_factors=UNROLL_FACTORS, maxrregcount=MAXRREG,
                 waves=WAVES) -> None:
        self.block_sizes = tuple(block_sizes)
        self.unroll_factors = tuple(unroll_factors)
        self.maxrregcount = tuple(maxrregcount)
        self.waves = tuple(waves)

    def transforms(self, context: ProposalContext) -> list[Transform]:
        sm_count = int(context.hardware.get("sm_count") or 132)
        out: list[Transform] = [("add __restrict__ and const to read-only pointer parameters", _restrict_const),
                                ("read read-only data through __ldg", _ldg)]
        out += [(f"block size {b}", _block_size(b)) for b in self.block_sizes]
        out += [(f"grid-stride grid capped at {w} wave(s) of {sm_count} SMs", _grid_stride_cap(w * sm_count))
                for w in self.waves]
        out += [(f"#pragma unroll {f} on inner loops", _unroll(f)) for f in self.unroll_factors]
        out += [("__launch_bounds__(block threads)", _launch_bounds(None)),
                ("__launch_bounds__(block threads, 2)", _launch_bounds(2))]
        out += [(f"-maxrregcount={r}", _option(f"-maxrregcount={r}", "-maxrregcount")) for r in self.maxrregcount]
        if fast_math_allowed(context.problem):
            out.append(("--use_fast_math (the tolerance allows it)", _option("--use_fast_math")))
        return out

    def propose(self, context: ProposalContext, n: int) -> list[Proposal]:
        transforms = self.transforms(context)
        context.rng.shuffle(transforms)
        known = set(context.known_hashes)
        out: list[Proposal] = []
        for rationale, transform in transforms:
            if len(out) >= n:
                break
            candidate = transform(context.parent)
            if candidate is None:
                continue
            digest = candidate_hash(candidate)
            if digest in known:
                continue
            known.add(digest)
            candidate["name"] = (context.parent.get("name") or "kernel") + "+" + rationale.split(" ")[0]
            out.append(Proposal(candidate, rationale))
        return out
