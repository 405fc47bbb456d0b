"""Kernel signatures: the parameters of each `__global__` function, read with tree-sitter's CUDA
grammar, and the check that a launch step's arguments fit them in number, kind and type.

No preprocessing happens: a kernel defined under `#if` in two versions has both definitions, and a
step fits when it fits one of them. A parameter type the table below does not know (a typedef, a
template parameter, a macro) is checked for being a pointer or a value only.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Mapping

import tree_sitter_cuda
from tree_sitter import Language, Node, Parser

from .dtypes import DTYPES

_CUDA = Language(tree_sitter_cuda.language())

# The C types a buffer or scalar of each dtype may be declared with. Vector types are accepted for
# buffers only (a float32 buffer read as float4).
SCALAR_TYPES: dict[str, frozenset[str]] = {
    "float32": frozenset({"float"}),
    "float64": frozenset({"double"}),
    "float16": frozenset({"__half", "half"}),
    "bfloat16": frozenset({"__nv_bfloat16", "nv_bfloat16"}),
    "int32": frozenset({"int", "signed int", "signed", "int32_t"}),
    "int64": frozenset({"long long", "long long int", "signed long long", "signed long long int", "long",
                        "long int", "int64_t", "size_t", "ptrdiff_t", "ssize_t", "intptr_t"}),
    "uint32": frozenset({"unsigned int", "unsigned", "uint32_t"}),
    "uint8": frozenset({"unsigned char", "uint8_t"}),
}
VECTOR_TYPES: dict[str, frozenset[str]] = {
    "float32": frozenset({"float1", "float2", "float3", "float4"}),
    "float64": frozenset({"double1", "double2", "double3", "double4"}),
    "float16": frozenset({"__half2", "half2"}),
    "bfloat16": frozenset({"__nv_bfloat162", "nv_bfloat162"}),
    "int32": frozenset({"int1", "int2", "int3", "int4"}),
    "int64": frozenset({"longlong1", "longlong2", "longlong3", "longlong4"}),
    "uint32": frozenset({"uint1", "uint2", "uint3", "uint4"}),
    "uint8": frozenset({"uchar1", "uchar2", "uchar3", "uchar4"}),
}
KNOWN_TYPES = frozenset().union(*SCALAR_TYPES.values(), *VECTOR_TYPES.values(), {
    "char", "signed char", "short", "unsigned short", "unsigned long", "unsigned long long", "bool",
    "int8_t", "int16_t", "uint16_t", "uint64_t", "void"})


@dataclass(frozen=True)
class KernelParameter:
    position: int           # 0-based
    name: str               # "" for an unnamed parameter
    base_type: str          # "float", "unsigned int", "__half", or the unknown name as written
    pointer_depth: int      # 0 for a value; `float x[]` counts as a pointer
    const_pointee: bool     # `const float*` (what it points to cannot be written)
    reference: bool         # `float&`
    text: str               # the declaration as written

    @property
    def known_type(self) -> bool:
        return self.base_type in KNOWN_TYPES


@dataclass(frozen=True)
class KernelSignature:
    name: str
    parameters: tuple[KernelParameter, ...]
    line: int               # 1-based line of the kernel's name in the source

    def describe(self) -> str:
        return f"{self.name}({', '.join(p.text for p in self.parameters)})"


@dataclass(frozen=True)
class SignatureMismatch:
    """One way a launch step does not fit its kernel; `message` is a sentence for the user."""

    position: int | None    # the argument's 0-based position, None for a wrong count
    message: str


@lru_cache(maxsize=256)
def kernel_signatures(source: str) -> Mapping[str, tuple[KernelSignature, ...]]:
    """Every `__global__` function definition in `source`, by name, in file order."""
    tree = Parser(_CUDA).parse(source.encode())
    # Kernels and the type aliases their parameters may name are declared outside function bodies, which hold most
    # of a kernel's syntax tree: one walk that does not enter them (a tenth of the nodes on a GEMM variant).
    declared = list(_walk(tree.root_node, skip=_BODIES))
    aliases = _type_aliases(declared)
    found: dict[str, list[KernelSignature]] = {}
    for node in declared:
        if node.type != "function_definition" or not any(c.type == "__global__" for c in node.children):
            continue
        declarator = node.child_by_field_name("declarator")
        while declarator is not None and declarator.type != "function_declarator":
            declarator = declarator.child_by_field_name("declarator")
        if declarator is None:
            continue
        name_node = declarator.child_by_field_name("declarator")
        parameters_node = declarator.child_by_field_name("parameters")
        if name_node is None or parameters_node is None:
            continue
        parameters = _parameters(parameters_node, aliases)
        found.setdefault(_text(name_node), []).append(
            KernelSignature(_text(name_node), parameters, name_node.start_point[0] + 1))
    return {name: tuple(signatures) for name, signatures in found.items()}


def launch_mismatches(kernel: str, arg_names: Iterable[str], args: Mapping[str, object],
                      signatures: Iterable[KernelSignature]) -> list[SignatureMismatch]:
    """What is wrong with launching `kernel` with `arg_names`, [] when it fits one of `signatures`.

    `args` maps names to ArgSpec-like objects (name, role, dtype); names missing from it are not
    type-checked (they are refused elsewhere). With several definitions, the closest one is reported."""
    names = list(arg_names)
    best: list[SignatureMismatch] | None = None
    for signature in signatures:
        mismatches = _mismatches(signature, names, args)
        if not mismatches:
            return []
        if best is None or len(mismatches) < len(best):
            best = mismatches
    return best or []


def fitting_signature(arg_names: Iterable[str], args: Mapping[str, object],
                      signatures: Iterable[KernelSignature]) -> KernelSignature | None:
    """The first definition the arguments fit, or None."""
    names = list(arg_names)
    return next((s for s in signatures if not _mismatches(s, names, args)), None)


def _mismatches(signature: KernelSignature, names: list[str], args: Mapping[str, object]) -> list[SignatureMismatch]:
    params = signature.parameters
    where = f"kernel {signature.name} (line {signature.line})"
    if len(names) != len(params):
        listed = ", ".join(f"'{n}'" for n in names) or "none"
        return [SignatureMismatch(None, f"the step passes {len(names)} argument{'s' if len(names) != 1 else ''} "
                                        f"({listed}) but {where} takes {len(params)}: "
                                        f"{signature.describe()}")]
    out = []
    for param, name in zip(params, names):
        arg = args.get(name)
        if arg is None:
            continue
        problem = _parameter_problem(param, arg)
        if problem:
            label = f"parameter {param.position + 1}" + (f" '{param.name}'" if param.name else "")
            out.append(SignatureMismatch(param.position, f"argument '{name}' ({_describe_arg(arg)}) does not fit "
                                                         f"{label} of {where}, declared '{param.text}': {problem}"))
    return out


def _parameter_problem(param: KernelParameter, arg) -> str:
    role, dtype = arg.role, arg.dtype
    if param.reference:
        return "a kernel parameter cannot be a reference"
    if role == "scalar":
        if param.pointer_depth:
            return f"a scalar is passed by value, so the parameter must be {_scalar_type(dtype)}, not a pointer"
        if param.known_type and param.base_type not in SCALAR_TYPES[dtype]:
            return f"a {dtype} scalar needs {_scalar_type(dtype)}"
        return ""
    if param.pointer_depth != 1:
        if param.pointer_depth == 0:
            return f"a {role} buffer is passed as a pointer, so the parameter must be {_scalar_type(dtype)}*"
        return f"a {role} buffer is one pointer, not {param.pointer_depth} levels of pointers"
    if param.known_type and param.base_type != "void" and param.base_type not in SCALAR_TYPES[dtype] | VECTOR_TYPES[dtype]:
        return f"a {dtype} buffer needs {_scalar_type(dtype)}*"
    return ""


def _scalar_type(dtype: str) -> str:
    return DTYPES[dtype].ctype


def _describe_arg(arg) -> str:
    return f"{arg.dtype} {arg.role}"


def _parameters(parameters_node: Node, aliases: Mapping[str, str]) -> tuple[KernelParameter, ...]:
    declarations = [c for c in parameters_node.named_children if c.type in ("parameter_declaration",
                                                                            "optional_parameter_declaration")]
    if len(declarations) == 1 and _text(declarations[0]).strip() == "void":
        return ()
    parameters = []
    for position, declaration in enumerate(declarations):
        type_node = declaration.child_by_field_name("type")
        base_type = _type_name(type_node) if type_node is not None else "?"
        base_type = aliases.get(base_type, base_type)
        const = any(c.type == "type_qualifier" and _text(c) == "const" for c in declaration.children)
        depth, reference, name = 0, False, ""
        node = declaration.child_by_field_name("declarator")
        while node is not None:
            if node.type in ("pointer_declarator", "abstract_pointer_declarator", "array_declarator",
                             "abstract_array_declarator"):
                depth += 1
            elif node.type in ("reference_declarator", "abstract_reference_declarator"):
                reference = True
            elif node.type in ("identifier", "field_identifier"):
                name = _text(node)
                break
            child = node.child_by_field_name("declarator")
            if child is None:
                child = next((c for c in node.named_children if c.type.endswith("declarator") or c.type == "identifier"), None)
            node = child
        parameters.append(KernelParameter(position, name, base_type, depth, const and depth > 0, reference,
                                          " ".join(_text(declaration).split())))
    return tuple(parameters)


def _type_name(node: Node) -> str:
    return " ".join(_text(node).replace("struct ", "").split())


def _type_aliases(nodes: Iterable[Node]) -> dict[str, str]:
    """`typedef float real;` and `using real = float;` among the source's declarations, resolved to known types."""
    aliases: dict[str, str] = {}
    for node in nodes:
        if node.type == "type_definition":
            type_node = node.child_by_field_name("type")
            declarator = node.child_by_field_name("declarator")
            if type_node is not None and declarator is not None and declarator.type == "type_identifier":
                aliases[_text(declarator)] = _type_name(type_node)
        elif node.type == "alias_declaration":
            name = node.child_by_field_name("name")
            type_node = node.child_by_field_name("type")
            if name is not None and type_node is not None:
                aliases[_text(name)] = _type_name(type_node)
    for _ in range(8):    # an alias of an alias
        aliases = {name: aliases.get(target, target) for name, target in aliases.items()}
    return aliases


# Blocks of statements: a function's body, or a block within one. Nothing declared there can name a kernel or a type
# another function's parameters use.
_BODIES = frozenset({"compound_statement"})


def _walk(root: Node, skip: frozenset = frozenset()):
    """Every node under root in document order; a node whose type is in `skip` is yielded but not entered."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        if node.type not in skip:
            stack.extend(reversed(node.children))


def _text(node: Node) -> str:
    return node.text.decode("utf-8", "replace")
