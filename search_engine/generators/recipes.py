"""Recipes: the standard cure for an expert's diagnosis, written into the user's own kernel.

A recipe reads the reference kernel with tree-sitter's CUDA grammar, checks that its cure applies
(and says why not when it does not), and rewrites the kernel into a template with the knobs the
cure opens (vector width, block size, ...). The recipe generator proposes a cure's starting
variants as children of the root, and from then on explores each cure's knobs like the template
generator, so the tree searches around every cure that applies.

Recipes (each refuses with its reason where its cure does not fit):
- vectorise: "global loads/stores are 4 bytes per thread" in an elementwise kernel (one thread per
  index, `p[i]` accesses only): VEC consecutive elements per thread through 16/8-byte loads and
  stores, with a scalar loop for the tail; knobs VEC and BLOCK.
- warp-per-row: "one thread per row" in a row-wise kernel: the row's column loops split over the 32
  lanes of a warp (a chunked loop by chunks, its scalar tail left to the one lane that needs it),
  and each sum, max or min a loop builds combined with shuffles; knob WARPS (rows per block).
- column-tile: "one thread per column": TILE_C columns by TILE_R threads per block, the rows split
  over threadIdx.y, the reductions combined in shared memory; knobs TILE_C, TILE_R.
- halo-tile: a 2-D stencil without reuse: the block's tile of the image and its halo loaded once
  into shared memory, each read taking the tile's copy where it lies in it; knobs BX, BY.
- row-window: a neighbourhood sum (every (dy, dx) in [-r, r]^2 once, rows and columns clamped or
  zero outside the image), read by running the taps' code for concrete pixels: a rolling window of
  2r+1 rows of horizontal sums in registers, VEC pixels (one float2/float4 load where the width and
  the buffers allow, else scalars) by ROWS rows per thread; knobs VEC, ROWS, BX, BY.
- row-block: any per-pixel 2-D kernel: ROWS consecutive rows per thread, the code after y repeated
  per row with its bounds check, the grid's y divided by ROWS; knobs ROWS, BX, BY.
- grid-stride: ITEMS elements per thread, a grid apart; knobs ITEMS, BLOCK.
- row-cache: passes that walk the same split columns (loops with one header, stepping more than one
  column) and read the same read-only buffer at their counter: the first pass keeps the values in a
  register array, the later ones read it, each as CACHE unrolled steps where the thread's share
  fits and as the original loop where it does not; knob CACHE. A value of the element that a pass
  computes and a later pass computes again (a softmax's exponential) is kept in the element's slot
  where no later pass needs the raw element, and `x / d` with d fixed during a pass becomes one
  division before it and a product per value under knob RECIP (it rounds differently).
- unroll: `#pragma unroll` with the knob's factor on each loop that has none, holds no other such loop
  and is not inside an unrolled loop (nested unrolling multiplies the code); knob UNROLL.
- read-only-path: __restrict__, const and __ldg on the buffers the kernel never writes, and
  __launch_bounds__ of its block; knobs RESTRICT, LDG, MINB.
Each cure's start point (and each modifier's on top of a cure) is proposed `measure_first`: no
surrogate has seen what the cure does to this kernel, so the GPU judges it ahead of the forecasts.
The last three are also modifiers: below a structural cure's variant they start on top of it
("recipe warp-per-row[WARPS=4]+read-only-path: ..."), which is how the row RMS norm reached 71% of
its roofline on the H200 (benchmarks/results/own_kernels_h200_2026-12-01.json), and how the row
softmax's three passes over a warp's row read it once.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Callable

import tree_sitter_cuda
from tree_sitter import Language, Node, Parser

from klexpr import ExpressionError, evaluate, parse_expression
from search_engine.candidates import Candidate, candidate_hash, make_candidate
from search_engine.generators.base import Proposal, ProposalContext
from search_engine.generators.template import KnobSpace, TemplateGenerator

_CUDA = Language(tree_sitter_cuda.language())

BLOCK_SIZES = (64, 128, 256, 512, 1024)
VECTOR_WIDTHS = (1, 2, 4, 8)
RECIPE_NAME_PREFIX = "recipe "


@dataclass
class RecipeFamily:
    """A cure written into the kernel: a template, its launch in terms of the knobs, and the knobs."""
    recipe: str
    template: str
    launch: list[dict]
    knobs: dict[str, list[int]]
    start: dict[str, int]
    constraints: list[str] = field(default_factory=list)
    temps: list[dict] = field(default_factory=list)
    compile_options: list[str] = field(default_factory=list)
    # (position, memset step) put in the launch when the knob SPLIT is above 1 (atomics add into it)
    zeroed_when_split: tuple[int, dict] | None = None

    def render(self, knobs: dict) -> Candidate:
        defines = "".join(f"#define {name} {value}\n" for name, value in knobs.items())
        launch = []
        for step in self.launch:
            if "kernel" not in step:
                launch.append(dict(step))
                continue
            launch.append({**step,
                           "grid": [_substitute(e, knobs) for e in step["grid"]],
                           "block": [_substitute(e, knobs) for e in step["block"]],
                           "shared": _substitute(step.get("shared", "0"), knobs)})
        if self.zeroed_when_split is not None and knobs.get("SPLIT", 1) > 1:
            at, memset = self.zeroed_when_split
            launch.insert(at, dict(memset))
        setting = ", ".join(f"{k}={v}" for k, v in knobs.items())
        return make_candidate(defines + self.template, launch, temps=self.temps, compile_options=self.compile_options,
                              knobs=dict(knobs), name=f"{RECIPE_NAME_PREFIX}{self.recipe}: {setting}")


class CannotApply(Exception):
    """The recipe does not fit this kernel; the message says why, in one sentence."""


@dataclass(frozen=True)
class Recipe:
    name: str
    cures: str                                   # the diagnosis, as the experts word it
    indicated_by: Callable[[dict], bool]         # does this expert note diagnose what the recipe cures
    derive: Callable[[Candidate], RecipeFamily]  # raises CannotApply


# ---- vectorise: 16-byte loads and stores with a scalar tail -------------------------------------
_LOAD_STORE_HELPERS = """\
// Written by KernelLab's vectorise recipe: W consecutive floats per thread, 16- and 8-byte accesses.
template <int W> __device__ __forceinline__ void kl_load(float* lanes, const float* from) {
    if constexpr (W % 4 == 0) {
#pragma unroll
        for (int k = 0; k < W; k += 4) {
            const float4 v = *reinterpret_cast<const float4*>(from + k);
            lanes[k] = v.x; lanes[k + 1] = v.y; lanes[k + 2] = v.z; lanes[k + 3] = v.w;
        }
    } else if constexpr (W % 2 == 0) {
#pragma unroll
        for (int k = 0; k < W; k += 2) {
            const float2 v = *reinterpret_cast<const float2*>(from + k);
            lanes[k] = v.x; lanes[k + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int k = 0; k < W; ++k) lanes[k] = from[k];
    }
}
template <int W> __device__ __forceinline__ void kl_store(float* to, const float* lanes) {
    if constexpr (W % 4 == 0) {
#pragma unroll
        for (int k = 0; k < W; k += 4) *reinterpret_cast<float4*>(to + k) = make_float4(lanes[k], lanes[k + 1], lanes[k + 2], lanes[k + 3]);
    } else if constexpr (W % 2 == 0) {
#pragma unroll
        for (int k = 0; k < W; k += 2) *reinterpret_cast<float2*>(to + k) = make_float2(lanes[k], lanes[k + 1]);
    } else {
#pragma unroll
        for (int k = 0; k < W; ++k) to[k] = lanes[k];
    }
}
"""


def narrow_accesses_noted(note: dict) -> bool:
    evidence = note.get("evidence") or {}
    return "narrow_bytes" in evidence or "per thread per instruction" in (note.get("finding") or "")


def vectorise_family(parent: Candidate) -> RecipeFamily:
    step, kernel, source = _single_kernel(parent)
    pointers = _pointer_parameters(kernel)
    body = kernel.child_by_field_name("body")
    statements, index, index_type = _indexed_statements(kernel, "its element index")
    guard_bound, element_statements = _guarded_elements(statements[1:], index)
    element_text = _element_code(source, element_statements)
    accesses = _pointer_accesses(element_statements, pointers, index)
    for name, element_type in pointers.items():
        if name in accesses and element_type != "float":
            raise CannotApply(f"{name} holds {element_type}, and the recipe vectorises float buffers only.")
    written = {name for name, kinds in accesses.items() if "write" in kinds}
    read = {name for name, kinds in accesses.items() if "read" in kinds}
    if not written:
        raise CannotApply("the kernel writes no buffer as p[i].")

    def lanes(text_node_source: str) -> str:
        return _rewrite_accesses(text_node_source, pointers, index)

    block = step["block"]
    if len(block) != 1 or not str(block[0]).strip().isdigit():
        raise CannotApply("the block is not one literal size, so the recipe cannot rescale the grid.")
    block_size = int(block[0])
    grid = [str(e) for e in step["grid"]]
    if len(grid) != 1 or not _has_number(grid[0], block_size):
        raise CannotApply(f"the grid {grid} does not divide the elements by the block size {block_size}.")
    vector_grid = _replace_number(grid[0], block_size, "BLOCK*VEC")
    indent = "        "
    loads = "".join(f"{indent}float {p}_lanes[VEC];\n" + (f"{indent}kl_load<VEC>({p}_lanes, {p} + kl_first);\n" if p in read else "")
                    for p in sorted(read | written))
    stores = "".join(f"{indent}kl_store<VEC>({p} + kl_first, {p}_lanes);\n" for p in sorted(written))
    vector_body = lanes(element_text)
    head = source[:body.start_byte]
    tail = source[body.end_byte:]
    new_body = (
        "{\n"
        "    const long long kl_first = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * VEC;\n"
        f"    const long long kl_end = (long long)({guard_bound});\n"
        "    if (kl_first + VEC <= kl_end) {\n"
        f"{loads}"
        "#pragma unroll\n"
        "        for (int kl_lane = 0; kl_lane < VEC; ++kl_lane) {\n"
        f"            const {index_type} {index} = ({index_type})(kl_first + kl_lane);\n"
        f"            {vector_body}\n"
        "        }\n"
        f"{stores}"
        "    } else {\n"
        "        for (long long kl_element = kl_first; kl_element < kl_end; ++kl_element) {\n"
        f"            const {index_type} {index} = ({index_type})kl_element;\n"
        f"            {element_text}\n"
        "        }\n"
        "    }\n"
        "}"
    )
    template = _LOAD_STORE_HELPERS + head + new_body + tail
    launch = [dict(s) for s in parent["launch"]]
    at = parent["launch"].index(step)
    launch[at] = {**step, "grid": [vector_grid], "block": ["BLOCK"]}
    return RecipeFamily(recipe="vectorise", template=template, launch=launch,
                        knobs={"VEC": list(VECTOR_WIDTHS), "BLOCK": sorted(set(BLOCK_SIZES) | {block_size})},
                        start={"VEC": 4, "BLOCK": block_size}, constraints=["BLOCK <= 1024"],
                        temps=list(parent.get("temps") or []), compile_options=list(parent.get("compile_options") or []))


def _element_index(declaration: Node) -> tuple[str, str]:
    type_node = declaration.child_by_field_name("type")
    declarators = [c for c in declaration.children if c.type == "init_declarator"]
    if type_node is None or len(declarators) != 1:
        raise CannotApply("the kernel does not begin by computing its element index from blockIdx, blockDim and threadIdx.")
    name = declarators[0].child_by_field_name("declarator")
    value = declarators[0].child_by_field_name("value")
    fields = {_text(n).replace(" ", "") for n in _walk(value) if n.type == "field_expression"}
    operators = {_text(n.child_by_field_name("operator")) for n in _walk(value) if n.type == "binary_expression"}
    if name is None or name.type != "identifier" or fields != {"blockIdx.x", "blockDim.x", "threadIdx.x"} \
            or not operators <= {"*", "+"}:
        raise CannotApply("the element index is not blockIdx.x * blockDim.x + threadIdx.x, so threads do not "
                          "map one-to-one to elements.")
    return _text(name), _text(type_node)


def _guarded_elements(statements: list[Node], index: str) -> tuple[str, list[Node]]:
    """The bound of `if (i < n) {...}` or of `if (i >= n) return; ...`, and the statements per element."""
    if not statements or statements[0].type != "if_statement":
        raise CannotApply("the element index is not followed by a bounds check (if (i < n) or if (i >= n) return).")
    guard = statements[0]
    condition = guard.child_by_field_name("condition")
    comparison = condition.named_children[0] if condition is not None and condition.named_children else None
    if comparison is None or comparison.type != "binary_expression":
        raise CannotApply("the bounds check is not a single comparison of the element index.")
    left, right = comparison.child_by_field_name("left"), comparison.child_by_field_name("right")
    operator = _text(comparison.child_by_field_name("operator"))
    if left is None or _text(left) != index or operator not in ("<", ">="):
        raise CannotApply(f"the bounds check does not compare {index} with the element count.")
    if _mentions(right, index):
        raise CannotApply("the element count depends on the element index.")
    consequence = guard.child_by_field_name("consequence")
    if operator == "<":
        if guard.child_by_field_name("alternative") is not None or len(statements) > 1:
            raise CannotApply("the kernel does work outside its bounds check.")
        inner = consequence.named_children if consequence.type == "compound_statement" else [consequence]
        return _text(right), [c for c in inner if c.type != "comment"]
    if consequence is None or _text(consequence).replace(" ", "") not in ("return;", "{return;}"):
        raise CannotApply("the bounds check does more than return.")
    return _text(right), [c for c in statements[1:] if c.type != "comment"]


def _element_code(source: str, statements: list[Node]) -> str:
    for node in statements:
        for inner in _walk(node):
            if inner.type in ("return_statement", "break_statement", "continue_statement", "goto_statement"):
                raise CannotApply(f"the per-element code has a {inner.type.split('_')[0]} (line "
                                  f"{inner.start_point[0] + 1}), which would skip other elements of a thread.")
            if inner.type == "call_expression" and _text(inner.child_by_field_name("function")) in ("__syncthreads", "__syncwarp"):
                raise CannotApply("the per-element code synchronises threads.")
    column = statements[0].start_point[1] if statements else 0
    lines = "\n".join(_text(n) if i == 0 else " " * (n.start_point[1] - column) + _text(n)
                      for i, n in enumerate(statements)).split("\n")
    # Later lines keep their indentation relative to the first statement; 12 spaces inside the loops.
    return "\n".join(line if i == 0 else "            " + line[column:] if line[:column].isspace() else line
                     for i, line in enumerate(lines))


def _pointer_accesses(statements: list[Node], pointers: dict[str, str], index: str) -> dict[str, set[str]]:
    kinds: dict[str, set[str]] = {}
    for top in statements:
        for node in _walk(top):
            if node.type != "identifier" or _text(node) not in pointers:
                continue
            name = _text(node)
            parent = node.parent
            argument = parent.child_by_field_name("argument") if parent is not None else None
            if parent is None or parent.type != "subscript_expression" or argument is None or argument.id != node.id:
                raise CannotApply(f"{name} is used other than as {name}[{index}] (line {node.start_point[0] + 1}).")
            subscript = parent.child_by_field_name("indices") or parent.child_by_field_name("index")
            if subscript is None or _text(subscript).strip("[] ") != index:
                raise CannotApply(f"{name} is indexed by {_text(subscript).strip('[] ') if subscript else '?'}, not by the element "
                                  f"index {index} (line {node.start_point[0] + 1}).")
            outer = parent.parent
            if outer is not None and outer.type == "assignment_expression" and outer.child_by_field_name("left").id == parent.id:
                if top.type != "expression_statement" or top.named_children[0].id != outer.id:
                    raise CannotApply(f"{name}[{index}] is written conditionally (line {node.start_point[0] + 1}).")
                kinds.setdefault(name, set()).add("write")
                if _text(outer.child_by_field_name("operator")) != "=":
                    kinds[name].add("read")
            else:
                kinds.setdefault(name, set()).add("read")
    return kinds


def _rewrite_accesses(text: str, pointers: dict[str, str], index: str) -> str:
    """`p[i]` -> `p_lanes[kl_lane]` in the per-element code, by the parse tree of that code."""
    wrapped = f"void kl_element() {{\n{text}\n}}"
    tree = Parser(_CUDA).parse(wrapped.encode())
    edits = []
    for node in _walk(tree.root_node):
        if node.type == "subscript_expression":
            argument = node.child_by_field_name("argument")
            if argument is not None and _text(argument) in pointers:
                edits.append((node.start_byte, node.end_byte, f"{_text(argument)}_lanes[kl_lane]"))
    data = wrapped.encode()
    for start, end, replacement in sorted(edits, reverse=True):
        data = data[:start] + replacement.encode() + data[end:]
    rewritten = data.decode()
    return rewritten[len("void kl_element() {\n"):-len("\n}")]


def _pointer_parameters(kernel: Node) -> dict[str, str]:
    declarator = kernel.child_by_field_name("declarator")
    while declarator is not None and declarator.type != "function_declarator":
        declarator = declarator.child_by_field_name("declarator")
    found = {}
    for parameter in declarator.child_by_field_name("parameters").named_children:
        if parameter.type != "parameter_declaration":
            continue
        inner = parameter.child_by_field_name("declarator")
        if inner is None or inner.type != "pointer_declarator":
            continue
        inner = _declared_identifier(inner)
        type_node = parameter.child_by_field_name("type")
        if inner is not None and type_node is not None:
            found[_text(inner)] = _text(type_node)
    return found


def _kernel(root: Node, name: str) -> Node | None:
    for node in _walk(root):
        if node.type != "function_definition" or not any(c.type == "__global__" for c in node.children):
            continue
        declarator = node.child_by_field_name("declarator")
        while declarator is not None and declarator.type != "function_declarator":
            declarator = declarator.child_by_field_name("declarator")
        if declarator is not None and _text(declarator.child_by_field_name("declarator")) == name:
            return node
    return None


# ---- warp per row: the columns of a row split over a warp, reduced with shuffles ----------------
WARP = 32
WARPS_PER_BLOCK = (1, 2, 4, 8, 16, 32)
_WARP_HELPERS = """\
// Written by KernelLab's warp-per-row recipe: a row's columns over the 32 lanes of a warp.
template <typename T> __device__ __forceinline__ T kl_warp_sum(T v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
template <typename T> __device__ __forceinline__ T kl_warp_max(T v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) { T other = __shfl_xor_sync(0xffffffffu, v, offset); v = other > v ? other : v; }
    return v;
}
template <typename T> __device__ __forceinline__ T kl_warp_min(T v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) { T other = __shfl_xor_sync(0xffffffffu, v, offset); v = other < v ? other : v; }
    return v;
}
"""
_REDUCERS = {"fmaxf": "max", "fmax": "max", "max": "max", "fminf": "min", "fmin": "min", "min": "min"}


def one_thread_per_row_noted(note: dict) -> bool:
    text = f"{note.get('finding', '')} {note.get('advice', '')}".lower()
    return "one thread per row" in text or "warp per row" in text


def warp_per_row_family(parent: Candidate) -> RecipeFamily:
    step, kernel, source = _single_kernel(parent)
    statements, row, row_type = _indexed_statements(kernel, "its row")
    _, row_statements = _guarded_elements(statements[1:], row)
    for node in row_statements:
        for inner in _walk(node):
            if inner.type == "field_expression" and _text(inner.child_by_field_name("argument")) in ("threadIdx", "blockDim"):
                raise CannotApply(f"the row's code reads {_text(inner)} (line {inner.start_point[0] + 1}), whose meaning a warp per row changes.")
            if inner.type == "return_statement":
                raise CannotApply(f"the row's code returns early (line {inner.start_point[0] + 1}).")
    edits, combines = _split_loops(row_statements, "the row's", str(WARP), "kl_warp_")
    edits += combines
    block = step["block"]
    if len(block) != 1 or not str(block[0]).strip().isdigit():
        raise CannotApply("the block is not one literal size, so the recipe cannot rescale the grid.")
    rows_per_block = int(block[0])
    grid = [str(e) for e in step["grid"]]
    if len(grid) != 1 or not _has_number(grid[0], rows_per_block):
        raise CannotApply(f"the grid {grid} does not divide the rows by the block size {rows_per_block}.")
    first = statements[0]
    edits.append((first.start_byte, first.end_byte,
                  "const long long kl_thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
                  f"    const int kl_lane = threadIdx.x % {WARP};\n"
                  f"    {row_type} {row} = ({row_type})(kl_thread / {WARP});"))
    data = source.encode()
    for start, end, text in sorted(edits, key=lambda e: e[0], reverse=True):
        data = data[:start] + text.encode() + data[end:]
    launch = [dict(s) for s in parent["launch"]]
    launch[parent["launch"].index(step)] = {**step, "grid": [_replace_number(grid[0], rows_per_block, "WARPS")],
                                            "block": [f"WARPS*{WARP}"]}
    return RecipeFamily(recipe="warp-per-row", template=_WARP_HELPERS + data.decode(), launch=launch,
                        knobs={"WARPS": list(WARPS_PER_BLOCK)}, start={"WARPS": 4},
                        temps=list(parent.get("temps") or []), compile_options=list(parent.get("compile_options") or []))


def _split_loops(statements: list[Node], whose: str, lanes: str, combine: str
                 ) -> tuple[list[tuple[int, int, str]], list[tuple[int, int, str]]]:
    """The top-level loops of `statements` split over `lanes` lanes (lane index kl_lane), and each
    variable a loop reduces combined across the lanes (by `combine`sum/max/min) after it.

    A loop without an initializer that goes on with the previous split loop's counter (the scalar
    tail of a chunked loop: `for (; c < n; ++c)` after `for (; c + 4 <= n; c += 4)`) is left
    serial: only the lane whose counter stopped at the first unfinished chunk is still below the
    bound, so it alone does the tail. Its reductions are combined after it."""
    loops = [n for n in statements if n.type == "for_statement"]
    if not loops:
        raise CannotApply(f"{whose} code has no loop over its columns at its top level.")
    for node in statements:
        if node.type != "for_statement" and any(n.type in ("for_statement", "while_statement", "do_statement") for n in _walk(node)):
            raise CannotApply(f"a loop at line {node.start_point[0] + 1} is inside another statement, so its columns cannot be split.")
    edits: list[tuple[int, int, str]] = []
    combines: list[tuple[int, int, str]] = []
    previous_counter, pending = None, {}
    top = [n for n in statements if n.type != "comment"]
    for position, node in enumerate(top):
        if node.type != "for_statement":
            previous_counter = None
            continue
        counter, step_text, declared = _loop_counter(node)
        continuation = not declared and counter == previous_counter and step_text == "1"
        reductions = _loop_reductions(node)
        for variable, kind in reductions.items():
            if pending.get(variable, kind) != kind:
                raise CannotApply(f"the loop at line {node.start_point[0] + 1} combines {variable} in two ways.")
            pending[variable] = kind
        if not continuation:
            edits += _split_header(node, counter, step_text, declared, lanes)
        previous_counter = counter
        following = top[position + 1] if position + 1 < len(top) else None
        goes_on = following is not None and following.type == "for_statement" and \
            _loop_counter(following)[0] == counter and not _loop_counter(following)[2]
        if not goes_on and pending:
            after = "".join(f"\n    {v} = {combine}{kind}({v});" for v, kind in pending.items())
            combines.append((node.end_byte, node.end_byte, after))
            pending = {}
    return edits, combines


def _loop_counter(loop: Node) -> tuple[str, str, bool]:
    """The loop's counter, its step (as text) and whether the loop declares the counter itself."""
    line = loop.start_point[0] + 1
    init, condition, update = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    if condition is None or update is None:
        raise CannotApply(f"the loop at line {line} has no condition or no update of its column counter.")
    if init is not None and init.type == "declaration":
        declarator = next((c for c in init.children if c.type == "init_declarator"), None)
        counter = declarator.child_by_field_name("declarator") if declarator is not None else None
        if counter is None or counter.type != "identifier" or declarator.child_by_field_name("value") is None:
            raise CannotApply(f"the loop at line {line} does not declare its own column counter.")
        name, declared = _text(counter), True
    elif init is None:
        target = update.child_by_field_name("argument") if update.type == "update_expression" else \
            update.child_by_field_name("left") if update.type == "assignment_expression" else None
        if target is None or target.type != "identifier":
            raise CannotApply(f"the loop at line {line} does not step a column counter.")
        name, declared = _text(target), False
    else:
        raise CannotApply(f"the loop at line {line} does not declare its own column counter.")
    compact = _text(update).replace(" ", "")
    if (update.type == "update_expression" and compact in (f"++{name}", f"{name}++")) or compact == f"{name}+=1":
        return name, "1", declared
    if update.type == "assignment_expression" and _text(update.child_by_field_name("operator")) == "+=" \
            and _text(update.child_by_field_name("left")) == name and not _mentions(update.child_by_field_name("right"), name):
        return name, _text(update.child_by_field_name("right")), declared
    raise CannotApply(f"the loop at line {line} steps by {_text(update)}, not one column or a fixed chunk at a time.")


