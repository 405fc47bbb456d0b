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
- grid-stride: ITEMS elements per thread, a grid apart; knobs ITEMS, BLOCK.
- unroll: `#pragma unroll` with the knob's factor on each loop that has none; knob UNROLL.
- read-only-path: __restrict__, const and __ldg on the buffers the kernel never writes, and
  __launch_bounds__ of its block; knobs RESTRICT, LDG, MINB.
The last two are also modifiers: below a structural cure's variant they start on top of it
("recipe warp-per-row[WARPS=4]+read-only-path: ..."), which is how the row RMS norm reached 71% of
its roofline on the H200 (benchmarks/results/own_kernels_h200_2026-12-01.json).
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
        while inner is not None and inner.type != "identifier":
            inner = inner.child_by_field_name("declarator")
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
    block = step["block"]
    if len(block) != 2 or not all(str(b).strip().isdigit() for b in block):
        raise CannotApply("the block is not two literal sizes (x, y), so the recipe cannot rescale the grid.")
    grid = [str(e) for e in step["grid"]]
    bx, by = int(block[0]), int(block[1])
    if len(grid) != 2 or not _has_number(grid[0], bx) or not _has_number(grid[1], by):
        raise CannotApply(f"the grid {grid} does not divide the image by the block {bx} x {by}.")
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
        inner = parameter.child_by_field_name("declarator")
        while inner is not None and inner.type != "identifier":
            inner = inner.child_by_field_name("declarator")
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
            inner = node.child_by_field_name("declarator")
            while inner is not None and inner.type != "identifier":
                inner = inner.child_by_field_name("declarator")
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
    before = source.encode()[:loop.start_byte].decode("utf-8", "replace").rstrip().rsplit("\n", 1)[-1].strip()
    return before.startswith("#pragma unroll") or before.startswith("#pragma nounroll")


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
        name = inner
        while name is not None and name.type != "identifier":
            name = name.child_by_field_name("declarator")
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
MODIFIERS = ("unroll", "read-only-path")   # recipes that may also go on top of another cure's variant
RECIPES: tuple[Recipe, ...] = (
    Recipe("vectorise", "4-byte global loads and stores", narrow_accesses_noted, vectorise_family),
    Recipe("warp-per-row", "one thread per row", one_thread_per_row_noted, warp_per_row_family),
    Recipe("column-tile", "one thread per column", one_thread_per_column_noted, column_tile_family),
    Recipe("halo-tile", "no reuse of a stencil's loads", no_data_reuse_noted, halo_tile_family),
    Recipe("grid-stride", "one element per thread over a grid of many waves", grid_too_small_or_too_many_blocks_noted,
           grid_stride_family),
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
                                "in the cured kernel; start at " + ", ".join(f"{k}={v}" for k, v in family.start.items())))
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
                                       + ", ".join(f"{k}={v}" for k, v in family.start.items())))
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
