"""Knobs found in an uploaded reference kernel, so the template generator can explore it without
the author writing a `[family]`: the launch's block size, integer `#define` and `constexpr`
constants, and `#pragma unroll N` factors.

The reference is read with tree-sitter's CUDA grammar (as in signature.py); a family template is
the reference with each knob's literal replaced by the knob's name, and a `[family]` table whose
launch is the reference's with the block size (and the grid and shared-memory expressions that
repeat it) written in terms of the knob. A constant equal to the block size is that knob: always
where the kernel reads blockDim, and where it does not, when the kernel counts its threads with the
constant rather than the bare number (a `#define THREADS 256` stride launched with 256 threads). What
cannot safely become a knob is reported with the reason, never silently dropped.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Sequence

import tree_sitter_cuda
from tree_sitter import Language, Node, Parser

from .family import check_combinations
from .spec import CudaReference, KernelLaunch, MemsetStep, Problem

_CUDA = Language(tree_sitter_cuda.language())

BLOCK_SIZES = (64, 96, 128, 192, 256, 384, 512, 768, 1024)
UNROLL_FACTORS = (1, 2, 4, 8)
MAX_THREADS_PER_BLOCK = 1024
INTEGER_TYPES = frozenset({"int", "unsigned", "unsigned int", "long", "long long", "unsigned long",
                           "unsigned long long", "short", "size_t", "int32_t", "int64_t", "uint32_t", "uint64_t"})
_INTEGER_LITERAL = re.compile(r"(0|[1-9][0-9]*)[uUlL]*")
# Where render_source puts "#define UNROLL 4", the pragma needs a C++ constant: nvcc does not
# expand macros in "#pragma unroll" (it looks the name up as an identifier).
UNROLL_CONSTANT = "{knob}_factor"


@dataclass(frozen=True)
class ProposedKnob:
    name: str
    kind: str          # "block", "constant" or "unroll"
    original: int
    values: tuple[int, ...]
    where: str         # what in the reference it stands for, for the problem page

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "original": self.original, "values": list(self.values),
                "where": self.where}


@dataclass
class KnobProposal:
    knobs: list[ProposedKnob] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)   # one sentence per literal left alone, with why

    def knob(self, name: str) -> ProposedKnob | None:
        return next((k for k in self.knobs if k.name == name), None)


@dataclass(frozen=True)
class _Edit:
    start: int
    end: int
    text: str


def propose_knobs(problem: Problem) -> KnobProposal:
    """The knobs the reference kernel and its launch offer, with sensible values and constraints."""
    return _derive(problem)[0]


def family_from_knobs(problem: Problem, chosen: dict[str, list[int]], constraints: list[str] | None = None,
                      source_name: str = "family.cu") -> tuple[str, str]:
    """The `[family]` TOML table and the template source for the chosen knobs (a subset of the
    proposal's, each with the values the user kept). A knob left out keeps its original value, and a
    constraint that names it is dropped (`split_constraints`). Knobs whose values make more than
    family.MAX_COMBINATIONS combinations are refused before anything else is done."""
    for name, values in chosen.items():
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
            raise ValueError(f"The knob {name} needs at least one value, each a positive whole number.")
    check_combinations({name: set(values) for name, values in chosen.items()})
    proposal, edits_by_knob, launch_by_knob = _derive(problem)
    unknown = sorted(set(chosen) - {k.name for k in proposal.knobs})
    if unknown:
        raise ValueError(f"{unknown[0]} is not a knob this kernel offers.")
    source = problem.reference.source.encode()
    edits = sorted((e for name in chosen for e in edits_by_knob[name]), key=lambda e: e.start, reverse=True)
    for edit in edits:
        source = source[:edit.start] + edit.text.encode() + source[edit.end:]
    prelude = "".join(f"constexpr int {UNROLL_CONSTANT.format(knob=k.name)} = {k.name};\n"
                      for k in proposal.knobs if k.kind == "unroll" and k.name in chosen)
    template = prelude + source.decode()
    kept, _ = _split_constraints(problem, proposal, chosen, constraints if constraints is not None else proposal.constraints)
    lines = ["[family]", f"source = {json.dumps(source_name)}",
             "knobs = { " + ", ".join(f"{name} = {json.dumps(sorted(set(values)))}" for name, values in chosen.items())
             + " }",
             f"constraints = {json.dumps(kept)}"]
    if problem.reference.compile_options:
        lines.append(f"compile_options = {json.dumps(list(problem.reference.compile_options))}")
    for index, step in enumerate(problem.reference.launch):
        lines.append("[[family.launch]]")
        if isinstance(step, MemsetStep):
            lines += [f"memset = {json.dumps(step.arg)}", f"value = {step.value}"]
            continue
        grid, block, shared = launch_by_knob(index, set(chosen))
        lines += [f"kernel = {json.dumps(step.kernel)}", f"grid = {json.dumps(grid)}", f"block = {json.dumps(block)}",
                  f"shared = {json.dumps(shared)}", f"args = {json.dumps(list(step.args))}"]
    return "\n".join(lines) + "\n", template


def split_constraints(problem: Problem, chosen, constraints: list[str]) -> tuple[list[str], list[str]]:
    """`constraints` as (kept, dropped): a constraint that names a knob this kernel offers but `chosen`
    leaves out is dropped, since that knob keeps its original value. A name that is neither a knob
    this kernel offers nor a size is a mistake (most likely a typo) and is refused with ValueError."""
    return _split_constraints(problem, _derive(problem)[0], chosen, constraints)


def _split_constraints(problem: Problem, proposal: KnobProposal, chosen, constraints: list[str]):
    offered = {k.name for k in proposal.knobs}
    kept, dropped = [], []
    for constraint in constraints:
        names = constraint_names(constraint)
        unknown = sorted(names - offered - set(problem.size_names))
        if unknown:
            raise ValueError(f"The constraint {constraint!r} names {unknown[0]}, which is neither a knob of this "
                             f"kernel ({', '.join(sorted(offered)) or 'none'}) nor a size "
                             f"({', '.join(sorted(problem.size_names))}).")
        (kept if names <= set(chosen) | set(problem.size_names) else dropped).append(constraint)
    return kept, dropped


# ---- finding knobs ----------------------------------------------------------------------------
def _derive(problem: Problem):
    if not isinstance(problem.reference, CudaReference):
        raise ValueError("Only a CUDA reference has knobs to find.")
    source = problem.reference.source
    root = Parser(_CUDA).parse(source.encode()).root_node
    proposal = KnobProposal()
    edits: dict[str, list[_Edit]] = {}
    taken: set[str] = set(problem.size_names) | {a.name for a in problem.args}
    declared = _declared_names(root)
    constants: dict[int, list[str]] = {}   # value -> the constant knobs that hold it (ties a block size to one)
    definitions: dict[str, Node] = {}      # constant knob -> its #define or constexpr

    for node, name, value, what in _integer_constants(root):
        if declared.count(name) > 1:
            proposal.skipped.append(f"{name} ({what}) is declared more than once, so it stays as written.")
            continue
        if value <= 0 or name in taken:
            continue
        taken.add(name)
        proposal.knobs.append(ProposedKnob(name, "constant", value, _around(value), f"{what} at line {_line(node)}"))
        edits[name] = [_Edit(node.start_byte, node.end_byte, "\n" if node.type == "preproc_def" else "")]
        constants.setdefault(value, []).append(name)
        definitions[name] = node

    unrolls = [n for n in _walk(root) if n.type == "preproc_call" and _pragma_unroll_factor(n) is not None]
    for index, node in enumerate(unrolls):
        name = "UNROLL" if len(unrolls) == 1 else f"UNROLL_{index + 1}"
        if name in taken:
            continue
        taken.add(name)
        factor = _pragma_unroll_factor(node)
        arg = next(c for c in node.children if c.type == "preproc_arg")
        proposal.knobs.append(ProposedKnob(name, "unroll", factor, tuple(sorted(set(UNROLL_FACTORS) | {factor})),
                                           f"#pragma unroll {factor} at line {_line(node)}"))
        edits[name] = [_Edit(arg.start_byte, arg.end_byte, f"unroll {UNROLL_CONSTANT.format(knob=name)}")]

    block_knobs: dict[tuple[int, int], str] = {}   # (launch step, dimension) -> knob
    kernels = _kernel_bodies(root)
    functions = _function_bodies(root)
    for index, step in enumerate(problem.reference.launch):
        if not isinstance(step, KernelLaunch):
            continue
        literal_dims = [(d, int(e.text)) for d, e in enumerate(step.block) if e.text.strip().isdigit() and int(e.text) > 1]
        if not literal_dims:
            continue
        body = kernels.get(step.kernel)
        code = _code_of(body, functions) if body is not None else []

        def offered(value: int) -> list[str]:
            """The constant knobs still offered that hold `value`, those the kernel's code uses first."""
            names = [c for c in constants.get(value, []) if proposal.knob(c) is not None]
            return sorted(names, key=lambda c: not _uses(code, c, definitions[c]))

        ties: dict[int, str] | None = None   # dimension -> constant, for a kernel that never reads blockDim
        if body is None or not _reads(body, "blockDim"):
            # Such a kernel counts its threads with a number of its own. Where that number is a constant equal
            # to the block size, used by the kernel's code while the bare number is not, the constant is the
            # thread count: it becomes the block size knob, so that the two always change together. Any other
            # constant equal to the block size that the code uses stays as written: changed apart from the
            # block, the kernel would count its threads wrongly.
            ties = {}
            for dim, value in literal_dims:
                used = [c for c in offered(value) if _uses(code, c, definitions[c])]
                if used and value not in _literals(code, [definitions[c] for c in used]):
                    ties[dim] = used[0]
            for dim, value in literal_dims:
                for name in offered(value):
                    knob = proposal.knob(name)
                    if name in ties.values() or knob.kind == "block" or not _uses(code, name, definitions[name]):
                        continue
                    proposal.knobs.remove(knob)
                    del edits[name]
                    proposal.skipped.append(
                        f"{name} ({knob.where}) stays {value}: it equals the block size of {step.kernel}, which never "
                        f"reads blockDim, so changing {name} apart from the block would make the kernel count its "
                        "threads wrongly.")
            if not ties:
                proposal.skipped.append(f"The block size of {step.kernel} stays {_dims(step)}: the kernel never reads "
                                        "blockDim, so its threads' work depends on that number.")
                continue
        two_d = len(literal_dims) > 1
        # Threads that cooperate through shared memory usually halve their count in a tree: powers of two only.
        sizes_1d = tuple(v for v in BLOCK_SIZES if v & (v - 1) == 0) if _cooperates(body) else BLOCK_SIZES
        names = []
        fixed = []    # dimensions that stay as written, in the thread limit as numbers
        for dim, value in literal_dims:
            tied = next(iter(offered(value)), None) if ties is None else ties.get(dim)
            if ties is not None and tied is None:
                fixed.append(str(value))
                continue
            if tied is not None:
                block_knobs[(index, dim)] = tied
                names.append(tied)
                knob = proposal.knob(tied)
                if knob.kind == "block":
                    continue  # both dimensions of a square block are the same constant
                values = sizes_1d if not two_d else _around(value)
                proposal.knobs[proposal.knobs.index(knob)] = ProposedKnob(
                    tied, "block", value, tuple(sorted(set(values) | {value})), knob.where + f", the block size of {step.kernel}")
                continue
            if value in _literals(body):
                proposal.skipped.append(f"The block size {value} of {step.kernel} stays as written: the kernel's code "
                                        f"uses the number {value} itself.")
                continue
            base = "BLOCK" if not two_d else f"BLOCK_{'XYZ'[dim]}"
            name = base if base not in taken else f"{base}_{index + 1}"
            if name in taken:
                continue
            taken.add(name)
            values = sizes_1d if not two_d else _around(value)
            proposal.knobs.append(ProposedKnob(name, "block", value, tuple(sorted(set(values) | {value})),
                                               f"dimension {'xyz'[dim]} of the block of {step.kernel}"))
            edits[name] = []
            block_knobs[(index, dim)] = name
            names.append(name)
        if names:
            threads = "*".join(names + fixed)
            proposal.constraints.append(f"{threads} <= {MAX_THREADS_PER_BLOCK}")
            if two_d:
                proposal.constraints.append(f"{threads} >= 32")

    def launch_for(index: int, chosen: set[str]):
        step = problem.reference.launch[index]
        grid = [e.text for e in step.grid]
        block = [e.text for e in step.block]
        shared = step.shared.text
        for dim in range(len(block)):
            name = block_knobs.get((index, dim))
            if name is None or name not in chosen:
                continue
            value = int(block[dim])
            block[dim] = name
            if dim < len(grid):
                grid[dim] = _replace_number(grid[dim], value, name)
            shared = _replace_number(shared, value, name)
        return grid, block, shared

    return proposal, edits, launch_for


def _integer_constants(root: Node):
    """(node, name, value, description) of each `#define NAME <integer>` and `constexpr <int type>
    NAME = <integer>;`, in file order."""
    for node in _walk(root):
        if node.type == "preproc_def":
            name_node = node.child_by_field_name("name")
            value_node = node.child_by_field_name("value")
            if name_node is None or value_node is None:
                continue
            match = _INTEGER_LITERAL.fullmatch(_text(value_node).strip())
            if match:
                yield node, _text(name_node), int(match.group(1)), f"#define {_text(name_node)}"
        elif node.type == "declaration" and any(c.type == "type_qualifier" and _text(c) == "constexpr" for c in node.children):
            type_node = node.child_by_field_name("type")
            declarators = [c for c in node.children if c.type == "init_declarator"]
            if type_node is None or _text(type_node) not in INTEGER_TYPES or len(declarators) != 1:
                continue
            name_node = declarators[0].child_by_field_name("declarator")
            value_node = declarators[0].child_by_field_name("value")
            if name_node is None or value_node is None or name_node.type != "identifier" or value_node.type != "number_literal":
                continue
            match = _INTEGER_LITERAL.fullmatch(_text(value_node))
            if match:
                yield node, _text(name_node), int(match.group(1)), f"constexpr {_text(name_node)}"


def _declared_names(root: Node) -> list[str]:
    """Every name a #define, a declaration or a parameter introduces, once per introduction."""
    names = []
    for node in _walk(root):
        if node.type == "preproc_def":
            name = node.child_by_field_name("name")
            if name is not None:
                names.append(_text(name))
        elif node.type in ("declaration", "parameter_declaration", "field_declaration"):
            for declarator in node.children_by_field_name("declarator"):
                while declarator is not None and declarator.type not in ("identifier", "field_identifier"):
                    declarator = declarator.child_by_field_name("declarator")
                if declarator is not None:
                    names.append(_text(declarator))
    return names


def _pragma_unroll_factor(node: Node) -> int | None:
    directive = next((c for c in node.children if c.type == "preproc_directive"), None)
    arg = next((c for c in node.children if c.type == "preproc_arg"), None)
    if directive is None or arg is None or _text(directive) != "#pragma":
        return None
    words = _text(arg).split()
    if len(words) == 2 and words[0] == "unroll" and words[1].isdigit() and int(words[1]) > 0:
        return int(words[1])
    return None


def _kernel_bodies(root: Node) -> dict[str, Node]:
    return _function_bodies(root, kernels_only=True)


def _function_bodies(root: Node, kernels_only: bool = False) -> dict[str, Node]:
    """Each function's body by name: the kernels', or every one's (device helpers too)."""
    bodies: dict[str, Node] = {}
    for node in _walk(root):
        if node.type != "function_definition":
            continue
        if kernels_only and not any(c.type == "__global__" for c in node.children):
            continue
        declarator = node.child_by_field_name("declarator")
        while declarator is not None and declarator.type != "function_declarator":
            declarator = declarator.child_by_field_name("declarator")
        name = declarator.child_by_field_name("declarator") if declarator is not None else None
        body = node.child_by_field_name("body")
        if name is not None and body is not None:
            bodies.setdefault(_text(name), body)
    return bodies


def _code_of(body: Node, functions: dict[str, Node]) -> list[Node]:
    """A kernel's body and the bodies of the functions it calls, and those they call: where a
    kernel's threads may count themselves (a block reduction is often a device helper)."""
    code, seen = [body], {id(body)}
    for node in code:
        for call in _walk(node):
            if call.type != "call_expression":
                continue
            callee = call.child_by_field_name("function")
            helper = functions.get(_text(callee)) if callee is not None and callee.type == "identifier" else None
            if helper is not None and id(helper) not in seen:
                seen.add(id(helper))
                code.append(helper)
    return code


def _uses(code: list[Node], name: str, definition: Node) -> bool:
    """Whether `code` reads `name` outside its own definition (a constexpr may be declared in a kernel)."""
    return any(n.type == "identifier" and _text(n) == name and not _inside(n, definition)
               for part in code for n in _walk(part))


def _inside(node: Node, outer: Node) -> bool:
    return outer.start_byte <= node.start_byte and node.end_byte <= outer.end_byte


def _reads(body: Node, identifier: str) -> bool:
    return any(n.type == "identifier" and _text(n) == identifier for n in _walk(body))


def _cooperates(body: Node) -> bool:
    return _reads(body, "__syncthreads") or any(n.type == "__shared__" for n in _walk(body))


def _literals(code: Node | list[Node], skip: Sequence[Node] = ()) -> set[int]:
    """The integers written in `code`, leaving out those inside `skip` (the definitions of constants)."""
    found = set()
    for node in (n for part in (code if isinstance(code, list) else [code]) for n in _walk(part)):
        if node.type == "number_literal" and not any(_inside(node, outer) for outer in skip):
            match = _INTEGER_LITERAL.fullmatch(_text(node))
            if match:
                found.add(int(match.group(1)))
    return found


def _around(value: int) -> tuple[int, ...]:
    """Powers of two from a quarter to four times the value, and the value itself."""
    power = 1 << max(0, value.bit_length() - 1)
    candidates = {power // 4, power // 2, power, power * 2, power * 4, value}
    return tuple(sorted(v for v in candidates if v >= 1))


def _replace_number(expression: str, value: int, name: str) -> str:
    """`expression` with each integer literal equal to `value` replaced by `name` (klexpr expressions
    are Python syntax)."""
    class Replace(ast.NodeTransformer):
        def visit_Constant(self, node: ast.Constant):
            if type(node.value) is int and node.value == value:
                return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), node)
            return node

    tree = ast.parse(expression.strip(), mode="eval")
    replaced = Replace().visit(tree)
    return ast.unparse(replaced)


def constraint_names(expression: str) -> set[str]:
    """The knob and size names an expression reads (not the functions it calls); none when it cannot be
    read, which the spec check then reports."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        return set()
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - calls


def _dims(step: KernelLaunch) -> str:
    return "(" + ", ".join(e.text for e in step.block) + ")"


def _walk(root: Node):
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children))


def _text(node: Node) -> str:
    return node.text.decode("utf-8", "replace")


def _line(node: Node) -> int:
    return node.start_point[0] + 1