def _split_header(loop: Node, counter: str, step: str, declared: bool, lanes: str) -> list[tuple[int, int, str]]:
    init, update = loop.child_by_field_name("initializer"), loop.child_by_field_name("update")
    lane = "kl_lane" if step == "1" else f"kl_lane * ({step})"
    stride = lanes if step == "1" else f"{lanes} * ({step})"
    if declared:
        declarator = next(c for c in init.children if c.type == "init_declarator")
        start = declarator.child_by_field_name("value")
        first = (start.start_byte, start.end_byte, f"{lane} + ({_text(start)})")
    else:
        # `for (; ...` : the counter goes on from where the code before left it, offset by the lane.
        semicolon = next(c for c in loop.children if c.type == ";")
        first = (semicolon.start_byte, semicolon.start_byte, f"{counter} += {lane}")
    return [first, (update.start_byte, update.end_byte, f"{counter} += {stride}")]


def _loop_reductions(loop: Node) -> dict[str, str]:
    """Each variable declared outside the loop that the loop builds, with how: sum, max or min."""
    line = loop.start_point[0] + 1
    counter = _loop_counter(loop)[0]
    local = {_text(n) for n in _walk(loop) if n.type == "identifier" and n.parent is not None
             and n.parent.type in ("init_declarator", "declaration") and n.parent.child_by_field_name("declarator") == n}
    local.add(counter)
    reductions: dict[str, str] = {}
    body = loop.child_by_field_name("body")
    for node in _walk(body):
        if node.type == "update_expression":
            target = node.child_by_field_name("argument")
            if target is not None and target.type == "identifier" and _text(target) not in local:
                raise CannotApply(f"the loop at line {line} counts with {_text(node)}, which the lanes would each count apart.")
        if node.type != "assignment_expression":
            continue
        left = node.child_by_field_name("left")
        if left is None or left.type != "identifier" or _text(left) in local:
            continue  # a write to memory (one column per lane) or to the loop's own variables
        variable, operator, right = _text(left), _text(node.child_by_field_name("operator")), node.child_by_field_name("right")
        kind = None
        if operator == "+=":
            kind = "sum"
        elif operator == "=" and right is not None and right.type == "call_expression":
            function = _text(right.child_by_field_name("function"))
            arguments = [a for a in right.child_by_field_name("arguments").named_children]
            if function in _REDUCERS and len(arguments) == 2 and variable in (_text(a) for a in arguments):
                kind = _REDUCERS[function]
        if kind is None:
            raise CannotApply(f"the loop at line {line} updates {variable} by {_text(node)}, which is not a sum, "
                              "max or min the lanes can combine.")
        if reductions.get(variable, kind) != kind:
            raise CannotApply(f"the loop at line {line} combines {variable} in two ways.")
        reductions[variable] = kind
    return reductions


# ---- grid-stride: a fixed grid whose threads each take ITEMS elements, a grid apart -------------
ITEMS_PER_THREAD = (1, 2, 4, 8, 16, 32)


def grid_too_small_or_too_many_blocks_noted(note: dict) -> bool:
    text = f"{note.get('finding', '')} {note.get('advice', '')}".lower()
    return "wave" in text or "about what a launch costs" in text or "grid-stride" in text


def grid_stride_family(parent: Candidate) -> RecipeFamily:
    step, kernel, source = _single_kernel(parent)
    body = kernel.child_by_field_name("body")
    statements, index, index_type = _indexed_statements(kernel, "its element index")
    guard_bound, element_statements = _guarded_elements(statements[1:], index)
    element_text = _element_code(source, element_statements)
    block_size, grid = _literal_block(step, "elements")
    new_body = (
        "{\n"
        "    const long long kl_stride = (long long)gridDim.x * blockDim.x;\n"
        f"    const long long kl_end = (long long)({guard_bound});\n"
        "    for (long long kl_element = (long long)blockIdx.x * blockDim.x + threadIdx.x; kl_element < kl_end;\n"
        "         kl_element += kl_stride) {\n"
        f"        const {index_type} {index} = ({index_type})kl_element;\n"
        f"        {element_text}\n"
        "    }\n"
        "}"
    )
    template = "// Written by KernelLab's grid-stride recipe: ITEMS elements per thread, a grid apart.\n" + \
        source[:body.start_byte] + new_body + source[body.end_byte:]
    launch = _relaunched(parent, step, [_replace_number(grid[0], block_size, "BLOCK*ITEMS")], ["BLOCK"])
    return RecipeFamily(recipe="grid-stride", template=template, launch=launch,
                        knobs={"ITEMS": list(ITEMS_PER_THREAD), "BLOCK": sorted(set(BLOCK_SIZES) | {block_size})},
                        start={"ITEMS": 4, "BLOCK": block_size},
                        temps=list(parent.get("temps") or []), compile_options=list(parent.get("compile_options") or []))


