"""Knobs found in an uploaded reference kernel, so the template generator can explore it without
the author writing a `[family]`: the launch's block size, integer `#define` and `constexpr`
constants, and `#pragma unroll N` factors.

The reference is read with tree-sitter's CUDA grammar (as in signature.py); a family template is
the reference with each knob's literal replaced by the knob's name, and a `[family]` table whose
launch is the reference's with the block size (and the grid and shared-memory expressions that
repeat it) written in terms of the knob. What cannot safely become a knob is reported with the
reason, never silently dropped.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

import tree_sitter_cuda
from tree_sitter import Language, Node, Parser

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
    proposal's, each with the values the user kept). A knob left out keeps its original value."""
    proposal, edits_by_knob, launch_by_knob = _derive(problem)
    unknown = sorted(set(chosen) - {k.name for k in proposal.knobs})
    if unknown:
        raise ValueError(f"{unknown[0]} is not a knob this kernel offers.")
    for name, values in chosen.items():
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
            raise ValueError(f"The knob {name} needs at least one value, each a positive whole number.")
    source = problem.reference.source.encode()
    edits = sorted((e for name in chosen for e in edits_by_knob[name]), key=lambda e: e.start, reverse=True)
    for edit in edits:
        source = source[:edit.start] + edit.text.encode() + source[edit.end:]
    prelude = "".join(f"constexpr int {UNROLL_CONSTANT.format(knob=k.name)} = {k.name};\n"
                      for k in proposal.knobs if k.kind == "unroll" and k.name in chosen)
    template = prelude + source.decode()
    kept = [c for c in (constraints if constraints is not None else proposal.constraints)
            if _names_in(c) <= set(chosen) | set(problem.size_names)]
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
    constants: dict[int, str] = {}      # value -> the constant knob that holds it (ties a block size to it)

    for node, name, value, what in _integer_constants(root):
        if declared.count(name) > 1:
            proposal.skipped.append(f"{name} ({what}) is declared more than once, so it stays as written.")
            continue
        if value <= 0 or name in taken:
            continue
        taken.add(name)
        proposal.knobs.append(ProposedKnob(name, "constant", value, _around(value), f"{what} at line {_line(node)}"))
        edits[name] = [_Edit(node.start_byte, node.end_byte, "\n" if node.type == "preproc_def" else "")]
        constants.setdefault(value, name)

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
    for index, step in enumerate(problem.reference.launch):
        if not isinstance(step, KernelLaunch):
            continue
        literal_dims = [(d, int(e.text)) for d, e in enumerate(step.block) if e.text.strip().isdigit() and int(e.text) > 1]
        if not literal_dims:
            continue
        body = kernels.get(step.kernel)
        if body is None or not _reads(body, "blockDim"):
            proposal.skipped.append(f"The block size of {step.kernel} stays {_dims(step)}: the kernel never reads "
                                    "blockDim, so its threads' work depends on that number.")
            continue
        two_d = len(literal_dims) > 1
        # Threads that cooperate through shared memory usually halve their count in a tree: powers of two only.
        sizes_1d = tuple(v for v in BLOCK_SIZES if v & (v - 1) == 0) if _cooperates(body) else BLOCK_SIZES
        names = []
        for dim, value in literal_dims:
            tied = constants.get(value)
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
            threads = "*".join(names)
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
    bodies: dict[str, Node] = {}
    for node in _walk(root):
        if node.type != "function_definition" or not any(c.type == "__global__" for c in node.children):
            continue
        declarator = node.child_by_field_name("declarator")
        while declarator is not None and declarator.type != "function_declarator":
            declarator = declarator.child_by_field_name("declarator")
        name = declarator.child_by_field_name("declarator") if declarator is not None else None
        body = node.child_by_field_name("body")
        if name is not None and body is not None:
            bodies.setdefault(_text(name), body)
    return bodies


def _reads(body: Node, identifier: str) -> bool:
    return any(n.type == "identifier" and _text(n) == identifier for n in _walk(body))


def _cooperates(body: Node) -> bool:
    return _reads(body, "__syncthreads") or any(n.type == "__shared__" for n in _walk(body))


def _literals(body: Node) -> set[int]:
    found = set()
    for node in _walk(body):
        if node.type == "number_literal":
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


def _names_in(expression: str) -> set[str]:
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
