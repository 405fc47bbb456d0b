"""Recipes: the standard cure for an expert's diagnosis, written into the user's own kernel.

A recipe reads the reference kernel with tree-sitter's CUDA grammar, checks that its cure applies
(and says why not when it does not), and rewrites the kernel into a template with the knobs the
cure opens (vector width, block size, ...). The recipe generator proposes a cure's starting
variants as children of the root, and from then on explores each cure's knobs like the template
generator, so the tree searches around every cure that applies.

Recipes so far:
- vectorise: "global loads/stores are 4 bytes per thread" in an elementwise kernel (one thread per
  index, `p[i]` accesses only): VEC consecutive elements per thread through 16/8-byte loads and
  stores, with a scalar loop for the tail; knobs VEC and BLOCK.
- warp-per-row: "one thread per row" in a row-wise kernel: the row's column loops split over the 32
  lanes of a warp, and each sum, max or min a loop builds combined with shuffles; knob WARPS (rows
  per block).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Callable

import tree_sitter_cuda
from tree_sitter import Language, Node, Parser

from klexpr import parse_expression
from search_engine.candidates import Candidate, make_candidate
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
    source = parent["source"]
    steps = [s for s in parent["launch"] if "kernel" in s]
    if len(steps) != 1:
        raise CannotApply("it rewrites a single kernel launch, and this plan has "
                          f"{len(steps)} kernel launches.")
    step = steps[0]
    root = Parser(_CUDA).parse(source.encode()).root_node
    kernel = _kernel(root, step["kernel"])
    if kernel is None:
        raise CannotApply(f"the kernel {step['kernel']} is not defined in the source.")
    pointers = _pointer_parameters(kernel)
    body = kernel.child_by_field_name("body")
    statements = [c for c in body.named_children if c.type != "comment"]
    if not statements or statements[0].type != "declaration":
        raise CannotApply("the kernel does not begin by computing its element index from blockIdx, blockDim and threadIdx.")
    index, index_type = _element_index(statements[0])
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
    source = parent["source"]
    steps = [s for s in parent["launch"] if "kernel" in s]
    if len(steps) != 1:
        raise CannotApply(f"it rewrites a single kernel launch, and this plan has {len(steps)} kernel launches.")
    step = steps[0]
    root = Parser(_CUDA).parse(source.encode()).root_node
    kernel = _kernel(root, step["kernel"])
    if kernel is None:
        raise CannotApply(f"the kernel {step['kernel']} is not defined in the source.")
    body = kernel.child_by_field_name("body")
    statements = [c for c in body.named_children if c.type != "comment"]
    if not statements or statements[0].type != "declaration":
        raise CannotApply("the kernel does not begin by computing its row from blockIdx, blockDim and threadIdx.")
    row, row_type = _element_index(statements[0])
    _, row_statements = _guarded_elements(statements[1:], row)
    for node in row_statements:
        for inner in _walk(node):
            if inner.type == "field_expression" and _text(inner.child_by_field_name("argument")) in ("threadIdx", "blockDim"):
                raise CannotApply(f"the row's code reads {_text(inner)} (line {inner.start_point[0] + 1}), whose meaning a warp per row changes.")
            if inner.type == "return_statement":
                raise CannotApply(f"the row's code returns early (line {inner.start_point[0] + 1}).")
    loops = [n for n in row_statements if n.type == "for_statement"]
    if not loops:
        raise CannotApply("the row's code has no loop over its columns at its top level.")
    for node in row_statements:
        if node.type != "for_statement" and any(n.type in ("for_statement", "while_statement", "do_statement") for n in _walk(node)):
            raise CannotApply(f"a loop at line {node.start_point[0] + 1} is inside another statement, so its columns cannot be split.")
    edits: list[tuple[int, int, str]] = []
    for loop in loops:
        edits += _strided_loop(loop)
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


def _strided_loop(loop: Node) -> list[tuple[int, int, str]]:
    """The loop's columns split over the lanes (start at the lane, step a warp) and, after it, each
    variable it reduces combined across the warp."""
    line = loop.start_point[0] + 1
    init, condition, update = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
    if init is None or init.type != "declaration" or condition is None or update is None:
        raise CannotApply(f"the loop at line {line} does not declare its own column counter.")
    declarator = next((c for c in init.children if c.type == "init_declarator"), None)
    counter = declarator.child_by_field_name("declarator") if declarator is not None else None
    start = declarator.child_by_field_name("value") if declarator is not None else None
    if counter is None or start is None:
        raise CannotApply(f"the loop at line {line} does not declare its own column counter.")
    name = _text(counter)
    steps_by_one = (update.type == "update_expression" and _text(update).replace(" ", "") in (f"++{name}", f"{name}++")) or \
        (update.type == "assignment_expression" and _text(update).replace(" ", "") == f"{name}+=1")
    if not steps_by_one:
        raise CannotApply(f"the loop at line {line} steps by {_text(update)}, not one column at a time.")
    local = {_text(n) for n in _walk(loop) if n.type == "identifier" and n.parent is not None
             and n.parent.type in ("init_declarator", "declaration") and n.parent.child_by_field_name("declarator") == n}
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
                              "max or min the warp can combine.")
        if reductions.get(variable, kind) != kind:
            raise CannotApply(f"the loop at line {line} combines {variable} in two ways.")
        reductions[variable] = kind
    header = [(start.start_byte, start.end_byte, f"kl_lane + ({_text(start)})"),
              (update.start_byte, update.end_byte, f"{name} += {WARP}")]
    after = "".join(f"\n    {v} = kl_warp_{kind}({v});" for v, kind in reductions.items())
    return header + ([(loop.end_byte, loop.end_byte, after)] if after else [])


# ---- the generator ------------------------------------------------------------------------------
RECIPES: tuple[Recipe, ...] = (
    Recipe("vectorise", "4-byte global loads and stores", narrow_accesses_noted, vectorise_family),
    Recipe("warp-per-row", "one thread per row", one_thread_per_row_noted, warp_per_row_family),
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
        recipe = self._recipe_of(context.parent)
        if recipe is not None:
            family = self.family(recipe, context.reference)
            if isinstance(family, str):
                return []
            return self._explorer(family).propose(context, n)
        if context.parent.get("source") != context.reference.get("source"):
            return []  # recipes rewrite the user's kernel; other nodes are explored by their own cure
        return self._cures(context, n)

    def _cures(self, context: ProposalContext, n: int) -> list[Proposal]:
        known = set(context.known_hashes)
        starts: list[Proposal] = []
        refusals: list[Proposal] = []
        first_time = True
        for recipe in self.recipes:
            family = self.family(recipe, context.reference)
            if isinstance(family, str):
                refusals.append(Proposal(candidate=None, rationale="", failure=family))
                continue
            why = self._why(recipe, context)
            explorer = self._explorer(family)
            start = family.render(family.start)
            from search_engine.candidates import candidate_hash

            if candidate_hash(start) in known:
                first_time = False
            else:
                known.add(candidate_hash(start))
                starts.append(Proposal(candidate=start, rationale=f"{recipe.name}: {why}; start at "
                                       + ", ".join(f"{k}={v}" for k, v in family.start.items())))
            spread = ProposalContext(**{**context.__dict__, "parent": start, "known_hashes": known})
            for proposal in explorer.propose(spread, max(0, n - len(starts))):
                proposal.rationale = f"{recipe.name}: {why}; {proposal.rationale}"
                starts.append(proposal)
        # A recipe's refusal is said once, with the root's first cures, not at every expansion.
        return starts[:n] + (refusals if first_time else [])

    def _why(self, recipe: Recipe, context: ProposalContext) -> str:
        for note in context.parent_expert_notes:
            if recipe.indicated_by(note):
                return f"cures the {note.get('expert', 'expert')} diagnosis \"{note.get('finding', '')}\""
        return f"cures {recipe.cures} (read in the kernel's code)"

    def _recipe_of(self, candidate: Candidate) -> Recipe | None:
        name = candidate.get("name") or ""
        if not name.startswith(RECIPE_NAME_PREFIX):
            return None
        recipe_name = name[len(RECIPE_NAME_PREFIX):].split(":", 1)[0]
        return next((r for r in self.recipes if r.name == recipe_name), None)

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