# ---- column tiles: a block's rows split over threadIdx.y, combined in shared memory --------------
TILE_COLUMNS = (16, 32, 64, 128)
TILE_ROWS = (2, 4, 8, 16, 32)
_TILE_HELPERS = """\
// Written by KernelLab's column-tile recipe: TILE_C columns per block, their rows split over
// TILE_R threads each, the partial results combined in shared memory.
template <int KIND, typename T> __device__ __forceinline__ T kl_pick(T a, T b) {
    if constexpr (KIND == 0) return a + b;
    else if constexpr (KIND == 1) return a > b ? a : b;
    else return a < b ? a : b;
}
template <int KIND, typename T> __device__ __forceinline__ T kl_tile_combine(T v) {
    __shared__ T kl_partial[TILE_R][TILE_C];
    kl_partial[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
#pragma unroll
    for (int kl_half = TILE_R / 2; kl_half > 0; kl_half >>= 1) {
        if (threadIdx.y < kl_half)
            kl_partial[threadIdx.y][threadIdx.x] = kl_pick<KIND>(kl_partial[threadIdx.y][threadIdx.x],
                                                                 kl_partial[threadIdx.y + kl_half][threadIdx.x]);
        __syncthreads();
    }
    const T total = kl_partial[0][threadIdx.x];
    __syncthreads();  // the next combine reuses kl_partial
    return total;
}
template <typename T> __device__ __forceinline__ T kl_tile_sum(T v) { return kl_tile_combine<0>(v); }
template <typename T> __device__ __forceinline__ T kl_tile_max(T v) { return kl_tile_combine<1>(v); }
template <typename T> __device__ __forceinline__ T kl_tile_min(T v) { return kl_tile_combine<2>(v); }
"""


def one_thread_per_column_noted(note: dict) -> bool:
    text = f"{note.get('finding', '')} {note.get('advice', '')}".lower()
    return "wave" in text or "one thread per column" in text or "occupancy" in text


def column_tile_family(parent: Candidate) -> RecipeFamily:
    """A kernel with one thread per column (`col = blockIdx.x * blockDim.x + threadIdx.x`, a bounds
    check, loops over the column's rows building sums, maxima or minima, then code that uses them):
    the block becomes TILE_C columns by TILE_R threads, each thread takes every TILE_R-th row (or
    chunk of rows), and what the loops build is combined in shared memory before the code after
    them. The bounds check moves below the combine, so every thread of the block reaches it."""
    step, kernel, source = _single_kernel(parent)
    body = kernel.child_by_field_name("body")
    statements, column, _ = _indexed_statements(kernel, "its column")
    bound, column_statements = _guarded_elements(statements[1:], column)
    guard = statements[1]
    for node in column_statements:
        for inner in _walk(node):
            if inner.type == "field_expression" and _text(inner.child_by_field_name("argument")) in ("threadIdx", "blockDim"):
                raise CannotApply(f"the column's code reads {_text(inner)} (line {inner.start_point[0] + 1}), whose "
                                  "meaning a tile of threads changes.")
            if inner.type == "return_statement":
                raise CannotApply(f"the column's code returns early (line {inner.start_point[0] + 1}).")
    loop_positions = [i for i, n in enumerate(column_statements) if n.type == "for_statement"]
    if not loop_positions:
        raise CannotApply("the column's code has no loop over its rows at its top level.")
    first, last = loop_positions[0], loop_positions[-1]
    if any(n.type != "for_statement" for n in column_statements[first:last + 1]):
        raise CannotApply(f"code at line {column_statements[first].start_point[0] + 1}-"
                          f"{column_statements[last].end_point[0] + 1} sits between the row loops, so they cannot be "
                          "split as one reduction.")
    for node in column_statements[:first]:
        if any(n.type in ("subscript_expression", "pointer_expression", "call_expression") for n in _walk(node)):
            raise CannotApply(f"the code before the row loops reads memory or calls a function (line "
                              f"{node.start_point[0] + 1}); threads past the last column would run it too.")
    loops = column_statements[first:last + 1]
    inside, combines = _split_loops(loops, "the column's", "(TILE_R * SPLIT)", "kl_tile_")
    if not combines:
        raise CannotApply("the row loops build no sum, maximum or minimum to combine across the tile.")
    if len(combines) > 1:
        raise CannotApply("a later row loop uses what an earlier one combined, so the loops cannot share one "
                          "combine after them.")
    block_size, grid = _literal_block(step, "columns")
    data = source.encode()
    loops_start, loops_end = loops[0].start_byte, loops[-1].end_byte
    loop_text = data[loops_start:loops_end]
    for start, end, text in sorted(inside, key=lambda e: e[0], reverse=True):
        loop_text = loop_text[:start - loops_start] + text.encode() + loop_text[end - loops_start:]
    combine_text = "".join(text for _, _, text in combines)
    guard_text = _text(guard) if guard.child_by_field_name("alternative") is None and \
        _text(guard.child_by_field_name("consequence")).replace(" ", "") in ("return;", "{return;}") else \
        f"if (!({column} < ({bound}))) return;"
    after = column_statements[last + 1:]
    after_text = source.encode()[after[0].start_byte:after[-1].end_byte].decode() if after else ""
    # A column whose code after the loops only stores a sum (out[col] = sum;) can also split its rows
    # over SPLIT blocks along y, each adding its part with atomicAdd into the output zeroed first.
    stored = _stored_sum(after, column, kernel, combines, loops)
    if stored is not None:
        target, value = stored
        after_text = (f"#if SPLIT > 1\n    if (threadIdx.y == 0) atomicAdd(&{target}[{column}], {value});\n#else\n"
                      f"    {after_text}\n#endif")
    before = source.encode()[column_statements[0].start_byte:loops_start].decode() if first > 0 else ""
    index_text = _text(statements[0])
    new_body = (
        "{\n"
        f"    {index_text}\n"
        "    const int kl_lane = blockIdx.y * TILE_R + threadIdx.y;\n"
        f"    const bool kl_active = {column} < ({bound});\n"
        + (f"    {before.rstrip()}\n" if before.strip() else "")
        + "    if (kl_active) {\n"
        f"    {loop_text.decode()}\n"
        "    }"
        f"{combine_text}\n"
        f"    {guard_text}\n"
        + (f"    {after_text}\n" if after_text else "")
        + "}"
    )
    template = _TILE_HELPERS + source[:body.start_byte] + new_body + source[body.end_byte:]
    launch = _relaunched(parent, step, [_replace_number(grid[0], block_size, "TILE_C"), "SPLIT"],
                         ["TILE_C", "TILE_R"])
    zeroed = None
    if stored is not None:
        zeroed = (launch.index(next(s for s in launch if s.get("kernel") == step["kernel"])),
                  {"memset": stored[0], "value": 0})
    return RecipeFamily(recipe="column-tile", template=template, launch=launch,
                        knobs={"TILE_C": list(TILE_COLUMNS), "TILE_R": list(TILE_ROWS),
                               "SPLIT": list(ROW_SPLITS) if stored is not None else [1]},
                        start={"TILE_C": 32, "TILE_R": 16, "SPLIT": 1}, constraints=["TILE_C * TILE_R <= 1024"],
                        temps=list(parent.get("temps") or []), compile_options=list(parent.get("compile_options") or []),
                        zeroed_when_split=zeroed)


ROW_SPLITS = (1, 2, 4, 8, 16)


def _stored_sum(after: list[Node], column: str, kernel: Node, combines: list, loops: list[Node]) -> tuple[str, str] | None:
    """(P, v) when the code after the loops is only `P[column] = v;` with v a sum the loops build."""
    if len(after) != 1 or after[0].type != "expression_statement" or not after[0].named_children:
        return None
    assignment = after[0].named_children[0]
    if assignment.type != "assignment_expression" or _text(assignment.child_by_field_name("operator")) != "=":
        return None
    left, right = assignment.child_by_field_name("left"), assignment.child_by_field_name("right")
    if left is None or left.type != "subscript_expression" or right is None or right.type != "identifier":
        return None
    target = _text(left.child_by_field_name("argument"))
    index = (left.child_by_field_name("indices") or left.child_by_field_name("index"))
    sums = {name for loop in loops for name, kind in _loop_reductions(loop).items() if kind == "sum"}
    if _pointer_parameters(kernel).get(target) != "float" or _text(index).strip("[] ") != column \
            or _text(right) not in sums:
        return None
    return target, _text(right)


# ---- halo tiles: a 2-D stencil's input read once per block into shared memory --------------------
HALO_BLOCK_X = (16, 32, 64, 128)
HALO_BLOCK_Y = (1, 2, 4, 8, 16)


def no_data_reuse_noted(note: dict) -> bool:
    text = f"{note.get('finding', '')} {note.get('advice', '')}".lower()
    return "reuse" in text or "shared memory" in text or "dram moved" in text


def halo_tile_family(parent: Candidate) -> RecipeFamily:
    """A 2-D stencil (x and y from blockIdx/blockDim/threadIdx, `if (x >= W || y >= H) return;`,
    reads of one read-only image as `img[ROW * W + COL]`): the block's tile of the image and a halo
    of the stencil's radius (the largest literal of its loops' bounds) is loaded into shared memory
    once, before the bounds check, and each read takes the tile's copy when (ROW, COL) lies in it,
    else the image's, so the result is the same whatever the radius."""
    step, kernel, source = _single_kernel(parent)
    body = kernel.child_by_field_name("body")
    statements = [c for c in body.named_children if c.type != "comment"]
    if len(statements) < 3 or statements[0].type != "declaration" or statements[1].type != "declaration":
        raise CannotApply("the kernel does not begin by computing x and y from blockIdx, blockDim and threadIdx.")
    axes = {}
    for declaration in statements[:2]:
        name, axis = _axis_index(declaration)
        axes[axis] = name
    if set(axes) != {"x", "y"}:
        raise CannotApply("the kernel's first two indices are not one along x and one along y.")
    guard = statements[2]
    bounds = _return_guard_bounds(guard, axes)
    pointers = _pointer_parameters(kernel)
    written = _written_pointers(kernel, pointers)
    reads: list[tuple[Node, str, Node, Node, str]] = []
    for node in _walk(body):
        if node.type != "subscript_expression":
            continue
        name = _text(node.child_by_field_name("argument"))
        if name not in pointers or name in written:
            continue
        reads.append((node, name, *_row_major(node, kernel)))
    if not reads:
        raise CannotApply("the kernel reads no read-only buffer as img[ROW * W + COL].")
    image = reads[0][1]
    if pointers[image] != "float":
        raise CannotApply(f"{image} holds {pointers[image]}, and the recipe tiles float images only.")
    width = reads[0][4]
    for node, name, row, col, w in reads:
        if name == image and w != width:
            raise CannotApply(f"{image} is read with two row lengths, {width} and {w} (line {node.start_point[0] + 1}).")
    if width != bounds["x"]:
        raise CannotApply(f"the image's row length {width} is not the bound {bounds['x']} of x, so the tile's loads "
                          "could fall outside the image.")
    radius = min(8, max([abs(int(_text(n))) for loop in _walk(body) if loop.type == "for_statement"
                         for part in ("initializer", "condition") if loop.child_by_field_name(part) is not None
                         for n in _walk(loop.child_by_field_name(part)) if n.type == "number_literal"
                         and _text(n).lstrip("-").isdigit()] or [1]))
    edits = []
    for node, name, row, col, _ in reads:
        if name != image:
            continue
        for part in (row, col):
            if any(n.type in ("update_expression", "assignment_expression", "call_expression") for n in _walk(part)):
                raise CannotApply(f"the read at line {node.start_point[0] + 1} computes its index with side effects.")
        r, c = _text(row), _text(col)
        edits.append((node.start_byte, node.end_byte,
                      f"(kl_in_tile(({r}) - kl_y0, ({c}) - kl_x0, ({r}), ({c}), {bounds['y']}, {bounds['x']}) ? "
                      f"kl_tile[({r}) - kl_y0][({c}) - kl_x0] : {_text(node)})"))
    bx, by, grid = _literal_block_2d(step)
    load = (
        "\n    __shared__ float kl_tile[BY + 2 * KL_HALO][BX + 2 * KL_HALO];\n"
        "    const int kl_x0 = (int)(blockIdx.x * blockDim.x) - KL_HALO;\n"
        "    const int kl_y0 = (int)(blockIdx.y * blockDim.y) - KL_HALO;\n"
        "    for (int kl_k = threadIdx.y * blockDim.x + threadIdx.x; kl_k < (BY + 2 * KL_HALO) * (BX + 2 * KL_HALO);\n"
        "         kl_k += blockDim.x * blockDim.y) {\n"
        "        const int kl_i = kl_k / (BX + 2 * KL_HALO), kl_j = kl_k % (BX + 2 * KL_HALO);\n"
        "        const int kl_gy = kl_y0 + kl_i, kl_gx = kl_x0 + kl_j;\n"
        f"        if (kl_gy >= 0 && kl_gy < ({bounds['y']}) && kl_gx >= 0 && kl_gx < ({bounds['x']}))\n"
        f"            kl_tile[kl_i][kl_j] = {image}[(kl_gy) * ({width}) + (kl_gx)];\n"
        "    }\n"
        "    __syncthreads();"
    )
    edits.append((statements[1].end_byte, statements[1].end_byte, load))
    data = source.encode()
    for start, end, text in sorted(edits, key=lambda e: e[0], reverse=True):
        data = data[:start] + text.encode() + data[end:]
    helpers = (
        "// Written by KernelLab's halo-tile recipe: a BX x BY block's image tile and its halo in shared memory.\n"
        f"#define KL_HALO {radius}\n"
        "__device__ __forceinline__ bool kl_in_tile(int i, int j, int row, int col, int rows, int cols) {\n"
        "    return (unsigned)i < (unsigned)(BY + 2 * KL_HALO) && (unsigned)j < (unsigned)(BX + 2 * KL_HALO)\n"
        "        && row >= 0 && row < rows && col >= 0 && col < cols;\n"
        "}\n"
    )
    launch = _relaunched(parent, step, [_replace_number(grid[0], bx, "BX"), _replace_number(grid[1], by, "BY")],
                         ["BX", "BY"])
    return RecipeFamily(recipe="halo-tile", template=helpers + data.decode(), launch=launch,
                        knobs={"BX": sorted(set(HALO_BLOCK_X) | {bx}), "BY": sorted(set(HALO_BLOCK_Y) | {by})},
                        start={"BX": 32, "BY": 8}, constraints=["BX * BY <= 1024", "BX * BY >= 32"],
                        temps=list(parent.get("temps") or []), compile_options=list(parent.get("compile_options") or []))


def _axis_index(declaration: Node) -> tuple[str, str]:
    declarators = [c for c in declaration.children if c.type == "init_declarator"]
    if len(declarators) != 1:
        raise CannotApply("the kernel does not begin by computing x and y from blockIdx, blockDim and threadIdx.")
    name, value = declarators[0].child_by_field_name("declarator"), declarators[0].child_by_field_name("value")
    fields = {_text(n).replace(" ", "") for n in _walk(value) if n.type == "field_expression"}
    for axis in ("x", "y"):
        if fields == {f"blockIdx.{axis}", f"blockDim.{axis}", f"threadIdx.{axis}"} and name is not None \
                and name.type == "identifier":
            return _text(name), axis
    raise CannotApply(f"{_text(declaration)} is not blockIdx * blockDim + threadIdx along x or y.")


