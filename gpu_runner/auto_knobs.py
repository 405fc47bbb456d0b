"""Knobs found in an uploaded reference kernel, so the template generator can explore it without
the author writing a `[family]`: the launch's block size, integer `#define` and `constexpr`
constants, and `#pragma unroll N` factors.

The reference is read with tree-sitter's CUDA grammar (as in signature.py); a family template is
the reference with each knob's literal replaced by the knob's name, and a `[family]` table whose
launch is the reference's with the block size (and the grid and shared-memory expressions that
repeat it) written in terms of the knob. A constant equal to the block size is that knob where the
code counts the block's threads with it (_counts_threads), and, in a kernel that never reads
blockDim (neither in its body nor in a helper it calls), where it is the only such constant the code
uses. Constants that cannot safely change (the warp size, a number an argument's shape repeats, the
size of a table indexed by data, a constexpr in a namespace) are not offered, nor is a block size or
constant whose number a temp's shape, a scalar's value or an expression in another argument's shape
(`ceil_div(N, 256)`) also writes (a knob cannot change those), and values whose static shared memory
is over what ptxas accepts are not proposed. A constant knob that a `#pragma unroll` names is read
there through a C++ constant, since nvcc does not expand a #define in the pragma. What cannot safely
become a knob is reported with the reason, never silently dropped.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Sequence

import tree_sitter_cuda
from tree_sitter import Language, Node, Parser

from klexpr import ExpressionError, parse_expression

from .family import check_combinations
from .spec import CudaReference, KernelLaunch, MemsetStep, Problem

_CUDA = Language(tree_sitter_cuda.language())

BLOCK_SIZES = (64, 96, 128, 192, 256, 384, 512, 768, 1024)
UNROLL_FACTORS = (1, 2, 4, 8)
MAX_THREADS_PER_BLOCK = 1024
INTEGER_TYPES = frozenset({"int", "unsigned", "unsigned int", "long", "long long", "unsigned long",
                           "unsigned long long", "short", "size_t", "int32_t", "int64_t", "uint32_t", "uint64_t"})
_INTEGER_LITERAL = re.compile(r"(0|[1-9][0-9]*)[uUlL]*")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
# ptxas refuses a kernel whose static __shared__ arrays take more than 48 KiB (more is dynamic shared memory only).
MAX_STATIC_SHARED_BYTES = 48 * 1024
# Bytes of the element types a __shared__ array is commonly declared with.
ELEMENT_BYTES = {
    "char": 1, "signed char": 1, "unsigned char": 1, "bool": 1, "int8_t": 1, "uint8_t": 1, "char2": 2, "uchar2": 2,
    "short": 2, "unsigned short": 2, "int16_t": 2, "uint16_t": 2, "half": 2, "__half": 2, "__nv_bfloat16": 2,
    "nv_bfloat16": 2, "char4": 4, "uchar4": 4,
    "int": 4, "unsigned": 4, "unsigned int": 4, "int32_t": 4, "uint32_t": 4, "float": 4, "half2": 4, "__half2": 4,
    "__nv_bfloat162": 4, "nv_bfloat162": 4,
    "long long": 8, "unsigned long long": 8, "long": 8, "unsigned long": 8, "int64_t": 8, "uint64_t": 8,
    "size_t": 8, "double": 8, "float2": 8, "int2": 8, "uint2": 8,
    "float3": 12, "int3": 12, "uint3": 12,
    "float4": 16, "int4": 16, "uint4": 16, "double2": 16,
}
# Where render_source puts "#define UNROLL 4", the pragma needs a C++ constant: nvcc does not
# expand macros in "#pragma unroll" (it looks the name up as an identifier). The same holds for a
# constant knob that a "#pragma unroll" names (`constexpr int UNROLL = 4;` ... `#pragma unroll UNROLL`).
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
    proposal, edits_by_knob, launch_by_knob, factored = _derive(problem)
    unknown = sorted(set(chosen) - {k.name for k in proposal.knobs})
    if unknown:
        raise ValueError(f"{unknown[0]} is not a knob this kernel offers.")
    source = problem.reference.source.encode()
    edits = sorted((e for name in chosen for e in edits_by_knob[name]), key=lambda e: e.start, reverse=True)
    for edit in edits:
        source = source[:edit.start] + edit.text.encode() + source[edit.end:]
    prelude = "".join(f"constexpr int {UNROLL_CONSTANT.format(knob=name)} = {name};\n"
                      for name in _factored_knobs(proposal, factored, chosen))
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


def template_prelude_lines(problem: Problem, chosen) -> int:
    """The lines family_from_knobs puts before the reference in the template (one constant per chosen
    unroll knob, and per chosen constant knob that a #pragma unroll names); the rest of the template
    keeps the reference's lines, so a compiler's line less these (and render_source's #define lines)
    is the reference's."""
    proposal, _, _, factored = _derive(problem)
    return len(_factored_knobs(proposal, factored, chosen))


def _factored_knobs(proposal: KnobProposal, factored: set[str], chosen) -> list[str]:
    """The chosen knobs that a #pragma unroll reads through UNROLL_CONSTANT, in the proposal's order."""
    return [k.name for k in proposal.knobs if k.name in chosen and (k.kind == "unroll" or k.name in factored)]


def split_constraints(problem: Problem, chosen, constraints: list[str]) -> tuple[list[str], list[str]]:
    """`constraints` as (kept, dropped): a constraint that names a knob this kernel offers but `chosen`
    leaves out is dropped, since that knob keeps its original value. A name that is neither a knob
    this kernel offers nor a size is a mistake (most likely a typo) and is refused with ValueError."""
    return _split_constraints(problem, _derive(problem)[0], chosen, constraints)


def _split_constraints(problem: Problem, proposal: KnobProposal, chosen, constraints: list[str]):
    offered = {k.name for k in proposal.knobs}
    kept, dropped = [], []
    for constraint in constraints:
        try:
            names = set(parse_expression(constraint, None, boolean=True).names)
        except ExpressionError as exc:
            shown = constraint if len(constraint) <= 60 else f"{constraint[:57]}... ({len(constraint):,} characters)"
            raise ValueError(f"The constraint {shown!r} cannot be read: {_short_error(exc, constraint)}.") from None
        unknown = sorted(names - offered - set(problem.size_names))
        if unknown:
            raise ValueError(f"The constraint {constraint!r} names {unknown[0]}, which is neither a knob of this "
                             f"kernel ({', '.join(sorted(offered)) or 'none'}) nor a size "
                             f"({', '.join(sorted(problem.size_names))}).")
        (kept if names <= set(chosen) | set(problem.size_names) else dropped).append(constraint)
    return kept, dropped


def _short_error(exc: ExpressionError, text: str) -> str:
    """klexpr's sentence without the expression it quotes at its start (the caller quotes it, shortened)."""
    message = str(exc).rstrip(".")
    text = text.strip()
    for quoted in (f"'{text}'", f"'{text[:57]}...'"):
        if message.startswith(quoted):
            message = "it" + message[len(quoted):] if not message[len(quoted):].startswith(":") \
                else message[len(quoted) + 1:].strip()
            break
    return message if len(message) <= 200 else message[:197] + "..."


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
    factored: set[str] = set()             # constant knobs a #pragma unroll reads through UNROLL_CONSTANT

    every_constant = list(_integer_constants(root))
    known_values = {name: value for _, name, value, _ in every_constant}   # for reading shared arrays' sizes
    qualified = _qualified_names(root)
    argument_dims = _literal_argument_dims(problem)
    held = _numbers_of_arguments(problem)
    pragmas = [n for n in _walk(root) if n.type == "preproc_call" and _pragma_unroll_arg(n) is not None]
    identifiers = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", source))
    for node, name, value, what in every_constant:
        if declared.count(name) > 1:
            proposal.skipped.append(f"{name} ({what}) is declared more than once, so it stays as written.")
            continue
        if value <= 0 or name in taken:
            continue
        where = f"{what} at line {_line(node)}"
        scope = _enclosing_scope(node)
        if scope is not None or name in qualified:
            # The knob would be a #define of the name, which the preprocessor puts wherever the name is written.
            reason = f"it is declared inside {scope}" if scope is not None else "the code names it with a scope"
            example = f" ({qualified[name]} would become {qualified[name][:-len(name)]}{value})" if name in qualified else ""
            proposal.skipped.append(f"{name} ({where}) stays {value}: {reason}, which a knob's #define of {name} "
                                    f"cannot stand for{example}.")
            continue
        uses = _uses([root], name, node)
        warp = _warp_size_use(root, name, node) if value == 32 else None
        if warp is not None:
            proposal.skipped.append(f"{name} ({where}) stays 32: it is the warp size ({warp}), which is 32 on every "
                                    "CUDA GPU.")
            continue
        if uses and value in argument_dims:
            arg, shape = argument_dims[value]
            proposal.skipped.append(f"{name} ({where}) stays {value}: the argument {arg} has {value} elements along a "
                                    f"dimension (shape {shape}), which {name} likely counts; changed apart from {arg}, "
                                    "the kernel would read or write past it or leave part of it out.")
            continue
        indexed = _indexed_by_data(root, name, node)
        if indexed is not None:
            array, access = indexed
            proposal.skipped.append(f"{name} ({where}) stays {value}: it sizes {array}, which the kernel indexes with "
                                    f"values it reads ({access}); {name} must cover every such value.")
            continue
        if uses and value in held:
            # A knob changes the kernel's code and its launch, never an argument's shape or a scalar's value.
            proposal.skipped.append(f"{name} ({where}) stays {value}: {value} is also written in "
                                    f"{_listed(held[value])}, which a knob cannot change, so {name} changed alone "
                                    f"could no longer match {_it(held[value])}.")
            continue
        in_pragmas = [(n, spans) for n in pragmas if (spans := _pragma_mentions(n, name))]
        factor = UNROLL_CONSTANT.format(knob=name)
        if in_pragmas and factor in identifiers:
            proposal.skipped.append(f"{name} ({where}) stays {value}: the #pragma unroll at line "
                                    f"{_line(in_pragmas[0][0])} names it, where nvcc does not expand a #define, and "
                                    f"the C++ constant the template would put there, {factor}, is a name the "
                                    "kernel already uses.")
            continue
        taken.add(name)
        proposal.knobs.append(ProposedKnob(name, "constant", value, _around(value), where))
        # Blank lines in place of the definition, as many as it had, so the template keeps the reference's lines.
        edits[name] = [_Edit(node.start_byte, node.end_byte, "\n" * _text(node).count("\n"))]
        # The knob's #define does not reach into a #pragma unroll, so there the name becomes a C++ constant
        # that family_from_knobs initialises from the #define.
        edits[name] += [_Edit(start, end, factor) for _, spans in in_pragmas for start, end in spans]
        if in_pragmas:
            factored.add(name)
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
    functions = _callable_bodies(root)
    codes: dict[str, list[Node]] = {}              # kernel -> its body and its helpers' (for the shared memory)
    strides: list[tuple[str, str]] = []            # (extent, stride knob): a loop over extent rows, stride at a time
    for index, step in enumerate(problem.reference.launch):
        if not isinstance(step, KernelLaunch):
            continue
        literal_dims = [(d, int(e.text)) for d, e in enumerate(step.block) if e.text.strip().isdigit() and int(e.text) > 1]
        body = kernels.get(step.kernel)
        code = _code_of(body, functions) if body is not None else []
        if body is not None:
            codes[step.kernel] = code
        if not literal_dims:
            continue

        def offered(value: int) -> list[str]:
            """The constant knobs still offered that hold `value`, those the kernel's code uses first."""
            names = [c for c in constants.get(value, []) if proposal.knob(c) is not None]
            return sorted(names, key=lambda c: not _uses(code, c, definitions[c]))

        def leave(name: str, why: str) -> None:
            knob = proposal.knob(name)
            proposal.knobs.remove(knob)
            del edits[name]
            proposal.skipped.append(f"{name} ({knob.where}) stays {knob.original}: {why}")

        # The helpers count: a kernel whose device function (a template's too) reads blockDim reads it.
        reads_block_dim = any(_reads(part, "blockDim") for part in code)
        ties: dict[int, str] = {}   # dimension -> the constant that is its thread count
        if not reads_block_dim:
            # Such a kernel counts its threads with a number of its own. Where that number is a constant equal
            # to the block size, used by the kernel's code while the bare number is not, the constant is the
            # thread count: it becomes the block size knob, so that the two always change together. Any other
            # constant equal to the block size that the code uses stays as written: changed apart from the
            # block, the kernel would count its threads wrongly.
            # Where several such constants hold the number, the one the code shows counting threads
            # (_counts_threads) is it; with none shown, no guess is made.
            aliases = _thread_aliases(code)
            for dim, value in literal_dims:
                used = [c for c in offered(value) if _uses(code, c, definitions[c])]
                if not used or value in _literals(code, [definitions[c] for c in used]):
                    continue
                shown = [c for c in used if _counts_threads(code, body, c, "xyz"[dim], aliases, False)]
                if shown or len(used) == 1:
                    ties[dim] = (shown or used)[0]
            for dim, value in literal_dims:
                for name in offered(value):
                    knob = proposal.knob(name)
                    if name in ties.values() or knob.kind == "block" or not _uses(code, name, definitions[name]):
                        continue
                    leave(name, f"it equals the block size of {step.kernel}, which never reads blockDim, so changing "
                                f"{name} apart from the block would make the kernel count its threads wrongly.")
            if not ties:
                proposal.skipped.append(f"The block size of {step.kernel} stays {_dims(step)}: the kernel never reads "
                                        "blockDim, so its threads' work depends on that number.")
                continue
        else:
            # A kernel that reads blockDim may still count its threads with a constant as well: such a constant
            # is tied to the block only where the code shows it (_counts_threads). One that the code only walks
            # over with blockDim-strided loops is a length of its own and stays a free knob; one the code shows
            # nothing of either way stays as written, since changed apart from the block it may be wrong.
            aliases = _thread_aliases(code)
            unsure: dict[str, int] = {}
            one_d = all(not e.text.strip().isdigit() or int(e.text) == 1 for d, e in enumerate(step.block) if d > 0)
            for dim, value in literal_dims:
                for name in offered(value):
                    knob = proposal.knob(name)
                    if not _uses(code, name, definitions[name]):
                        continue  # not this kernel's: a knob of its own
                    counts = _counts_threads(code, body, name, "xyz"[dim], aliases, dim == 0 and one_d)
                    if counts and not _strided_by_block(code, name) and dim not in ties:
                        ties[dim] = name
                    elif knob.kind != "block" and (counts or not _strided_by_block(code, name)):
                        unsure.setdefault(name, value)
            for name, value in unsure.items():
                if name not in ties.values() and proposal.knob(name).kind != "block":
                    leave(name, f"it equals the block size of {step.kernel}, but the code does not show that it "
                                f"counts the block's threads (as blockIdx.x * {name} + threadIdx.x, a shared array "
                                f"of {name} indexed by threadIdx.x, a loop stepping by {name} from threadIdx.x or "
                                f"__launch_bounds__({name}) would), nor that it is a length of its own (a loop "
                                f"over {name} stepping by blockDim would); rather than guess, it stays as written.")
        two_d = len(literal_dims) > 1
        # Threads that cooperate through shared memory usually halve their count in a tree: powers of two only.
        sizes_1d = tuple(v for v in BLOCK_SIZES if v & (v - 1) == 0) if _cooperates(code) else BLOCK_SIZES
        names = []
        fixed = []    # dimensions that stay as written, in the thread limit as numbers
        for dim, value in literal_dims:
            tied = ties.get(dim)
            if not reads_block_dim and tied is None:
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
            if value in _literals(code):
                proposal.skipped.append(f"The block size {value} of {step.kernel} stays as written: the kernel's code "
                                        f"uses the number {value} itself.")
                continue
            if value in held:
                # A knob rewrites the launch's block, grid and shared memory, but not the arguments: a temp of
                # ceil_div(N, 256) partials (or a scalar counting them) would not follow a grid of ceil_div(N, BLOCK).
                proposal.skipped.append(f"The block size {value} of {step.kernel} stays as written: {value} is also "
                                        f"written in {_listed(held[value])}, which a knob cannot change, so a variant "
                                        f"with another block size could no longer match {_it(held[value])}.")
                fixed.append(str(value))
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
            for dim, value in literal_dims:
                tied = block_knobs.get((index, dim))
                if tied is not None and tied in definitions:
                    strides += [(extent, tied) for extent in _row_loops(code, tied, "xyz"[dim], _thread_aliases(code))]

    # A loop that covers `extent` rows `stride` threads at a time, each thread at threadIdx + j, reaches row
    # extent - 1 exactly when the stride divides the extent; past it the threads read and write beyond the tile.
    for extent, stride in dict.fromkeys(strides):
        if not extent.isdigit() and proposal.knob(extent) is None:
            if extent not in known_values:
                continue
            extent = str(known_values[extent])  # a constant that stays as written
        if extent == stride:
            continue
        constraint = f"{extent} % {stride} == 0"
        if constraint not in proposal.constraints:
            proposal.constraints.append(constraint)

    # A grid dimension that repeats the number of a constant tied to the block (the tile of a transpose, the
    # grid's y dimension counting tiles of TILE_DIM rows with a block of BLOCK_ROWS) is written with it in any
    # dimension; only where no other constant or block dimension holds the same number.
    cross: dict[int, dict[int, str]] = {}
    for index, step in enumerate(problem.reference.launch):
        if not isinstance(step, KernelLaunch):
            continue
        mine = {d: n for (i, d), n in block_knobs.items() if i == index}
        claims: dict[int, set[str]] = {}
        for d, e in enumerate(step.block):
            if e.text.strip().isdigit():
                claims.setdefault(int(e.text), set()).add(mine.get(d, f"dimension {'xyz'[d]} of the block"))
        for name, value in known_values.items():
            claims.setdefault(value, set()).add(name)
        cross[index] = {}
        for d, name in mine.items():
            if name not in definitions:
                continue  # BLOCK_X and the like: a number in the grid's own dimension only
            value = proposal.knob(name).original
            holders = sorted(claims.get(value, set()))
            repeated = [g for g, e in enumerate(step.grid) if g != d and value in _numbers(e.text)
                        and not (mine.get(g) is not None and proposal.knob(mine[g]).original == value)]
            if holders == [name]:
                cross[index][value] = name
            elif repeated:
                proposal.skipped.append(
                    f"The grid of {step.kernel} writes {value} in dimension {'xyz'[repeated[0]]}, but "
                    f"{' and '.join(holders)} all hold {value}; it stays {value} rather than a guess at which it "
                    "counts.")

    # Static shared memory: a block may have at most 48 KiB of it (ptxas refuses more). Where the kernel's
    # __shared__ arrays are sized by knobs, the values that take more with the other knobs as in the reference
    # are left out of the proposal, and a constraint keeps every combination within the limit.
    originals = {k.name: k.original for k in proposal.knobs}
    for kernel, code in codes.items():
        bytes_expression = _static_shared_bytes(code, set(originals), known_values)
        if bytes_expression is None:
            continue
        constraint = f"{bytes_expression} <= {MAX_STATIC_SHARED_BYTES}"
        expression = parse_expression(constraint, None, boolean=True)
        named = [k for k in proposal.knobs if k.name in expression.names]
        if not named:
            continue
        if constraint not in proposal.constraints:
            proposal.constraints.append(constraint)
        for knob in named:
            too_big = [v for v in knob.values if not _holds(expression, {**originals, knob.name: v})]
            kept = tuple(v for v in knob.values if v not in too_big)
            if not too_big or not kept:
                continue
            proposal.knobs[proposal.knobs.index(knob)] = ProposedKnob(knob.name, knob.kind, knob.original, kept, knob.where)
            biggest = _evaluate(parse_expression(bytes_expression, None), {**originals, knob.name: too_big[0]})
            proposal.skipped.append(
                f"{knob.name} is not proposed at {', '.join(map(str, too_big))}: the shared arrays of {kernel} would "
                f"take {biggest:,} bytes at {knob.name}={too_big[0]}, more than the {MAX_STATIC_SHARED_BYTES:,} "
                f"(48 KiB) of static shared memory a block may have; the constraint {constraint} keeps every "
                "setting within it.")

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
        for value, name in cross.get(index, {}).items():
            if name in chosen:
                grid = [_replace_number(g, value, name) if value in _numbers(g) else g for g in grid]
        return grid, block, shared

    return proposal, edits, launch_for, factored


def _integer_constants(root: Node):
    """(node, name, value, description) of each `#define NAME <integer>` and `constexpr <int type>
    NAME = <integer>;`, in file order."""
    for node in _walk(root):
        if node.type == "preproc_def":
            name_node = node.child_by_field_name("name")
            value_node = node.child_by_field_name("value")
            if name_node is None or value_node is None:
                continue
            # A comment after the value ("#define TILE 16  // tile edge") is part of the preprocessor's argument
            # in tree-sitter's reading (a /* */ one may be too), as is a line continuation.
            value = _COMMENT.sub(" ", _text(value_node)).replace("\\\n", " ").strip()
            match = _INTEGER_LITERAL.fullmatch(value)
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


def _pragma_unroll_arg(node: Node) -> Node | None:
    """The argument of a `#pragma unroll ...` line (`unroll UNROLL`), or None for any other line."""
    directive = next((c for c in node.children if c.type == "preproc_directive"), None)
    arg = next((c for c in node.children if c.type == "preproc_arg"), None)
    if directive is None or arg is None or _text(directive) != "#pragma":
        return None
    return arg if re.match(rb"\s*unroll\b", arg.text) else None


def _pragma_mentions(node: Node, name: str) -> list[tuple[int, int]]:
    """The byte spans (in the source) where a `#pragma unroll` line's factor writes `name`: the pragma's
    argument is raw text to tree-sitter, so its names are found by their spelling, before any comment."""
    arg = _pragma_unroll_arg(node)
    if arg is None:
        return []
    text = arg.text
    start = re.match(rb"\s*unroll\b", text).end()
    comment = re.search(rb"//|/\*", text[start:])
    end = start + comment.start() if comment is not None else len(text)
    pattern = re.compile(rb"(?<![A-Za-z0-9_])" + re.escape(name.encode()) + rb"(?![A-Za-z0-9_])")
    return [(arg.start_byte + m.start(), arg.start_byte + m.end()) for m in pattern.finditer(text, start, end)]


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


def _callable_bodies(root: Node) -> dict[str, list[Node]]:
    """Each function's bodies by its unqualified name (`relu_body` for `template <...> void relu_body`,
    `f` for `void ns::f`): every definition of the name, since overloads are not told apart here."""
    bodies: dict[str, list[Node]] = {}
    for node in _walk(root):
        if node.type != "function_definition":
            continue
        declarator = node.child_by_field_name("declarator")
        while declarator is not None and declarator.type != "function_declarator":
            declarator = declarator.child_by_field_name("declarator")
        name = _unqualified(declarator.child_by_field_name("declarator")) if declarator is not None else None
        body = node.child_by_field_name("body")
        if name is not None and body is not None:
            bodies.setdefault(name, []).append(body)
    return bodies


def _unqualified(node: Node | None) -> str | None:
    """The name a function is called or defined by, without its scope or template arguments
    (`ns::relu_body<float, 4>` is relu_body); None for anything else (a member, a pointer)."""
    while node is not None and node.type in ("qualified_identifier", "template_function"):
        node = node.child_by_field_name("name")
    return _text(node) if node is not None and node.type == "identifier" else None


def _code_of(body: Node, functions: dict[str, list[Node]]) -> list[Node]:
    """A kernel's body and the bodies of the functions it calls, and those they call: where a
    kernel's threads may count themselves (a block reduction is often a device helper) and read
    blockDim. A call names its helper plainly, with a scope or with template arguments
    (`relu_body<float, 4>(...)`); where several functions have that name, all of them are counted,
    since any of them may be the one that runs."""
    code, seen = [body], {id(body)}
    for node in code:
        for call in _walk(node):
            if call.type != "call_expression":
                continue
            for helper in functions.get(_unqualified(call.child_by_field_name("function")) or "", []):
                if id(helper) not in seen:
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


def _cooperates(code: list[Node]) -> bool:
    return any(_reads(part, "__syncthreads") or any(n.type == "__shared__" for n in _walk(part)) for part in code)


def _literals(code: Node | list[Node], skip: Sequence[Node] = ()) -> set[int]:
    """The integers written in `code`, leaving out those inside `skip` (the definitions of constants)."""
    found = set()
    for node in (n for part in (code if isinstance(code, list) else [code]) for n in _walk(part)):
        if node.type == "number_literal" and not any(_inside(node, outer) for outer in skip):
            match = _INTEGER_LITERAL.fullmatch(_text(node))
            if match:
                found.add(int(match.group(1)))
    return found


# ---- what the code does with a constant ----------------------------------------------------------
def _qualified_names(root: Node) -> dict[str, str]:
    """Each name the code writes with a scope (`cfg::kItems`, `::TILE`), with one such use: a #define of
    that name would turn `cfg::kItems` into `cfg::4`."""
    found: dict[str, str] = {}
    for node in _walk(root):
        if node.type != "qualified_identifier" or (node.parent is not None and node.parent.type == "qualified_identifier"):
            continue
        name = node
        while name is not None and name.type == "qualified_identifier":
            name = name.child_by_field_name("name")
        if name is not None:
            found.setdefault(_text(name), _text(node))
    return found


def _enclosing_scope(node: Node) -> str | None:
    """The named namespace, class or struct a constexpr is declared in (a #define of its name could not
    stand for `scope::name`), or None. A constant local to a function, or in an anonymous namespace,
    is reached by its bare name."""
    if node.type == "preproc_def":
        return None
    parent = node.parent
    while parent is not None:
        if parent.type == "function_definition":
            return None
        if parent.type == "namespace_definition":
            name = parent.child_by_field_name("name")
            if name is not None:
                return f"namespace {_text(name)}"
        if parent.type in ("class_specifier", "struct_specifier", "union_specifier"):
            name = parent.child_by_field_name("name")
            return f"{parent.type.split('_')[0]} {_text(name)}" if name is not None else f"an unnamed {parent.type.split('_')[0]}"
        parent = parent.parent
    return None


def _literal_argument_dims(problem: Problem) -> dict[int, tuple[str, str]]:
    """Each number (above 1) written as a dimension of an argument's shape, with the first such argument
    and its shape as the spec writes it."""
    found: dict[int, tuple[str, str]] = {}
    for arg in problem.args:
        for dim in arg.shape:
            text = dim.text.strip()
            if text.isdigit() and int(text) > 1:
                found.setdefault(int(text), (arg.name, "[" + ", ".join(d.text for d in arg.shape) + "]"))
    return found


def _numbers_of_arguments(problem: Problem) -> dict[int, list[str]]:
    """Each number (above 1) that a temp's shape, a scalar's value or a dimension of another argument's
    shape written as an expression (`ceil_div(N, 256)`, not a bare `256`) writes, to the arguments that
    write it, each as a phrase: a knob cannot change these, so what they count must stay as written.
    A bare dimension of an input or output (a histogram's 256 bins) is a length of its own, which
    _literal_argument_dims reports for the constants that repeat it."""
    found: dict[int, list[str]] = {}
    for arg in problem.args:
        if arg.role == "scalar":
            if arg.value is not None:
                for number in _numbers(arg.value.text):
                    found.setdefault(number, []).append(f"the value of the scalar {arg.name} ({arg.value.text})")
            continue
        shape = "[" + ", ".join(d.text for d in arg.shape) + "]"
        dims = arg.shape if arg.role == "temp" else [d for d in arg.shape if not d.text.strip().isdigit()]
        for number in sorted({n for d in dims for n in _numbers(d.text)}):
            found.setdefault(number, []).append(f"the shape of the {arg.role} {arg.name} ({shape})")
    return {number: phrases for number, phrases in found.items() if number > 1}


def _listed(phrases: list[str]) -> str:
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]


def _it(phrases: list[str]) -> str:
    return "it" if len(phrases) == 1 else "them"


def _strip(node: Node | None) -> Node | None:
    """`node` without the parentheses and casts around it."""
    while node is not None and node.type in ("parenthesized_expression", "cast_expression"):
        node = node.child_by_field_name("value") if node.type == "cast_expression" else node.named_children[0] \
            if node.named_children else None
    return node


def _operator(node: Node) -> str:
    op = node.child_by_field_name("operator")
    return _text(op) if op is not None else ""


def _is_identifier(node: Node | None, name: str) -> bool:
    node = _strip(node)
    return node is not None and node.type == "identifier" and _text(node) == name


def _is_builtin(node: Node | None, builtin: str, axis: str | None = None) -> bool:
    """Whether `node` is `threadIdx.x` (builtin threadIdx, axis x) or, without an axis, any of its fields."""
    node = _strip(node)
    if node is None or node.type != "field_expression":
        return False
    argument, field_node = node.child_by_field_name("argument"), node.child_by_field_name("field")
    return (argument is not None and _text(argument) == builtin
            and (axis is None or (field_node is not None and _text(field_node) == axis)))


def _thread_aliases(code: list[Node]) -> dict[str, str]:
    """Local names that hold threadIdx along one axis (`int tx = threadIdx.x;`), to their axis: never
    assigned again (a loop's `b = threadIdx.x; ...; b += blockDim.x` is no alias)."""
    aliases: dict[str, str] = {}
    changed: set[str] = set()
    for part in code:
        for node in _walk(part):
            if node.type in ("assignment_expression", "update_expression"):
                target = _strip(node.child_by_field_name("left") or node.child_by_field_name("argument"))
                if target is not None and target.type == "identifier":
                    changed.add(_text(target))
            if node.type != "init_declarator":
                continue
            name, value = node.child_by_field_name("declarator"), node.child_by_field_name("value")
            for axis in "xyz":
                if name is not None and name.type == "identifier" and _is_builtin(value, "threadIdx", axis):
                    aliases[_text(name)] = axis
    return {name: axis for name, axis in aliases.items() if name not in changed}


def _is_thread_index(node: Node | None, axis: str, aliases: dict[str, str]) -> bool:
    node = _strip(node)
    if node is None:
        return False
    if node.type == "identifier":
        return aliases.get(_text(node)) == axis
    return _is_builtin(node, "threadIdx", axis)


def _mentions_threads(node: Node, derived: set[str]) -> bool:
    """Whether `node` reads threadIdx or blockDim, or a local name computed from threadIdx."""
    return any((n.type == "identifier" and (_text(n) in ("threadIdx", "blockDim") or _text(n) in derived))
               for n in _walk(node))


def _thread_derived(root: Node) -> set[str]:
    """Local names whose initial value reads threadIdx (`int lane = threadIdx.x % 32;`)."""
    derived: set[str] = set()
    for node in _walk(root):
        if node.type == "init_declarator":
            name, value = node.child_by_field_name("declarator"), node.child_by_field_name("value")
            if name is not None and name.type == "identifier" and value is not None and _reads(value, "threadIdx"):
                derived.add(_text(name))
    return derived


def _warp_size_use(root: Node, name: str, definition: Node) -> str | None:
    """Why a constant of 32 is the warp size, or None: its name says so, it is passed to a __shfl*_sync
    or bounds the loop of one, or it splits thread indices into lanes and warps (threadIdx.x % 32,
    threadIdx.x / 32, blockDim.x / 32)."""
    derived = _thread_derived(root)
    for node in _walk(root):
        if node.type != "identifier" or _text(node) != name or _inside(node, definition):
            continue
        child, parent = node, node.parent
        while parent is not None and parent.type not in ("function_definition", "translation_unit"):
            if parent.type == "call_expression":
                function = parent.child_by_field_name("function")
                if function is not None and _text(function).startswith("__shfl"):
                    return f"{name} is passed to {_text(function)}"
            if parent.type == "for_statement" and child != parent.child_by_field_name("body"):
                shuffle = next((c for c in _walk(parent) if c.type == "call_expression"
                                and _text(c.child_by_field_name("function") or c).startswith("__shfl")), None)
                if shuffle is not None:
                    return f"{name} counts the steps of a loop of {_text(shuffle.child_by_field_name('function'))}"
            if parent.type == "binary_expression" and _operator(parent) in ("%", "/", "&") \
                    and child == parent.child_by_field_name("right") \
                    and _divides_by(parent.child_by_field_name("right"), name, _operator(parent) == "&") \
                    and _mentions_threads(parent.child_by_field_name("left"), derived):
                return f"{_text(parent)} splits threads into lanes and warps"
            if parent.type in ("expression_statement", "declaration", "compound_statement"):
                break
            child, parent = parent, parent.parent
    return "its name says so" if "warp" in name.lower() else None


def _divides_by(node: Node | None, name: str, mask: bool) -> bool:
    """Whether `node` is `name` (x % name, x / name) or, for a mask, `name - 1` (x & (name - 1))."""
    node = _strip(node)
    if not mask:
        return _is_identifier(node, name)
    return (node is not None and node.type == "binary_expression" and _operator(node) == "-"
            and _is_identifier(node.child_by_field_name("left"), name)
            and _text(_strip(node.child_by_field_name("right")) or node) == "1")


def _indexed_by_data(root: Node, name: str, definition: Node) -> tuple[str, str] | None:
    """(array, access) where `name` sizes an array that the code indexes with a value it reads from
    memory (`local[data[i]]`, `table[*p]`), or None."""
    arrays: set[str] = set()
    for node in _walk(root):
        if node.type == "array_declarator" and not _inside(node, definition):
            size = node.child_by_field_name("size")
            if size is not None and any(n.type == "identifier" and _text(n) == name for n in _walk(size)):
                inner = node.child_by_field_name("declarator")
                while inner is not None and inner.type != "identifier":
                    inner = inner.child_by_field_name("declarator")
                if inner is not None:
                    arrays.add(_text(inner))
    for node in _walk(root):
        if node.type != "subscript_expression":
            continue
        base = node.child_by_field_name("argument")
        while base is not None and base.type == "subscript_expression":
            base = base.child_by_field_name("argument")
        if base is None or base.type != "identifier" or _text(base) not in arrays:
            continue
        indices = node.child_by_field_name("indices")
        if indices is not None and any(n.type == "subscript_expression" or (n.type == "pointer_expression" and
                                       n.children and _text(n.children[0]) == "*") for n in _walk(indices)):
            return _text(base), _text(node)
    return None


def _shared_arrays(code: list[Node]) -> dict[str, list[Node]]:
    """Each (static) __shared__ array of `code` to its dimensions' size expressions, first dimension first."""
    arrays: dict[str, list[Node]] = {}
    for declaration in _shared_declarations(code):
        for declarator in declaration.children_by_field_name("declarator"):
            sizes = []
            while declarator is not None and declarator.type == "array_declarator":
                sizes.append(declarator.child_by_field_name("size"))
                declarator = declarator.child_by_field_name("declarator")
            if declarator is not None and declarator.type == "identifier" and sizes:
                arrays[_text(declarator)] = list(reversed(sizes))
    return arrays


def _shared_declarations(code: list[Node]) -> list[Node]:
    found, seen = [], set()
    for part in code:
        for node in _walk(part):
            if node.type != "declaration" or node.id in seen:
                continue
            seen.add(node.id)
            if any(c.type == "type_qualifier" and _text(c) == "__shared__" for c in node.children) and not any(
                    c.type == "storage_class_specifier" and _text(c) == "extern" for c in node.children):
                found.append(node)
    return found


def _counts_threads(code: list[Node], body: Node, name: str, axis: str, aliases: dict[str, str], one_d: bool) -> bool:
    """Whether the code counts the block's threads along `axis` with the constant `name`: the kernel's
    `__launch_bounds__(name)` (a 1-D block), a tile of `name` per block (`blockIdx.? * name +
    threadIdx.axis`), a shared array whose dimension of `name` is indexed by threadIdx.axis, or a loop
    stepping by `name` from threadIdx.axis or over rows `threadIdx.axis + j`."""
    definition = body.parent if body is not None else None
    if one_d and definition is not None:
        bounds = next((c for c in definition.children if c.type == "launch_bounds"), None)
        if bounds is not None and bounds.named_children and _is_identifier(bounds.named_children[0], name):
            return True
    shared = _shared_arrays(code)
    for part in code:
        for node in _walk(part):
            if node.type == "binary_expression" and _operator(node) == "+":
                left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
                for tile, thread in ((left, right), (right, left)):
                    tile = _strip(tile)
                    if tile is not None and tile.type == "binary_expression" and _operator(tile) == "*" \
                            and _is_thread_index(thread, axis, aliases):
                        a, b = tile.child_by_field_name("left"), tile.child_by_field_name("right")
                        if (_is_builtin(a, "blockIdx") and _is_identifier(b, name)) or \
                                (_is_builtin(b, "blockIdx") and _is_identifier(a, name)):
                            return True
            elif node.type == "subscript_expression" and node.parent is not None and not (
                    node.parent.type == "subscript_expression" and node.parent.child_by_field_name("argument") == node):
                indices, base = [], node
                while base is not None and base.type == "subscript_expression":
                    indices.append(base.child_by_field_name("indices"))
                    base = base.child_by_field_name("argument")
                sizes = shared.get(_text(base)) if base is not None and base.type == "identifier" else None
                for size, index in zip(sizes or [], reversed(indices)):
                    index = index.named_children[0] if index is not None and len(index.named_children) == 1 else None
                    if _is_identifier(size, name) and _is_thread_index(index, axis, aliases):
                        return True
            elif node.type == "for_statement":
                variable = _stepped_by(node, name)
                if variable is None:
                    continue
                start = node.child_by_field_name("initializer")
                if start is not None and any(_is_thread_index(n, axis, aliases) for n in _walk(start)):
                    return True
                if _rows_of_threads(node, variable, axis, aliases):
                    return True
    return False


def _stepped_by(loop: Node, name: str) -> str | None:
    """The variable of a for loop whose update is `v += name` (or `v = v + name`), or None."""
    update = _strip(loop.child_by_field_name("update"))
    if update is None or update.type != "assignment_expression":
        return None
    left, right = update.child_by_field_name("left"), update.child_by_field_name("right")
    if left is None or left.type != "identifier":
        return None
    if _operator(update) == "+=" and _is_identifier(right, name):
        return _text(left)
    right = _strip(right)
    if _operator(update) == "=" and right is not None and right.type == "binary_expression" and _operator(right) == "+":
        a, b = right.child_by_field_name("left"), right.child_by_field_name("right")
        if (_is_identifier(a, _text(left)) and _is_identifier(b, name)) or (_is_identifier(b, _text(left)) and _is_identifier(a, name)):
            return _text(left)
    return None


def _rows_of_threads(loop: Node, variable: str, axis: str, aliases: dict[str, str]) -> bool:
    """Whether the loop's body adds its variable to threadIdx.axis (`tile[threadIdx.y + j]`)."""
    body = loop.child_by_field_name("body")
    for node in _walk(body) if body is not None else ():
        if node.type == "binary_expression" and _operator(node) == "+":
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            if (_is_identifier(left, variable) and _is_thread_index(right, axis, aliases)) or \
                    (_is_identifier(right, variable) and _is_thread_index(left, axis, aliases)):
                return True
    return False


def _strided_by_block(code: list[Node], name: str) -> bool:
    """Whether the code walks over `name` items with a loop stepping by blockDim (`for (b = threadIdx.x;
    b < NUM_BINS; b += blockDim.x)`): then `name` is a length of its own, whatever the block size."""
    for part in code:
        for loop in (n for n in _walk(part) if n.type == "for_statement"):
            condition, update = _strip(loop.child_by_field_name("condition")), _strip(loop.child_by_field_name("update"))
            if condition is None or update is None or condition.type != "binary_expression" \
                    or update.type != "assignment_expression":
                continue
            if _operator(condition) in ("<", "<=") and _is_identifier(condition.child_by_field_name("right"), name) \
                    and _reads(update.child_by_field_name("right") or update, "blockDim"):
                return True
    return False


def _row_loops(code: list[Node], stride: str, axis: str, aliases: dict[str, str]) -> list[str]:
    """The extents (a name or a number) of loops `for (j = 0; j < extent; j += stride)` whose body works
    on rows `threadIdx.axis + j`: the rows a block of `stride` threads covers, `stride` at a time."""
    extents = []
    for part in code:
        for loop in (n for n in _walk(part) if n.type == "for_statement"):
            variable = _stepped_by(loop, stride)
            condition = _strip(loop.child_by_field_name("condition"))
            start = loop.child_by_field_name("initializer")
            if variable is None or condition is None or condition.type != "binary_expression" or _operator(condition) != "<":
                continue
            if not _is_identifier(condition.child_by_field_name("left"), variable) or start is None:
                continue
            if not any(n.type == "number_literal" and _text(n) == "0" for n in start.named_children) and not any(
                    n.type in ("init_declarator", "assignment_expression") and _is_identifier(n.child_by_field_name("left")
                    or n.child_by_field_name("declarator"), variable) and _text(_strip(n.child_by_field_name("right")
                    or n.child_by_field_name("value"))) == "0" for n in _walk(start)):
                continue
            extent = _strip(condition.child_by_field_name("right"))
            if extent is None or extent.type not in ("identifier", "number_literal") or \
                    (extent.type == "number_literal" and not _text(extent).isdigit()):
                continue
            if _rows_of_threads(loop, variable, axis, aliases):
                extents.append(_text(extent))
    return extents


def _c_expression(node: Node | None, knobs: set[str], known: dict[str, int]) -> str | None:
    """A C integer expression of numbers, constants and + - * / % as a klexpr expression (C's / as //),
    with the constants that are no knob written as their values; None for anything else."""
    if node is None:
        return None
    if node.type == "number_literal":
        match = _INTEGER_LITERAL.fullmatch(_text(node))
        return match.group(1) if match else None
    if node.type == "identifier":
        name = _text(node)
        return name if name in knobs else str(known[name]) if name in known else None
    if node.type == "parenthesized_expression" and len(node.named_children) == 1:
        inner = _c_expression(node.named_children[0], knobs, known)
        return None if inner is None else f"({inner})"
    if node.type == "binary_expression" and _operator(node) in ("+", "-", "*", "/", "%"):
        left = _c_expression(node.child_by_field_name("left"), knobs, known)
        right = _c_expression(node.child_by_field_name("right"), knobs, known)
        if left is None or right is None:
            return None
        return f"{left} {'//' if _operator(node) == '/' else _operator(node)} {right}"
    return None


def _static_shared_bytes(code: list[Node], knobs: set[str], known: dict[str, int]) -> str | None:
    """The bytes of the static __shared__ arrays of `code` as an expression of knobs, or None when no
    array's size can be read. Arrays of types or sizes it cannot read are left out, so the number is
    at most what the kernel takes: a setting it puts over the limit is over it."""
    parts = []
    for declaration in _shared_declarations(code):
        type_node = declaration.child_by_field_name("type")
        element = ELEMENT_BYTES.get(" ".join(_text(type_node).split())) if type_node is not None else None
        if element is None:
            continue
        for declarator in declaration.children_by_field_name("declarator"):
            dims = []
            while declarator is not None and declarator.type == "array_declarator":
                dims.append(_c_expression(declarator.child_by_field_name("size"), knobs, known))
                declarator = declarator.child_by_field_name("declarator")
            if declarator is None or declarator.type != "identifier" or None in dims:
                continue
            factors = [str(element)] + [d if d.isidentifier() or d.isdigit() else f"({d})" for d in reversed(dims)]
            parts.append(" * ".join(factors))
    return " + ".join(parts) if parts else None


def _holds(expression, env: dict[str, int]) -> bool:
    """Whether a condition holds; one that cannot be evaluated is not judged here (True)."""
    try:
        return bool(expression.evaluate(env))
    except ExpressionError:
        return True


def _evaluate(expression, env: dict[str, int]) -> int:
    try:
        return int(expression.evaluate(env))
    except ExpressionError:
        return 0


def _numbers(expression: str) -> set[int]:
    """The integers written in a launch expression (klexpr text)."""
    try:
        tree = parse_expression(expression).tree
    except ExpressionError:
        return set()
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) is int}


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
    read, which the spec check then reports. Read by klexpr, whose bounds (1,000 characters, 50 levels
    of nesting) hold before Python's parser sees the text: a constraint of 5,000 '-' signs or NUL
    characters is an unreadable constraint, not a RecursionError."""
    try:
        return set(parse_expression(expression, None, boolean=True).names)
    except ExpressionError:
        return set()


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