def _return_guard_bounds(guard: Node, axes: dict[str, str]) -> dict[str, str]:
    condition = guard.child_by_field_name("condition") if guard.type == "if_statement" else None
    consequence = guard.child_by_field_name("consequence") if guard.type == "if_statement" else None
    if condition is None or _text(consequence).replace(" ", "") not in ("return;", "{return;}"):
        raise CannotApply("the indices are not followed by a bounds check that returns (if (x >= w || y >= h) return;).")
    comparisons, stack = [], list(condition.named_children)
    while stack:
        node = stack.pop()
        if node.type == "parenthesized_expression":
            stack.extend(node.named_children)
        elif node.type == "binary_expression" and _text(node.child_by_field_name("operator")) == "||":
            stack += [node.child_by_field_name("left"), node.child_by_field_name("right")]
        else:
            comparisons.append(node)
    bounds = {}
    for comparison in comparisons:
        operator = _text(comparison.child_by_field_name("operator")) if comparison.type == "binary_expression" else ""
        left = _text(comparison.child_by_field_name("left")) if operator else ""
        axis = next((a for a, name in axes.items() if name == left), None)
        if operator != ">=" or axis is None:
            raise CannotApply(f"the bounds check compares {_text(comparison)}, not x >= W or y >= H.")
        bounds[axis] = _text(comparison.child_by_field_name("right"))
    if set(bounds) != {"x", "y"}:
        raise CannotApply("the bounds check does not bound both x and y.")
    return bounds


def _row_major(read: Node, kernel: Node) -> tuple[Node, Node, str]:
    """(ROW, COL, W) of a read p[ROW * W + COL] (or p[COL + ROW * W]); W must be a kernel parameter."""
    index = read.child_by_field_name("indices") or read.child_by_field_name("index")
    while index is not None and index.type in ("subscript_argument_list", "parenthesized_expression") \
            and len(index.named_children) == 1:
        index = index.named_children[0]
    line = read.start_point[0] + 1
    if index is None or index.type != "binary_expression" or _text(index.child_by_field_name("operator")) != "+":
        raise CannotApply(f"the read {_text(read)} (line {line}) is not indexed as ROW * W + COL.")
    parameters = _parameter_names(kernel)
    left, right = index.child_by_field_name("left"), index.child_by_field_name("right")
    for product, col in ((left, right), (right, left)):
        if product.type == "binary_expression" and _text(product.child_by_field_name("operator")) == "*":
            a, b = product.child_by_field_name("left"), product.child_by_field_name("right")
            if b.type == "identifier" and _text(b) in parameters:
                return a, col, _text(b)
            if a.type == "identifier" and _text(a) in parameters:
                return b, col, _text(a)
    raise CannotApply(f"the read {_text(read)} (line {line}) is not indexed as ROW * W + COL with W a parameter.")


def _parameter_names(kernel: Node) -> set[str]:
    declarator = kernel.child_by_field_name("declarator")
    while declarator is not None and declarator.type != "function_declarator":
        declarator = declarator.child_by_field_name("declarator")
    names = set()
    for parameter in declarator.child_by_field_name("parameters").named_children:
        inner = _declared_identifier(parameter.child_by_field_name("declarator"))
        if inner is not None:
            names.add(_text(inner))
    return names


def _written_pointers(kernel: Node, pointers: dict[str, str]) -> set[str]:
    """Pointer parameters the kernel may write: through p[...] or *p on an assignment's left, ++/--,
    &p[...] or p handed to a call, or a local pointer made from p that is written."""
    aliases: dict[str, set[str]] = {name: {name} for name in pointers}
    for node in _walk(kernel.child_by_field_name("body")):
        if node.type == "init_declarator" and node.child_by_field_name("declarator") is not None \
                and node.child_by_field_name("declarator").type == "pointer_declarator":
            inner = _declared_identifier(node.child_by_field_name("declarator"))
            value = node.child_by_field_name("value")
            sources = {_text(n) for n in _walk(value) if n.type == "identifier" and _text(n) in pointers} if value else set()
            if inner is not None:
                aliases[_text(inner)] = sources
    written: set[str] = set()
    for node in _walk(kernel.child_by_field_name("body")):
        target = None
        if node.type == "assignment_expression":
            target = node.child_by_field_name("left")
        elif node.type == "update_expression":
            target = node.child_by_field_name("argument")
        elif node.type == "pointer_expression" and _text(node).startswith("&"):
            target = node.child_by_field_name("argument")
        elif node.type == "call_expression":
            for argument in node.child_by_field_name("arguments").named_children:
                if argument.type == "identifier" and _text(argument) in aliases:
                    written |= aliases[_text(argument)]
            continue
        while target is not None and target.type in ("subscript_expression", "pointer_expression",
                                                     "parenthesized_expression", "field_expression"):
            target = target.child_by_field_name("argument") or (target.named_children[0] if target.named_children else None)
        if target is not None and target.type == "identifier" and _text(target) in aliases:
            written |= aliases[_text(target)]
    return written


# ---- row-block: ROWS consecutive rows per thread (thread coarsening along y) ----------------------
ROW_BLOCK_ROWS = (2, 4, 8)
ROW_BLOCK_X = (16, 32, 64, 128, 256)
ROW_BLOCK_Y = (1, 2, 4, 8, 16)
_Y_FIELDS = ("blockIdx.y", "threadIdx.y", "blockDim.y", "gridDim.y")
_WARP_WIDE = ("__syncthreads", "__syncwarp", "__shfl", "__ballot", "__any_sync", "__all_sync", "__activemask",
              "__match", "__reduce_", "this_thread_block", "tiled_partition")


def one_pixel_per_thread_noted(note: dict) -> bool:
    text = f"{note.get('finding', '')} {note.get('advice', '')}".lower()
    return "reuse" in text or "loads per thread" in text or "independent work" in text or "coarsen" in text \
        or "per output" in text


def row_block_family(parent: Candidate) -> RecipeFamily:
    """A per-pixel 2-D kernel (x and y from blockIdx/blockDim/threadIdx as its first two statements,
    a bounds check on y that returns or wraps the work): each thread takes ROWS consecutive rows,
    `y = (blockIdx.y * blockDim.y + threadIdx.y) * ROWS + r`, the code after y's declaration
    repeated per row in an unrolled loop where a `return` becomes `continue`, so each row keeps
    the original's bounds check. The rows' overlapping loads (a stencil's) are then one thread's,
    which the compiler loads once, and every thread has ROWS rows of loads in flight."""
    step, kernel, source = _single_kernel(parent)
    body = kernel.child_by_field_name("body")
    statements = [c for c in body.named_children if c.type != "comment"]
    if len(statements) < 3 or statements[0].type != "declaration" or statements[1].type != "declaration":
        raise CannotApply("the kernel does not begin by computing x and y from blockIdx, blockDim and threadIdx.")
    axes, where = {}, {}
    for position, declaration in enumerate(statements[:2]):
        name, axis = _axis_index(declaration)
        axes[axis], where[axis] = name, position
    if set(axes) != {"x", "y"}:
        raise CannotApply("the kernel's first two indices are not one along x and one along y.")
    y_name, y_declaration = axes["y"], statements[where["y"]]
    root = kernel
    while root.parent is not None:
        root = root.parent
    for node in _walk(root):  # the whole source: a device function the kernel calls may hold the barrier
        if node.type == "identifier" and _text(node).startswith(_WARP_WIDE) or node.type == "__shared__" \
                or (node.type in ("storage_class_specifier", "type_qualifier", "attribute_specifier")
                    and "__shared__" in _text(node)):
            raise CannotApply(f"the kernel uses {_text(node)} (line {node.start_point[0] + 1}): threads that share "
                              "memory or meet at barriers cannot each take several rows.")
    for node in _walk(body):
        if node.type == "field_expression" and _text(node).replace(" ", "") in _Y_FIELDS \
                and not _inside(node, y_declaration):
            raise CannotApply(f"the kernel reads {_text(node)} outside y's declaration (line {node.start_point[0] + 1}), "
                              "whose meaning ROWS rows per thread changes.")
        if node.type == "goto_statement":
            raise CannotApply(f"the kernel has a goto (line {node.start_point[0] + 1}).")
    rest = statements[statements.index(y_declaration) + 1:]
    if not any(_compares(n, y_name) for top in rest for n in _walk(top) if n.type == "if_statement"):
        raise CannotApply(f"no if compares {y_name} with the image's height, so the rows a thread adds past the last "
                          "row would run unchecked.")
    edits = []
    for top in rest:
        for node in _walk(top):
            if node.type != "return_statement":
                continue
            enclosing = node.parent
            while enclosing is not None and enclosing.id != body.id:
                if enclosing.type in ("for_statement", "while_statement", "do_statement", "switch_statement"):
                    raise CannotApply(f"the return at line {node.start_point[0] + 1} is inside a loop or switch, so it "
                                      "cannot become a continue to the thread's next row.")
                enclosing = enclosing.parent
            if node.named_children:
                raise CannotApply(f"the return at line {node.start_point[0] + 1} returns a value.")
            edits.append((node.start_byte, node.end_byte, "continue;"))
    data = source.encode()
    first, last = y_declaration.end_byte, rest[-1].end_byte   # what follows y, its comments included
    rows_text = data[first:last]
    for start, end, text in sorted(edits, key=lambda e: e[0], reverse=True):
        rows_text = rows_text[:start - first] + text.encode() + rows_text[end - first:]
    rows_text = rows_text.decode().strip().replace("\n", "\n    ")
    y_type = _text(y_declaration.child_by_field_name("type"))
    y_value = _text(next(c for c in y_declaration.children if c.type == "init_declarator").child_by_field_name("value"))
    replacement = (f"const {y_type} kl_y0 = ({y_value}) * ROWS;\n"
                   "#pragma unroll\n"
                   "    for (int kl_r = 0; kl_r < ROWS; ++kl_r) {\n"
                   f"        {y_type} {y_name} = kl_y0 + kl_r;\n"
                   f"        {rows_text}\n"
                   "    }")
    data = data[:y_declaration.start_byte] + replacement.encode() + data[last:]
    bx, by, grid = _literal_block_2d(step)
    launch = _relaunched(parent, step, [_replace_number(grid[0], bx, "BX"), _replace_number(grid[1], by, "BY*ROWS")],
                         ["BX", "BY"])
    template = "// Written by KernelLab's row-block recipe: ROWS consecutive rows per thread.\n" + data.decode()
    return RecipeFamily(recipe="row-block", template=template, launch=launch,
                        knobs={"ROWS": list(ROW_BLOCK_ROWS), "BX": sorted(set(ROW_BLOCK_X) | {bx}),
                               "BY": sorted(set(ROW_BLOCK_Y) | {by})},
                        start={"ROWS": 4, "BX": 64, "BY": 4}, constraints=["BX * BY <= 1024", "BX * BY >= 32"],
                        temps=list(parent.get("temps") or []), compile_options=list(parent.get("compile_options") or []))


def _inside(node: Node, ancestor: Node) -> bool:
    return ancestor.start_byte <= node.start_byte and node.end_byte <= ancestor.end_byte


def _compares(statement: Node, name: str) -> bool:
    """Does this if's condition compare `name` (y < h, y >= h, h > y, ...)?"""
    condition = statement.child_by_field_name("condition")
    return condition is not None and any(
        n.type == "binary_expression" and _text(n.child_by_field_name("operator")) in ("<", "<=", ">", ">=")
        and name in (_text(n.child_by_field_name("left")), _text(n.child_by_field_name("right")))
        for n in _walk(condition))


def _literal_block_2d(step: dict) -> tuple[int, int, list[str]]:
    block = step["block"]
    if len(block) != 2 or not all(str(b).strip().isdigit() for b in block):
        raise CannotApply("the block is not two literal sizes (x, y), so the recipe cannot rescale the grid.")
    grid = [str(e) for e in step["grid"]]
    bx, by = int(block[0]), int(block[1])
    if len(grid) != 2 or not _has_number(grid[0], bx) or not _has_number(grid[1], by):
        raise CannotApply(f"the grid {grid} does not divide the image by the block {bx} x {by}.")
    return bx, by, grid


# ---- row-window: a stencil's neighbourhood sum as a rolling window of row sums in registers -------
WINDOW_VECTOR_WIDTHS = (1, 2, 4)
WINDOW_ROWS = (1, 2, 4, 8)
WINDOW_BLOCK_X = (32, 64, 128, 256)
WINDOW_BLOCK_Y = (1, 2, 4, 8)
MAX_WINDOW_RADIUS = 8
_PROBE_W, _PROBE_H = 2 * MAX_WINDOW_RADIUS + 21, 2 * MAX_WINDOW_RADIUS + 15   # odd sizes, so no row looks like another
_WINDOW_PATTERN = ("the recipe needs `float acc = 0; ... acc += img[ROW * W + COL]; ... out[y * W + x] = f(acc);` "
                   "with the taps over every (dy, dx) in [-r, r] x [-r, r] once, unweighted")


def many_loads_per_output_noted(note: dict) -> bool:
    text = f"{note.get('finding', '')} {note.get('advice', '')}".lower()
    return no_data_reuse_noted(note) or "loads per output" in text or "many loads" in text


def row_window_family(parent: Candidate) -> RecipeFamily:
    """A neighbourhood sum (x and y from blockIdx/blockDim/threadIdx, `if (x >= W || y >= H) return;`,
    a float accumulator summing img[ROW * W + COL] over every (dy, dx) in [-r, r]^2 once, with rows
    and columns clamped into the image or the taps outside it left out, then `out[y * W + x] =
    f(acc)`): each thread keeps the horizontal (2r+1)-sums of VEC consecutive pixels of 2r+1 rows
    in registers and slides them down ROWS rows, loading each row once (its VEC centre pixels as
    one float2/float4 where the row pitch and the buffers allow it, else scalars, and r pixels each
    side), so a pixel is loaded about (1 + 2r/VEC)(1 + 2r/ROWS) times instead of (2r+1)^2.

    The taps are read by running the code between the bounds check and the store for concrete
    pixels of a small image (loops, int locals and integer #defines, min/max, conditions), each float local standing for
    the pixels summed into it: the interior pixel gives the offsets, the pixels near the edges the
    edge rule, so the loops may be nested, one, or written out."""
    step, kernel, source = _single_kernel(parent)
    body = kernel.child_by_field_name("body")
    statements = [c for c in body.named_children if c.type != "comment"]
    if len(statements) < 3 or statements[0].type != "declaration" or statements[1].type != "declaration":
        raise CannotApply("the kernel does not begin by computing x and y from blockIdx, blockDim and threadIdx.")
    axes, types = {}, {}
    for declaration in statements[:2]:
        name, axis = _axis_index(declaration)
        axes[axis], types[axis] = name, _text(declaration.child_by_field_name("type"))
    if set(axes) != {"x", "y"}:
        raise CannotApply("the kernel's first two indices are not one along x and one along y.")
    wrapped = _wrapped_pixel(statements[2], axes) if len(statements) == 3 else None
    if wrapped is not None:
        bounds, pixel = wrapped
    else:
        bounds, pixel = _return_guard_bounds(statements[2], axes), statements[3:]
    if not pixel:
        raise CannotApply("the bounds check is followed by no code for the pixel.")
    parameters = _parameter_names(kernel)
    for axis, bound in bounds.items():
        if bound not in parameters:
            raise CannotApply(f"the bound of {axes[axis]} is {bound}, not a parameter of the kernel.")
    width, height = bounds["x"], bounds["y"]
    pointers = _pointer_parameters(kernel)
    target, value = _window_store(pixel[-1], kernel, axes, width)
    if pointers[target] != "float":
        raise CannotApply(f"{target} holds {pointers[target]}, and the recipe writes float images only.")
    taps_code = pixel[:-1]
    scalars = parameters - set(pointers)

    root = kernel
    while root.parent is not None:
        root = root.parent
    macros = _integer_macros(root)

    def taps_at(x: int, y: int) -> tuple[dict, dict]:
        reader = _TapReader(pointers, {**macros, axes["x"]: x, axes["y"]: y, width: _PROBE_W, height: _PROBE_H})
        reader.run(taps_code)
        return reader.floats, reader.ints

    for node in _walk(value):
        if node.type in ("subscript_expression", "assignment_expression", "update_expression", "pointer_expression"):
            raise CannotApply(f"the stored value {_text(value)} reads memory or has a side effect.")
    floats, ints = taps_at(_PROBE_W // 2, _PROBE_H // 2)
    used = {_text(n) for n in _walk(value) if n.type == "identifier"
            and not (n.parent is not None and n.parent.type == "call_expression" and n.parent.child_by_field_name("function") == n)}
    sums = sorted(used & set(floats))
    if len(sums) != 1:
        raise CannotApply(f"the stored value {_text(value)} uses {len(sums)} float sums ({', '.join(sums) or 'none'}); "
                          + _WINDOW_PATTERN + ".")
    accumulator = sums[0]
    others = used - {accumulator, axes["x"], axes["y"]} - scalars
    if others:
        raise CannotApply(f"the stored value {_text(value)} uses {', '.join(sorted(others))}, a local the recipe does not "
                          "carry into the window; only the sum, x, y and the kernel's scalar parameters may appear.")
    taps = floats[accumulator]
    images = {name for name, _ in taps}
    if len(images) != 1:
        raise CannotApply(f"the sum reads {len(images)} buffers ({', '.join(sorted(images)) or 'none'}), and the "
                          "recipe slides a window over one image.")
    image = images.pop()
    if pointers[image] != "float":
        raise CannotApply(f"{image} holds {pointers[image]}, and the recipe sums float images only.")
    if image in _written_pointers(kernel, pointers):
        raise CannotApply(f"the kernel writes {image}, which the window reads once per row through the read-only path.")
    centre_x, centre_y = _PROBE_W // 2, _PROBE_H // 2
    offsets = sorted((index // _PROBE_W - centre_y, index % _PROBE_W - centre_x) for _, index in taps)
    radius = max(max(abs(dy), abs(dx)) for dy, dx in offsets) if offsets else 0
    square = sorted((dy, dx) for dy in range(-radius, radius + 1) for dx in range(-radius, radius + 1))
    if radius == 0 or radius > MAX_WINDOW_RADIUS or offsets != square:
        raise CannotApply(f"the sum at an inner pixel reads {len(offsets)} taps at offsets "
                          f"{_offsets_text(offsets)}, not each of the (2r+1)^2 offsets of a square of radius r <= "
                          f"{MAX_WINDOW_RADIUS} once; " + _WINDOW_PATTERN + ".")
    rules = {"clamp", "zero"}
    near = lambda size: sorted({0, 1, radius, radius + 1, size - 2 - radius, size - 1 - radius, size - 2, size - 1})
    for y in near(_PROBE_H):
        for x in near(_PROBE_W):
            seen = sorted(divmod(index, _PROBE_W) for _, index in taps_at(x, y)[0].get(accumulator, []))
            clamped = sorted((min(max(y + dy, 0), _PROBE_H - 1), min(max(x + dx, 0), _PROBE_W - 1)) for dy, dx in square)
            inside = sorted((y + dy, x + dx) for dy, dx in square if 0 <= y + dy < _PROBE_H and 0 <= x + dx < _PROBE_W)
            if seen != clamped:
                rules.discard("clamp")
            if seen != inside:
                rules.discard("zero")
            if not rules:
                raise CannotApply(f"at the pixel (x={x}, y={y}) of a {_PROBE_W} x {_PROBE_H} image the sum reads "
                                  f"{_offsets_text([(r - y, c - x) for r, c in seen])}, which is neither clamped rows and "
                                  "columns (min/max into the image) nor the taps inside the image (zero outside).")
    clamp = "clamp" in rules
    bx, by, grid = _literal_block_2d(step)
    output = target
    per_pixel = (f"            const {types['x']} {axes['x']} = kl_x0 + kl_k;\n"
                 f"            const {types['y']} {axes['y']} = kl_y;\n"
                 f"            (void){axes['x']}; (void){axes['y']};\n"
                 f"            float {accumulator} = kl_win[0][kl_k];\n"
                 "#pragma unroll\n"
                 f"            for (int kl_t = 1; kl_t <= 2 * KL_R; ++kl_t) {accumulator} += kl_win[kl_t][kl_k];\n"
                 f"            kl_out[kl_k] = {_text(value)};\n")

    def rows(vector: bool) -> str:
        flag = "true" if vector else "false"
        if vector:
            store = (f"            float* kl_to = {output} + (long long)kl_y * ({width}) + kl_x0;\n"
                     "#if VEC == 4\n"
                     "            *reinterpret_cast<float4*>(kl_to) = make_float4(kl_out[0], kl_out[1], kl_out[2], kl_out[3]);\n"
                     "#elif VEC == 2\n"
                     "            *reinterpret_cast<float2*>(kl_to) = make_float2(kl_out[0], kl_out[1]);\n"
                     "#else\n"
                     "            kl_to[0] = kl_out[0];\n"
                     "#endif\n")
        else:
            store = ("#pragma unroll\n"
                     "            for (int kl_k = 0; kl_k < VEC; ++kl_k)\n"
                     f"                if (kl_x0 + kl_k < ({width})) {output}[(long long)kl_y * ({width}) + kl_x0 + kl_k] = kl_out[kl_k];\n")
        return (
            "        float kl_win[2 * KL_R + 1][VEC];\n"
            "#pragma unroll\n"
            "        for (int kl_t = 0; kl_t < 2 * KL_R; ++kl_t)\n"
            f"            kl_row_sums<VEC, {flag}>({image}, kl_y0 - KL_R + kl_t, kl_x0, {width}, {height}, kl_win[kl_t]);\n"
            "#pragma unroll\n"
            "        for (int kl_r = 0; kl_r < ROWS; ++kl_r) {\n"
            "            const int kl_y = kl_y0 + kl_r;\n"
            f"            if (kl_y >= ({height})) break;\n"
            f"            kl_row_sums<VEC, {flag}>({image}, kl_y + KL_R, kl_x0, {width}, {height}, kl_win[2 * KL_R]);\n"
            "            float kl_out[VEC];\n"
            "#pragma unroll\n"
            "            for (int kl_k = 0; kl_k < VEC; ++kl_k) {\n"
            + per_pixel.replace("\n            ", "\n                ").replace("            const", "                const", 1)
            + "            }\n"
            + store +
            "#pragma unroll\n"
            "            for (int kl_t = 0; kl_t < 2 * KL_R; ++kl_t)\n"
            "#pragma unroll\n"
            "                for (int kl_k = 0; kl_k < VEC; ++kl_k) kl_win[kl_t][kl_k] = kl_win[kl_t + 1][kl_k];\n"
            "        }\n")

    new_body = (
        "{\n"
        "    const int kl_x0 = (int)(blockIdx.x * blockDim.x + threadIdx.x) * VEC;\n"
        "    const int kl_y0 = (int)(blockIdx.y * blockDim.y + threadIdx.y) * ROWS;\n"
        f"    if (kl_x0 >= ({width}) || kl_y0 >= ({height})) return;\n"
        "    // float2/float4 accesses need the thread's VEC pixels inside the row and every row aligned to them: a\n"
        "    // width that VEC does not divide, or an unaligned buffer, takes the scalar loads and stores.\n"
        f"    const bool kl_vector = VEC > 1 && kl_x0 + VEC <= ({width}) && ({width}) % VEC == 0\n"
        f"        && (unsigned long long)({image}) % (sizeof(float) * VEC) == 0\n"
        f"        && (unsigned long long)({output}) % (sizeof(float) * VEC) == 0;\n"
        "    if (kl_vector) {\n" + rows(True) + "    } else {\n" + rows(False) + "    }\n"
        "}"
    )
    helpers = (
        f"// Written by KernelLab's row-window recipe: the {2 * radius + 1}x{2 * radius + 1} neighbourhood sum as a rolling "
        "window of row sums,\n"
        f"// VEC pixels by ROWS rows per thread, edges {'clamped' if clamp else 'zero'} as in the original.\n"
        f"#define KL_R {radius}\n"
        f"#define KL_CLAMP {1 if clamp else 0}\n"
        "__device__ __forceinline__ float kl_pixel(const float* __restrict__ row, int col, int w) {\n"
        "#if KL_CLAMP\n"
        "    return __ldg(row + min(max(col, 0), w - 1));\n"
        "#else\n"
        "    return col >= 0 && col < w ? __ldg(row + col) : 0.0f;\n"
        "#endif\n"
        "}\n"
        "// The horizontal (2R+1)-sums of pixels x0 .. x0+V-1 of the image's row `row`; VECTOR: those V pixels\n"
        "// lie in the row and are V-aligned, so they come in one float2/float4 load.\n"
        "template <int V, bool VECTOR>\n"
        "__device__ __forceinline__ void kl_row_sums(const float* __restrict__ image, int row, int x0, int w, int h, float* sums) {\n"
        "#if KL_CLAMP\n"
        "    row = min(max(row, 0), h - 1);\n"
        "#else\n"
        "    if (row < 0 || row >= h) {\n"
        "#pragma unroll\n"
        "        for (int k = 0; k < V; ++k) sums[k] = 0.0f;\n"
        "        return;\n"
        "    }\n"
        "#endif\n"
        "    const float* __restrict__ p = image + (long long)row * w;\n"
        "    float v[V + 2 * KL_R];\n"
        "#pragma unroll\n"
        "    for (int j = 0; j < V + 2 * KL_R; ++j)\n"
        "        if (!VECTOR || j < KL_R || j >= KL_R + V) v[j] = kl_pixel(p, x0 - KL_R + j, w);\n"
        "    if constexpr (VECTOR && V == 4) {\n"
        "        const float4 c = __ldg(reinterpret_cast<const float4*>(p + x0));\n"
        "        v[KL_R] = c.x; v[KL_R + 1] = c.y; v[KL_R + 2] = c.z; v[KL_R + 3] = c.w;\n"
        "    } else if constexpr (VECTOR && V == 2) {\n"
        "        const float2 c = __ldg(reinterpret_cast<const float2*>(p + x0));\n"
        "        v[KL_R] = c.x; v[KL_R + 1] = c.y;\n"
        "    } else if constexpr (VECTOR) {\n"
        "#pragma unroll\n"
        "        for (int k = 0; k < V; ++k) v[KL_R + k] = __ldg(p + x0 + k);\n"
        "    }\n"
        "#pragma unroll\n"
        "    for (int k = 0; k < V; ++k) {\n"
        "        float s = v[k];\n"
        "#pragma unroll\n"
        "        for (int t = 1; t <= 2 * KL_R; ++t) s += v[k + t];\n"
        "        sums[k] = s;\n"
        "    }\n"
        "}\n"
    )
    template = helpers + source[:body.start_byte] + new_body + source[body.end_byte:]
    launch = _relaunched(parent, step, [_replace_number(grid[0], bx, "BX*VEC"), _replace_number(grid[1], by, "BY*ROWS")],
                         ["BX", "BY"])
    return RecipeFamily(recipe="row-window", template=template, launch=launch,
                        knobs={"VEC": list(WINDOW_VECTOR_WIDTHS), "ROWS": list(WINDOW_ROWS),
                               "BX": sorted(set(WINDOW_BLOCK_X) | {bx}), "BY": sorted(set(WINDOW_BLOCK_Y) | {by})},
                        start={"VEC": 4, "ROWS": 2, "BX": 64, "BY": 4}, constraints=["BX * BY <= 1024", "BX * BY >= 32"],
                        temps=list(parent.get("temps") or []), compile_options=list(parent.get("compile_options") or []))


def _wrapped_pixel(guard: Node, axes: dict[str, str]) -> tuple[dict[str, str], list[Node]] | None:
    """({x: W, y: H}, the statements inside) of a last statement `if (x < W && y < H) { ... }`, else None."""
    if guard.type != "if_statement" or guard.child_by_field_name("alternative") is not None:
        return None
    comparisons, stack = [], [_unwrapped(guard.child_by_field_name("condition"))]
    while stack:
        node = _unwrapped(stack.pop())
        if node is not None and node.type == "binary_expression" and _text(node.child_by_field_name("operator")) == "&&":
            stack += [node.child_by_field_name("left"), node.child_by_field_name("right")]
        else:
            comparisons.append(node)
    bounds = {}
    for comparison in comparisons:
        if comparison is None or comparison.type != "binary_expression" \
                or _text(comparison.child_by_field_name("operator")) != "<":
            return None
        axis = next((a for a, name in axes.items() if name == _text(comparison.child_by_field_name("left"))), None)
        if axis is None:
            return None
        bounds[axis] = _text(comparison.child_by_field_name("right"))
    if set(bounds) != {"x", "y"}:
        return None
    consequence = guard.child_by_field_name("consequence")
    inner = consequence.named_children if consequence.type == "compound_statement" else [consequence]
    return bounds, [c for c in inner if c.type != "comment"]


def _integer_macros(root: Node) -> dict[str, int]:
    """The source's `#define NAME <integer>` (a radius is often one), for the taps' index arithmetic."""
    found = {}
    for node in _walk(root):
        if node.type == "preproc_def" and node.child_by_field_name("value") is not None:
            text = _text(node.child_by_field_name("value")).strip()
            while text.startswith("(") and text.endswith(")"):
                text = text[1:-1].strip()
            try:
                found[_text(node.child_by_field_name("name"))] = int(text.rstrip("uUlL"), 0)
            except ValueError:
                continue
    return found


def _offsets_text(offsets: list[tuple[int, int]]) -> str:
    shown = ", ".join(f"({dy:+d}, {dx:+d})" for dy, dx in offsets[:12])
    return "{" + shown + (f", ... {len(offsets) - 12} more" if len(offsets) > 12 else "") + "}"


def _window_store(statement: Node, kernel: Node, axes: dict[str, str], width: str) -> tuple[str, Node]:
    """(out, value) of the kernel's last statement `out[y * W + x] = value;`, W the bound of x."""
    assignment = statement.named_children[0] if statement.type == "expression_statement" and statement.named_children else None
    if assignment is None or assignment.type != "assignment_expression" \
            or _text(assignment.child_by_field_name("operator")) != "=" \
            or assignment.child_by_field_name("left").type != "subscript_expression":
        raise CannotApply(f"the kernel does not end by storing the pixel (out[y * W + x] = ...;) but with "
                          f"{_text(statement)} (line {statement.start_point[0] + 1}).")
    left = assignment.child_by_field_name("left")
    row, col, w = _row_major(left, kernel)
    strip = lambda n: _text(n).replace(" ", "").strip("()")
    if strip(row) != axes["y"] or strip(col) != axes["x"] or w != width:
        raise CannotApply(f"the store {_text(left)} (line {statement.start_point[0] + 1}) is not at "
                          f"[{axes['y']} * {width} + {axes['x']}], the pixel of the thread.")
    return _text(left.child_by_field_name("argument")), assignment.child_by_field_name("right")


class _TapReader:
    """The per-pixel code run for one concrete pixel, reads recorded instead of done: int locals and
    loop counters are evaluated (C's integer arithmetic, min, max, conditions), and each float local
    is the list of (buffer, index) reads summed into it. Anything else (a weight, a product, a call,
    a write) is refused with the line, since the window could not keep it."""

    STEPS = 200_000
    _INT_TYPES = {"int", "unsigned", "unsigned int", "long", "long long", "size_t", "short", "char", "bool", "auto"}

    def __init__(self, pointers: dict[str, str], ints: dict[str, int]) -> None:
        self.pointers = pointers
        self.ints: dict[str, int | None] = dict(ints)
        self.floats: dict[str, list[tuple[str, int]]] = {}
        self.steps = 0

    def run(self, statements: list[Node]) -> None:
        for statement in statements:
            self.statement(statement)

    def _refuse(self, node: Node, what: str) -> CannotApply:
        return CannotApply(f"{what} (line {node.start_point[0] + 1}); " + _WINDOW_PATTERN + ".")

    def statement(self, node: Node) -> None:
        self.steps += 1
        if self.steps > self.STEPS:
            raise CannotApply("the loops before the store run for more than 200,000 steps, so their bounds are not a "
                              "small constant radius.")
        kind = node.type
        if kind == "comment":
            return
        if kind == "compound_statement":
            self.run([c for c in node.named_children if c.type != "comment"])
        elif kind == "declaration":
            self.declare(node)
        elif kind == "expression_statement":
            if node.named_children:
                self.effect(node.named_children[0])
        elif kind == "if_statement":
            alternative = node.child_by_field_name("alternative")
            if alternative is not None and alternative.type == "else_clause":
                alternative = alternative.named_children[0] if alternative.named_children else None
            if self.integer(node.child_by_field_name("condition")):
                self.statement(node.child_by_field_name("consequence"))
            elif alternative is not None:
                self.statement(alternative)
        elif kind == "for_statement":
            initializer = node.child_by_field_name("initializer")
            if initializer is not None:
                self.declare(initializer) if initializer.type == "declaration" else self.effect(initializer)
            condition, update = node.child_by_field_name("condition"), node.child_by_field_name("update")
            while condition is None or self.integer(condition):
                self.steps += 1
                if self.steps > self.STEPS:
                    raise CannotApply(f"the loop at line {node.start_point[0] + 1} does not end within 200,000 steps, "
                                      "so its bounds are not a small constant radius.")
                self.statement(node.child_by_field_name("body"))
                if update is not None:
                    self.effect(update)
        else:
            raise self._refuse(node, f"the taps' code has a {kind.replace('_', ' ')}")

    def declare(self, node: Node) -> None:
        type_text = _text(node.child_by_field_name("type"))
        is_float = type_text == "float"
        if not is_float and type_text not in self._INT_TYPES:
            raise self._refuse(node, f"the taps' code declares a {type_text}, neither an int nor the float sum")
        for child in node.named_children:
            if child.type == "identifier":
                (self.floats if is_float else self.ints)[_text(child)] = [] if is_float else None
            elif child.type == "init_declarator":
                name = _text(child.child_by_field_name("declarator"))
                value = child.child_by_field_name("value")
                if is_float:
                    self.floats[name] = self.pixels(value)
                else:
                    self.ints[name] = self.integer(value)
            elif child.type not in ("primitive_type", "type_qualifier", "sized_type_specifier", "type_identifier",
                                    "storage_class_specifier"):
                raise self._refuse(node, f"the declaration {_text(node)} is not a plain local")

    def effect(self, node: Node) -> None:
        if node.type == "comma_expression":
            for child in node.named_children:
                self.effect(child)
            return
        if node.type == "update_expression":
            name = _text(node.child_by_field_name("argument"))
            if self.ints.get(name) is None:
                raise self._refuse(node, f"{_text(node)} steps something other than an int local")
            self.ints[name] += 1 if "++" in _text(node) else -1
            return
        if node.type != "assignment_expression":
            raise self._refuse(node, f"{_text(node)} is not an assignment")
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        operator = _text(node.child_by_field_name("operator"))
        name = _text(left)
        if left.type != "identifier":
            raise self._refuse(node, f"{_text(node)} writes memory before the store of the pixel")
        if name in self.floats:
            if operator == "=":
                self.floats[name] = self.pixels(right)
            elif operator == "+=":
                self.floats[name] = self.floats[name] + self.pixels(right)
            else:
                raise self._refuse(node, f"{name} is updated by {operator}, and a window keeps only sums of the "
                                   "taps, unweighted")
        elif name in self.ints:
            value = self.integer(right)
            if operator == "=":
                self.ints[name] = value
            else:
                current = self.ints[name]
                if current is None:
                    raise self._refuse(node, f"{name} is used before it is set")
                self.ints[name] = self._arithmetic(node, operator[:-1], current, value)
        else:
            raise self._refuse(node, f"{_text(node)} assigns {name}, which is not a local of the taps' code")

    def pixels(self, node: Node) -> list[tuple[str, int]]:
        """The reads a float expression sums (a read, a float local, a sum of those, 0, a condition)."""
        node = _unwrapped(node)
        kind = node.type
        if kind == "binary_expression" and _text(node.child_by_field_name("operator")) == "+":
            return self.pixels(node.child_by_field_name("left")) + self.pixels(node.child_by_field_name("right"))
        if kind == "subscript_expression":
            name = _text(node.child_by_field_name("argument"))
            if name not in self.pointers:
                raise self._refuse(node, f"{_text(node)} reads {name}, which is not a buffer parameter")
            index = node.child_by_field_name("indices") or node.child_by_field_name("index")
            return [(name, self.integer(index))]
        if kind == "identifier" and _text(node) in self.floats:
            return list(self.floats[_text(node)])
        if kind == "number_literal" and _float_literal(_text(node)) == 0.0:
            return []
        if kind == "conditional_expression":
            chosen = "consequence" if self.integer(node.child_by_field_name("condition")) else "alternative"
            return self.pixels(node.child_by_field_name(chosen))
        if kind == "cast_expression" and _text(node.child_by_field_name("type")) == "float":
            return self.pixels(node.child_by_field_name("value"))
        if kind == "call_expression" and _text(node.child_by_field_name("function")) == "__ldg":
            arguments = node.child_by_field_name("arguments").named_children
            if len(arguments) == 1 and arguments[0].type == "pointer_expression" and _text(arguments[0]).startswith("&"):
                return self.pixels(arguments[0].child_by_field_name("argument"))
        raise self._refuse(node, f"{_text(node)} is not a sum of the image's pixels: a weight per tap, a product "
                           "or a function of the pixels is not a plain neighbourhood sum")

    def integer(self, node: Node | None) -> int:
        node = _unwrapped(node)
        if node is None:
            raise CannotApply("the taps' code has an empty condition or value.")
        kind = node.type
        if kind == "number_literal":
            text = _text(node).lower().rstrip("ul")
            try:
                return int(text, 0)
            except ValueError:
                raise self._refuse(node, f"{_text(node)} is not an integer in the taps' index arithmetic") from None
        if kind in ("true", "false"):
            return int(kind == "true")
        if kind == "identifier":
            name = _text(node)
            if self.ints.get(name) is None:
                raise self._refuse(node, f"the taps depend on {name}, which is not x, y, the image's width or height, "
                                   "a loop counter or an int local set from those")
            return self.ints[name]
        if kind == "unary_expression":
            operator, value = _text(node.child_by_field_name("operator")), self.integer(node.child_by_field_name("argument"))
            return {"-": -value, "+": value, "!": int(not value), "~": ~value}[operator]
        if kind == "binary_expression":
            operator = _text(node.child_by_field_name("operator"))
            left = self.integer(node.child_by_field_name("left"))
            if operator == "&&":
                return int(bool(left) and bool(self.integer(node.child_by_field_name("right"))))
            if operator == "||":
                return int(bool(left) or bool(self.integer(node.child_by_field_name("right"))))
            return self._arithmetic(node, operator, left, self.integer(node.child_by_field_name("right")))
        if kind == "conditional_expression":
            chosen = "consequence" if self.integer(node.child_by_field_name("condition")) else "alternative"
            return self.integer(node.child_by_field_name(chosen))
        if kind == "cast_expression" and _text(node.child_by_field_name("type")) in self._INT_TYPES:
            return self.integer(node.child_by_field_name("value"))
        if kind == "call_expression":
            function = _text(node.child_by_field_name("function"))
            arguments = [self.integer(a) for a in node.child_by_field_name("arguments").named_children]
            if function in ("min", "max", "::min", "::max", "std::min", "std::max") and len(arguments) == 2:
                return min(arguments) if function.endswith("min") else max(arguments)
            if function in ("abs", "::abs") and len(arguments) == 1:
                return abs(arguments[0])
        if kind in ("assignment_expression", "update_expression", "comma_expression"):
            raise self._refuse(node, f"{_text(node)} has a side effect inside an expression")
        raise self._refuse(node, f"{_text(node)} is not index arithmetic the recipe can follow")

    def _arithmetic(self, node: Node, operator: str, a: int, b: int) -> int:
        if operator in ("/", "%") and b == 0:
            raise self._refuse(node, f"{_text(node)} divides by zero")
        if operator == "/":
            return abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)   # C truncates toward zero
        if operator == "%":
            return a - b * (abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1))
        operations = {"+": a + b, "-": a - b, "*": a * b, "<<": a << b if b >= 0 else 0, ">>": a >> b if b >= 0 else 0,
                      "<": int(a < b), "<=": int(a <= b), ">": int(a > b), ">=": int(a >= b), "==": int(a == b),
                      "!=": int(a != b), "&": a & b, "|": a | b, "^": a ^ b}
        if operator not in operations:
            raise self._refuse(node, f"{_text(node)} uses {operator}")
        return operations[operator]


def _unwrapped(node: Node | None) -> Node | None:
    while node is not None and node.type in ("parenthesized_expression", "condition_clause", "subscript_argument_list") \
            and len(node.named_children) == 1:
        node = node.named_children[0]
    return node


def _float_literal(text: str) -> float | None:
    try:
        return float(text.lower().rstrip("f"))
    except ValueError:
        return None


# ---- loop unrolling: each loop without an unroll pragma gets one, its factor a knob ---------------
UNROLL_FACTORS = (1, 2, 4, 8, 16)


def latency_bound_noted(note: dict) -> bool:
    text = f"{note.get('finding', '')} {note.get('advice', '')}".lower()
    return "waits" in text or "unroll" in text or "latency" in text


def unroll_family(parent: Candidate) -> RecipeFamily:
    steps = [s for s in parent["launch"] if "kernel" in s]
    source = parent["source"]
    root = Parser(_CUDA).parse(source.encode()).root_node
    kernels = [k for k in (_kernel(root, s["kernel"]) for s in steps) if k is not None]
    if not kernels:
        raise CannotApply("none of the launched kernels is defined in the source.")
    loops = [n for k in kernels for n in _walk(k.child_by_field_name("body")) if n.type == "for_statement"]
    if not loops:
        raise CannotApply("the kernel has no for loop to unroll.")
    bare = [loop for loop in loops if not _has_unroll_pragma(loop, source)]
    if not bare:
        raise CannotApply("every loop already has an unroll pragma, whose factor the automatic knobs explore.")
    # Never two of them nested, and none inside a loop that is unrolled already: nested unrolling multiplies
    # the code by both factors (on the H200 host a grid-stride softmax, its row loop and the three column
    # loops inside it all at UNROLL=16, took NVRTC 4.5 s to compile, against ~0.05 s without the pragmas).
    # Of two nested loops without a pragma the inner one is unrolled.
    bare = [loop for loop in bare
            if not any(_encloses(loop, other) for other in bare) and not _inside_unrolled_loop(loop, source)]
    if not bare:
        raise CannotApply("every loop without an unroll pragma sits inside a loop that is unrolled already; "
                          "unrolling it too would multiply the code by both factors.")
    data = source.encode()
    for loop in sorted(bare, key=lambda n: n.start_byte, reverse=True):
        line_start = data.rfind(b"\n", 0, loop.start_byte) + 1
        indent = data[line_start:loop.start_byte]
        if indent.strip():
            indent = b""
            insertion = b"\n#pragma unroll kl_unroll\n"
        else:
            insertion = b"#pragma unroll kl_unroll\n" + indent
        data = data[:loop.start_byte] + insertion + data[loop.start_byte:]
    # nvcc does not expand macros in an unroll pragma; a constant it does read.
    template = (f"// Written by KernelLab's unroll recipe: {len(bare)} loop(s) unrolled UNROLL times.\n"
                "constexpr int kl_unroll = UNROLL;\n" + data.decode())
    return RecipeFamily(recipe="unroll", template=template, launch=[dict(s) for s in parent["launch"]],
                        knobs={"UNROLL": list(UNROLL_FACTORS)}, start={"UNROLL": 4},
                        temps=list(parent.get("temps") or []), compile_options=list(parent.get("compile_options") or []))


def _has_unroll_pragma(loop: Node, source: str) -> bool:
    return _unroll_pragma(loop, source) is not None


def _unroll_pragma(loop: Node, source: str) -> str | None:
    """The `#pragma unroll ...`/`#pragma nounroll` line right above `loop`, or None."""
    before = source.encode()[:loop.start_byte].decode("utf-8", "replace").rstrip().rsplit("\n", 1)[-1].strip()
    return before if before.startswith(("#pragma unroll", "#pragma nounroll")) else None


_LOOPS = ("for_statement", "while_statement", "do_statement")


def _encloses(outer: Node, inner: Node) -> bool:
    return outer is not inner and outer.start_byte <= inner.start_byte and inner.end_byte <= outer.end_byte


def _inside_unrolled_loop(loop: Node, source: str) -> bool:
    """Whether an enclosing loop carries an unroll pragma other than `unroll 1` or `nounroll`."""
    node = loop.parent
    while node is not None:
        if node.type in _LOOPS:
            pragma = _unroll_pragma(node, source)
            if pragma is not None and pragma.split() not in (["#pragma", "unroll", "1"], ["#pragma", "nounroll"]):
                return True
        node = node.parent
    return False


# ---- the read-only path: __ldg, __restrict__ and __launch_bounds__ as knobs -------------------------
def read_only_path_noted(note: dict) -> bool:
    text = f"{note.get('finding', '')} {note.get('advice', '')}".lower()
    return "read-only" in text or "__ldg" in text or "restrict" in text or "launch bounds" in text or "registers" in text


def read_only_family(parent: Candidate) -> RecipeFamily:
    """Pointer parameters marked __restrict__ (and const where the kernel never writes through them),
    reads of those through __ldg, and __launch_bounds__ of the launch's block, each switched by a
    knob (RESTRICT, LDG, MINB: the blocks per SM asked of the register allocator, 0 for none)."""
    step, kernel, source = _single_kernel(parent)
    pointers = _pointer_parameters(kernel)
    if not pointers:
        raise CannotApply("the kernel has no pointer parameters.")
    if "__launch_bounds__" in _text(kernel) or "__restrict__" in _text(kernel.child_by_field_name("declarator")):
        raise CannotApply("the kernel already states __launch_bounds__ or __restrict__.")
    threads = 1
    for b in step["block"] or ["?"]:
        try:
            threads *= int(evaluate(str(b), {}))
        except (ExpressionError, TypeError, ValueError, ZeroDivisionError):
            raise CannotApply("the block is not a fixed size, so __launch_bounds__ cannot state it.") from None
    written = _written_pointers(kernel, pointers)
    read_only = set(pointers) - written
    edits = []
    declarator = kernel.child_by_field_name("declarator")
    while declarator is not None and declarator.type != "function_declarator":
        declarator = declarator.child_by_field_name("declarator")
    for parameter in declarator.child_by_field_name("parameters").named_children:
        inner = parameter.child_by_field_name("declarator")
        if parameter.type != "parameter_declaration" or inner is None or inner.type != "pointer_declarator":
            continue
        name = _declared_identifier(inner)
        if name is None:
            continue
        edits.append((name.start_byte, name.start_byte, "KL_RESTRICT "))
        if _text(name) in read_only and not any(c.type == "type_qualifier" and _text(c) == "const" for c in parameter.children):
            edits.append((parameter.start_byte, parameter.start_byte, "const "))
    local_read_only = {_text(n.child_by_field_name("declarator").child_by_field_name("declarator"))
                       for n in _walk(kernel.child_by_field_name("body"))
                       if n.type == "init_declarator" and n.child_by_field_name("declarator") is not None
                       and n.child_by_field_name("declarator").type == "pointer_declarator"
                       and n.child_by_field_name("value") is not None
                       and {_text(i) for i in _walk(n.child_by_field_name("value"))
                            if i.type == "identifier" and _text(i) in pointers} <= read_only
                       and any(_text(i) in pointers for i in _walk(n.child_by_field_name("value")) if i.type == "identifier")}
    readable = read_only | local_read_only
    reads = 0
    for node in _walk(kernel.child_by_field_name("body")):
        if node.type != "subscript_expression" or _text(node.child_by_field_name("argument")) not in readable:
            continue
        outer = node.parent
        if outer is not None and ((outer.type == "assignment_expression" and outer.child_by_field_name("left") == node)
                                  or outer.type == "update_expression"
                                  or (outer.type == "pointer_expression" and _text(outer).startswith("&"))):
            continue
        edits.append((node.start_byte, node.start_byte, "KL_READ("))
        edits.append((node.end_byte, node.end_byte, ")"))
        reads += 1
    global_keyword = next(c for c in kernel.children if c.type == "__global__")
    edits.append((global_keyword.end_byte, global_keyword.end_byte, " KL_BOUNDS"))
    data = source.encode()
    for start, end, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        data = data[:start] + text.encode() + data[end:]
    helpers = (
        "// Written by KernelLab's read-only-path recipe: __restrict__, __ldg and __launch_bounds__ as knobs.\n"
        "#if RESTRICT\n#define KL_RESTRICT __restrict__\n#else\n#define KL_RESTRICT\n#endif\n"
        "#if LDG\n#define KL_READ(value) __ldg(&(value))\n#else\n#define KL_READ(value) (value)\n#endif\n"
        f"#if MINB > 0\n#define KL_BOUNDS __launch_bounds__({threads}, MINB)\n#else\n"
        f"#define KL_BOUNDS __launch_bounds__({threads})\n#endif\n"
    )
    if reads == 0:
        raise CannotApply("the kernel reads no buffer it does not also write.")
    return RecipeFamily(recipe="read-only-path", template=helpers + data.decode(), launch=[dict(s) for s in parent["launch"]],
                        knobs={"RESTRICT": [0, 1], "LDG": [0, 1], "MINB": [0, 1, 2, 4, 8]},
                        start={"RESTRICT": 1, "LDG": 1, "MINB": 0},
                        temps=list(parent.get("temps") or []), compile_options=list(parent.get("compile_options") or []))


# ---- row cache: a row that several passes read, held in registers after the first ----------------
ROW_CACHE = (4, 8, 16, 32, 64)
_CONTROL_FLOW = ("break_statement", "continue_statement", "return_statement", "goto_statement")


def repeated_reads_noted(note: dict) -> bool:
    text = f"{note.get('finding', '')} {note.get('advice', '')}".lower()
    return "more than once" in text or "read again" in text or "re-read" in text or "reuse" in text


def row_cache_family(parent: Candidate) -> RecipeFamily:
    """Top-level loops that walk the same columns (the same header, e.g. the passes of a warp-per-row
    softmax: max, sum, write) and read the same read-only buffer at the loop's counter: the first pass
    that reads it keeps each value in a register array of CACHE entries, and the later passes take it
    from there instead of from memory. Each pass runs as CACHE unrolled steps where the thread's share
    of the row fits (kl_fits), and as the original loop where it does not, so any row length is right."""
    step, kernel, source = _single_kernel(parent)
    body = kernel.child_by_field_name("body")
    statements = [c for c in body.named_children if c.type != "comment"]
    loops = [n for n in statements if n.type == "for_statement"]
    groups: dict[tuple[str, ...], list[Node]] = {}
    for loop in loops:
        header = tuple(_text(loop.child_by_field_name(f)).replace(" ", "") for f in ("initializer", "condition", "update"))
        groups.setdefault(header, []).append(loop)
    repeated = [g for g in groups.values() if len(g) >= 2]
    if not repeated:
        raise CannotApply("no two loops at the kernel's top level walk the same columns, so nothing is read twice.")
    pointers = dict(_pointer_parameters(kernel))
    local = _local_pointers(body)
    written = _written_pointers(kernel, pointers)
    readable = {name for name in pointers if name not in written}
    readable |= {name for name, (_, sources) in local.items() if sources and not sources & written
                 and name not in {target for _, target in _assignments(body)}}
    element_type = {**pointers, **{name: t for name, (t, _) in local.items()}}
    best: tuple[list[Node], str, str, dict[str, list[int]]] | None = None
    reason = "the loops that walk the same columns read no buffer the kernel never writes at their counter."
    for group in repeated:
        counter, step_text, declared = _loop_counter(group[0])
        if not declared:
            reason = f"the loop at line {group[0].start_point[0] + 1} does not declare its own counter."
            continue
        if step_text == "1":
            reason = ("the loops step one column at a time, so one thread would hold the whole row in registers; "
                      "the cache pays where a row's columns are split over lanes (on top of warp-per-row).")
            continue
        reads: dict[str, list[int]] = {}
        for position, loop in enumerate(group):
            if any(target == counter for _, target in _assignments(loop.child_by_field_name("body"))):
                raise CannotApply(f"the loop at line {loop.start_point[0] + 1} changes its counter {counter} in its body.")
            for node in _walk(loop.child_by_field_name("body")):
                if node.type in _CONTROL_FLOW:
                    raise CannotApply(f"the loop at line {loop.start_point[0] + 1} leaves by {_text(node).split()[0]}, "
                                      "which its unrolled copy cannot do the same way.")
                if _is_read_at(node, counter, readable):
                    name = _text(node.child_by_field_name("argument"))
                    if position not in reads.setdefault(name, []):
                        reads[name].append(position)
        reads = {name: at for name, at in reads.items() if len(at) >= 2}
        if reads and (best is None or sum(map(len, reads.values())) > sum(map(len, best[3].values()))):
            best = (group, counter, step_text, reads)
    if best is None:
        raise CannotApply(reason)
    group, counter, step_text, reads = best
    condition = group[0].child_by_field_name("condition")
    if condition.type != "binary_expression" or _text(condition.child_by_field_name("left")) != counter \
            or _text(condition.child_by_field_name("operator")) not in ("<", "<=") \
            or _mentions(condition.child_by_field_name("right"), counter):
        raise CannotApply(f"the loops' condition {_text(condition)} is not {counter} < a bound.")
    bound, operator = _text(condition.child_by_field_name("right")), _text(condition.child_by_field_name("operator"))
    declaration = group[0].child_by_field_name("initializer")
    counter_type = _text(declaration.child_by_field_name("type"))
    start = _text(next(c for c in declaration.children if c.type == "init_declarator").child_by_field_name("value"))
    fixed = {_text(n) for loop in group for f in ("initializer", "condition", "update")
             for n in _walk(loop.child_by_field_name(f)) if n.type == "identifier"} - {counter}
    changed = fixed & {target for _, target in _assignments(body)}
    if changed:
        raise CannotApply(f"{', '.join(sorted(changed))} changes between the loops, so they may not walk the same columns.")
    kept = _kept_expression(group, counter, reads, body)
    divisors = _invariant_divisors(group, reads, body)
    edits: list[tuple[int, int, str]] = []
    arrays = "".join(f"    {element_type[name]} kl_row_{name}[CACHE];\n" for name in reads)
    after_all = "<" if operator == "<=" else "<="
    first = group[0]
    edits.append((first.start_byte, first.start_byte,
                  f"// row cache: {', '.join(reads)} read once, kept in registers for the later passes\n{arrays}"
                  f"    const bool kl_fits = ({bound}) {after_all} ({start}) + CACHE * ({step_text});\n    "))
    for position, loop in enumerate(group):
        loop_body = loop.child_by_field_name("body")
        cached = [name for name, at in reads.items() if position in at]
        if not cached:
            continue
        inner: list[tuple[int, int, str]] = []   # byte offsets in the loop's body
        spans = kept.spans.get(position, []) if kept is not None and position > kept.position else []
        for node in _walk(loop_body):
            if _is_read_at(node, counter, set(cached)) and not any(a <= node.start_byte < b for a, b in spans):
                inner.append((node.start_byte, node.end_byte, f"kl_row_{_text(node.child_by_field_name('argument'))}[kl_k]"))
        for a, b in spans:       # a later pass takes the value the earlier one kept
            inner.append((a, b, f"kl_row_{kept.name}[kl_k]"))
        if kept is not None and position == kept.position:
            for a, b in kept.spans[position][:1]:
                inner += [(a, a, f"(kl_row_{kept.name}[kl_k] = ("), (b, b, "))")]
        hoisted = ""
        for divisor, at in divisors.get(position, {}).items():
            hoisted += f"const float kl_inv_{divisor} = 1.0f / ({divisor});\n    "
            for begin, left_end, end in at:
                inner += [(begin, begin, "KL_DIV("), (left_end, end, f", {divisor})")]
        text = loop_body.text
        for a, b, piece in sorted(inner, key=lambda e: (e[0], e[1]), reverse=True):
            a, b = a - loop_body.start_byte, b - loop_body.start_byte
            text = text[:a] + piece.encode() + text[b:]
        loads = "".join(f"kl_row_{name}[kl_k] = {name}[{counter}]; " for name in cached if reads[name][0] == position)
        unrolled = ("if (kl_fits) {\n" + (f"    {hoisted.rstrip()}\n" if hoisted else "") + "#pragma unroll\n"
                    f"    for (int kl_k = 0; kl_k < CACHE; ++kl_k) {{\n"
                    f"        {counter_type} {counter} = ({start}) + kl_k * ({step_text});\n"
                    f"        if ({counter} {operator} ({bound})) {{ {loads}{text.decode()} }}\n    }}\n"
                    f"    }} else {_text(loop)}")
        edits.append((loop.start_byte, loop.end_byte, unrolled))
    data = source.encode()
    for a, b, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        data = data[:a] + text.encode() + data[b:]
    knobs: dict[str, list[int]] = {"CACHE": list(ROW_CACHE)}
    start_knobs = {"CACHE": 32}
    helpers = ""
    if divisors:
        # x / d with d fixed in the loop: one division before it, a multiplication per value (rounds
        # differently in the last place, so a knob: the tolerance check decides)
        knobs["RECIP"], start_knobs["RECIP"] = [0, 1], 1
        helpers = "#if RECIP\n#define KL_DIV(x, d) ((x) * kl_inv_##d)\n#else\n#define KL_DIV(x, d) ((x) / (d))\n#endif\n"
    template = "// Written by KernelLab's row-cache recipe: a row read by several passes, read once.\n" + helpers + \
        data.decode()
    return RecipeFamily(recipe="row-cache", template=template, launch=[dict(s) for s in parent["launch"]],
                        knobs=knobs, start=start_knobs,
                        temps=list(parent.get("temps") or []), compile_options=list(parent.get("compile_options") or []))


# Functions whose value depends on their arguments alone: an expression of them can be kept.
_PURE = {"__expf", "expf", "exp", "__logf", "logf", "log", "exp2f", "log2f", "sqrtf", "sqrt", "rsqrtf", "fabsf",
         "fabs", "fmaxf", "fminf", "max", "min", "tanhf", "erff", "__sinf", "__cosf", "sinf", "cosf", "powf", "__powf",
         "__fdividef"}


@dataclass
class _Kept:
    name: str                              # the cached buffer whose slots take the kept value
    position: int                          # the pass that computes it (and stores it in the slot)
    spans: dict[int, list[tuple[int, int]]]  # per pass, where the expression stands (bytes of the source)


def _kept_expression(group: list[Node], counter: str, reads: dict[str, list[int]], body: Node) -> _Kept | None:
    """A value of the cached element that one pass computes and a later pass computes again (the
    softmax's __expf(in[c] - largest) in its sum and its write): the first pass keeps it in the
    element's slot and the later ones read it. Only where every later read of the element is inside
    that expression (the raw value is not needed again), the expression calls pure functions only,
    and nothing it reads changes between the passes."""
    def pure(node: Node) -> bool:
        for n in _walk(node):
            if n.type in ("assignment_expression", "update_expression", "comma_expression"):
                return False
            if n.type == "call_expression" and _text(n.child_by_field_name("function")) not in _PURE:
                return False
        return True

    def occurrences(loop: Node, text: str) -> list[Node]:
        found, stack = [], [loop.child_by_field_name("body")]
        while stack:
            n = stack.pop()
            if n.type in ("call_expression", "binary_expression", "parenthesized_expression") and \
                    _text(n).replace(" ", "") == text:
                found.append(n)
                continue
            stack.extend(n.children)
        return found

    for name, at in reads.items():
        names = {name}
        for p in at[:-1]:
            loop = group[p]
            options = [n for n in _walk(loop.child_by_field_name("body"))
                       if n.type in ("call_expression", "binary_expression")
                       and any(_is_read_at(r, counter, names) for r in _walk(n)) and pure(n)]
            for candidate in sorted(options, key=lambda n: n.start_byte - n.end_byte):
                text = _text(candidate).replace(" ", "")
                if len(occurrences(loop, text)) != 1:
                    continue
                later = {q: occurrences(group[q], text) for q in at if q > p}
                later = {q: spans for q, spans in later.items() if spans}
                if not later:
                    continue
                # every read of the element from this pass on must be inside the expression
                covered = True
                for q in [p] + [q for q in at if q > p]:
                    inside = [(n.start_byte, n.end_byte) for n in ([candidate] if q == p else later.get(q, []))]
                    for r in _walk(group[q].child_by_field_name("body")):
                        if _is_read_at(r, counter, names) and not any(a <= r.start_byte < b for a, b in inside):
                            covered = False
                if not covered:
                    continue
                free = {_text(n) for n in _walk(candidate) if n.type == "identifier"} - {name, counter} - _PURE
                last = max(later)
                changed = any(target in free and loop.start_byte <= node.start_byte < group[last].end_byte
                              for node, target in _assignments(body))
                if changed:
                    continue
                spans = {p: [(candidate.start_byte, candidate.end_byte)]}
                spans.update({q: [(n.start_byte, n.end_byte) for n in nodes] for q, nodes in later.items()})
                return _Kept(name=name, position=p, spans=spans)
    return None


def _assignments(body: Node) -> list[tuple[Node, str]]:
    """Each assignment or step of a plain variable in `body` (`x = ...`, `x += ...`, `++x`), with its name."""
    out = []
    for node in _walk(body):
        target = node.child_by_field_name("left") if node.type == "assignment_expression" else \
            node.child_by_field_name("argument") if node.type == "update_expression" else None
        if target is not None and target.type == "identifier":
            out.append((node, _text(target)))
    return out


def _invariant_divisors(group: list[Node], reads: dict[str, list[int]], body: Node
                        ) -> dict[int, dict[str, list[tuple[int, int, int]]]]:
    """In each cached pass, `x / d` with d a float local the pass does not change: (expression start,
    the end of x, expression end) per divisor, for one division before the pass and a product per value."""
    floats = {_text(d.child_by_field_name("declarator")) for n in _walk(body) if n.type == "declaration"
              and _text(n.child_by_field_name("type")) == "float"
              for d in n.children if d.type == "init_declarator"}
    passes = {p for at in reads.values() for p in at}
    out: dict[int, dict[str, list[tuple[int, int, int]]]] = {}
    for p in sorted(passes):
        loop = group[p]
        written = {target for _, target in _assignments(loop)}
        for node in _walk(loop.child_by_field_name("body")):
            if node.type != "binary_expression" or _text(node.child_by_field_name("operator")) != "/":
                continue
            right = node.child_by_field_name("right")
            if right is None or right.type != "identifier" or _text(right) not in floats or _text(right) in written:
                continue
            left = node.child_by_field_name("left")
            out.setdefault(p, {}).setdefault(_text(right), []).append((node.start_byte, left.end_byte, node.end_byte))
    return out


def _is_read_at(node: Node, counter: str, names: set[str]) -> bool:
    """`P[counter]` for a P of `names`, read (not the left of an assignment, not under &)."""
    if node.type != "subscript_expression" or _text(node.child_by_field_name("argument")) not in names:
        return False
    index = node.child_by_field_name("indices") or node.child_by_field_name("index")
    if _text(index).strip("[] ") != counter:
        return False
    outer = node.parent
    return not (outer is not None and ((outer.type == "assignment_expression" and outer.child_by_field_name("left") == node)
                                       or outer.type == "update_expression"
                                       or (outer.type == "pointer_expression" and _text(outer).startswith("&"))))


def _local_pointers(body: Node) -> dict[str, tuple[str, set[str]]]:
    """Pointers declared in the body: name -> (element type, the identifiers its value is made from)."""
    found = {}
    for node in _walk(body):
        if node.type != "declaration":
            continue
        for declarator in (c for c in node.children if c.type == "init_declarator"):
            inner = declarator.child_by_field_name("declarator")
            if inner is None or inner.type != "pointer_declarator":
                continue
            inner = _declared_identifier(inner)
            value = declarator.child_by_field_name("value")
            if inner is not None and value is not None:
                found[_text(inner)] = (_text(node.child_by_field_name("type")),
                                       {_text(n) for n in _walk(value) if n.type == "identifier"})
    return found


# ---- shared by the recipes ----------------------------------------------------------------------
def _single_kernel(parent: Candidate) -> tuple[dict, Node, str]:
    source = parent["source"]
    steps = [s for s in parent["launch"] if "kernel" in s]
    if len(steps) != 1:
        raise CannotApply(f"it rewrites a single kernel launch, and this plan has {len(steps)} kernel launches.")
    step = steps[0]
    kernel = _kernel(Parser(_CUDA).parse(source.encode()).root_node, step["kernel"])
    if kernel is None:
        raise CannotApply(f"the kernel {step['kernel']} is not defined in the source.")
    return step, kernel, source


def _indexed_statements(kernel: Node, what: str) -> tuple[list[Node], str, str]:
    """The body's statements (comments left out), the first of which declares the thread's index
    (`what`, for the refusal) from blockIdx, blockDim and threadIdx: (statements, index, its type)."""
    statements = [c for c in kernel.child_by_field_name("body").named_children if c.type != "comment"]
    if not statements or statements[0].type != "declaration":
        raise CannotApply(f"the kernel does not begin by computing {what} from blockIdx, blockDim and threadIdx.")
    index, index_type = _element_index(statements[0])
    return statements, index, index_type


def _literal_block(step: dict, what: str) -> tuple[int, list[str]]:
    block = step["block"]
    if len(block) != 1 or not str(block[0]).strip().isdigit():
        raise CannotApply("the block is not one literal size, so the recipe cannot rescale the grid.")
    size = int(block[0])
    grid = [str(e) for e in step["grid"]]
    if len(grid) != 1 or not _has_number(grid[0], size):
        raise CannotApply(f"the grid {grid} does not divide the {what} by the block size {size}.")
    return size, grid


def _relaunched(parent: Candidate, step: dict, grid: list[str], block: list[str]) -> list[dict]:
    launch = [dict(s) for s in parent["launch"]]
    launch[parent["launch"].index(step)] = {**step, "grid": grid, "block": block}
    return launch


# ---- the generator ------------------------------------------------------------------------------
MODIFIERS = ("row-cache", "unroll", "read-only-path")   # recipes that may also go on top of another cure's variant
RECIPES: tuple[Recipe, ...] = (
    Recipe("vectorise", "4-byte global loads and stores", narrow_accesses_noted, vectorise_family),
    Recipe("warp-per-row", "one thread per row", one_thread_per_row_noted, warp_per_row_family),
    Recipe("column-tile", "one thread per column", one_thread_per_column_noted, column_tile_family),
    Recipe("halo-tile", "no reuse of a stencil's loads", no_data_reuse_noted, halo_tile_family),
    Recipe("row-window", "many loads per output of a stencil's neighbourhood sum", many_loads_per_output_noted,
           row_window_family),
    Recipe("row-block", "one pixel per thread", one_pixel_per_thread_noted, row_block_family),
    Recipe("grid-stride", "one element per thread over a grid of many waves", grid_too_small_or_too_many_blocks_noted,
           grid_stride_family),
    Recipe("row-cache", "passes that read the same row again", repeated_reads_noted, row_cache_family),
    Recipe("unroll", "loops without unrolling", latency_bound_noted, unroll_family),
    Recipe("read-only-path", "loads outside the read-only path", read_only_path_noted, read_only_family),
)


class RecipeGenerator:
    """At the root: each recipe that applies to the user's kernel proposes its cure's starting
    variants, and each that does not says why (once, on the root). Below a cure: its knobs are
    explored like the template generator's."""

    name = "recipes"

    def __init__(self, recipes: tuple[Recipe, ...] = RECIPES) -> None:
        self.recipes = recipes
        self._families: dict[tuple[str, str], RecipeFamily | str] = {}  # a cache, never state

    def family(self, recipe: Recipe, reference: Candidate) -> RecipeFamily | str:
        key = (recipe.name, reference["source"])
        if key not in self._families:
            try:
                self._families[key] = recipe.derive(reference)
            except CannotApply as exc:
                self._families[key] = f"The {recipe.name} recipe (for {recipe.cures}) cannot apply: {exc}"
        return self._families[key]

    def propose(self, context: ProposalContext, n: int) -> list[Proposal]:
        chain = self._chain_of(context.parent)
        if chain is not None:
            family = self._family_of_chain(chain, context.reference)
            if isinstance(family, str):
                return []
            stacked = self._stacked_starts(chain, context, max(1, n // 2)) if "+" not in chain else []
            known = set(context.known_hashes) | {candidate_hash(p.candidate) for p in stacked}
            around = self._explorer(family).propose(
                ProposalContext(**{**context.__dict__, "known_hashes": known}), max(0, n - len(stacked)))
            return stacked + around
        if context.parent.get("source") != context.reference.get("source"):
            return []  # recipes rewrite the user's kernel; other nodes are explored by their own cure
        return self._cures(context, n)

    # ---- modifiers on top of a cure ---------------------------------------------------------------
    # A structural cure's variant can take a modifier recipe as well (unroll its loops, route its
    # reads through the read-only path): the stacked family is the modifier derived from that very
    # variant, its knobs the modifier's, and its name carries the variant, e.g.
    # "recipe warp-per-row[WARPS=4]+unroll: UNROLL=8", so a later expansion can derive it again.
    def _stacked_starts(self, chain: str, context: ProposalContext, n: int) -> list[Proposal]:
        parent_knobs = context.parent.get("knobs") or {}
        if not parent_knobs:
            return []
        base = f"{chain}[{','.join(f'{k}={v}' for k, v in parent_knobs.items())}]"
        known = set(context.known_hashes)
        out = []
        for modifier in (r for r in self.recipes if r.name in MODIFIERS and r.name != chain):
            family = self._family_of_chain(f"{base}+{modifier.name}", context.reference)
            if isinstance(family, str) or len(out) >= n:
                continue
            start = family.render(family.start)
            digest = candidate_hash(start)
            if digest in known:
                continue
            known.add(digest)
            out.append(Proposal(candidate=start, rationale=f"{modifier.name} on top of {chain}: cures {modifier.cures} "
                                "in the cured kernel; start at " + ", ".join(f"{k}={v}" for k, v in family.start.items()),
                                measure_first=True))
        return out

    def _family_of_chain(self, chain: str, reference: Candidate) -> RecipeFamily | str:
        if "+" not in chain:
            recipe = next((r for r in self.recipes if r.name == chain), None)
            return self.family(recipe, reference) if recipe is not None else f"no recipe is called {chain}"
        base_text, top_name = chain.rsplit("+", 1)
        base_name, _, knob_text = base_text.partition("[")
        top = next((r for r in self.recipes if r.name == top_name), None)
        base_family = self._family_of_chain(base_name, reference)
        if top is None or isinstance(base_family, str):
            return f"no recipe is called {top_name}" if top is None else base_family
        try:
            knobs = {k: int(v) for k, v in (item.split("=") for item in knob_text.rstrip("]").split(",") if item)}
        except ValueError:
            return f"the cure's knobs {knob_text!r} cannot be read"
        key = (chain, reference["source"])
        if key not in self._families:
            try:
                family = top.derive(base_family.render(knobs))
                family.recipe = chain
                self._families[key] = family
            except CannotApply as exc:
                self._families[key] = f"The {top.name} recipe cannot apply on top of {base_name}: {exc}"
        return self._families[key]

    def _cures(self, context: ProposalContext, n: int) -> list[Proposal]:
        """Each applicable cure's start point first (cures an expert diagnosed ahead of the others),
        then their knobs' neighbours one cure at a time, so no cure waits behind another's knobs."""
        known = set(context.known_hashes)
        starts: list[Proposal] = []
        refusals: list[Proposal] = []
        first_time = True
        applicable: list[tuple[Recipe, RecipeFamily, str, Candidate]] = []
        for recipe in self.recipes:
            family = self.family(recipe, context.reference)
            if isinstance(family, str):
                refusals.append(Proposal(candidate=None, rationale="", failure=family))
                continue
            applicable.append((recipe, family, self._why(recipe, context), family.render(family.start)))
        applicable.sort(key=lambda item: not item[2].startswith("cures the "))  # diagnosed first, stable
        for recipe, family, why, start in applicable:
            if candidate_hash(start) in known:
                first_time = False
            else:
                known.add(candidate_hash(start))
                starts.append(Proposal(candidate=start, rationale=f"{recipe.name}: {why}; start at "
                                       + ", ".join(f"{k}={v}" for k, v in family.start.items()), measure_first=True))
        spreading = list(applicable)
        while len(starts) < n and spreading:
            for item in list(spreading):
                if len(starts) >= n:
                    break
                recipe, family, why, start = item
                spread = ProposalContext(**{**context.__dict__, "parent": start, "known_hashes": known})
                found = self._explorer(family).propose(spread, 1)
                if not found:
                    spreading.remove(item)
                for proposal in found:
                    known.add(candidate_hash(proposal.candidate))
                    proposal.rationale = f"{recipe.name}: {why}; {proposal.rationale}"
                    starts.append(proposal)
        # A recipe's refusal is said once, with the root's first cures, not at every expansion.
        return starts[:n] + (refusals if first_time else [])

    def _why(self, recipe: Recipe, context: ProposalContext) -> str:
        for note in context.parent_expert_notes:
            if recipe.indicated_by(note):
                return f"cures the {note.get('expert', 'expert')} diagnosis \"{note.get('finding', '')}\""
        return f"cures {recipe.cures} (read in the kernel's code)"

    def _chain_of(self, candidate: Candidate) -> str | None:
        """The recipe (or the cure and the modifier on top of it) that wrote this candidate."""
        name = candidate.get("name") or ""
        if not name.startswith(RECIPE_NAME_PREFIX):
            return None
        return name[len(RECIPE_NAME_PREFIX):].split(":", 1)[0]

    @staticmethod
    def _explorer(family: RecipeFamily) -> TemplateGenerator:
        return TemplateGenerator(KnobSpace(knobs=family.knobs, constraints=family.constraints), family.render)


# ---- small readers ------------------------------------------------------------------------------
def _substitute(expression, knobs: dict) -> str:
    text = str(expression)
    try:
        return parse_expression(text).substitute(knobs)
    except Exception:
        return text


def _has_number(expression: str, value: int) -> bool:
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        return False
    return any(isinstance(n, ast.Constant) and type(n.value) is int and n.value == value for n in ast.walk(tree))


def _replace_number(expression: str, value: int, replacement: str) -> str:
    swap = ast.parse(replacement, mode="eval").body

    class Replace(ast.NodeTransformer):
        def visit_Constant(self, node: ast.Constant):
            if type(node.value) is int and node.value == value:
                return ast.copy_location(swap, node)
            return node

    return ast.unparse(Replace().visit(ast.parse(expression.strip(), mode="eval")))


def _declared_identifier(node: Node | None) -> Node | None:
    """The name inside a declarator (`*p`, `p[4]`, `* const p`): the innermost identifier, or None."""
    while node is not None and node.type != "identifier":
        node = node.child_by_field_name("declarator")
    return node


def _mentions(node: Node | None, name: str) -> bool:
    return node is not None and any(n.type == "identifier" and _text(n) == name for n in _walk(node))


def _walk(root: Node):
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children))


def _text(node: Node | None) -> str:
    return node.text.decode("utf-8", "replace") if node is not None else ""
