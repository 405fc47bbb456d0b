"""Features of a PyTorch-program candidate (a KernelBench `ModelNew`, usually with CUDA built by
`load_inline`) that carry from one problem to another: none is a knob value or one family's token.

- the candidate: its own CUDA (kernels, launches and their geometry, vector loads, shared memory,
  shuffles, atomics, tensor cores, library calls; the kernel sources are the string literals that hold
  `__global__`), how its Python drives them (CUDA graphs, cuDNN and TF32 flags, torch.compile, half
  precision, channels-last, streams, caching), and the torch operations it still calls;
- the reference: its operations by class (matmul, convolution, normalisation, reduction, pooling,
  elementwise, loss, recurrent/attention), its sizes read from the module's constants and
  `get_inputs()`, estimated bytes and flops, and its measured time where one is known;
- the hardware as numbers (SMs, bandwidth, peak, L2, compute capability), so that one model serves
  every GPU in the data and forecasts a new one; and estimates tied to it (the reference's memory and
  compute time at the roofline, the reference's measured time over them);
- candidate-versus-reference differences of the operation classes (what the candidate replaced).

Everything is read with the tokenizer-level scans below, not by running the program: a search
forecasts thousands of candidates and the reference's features are computed once per problem (cached).
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

import numpy as np

from search_engine.surrogates.features import _count_source

# Published figures (dense, without sparsity). CUDA-L1's five GPUs and the H200 the project measures on.
GPU_SPECS: dict[str, dict] = {
    "h200": {"sm_count": 132, "memory_bandwidth_gbs": 4800.0, "fp32_tflops": 67.0, "tensor_tflops": 989.0,
             "l2_mb": 60.0, "compute_capability": 9.0},
    "h100": {"sm_count": 132, "memory_bandwidth_gbs": 3350.0, "fp32_tflops": 67.0, "tensor_tflops": 989.0,
             "l2_mb": 50.0, "compute_capability": 9.0},
    "h20": {"sm_count": 78, "memory_bandwidth_gbs": 4000.0, "fp32_tflops": 44.0, "tensor_tflops": 148.0,
            "l2_mb": 60.0, "compute_capability": 9.0},
    "a100": {"sm_count": 108, "memory_bandwidth_gbs": 2039.0, "fp32_tflops": 19.5, "tensor_tflops": 312.0,
             "l2_mb": 40.0, "compute_capability": 8.0},
    "l40": {"sm_count": 142, "memory_bandwidth_gbs": 864.0, "fp32_tflops": 90.5, "tensor_tflops": 181.0,
            "l2_mb": 96.0, "compute_capability": 8.9},
    "3090": {"sm_count": 82, "memory_bandwidth_gbs": 936.0, "fp32_tflops": 35.6, "tensor_tflops": 71.0,
             "l2_mb": 6.0, "compute_capability": 8.6},
}
_GPU_ALIASES = (("h200", "h200"), ("h100", "h100"), ("h20", "h20"), ("a100", "a100"), ("l40", "l40"),
                ("3090", "3090"))


def gpu_key(hardware: dict | str | None) -> str | None:
    """The GPU_SPECS key of a hardware dict or name ('NVIDIA H100 80GB HBM3' -> 'h100'), None if unknown."""
    name = hardware if isinstance(hardware, str) else (hardware or {}).get("name") or (hardware or {}).get("gpu") or ""
    lowered = str(name).lower().replace(" ", "")
    for needle, key in _GPU_ALIASES:
        if needle in lowered and not (needle == "h20" and "h200" in lowered):
            return key
    return None


def hardware_numbers(hardware: dict | None) -> dict[str, float]:
    """The GPU's numbers: the table's for a GPU it names, else those the hardware dict gives, else NaN.

    A known GPU gets the table's figures even where the dict carries measured ones (a recording's 4,814 GB/s on
    an H200, a string compute capability): the training rows know each GPU only by its name
    (search_engine.lab.program_rows), so a forecast reads the numbers the model learned from."""
    hardware = hardware or {}
    key = gpu_key(hardware)
    spec = dict(GPU_SPECS.get(key or "", {}))
    for name in HARDWARE_FEATURES:
        if key is not None and name in spec:
            continue
        value = hardware.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            spec[name] = float(value)
        elif name == "compute_capability" and isinstance(value, str):
            try:
                spec[name] = float(value)
            except ValueError:
                pass
    return {name: float(spec.get(name, math.nan)) for name in HARDWARE_FEATURES}


HARDWARE_FEATURES = ["sm_count", "memory_bandwidth_gbs", "fp32_tflops", "tensor_tflops", "l2_mb",
                     "compute_capability"]

# Torch operations by class (names as written after torch., F., nn. or as methods).
OP_CLASSES: dict[str, frozenset] = {
    "matmul": frozenset({"matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "einsum", "Linear", "linear",
                         "tensordot", "Bilinear", "bilinear", "outer", "mv", "addmv", "dot", "diag"}),
    "conv": frozenset({"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
                       "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"}),
    "norm": frozenset({"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "InstanceNorm1d",
                       "InstanceNorm2d", "InstanceNorm3d", "layer_norm", "batch_norm", "group_norm",
                       "instance_norm", "norm", "normalize", "RMSNorm", "rms_norm", "LocalResponseNorm"}),
    "reduction": frozenset({"sum", "mean", "max", "min", "amax", "amin", "argmax", "argmin", "prod", "cumsum",
                            "cumprod", "var", "std", "logsumexp", "softmax", "log_softmax", "Softmax",
                            "LogSoftmax", "Softmin", "softmin", "all", "any"}),
    "pool": frozenset({"MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
                       "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool2d",
                       "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
                       "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool2d"}),
    "elementwise": frozenset({"relu", "ReLU", "gelu", "GELU", "tanh", "Tanh", "sigmoid", "Sigmoid", "leaky_relu",
                              "LeakyReLU", "elu", "ELU", "selu", "SELU", "silu", "SiLU", "hardtanh", "Hardtanh",
                              "hardsigmoid", "Hardsigmoid", "hardswish", "Hardswish", "softplus", "Softplus",
                              "softsign", "Softsign", "mish", "Mish", "clamp", "clip", "exp", "log", "sqrt",
                              "rsqrt", "abs", "dropout", "Dropout", "where", "mul", "add", "sub", "div", "pow",
                              "relu6", "ReLU6", "threshold", "sign", "erf", "neg", "reciprocal"}),
    "loss": frozenset({"cross_entropy", "mse_loss", "kl_div", "smooth_l1_loss", "huber_loss", "l1_loss",
                       "triplet_margin_loss", "TripletMarginLoss", "hinge_embedding_loss", "cosine_similarity",
                       "margin_ranking_loss", "nll_loss", "binary_cross_entropy", "CrossEntropyLoss"}),
    "sequence": frozenset({"LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "MultiheadAttention",
                           "scaled_dot_product_attention", "TransformerEncoderLayer", "TransformerDecoderLayer",
                           "Embedding"}),
    "layout": frozenset({"transpose", "permute", "reshape", "view", "flatten", "cat", "stack", "split", "chunk",
                         "pad", "interpolate", "pixel_shuffle", "gather", "scatter", "index_select",
                         "masked_fill", "triu", "tril", "repeat", "expand", "unfold", "roll"}),
}
OP_CLASS_NAMES = list(OP_CLASSES)

_IDENT = re.compile(r"[A-Za-z_]\w*")
_METHOD = re.compile(r"\.(\w+)\s*\(")
_LAUNCH = re.compile(r"<<<\s*([^,>]+?)\s*,\s*([^,>]+?)\s*(?:,\s*([^,>]+?)\s*)?(?:,[^>]*)?>>>")
# (qualifiers before the type, const, constexpr or static, change no match's name or value)
_INT_DECL = re.compile(r"\b(?:unsigned\s+)?(?:int|int32_t|int64_t|size_t|long|auto)"
                       r"\s+(\w+)\s*=\s*(\d+)\s*;")
_DEFINE_INT = re.compile(r"^\s*#\s*define\s+(\w+)\s+\(?(\d+)\)?\s*$", re.M)
_DIM3 = re.compile(r"\bdim3\s+(\w+)\s*[({]\s*([^;)}]*)[)}]")
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\(\s*(\d+)")
# A token starting with one of these names a library (at:: counts ATen calls made from the CUDA source).
_LIBRARY = {"cublas": ("cublas",), "cudnn_api": ("cudnn",), "cutlass": ("cutlass", "cute"),
            "wmma": ("wmma", "nvcuda")}
_LIBRARY_EXACT = {"thrust_cub": ("thrust", "cub"), "at_ops": ("at",)}  # namespaces: thrust::, cub::, at::
_LIBRARY_HEADS = {w[:2] for words in _LIBRARY.values() for w in words}
_HALF_WORDS = ("half", "float16", "bfloat16", "autocast", "__half", "__nv_bfloat16", "fp16")

# The CUDA kernels' counts, named here so that the shipped model keeps its features when the family
# features (features.SOURCE_COUNTS) gain one; features._count_source counts them.
CUDA_COUNTS = ["index_ops", "vector_types", "vector4", "reinterpret", "shared_decl", "extern_shared", "syncthreads",
               "syncwarp", "pragma_unroll", "for_loops", "while_loops", "branches", "ternaries", "shuffles",
               "atomics", "tensor_core", "ldg", "restrict", "const_ptr", "cp_async", "half_types",
               "fast_intrinsics", "fma", "kernels", "device_functions", "grid_stride", "launch_bounds",
               "thread_idx", "double_math", "divisions_mod"]
CUDA_FEATURES = CUDA_COUNTS + ["cuda_lines", "launches", "threads_per_block", "grid_literal", "dyn_shared",
                                 "bounded_threads", "max_define", "lib_cublas", "lib_cudnn_api", "lib_cutlass",
                                 "lib_wmma", "lib_thrust_cub", "lib_at_ops"]
PYTHON_FEATURES = ["has_cuda", "load_inline", "cuda_sources", "triton", "cupy", "cuda_graph", "cudnn_flags",
                   "tf32_flags", "torch_compile", "jit_script", "half_precision", "channels_last", "streams",
                   "contiguous", "out_args", "inplace_methods", "is_none_checks", "py_for", "py_if", "py_lines",
                   "try_blocks", "torch_calls", "fallback_words"]
REFERENCE_FEATURES = ["ref_" + n for n in OP_CLASS_NAMES] + [
    "ref_ops", "ref_distinct_ops", "ref_modules", "ref_lines", "n_inputs", "max_ndim",
    "log_input_elems", "log_max_input_elems", "log_batch", "log_params", "log_est_bytes", "log_est_flops",
    "log_intensity", "log_ref_ms", "log_t_mem_us", "log_t_flop_us", "log_ref_over_roofline", "log_ridge"]
# From nvcc (-Xptxas -v) on the kernel unit, sm_90: given with the request (request.compiler_facts) or
# found in the table of programs compiled before (models/program_compiler_facts.json, keyed by the
# CUDA text's hash), else unknown. comp_known: 1 compiled, 0 the unit did not compile alone, NaN unknown.
COMPILER_FEATURES = ["comp_known", "comp_registers", "comp_shared_bytes", "comp_spills", "comp_kernels"]
COMPILER_FACTS_FILE = Path(__file__).with_name("models") / "program_compiler_facts.json"
CANDIDATE_OP_FEATURES = ["cand_" + n for n in OP_CLASS_NAMES] + ["cand_ops"]
DELTA_FEATURES = ["delta_" + n for n in OP_CLASS_NAMES] + ["delta_ops", "delta_lines", "kept_heavy_ops",
                                                            "replaced_heavy_ops"]


# The measurement's rules: 1 where KernelLab's guards apply (a run in the app, the torch backend's
# records: a program with no kernel of its own is rejected), 0 for speedups measured without them
# (CUDA-L1's authors', problem["rule"] = "authors").
RULE_FEATURES = ["kernellab_guards"]


def feature_names() -> list[str]:
    return (["cuda_" + n for n in CUDA_FEATURES] + PYTHON_FEATURES + COMPILER_FEATURES + CANDIDATE_OP_FEATURES
            + REFERENCE_FEATURES + DELTA_FEATURES + HARDWARE_FEATURES + RULE_FEATURES)


# ---- splitting a program into its Python and its CUDA ------------------------------------------

def cuda_text(program: str) -> str:
    """The CUDA a program carries (its string literals that hold kernels or includes), joined."""
    return _split(program)[1]


# Headers device code may use; torch's, pybind's and the C++ library's serve the host wrappers only.
_DEVICE_INCLUDE = re.compile(r"#\s*include\s*[<\"](?:cuda|mma\.h|cooperative_groups|cub/|thrust/|curand|math|cmath|"
                             r"float\.h|cfloat|stdint|cstdint|sm_\d|crt/|vector_types|device_)")
_TEMPLATE_HEAD = re.compile(r"^\s*template\s*<([^<>]*)>\s*", re.S)


def kernel_unit(cuda: str) -> str | None:
    """A translation unit nvcc can compile without torch's headers: the CUDA's device code alone
    (includes other than torch's, macros, __constant__/__device__ data, __device__ and __global__
    functions; a template over one type is written out for float), read with tree-sitter's CUDA
    grammar. None when the CUDA holds no kernel. Host code (the extension's wrappers) is left out."""
    if "__global__" not in cuda:
        return None
    import tree_sitter_cuda
    from tree_sitter import Language, Parser

    tree = Parser(Language(tree_sitter_cuda.language())).parse(cuda.encode())
    parts: list[str] = []
    for node in tree.root_node.children:
        text = node.text.decode(errors="replace")
        head = text.split("{", 1)[0]
        if node.type == "preproc_include":
            if _DEVICE_INCLUDE.search(text):
                parts.append(text.strip())
        elif node.type in ("preproc_def", "preproc_function_def"):
            parts.append(text.strip())
        elif node.type == "function_definition" and ("__global__" in head or "__device__" in head):
            parts.append(text)
        elif node.type == "declaration" and ("__constant__" in head or "__device__" in head):
            parts.append(text)
        elif node.type == "template_declaration" and ("__global__" in head or "__device__" in head):
            match = _TEMPLATE_HEAD.match(text)
            params = [p.strip() for p in match.group(1).split(",")] if match else []
            if len(params) == 1 and re.fullmatch(r"(?:typename|class)\s+\w+", params[0]):
                name = params[0].split()[-1]
                parts.append(re.sub(rf"\b{name}\b", "float", text[match.end():]))
    return "\n".join(parts) if any("__global__" in p for p in parts) else None


def _split(program: str) -> tuple[str, str, int]:
    """(the Python text with the CUDA literals taken out, the CUDA text, how many CUDA literals).
    A scan for triple quotes (str.find, far faster than a regular expression over the whole file)."""
    cuda_parts, python_parts, last, at = [], [], 0, 0
    if '"""' not in program and "'''" not in program:
        return program, "", 0
    while True:
        double, single = program.find('"""', at), program.find("'''", at)
        if double < 0 and single < 0:
            break
        start, quote = (double, '"""') if single < 0 or 0 <= double < single else (single, "'''")
        end = program.find(quote, start + 3)
        if end < 0:
            break
        body = program[start + 3:end]
        if "__global__" in body or "__device__" in body or "#include" in body or "<<<" in body:
            cuda_parts.append(body)
            python_parts.append(program[last:start])
            last = end + 3
        at = end + 3
    python_parts.append(program[last:])
    return "".join(python_parts), "\n".join(cuda_parts), len(cuda_parts)


def _ops(python: str) -> tuple[Counter, int]:
    """Torch operations called (torch.x(...), F.x(...), nn.X(...) or tensor.x(...)), as counts per
    name, and the number of calls in all."""
    names = Counter(_METHOD.findall(python))
    return names, sum(names.values())


_CLASS_OF = {name: c for c, members in OP_CLASSES.items() for name in members}


def _op_classes(names: Counter) -> dict[str, float]:
    out = dict.fromkeys(OP_CLASSES, 0.0)
    for name, count in names.items():
        c = _CLASS_OF.get(name)
        if c is not None:
            out[c] += count
    return out


# ---- the candidate ------------------------------------------------------------------------------

def _int_value(text: str, known: dict[str, int]) -> float:
    """The value of a launch argument: a literal, a known constant, or a product of them; NaN else."""
    text = text.strip().strip("()")
    total = 1.0
    for factor in re.split(r"\s*\*\s*", text):
        factor = factor.strip()
        if factor.isdigit():
            total *= int(factor)
        elif factor in known:
            total *= known[factor]
        else:
            return math.nan
    return total


def _cuda_features(cuda: str) -> dict[str, float]:
    tokens = Counter(_IDENT.findall(cuda))
    for ch in "[?/%":
        tokens[ch] = cuda.count(ch)
    values = _count_source(cuda, tokens) if cuda else {n: 0.0 for n in CUDA_COUNTS}
    known = {name: int(v) for name, v in _INT_DECL.findall(cuda)}
    defines = {name: int(v) for name, v in _DEFINE_INT.findall(cuda)} if "define" in cuda else {}
    known.update(defines)
    dim3 = {}
    for name, args in (_DIM3.findall(cuda) if "dim3" in cuda else ()):
        product = 1.0
        for arg in args.split(","):
            product *= _int_value(arg, known) if arg.strip() else 1.0
        dim3[name] = product
    threads, grids, dyn = [], [], []
    launches = _LAUNCH.findall(cuda)
    for grid, block, shared in launches:
        block = block.strip()
        value = dim3.get(block, math.nan) if block in dim3 else _int_value(block, known)
        if not math.isnan(value):
            threads.append(value)
        grids.append(0.0 if math.isnan(_int_value(grid, known)) else 1.0)
        if shared and shared.strip() not in ("0", ""):
            dyn.append(1.0)
    bounds = [int(b) for b in _LAUNCH_BOUNDS.findall(cuda)]
    if not threads and bounds:
        threads = [float(max(bounds))]
    if not threads:
        # Common spellings of a block size when the launch names a variable computed at run time.
        for name, value in known.items():
            if re.search(r"thread|block|tpb", name, re.I) and 32 <= value <= 1024:
                threads.append(float(value))
    values.update({
        "cuda_lines": float(cuda.count("\n") + (1 if cuda else 0)),
        "launches": float(len(launches)),
        "threads_per_block": float(max(threads)) if threads else math.nan,
        "grid_literal": float(sum(grids)),
        "dyn_shared": float(len(dyn)),
        "bounded_threads": float(max(bounds)) if bounds else math.nan,
        "max_define": float(math.log2(1 + max(defines.values()))) if defines else 0.0,
    })
    library = Counter()
    for token, count in tokens.items():
        if token[:2] in _LIBRARY_HEADS:
            for name, words in _LIBRARY.items():
                if token.startswith(words):
                    library[name] += count
    for name, words in _LIBRARY_EXACT.items():
        library[name] = sum(tokens.get(w, 0) for w in words)
    for name in list(_LIBRARY) + list(_LIBRARY_EXACT):
        values["lib_" + name] = float(library[name])
    return values


# The identifiers _python_features counts, found by one alternation instead of counting every
# identifier of the program (a third of a cold forecast's time). A match is a whole identifier as
# _IDENT tokenises: not preceded by a letter, digit or _ (a digit-led run such as 1for is not
# Python) and not followed by a word character.
_PYTHON_WORDS = ("load_inline", "load", "triton", "tl", "cupy", "RawKernel", "CUDAGraph", "replay", "cudnn",
                 "allow_tf32", "set_float32_matmul_precision", "jit", "channels_last", "Stream", "stream",
                 "contiguous", "for", "if", "try") + _HALF_WORDS
_PYTHON_WORD = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(sorted(map(re.escape, _PYTHON_WORDS), key=len, reverse=True))
                          + r")(?!\w)")


def _python_features(program: str, python: str, cuda_literals: int, names: Counter, n_calls: int) -> dict:
    words = Counter(_PYTHON_WORD.findall(python))
    lowered = python.lower()
    return {
        "has_cuda": float("__global__" in program),
        "load_inline": float(words.get("load_inline", 0) + words.get("load", 0) * ("cpp_extension" in python)),
        "cuda_sources": float(cuda_literals),
        "triton": float(words.get("triton", 0) + words.get("tl", 0) > 0),
        "cupy": float(words.get("cupy", 0) + words.get("RawKernel", 0) > 0),
        "cuda_graph": float(words.get("CUDAGraph", 0) + words.get("replay", 0) + ("cuda.graph(" in python)),
        "cudnn_flags": float(words.get("cudnn", 0)),
        "tf32_flags": float(words.get("allow_tf32", 0) + words.get("set_float32_matmul_precision", 0)),
        "torch_compile": float("torch.compile" in python),
        "jit_script": float(words.get("jit", 0)),
        "half_precision": float(sum(words.get(w, 0) for w in _HALF_WORDS)),
        "channels_last": float(words.get("channels_last", 0)),
        "streams": float(words.get("Stream", 0) + words.get("stream", 0)),
        "contiguous": float(words.get("contiguous", 0)),
        "out_args": float(python.count("out=") + python.count("out =")),
        "inplace_methods": float(sum(c for name, c in names.items() if name[-1] == "_" and name[:1] != "_")),
        "is_none_checks": float(lowered.count("is none")),
        "py_for": float(words.get("for", 0)),
        "py_if": float(words.get("if", 0)),
        "py_lines": float(python.count("\n") + 1),
        "try_blocks": float(words.get("try", 0)),
        "torch_calls": float(n_calls),
        "fallback_words": float(lowered.count("fallback") + lowered.count("except")),
    }


@lru_cache(maxsize=8192)
def candidate_facts(program: str) -> tuple[tuple[float, ...], tuple[float, ...], str]:
    """(the candidate's own features in CUDA_FEATURES + PYTHON_FEATURES order, its op-class counts,
    the hash of its CUDA text, empty without CUDA)."""
    python, cuda, literals = _split(program)
    names, n_calls = _ops(python)
    cuda_values = _cuda_features(cuda)
    py = _python_features(program, python, literals, names, n_calls)
    classes = _op_classes(names)
    own = tuple(cuda_values[n] for n in CUDA_FEATURES) + tuple(py[n] for n in PYTHON_FEATURES)
    digest = cuda_digest(cuda) if "__global__" in cuda else ""
    return own, tuple(classes[c] for c in OP_CLASS_NAMES) + (float(n_calls),), digest


def cuda_digest(cuda: str) -> str:
    return hashlib.sha256(cuda.encode()).hexdigest()[:24]


_compiler_table: dict | None = None


def compiler_table() -> dict:
    """The compiler facts of programs compiled before, by CUDA digest (read once)."""
    global _compiler_table
    if _compiler_table is None:
        try:
            _compiler_table = json.loads(COMPILER_FACTS_FILE.read_text())["facts"]
        except (OSError, ValueError, KeyError):
            _compiler_table = {}
    return _compiler_table


def compiler_values(facts: dict | None, digest: str) -> list[float]:
    """COMPILER_FEATURES from the request's facts, else the table's, else NaN (0 known for no CUDA)."""
    if not digest:
        return [math.nan] * len(COMPILER_FEATURES)
    if not (facts and facts.get("registers") is not None):
        facts = compiler_table().get(digest)
    if not facts:
        return [math.nan] * len(COMPILER_FEATURES)
    if facts.get("failed"):
        return [0.0] + [math.nan] * (len(COMPILER_FEATURES) - 1)
    return [1.0, float(facts.get("registers") or 0), float(facts.get("shared_bytes") or 0),
            float((facts.get("spill_stores") or 0) + (facts.get("spill_loads") or 0)),
            float(facts.get("kernels") or len(facts.get("per_kernel") or {}) or 1)]


# ---- the reference --------------------------------------------------------------------------

_NN_MODULE = re.compile(r"\bnn\.[A-Z]\w*\(")
_RANDOM_TENSOR = {"randn", "rand", "randint", "ones", "zeros", "empty", "randn_like", "full", "rand_like"}


def _literal(node: ast.AST, constants: dict):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    if isinstance(node, ast.BinOp):
        a, b = _literal(node.left, constants), _literal(node.right, constants)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            ops = {ast.Mult: lambda: a * b, ast.Add: lambda: a + b, ast.Sub: lambda: a - b,
                   ast.FloorDiv: lambda: a // b if b else None, ast.Div: lambda: a / b if b else None,
                   ast.Pow: lambda: a ** b if abs(b) < 64 else None}
            op = ops.get(type(node.op))
            return op() if op else None
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_literal(e, constants) for e in node.elts]
        return tuple(items) if all(isinstance(i, (int, float)) for i in items) else None
    return None


def _shape(call: ast.Call, constants: dict) -> tuple | None:
    """The shape a torch.randn(...)-like call makes, from its positional arguments (or a size= tuple)."""
    args = list(call.args)
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    if name == "randint" and len(args) >= 3:
        args = args[2:]
    elif name == "full" and args:
        args = args[:1]
    for kw in call.keywords:
        if kw.arg == "size":
            args = [kw.value]
    dims: list = []
    for arg in args:
        value = _literal(arg, constants)
        if isinstance(value, tuple):
            dims.extend(value)
        elif isinstance(value, (int, float)):
            dims.append(value)
        else:
            return None
    return tuple(int(d) for d in dims) if dims and all(d > 0 for d in dims) else None


@lru_cache(maxsize=512)
def reference_facts(program: str) -> dict[str, float]:
    """The reference's own features that do not depend on the hardware (NaN where unreadable)."""
    python, cuda, _ = _split(program)
    names, n_calls = _ops(python)
    classes = _op_classes(names)
    out = {f"ref_{c}": v for c, v in classes.items()}
    out["_class_vector"] = tuple(classes[c] for c in OP_CLASS_NAMES) + (float(n_calls),)
    out["_lines"] = float(python.count("\n") + 1 + (cuda.count("\n") + 1 if cuda else 0))
    out.update({"ref_ops": float(n_calls), "ref_distinct_ops": float(len(names)),
                "ref_lines": float(program.count("\n") + 1)})
    constants: dict = {}
    shapes: list[tuple] = []
    init_numbers: list[float] = []
    modules = len(_NN_MODULE.findall(python))
    try:
        tree = ast.parse(program)
    except SyntaxError:
        tree = None
    if tree is not None:
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                value = _literal(node.value, constants)
                if value is not None:
                    constants[node.targets[0].id] = value
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == "get_inputs":
                for call in ast.walk(node):
                    if isinstance(call, ast.Call):
                        fname = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
                        if fname in _RANDOM_TENSOR:
                            shape = _shape(call, constants)
                            if shape:
                                shapes.append(shape)
            elif isinstance(node, ast.FunctionDef) and node.name == "get_init_inputs":
                for sub in ast.walk(node):
                    value = _literal(sub, constants) if isinstance(sub, (ast.Name, ast.Constant)) else None
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        init_numbers.append(float(value))
    elems = [math.prod(s) for s in shapes]
    total = float(sum(elems)) if elems else math.nan
    out.update({
        "ref_modules": float(modules), "n_inputs": float(len(shapes)),
        "max_ndim": float(max((len(s) for s in shapes), default=0)),
        "log_input_elems": math.log10(total) if elems else math.nan,
        "log_max_input_elems": math.log10(max(elems)) if elems else math.nan,
        "log_batch": math.log10(shapes[0][0]) if shapes else math.nan,
        "log_params": math.log10(1 + sum(init_numbers)) if init_numbers else 0.0,
    })
    # Bytes: inputs read and an output as large as the largest input written (fp32). Flops: a matmul
    # over the first two inputs where their shapes chain, a convolution as output x channels x taps from
    # the init numbers, else a handful per element.
    est_bytes = 4.0 * (total + max(elems)) if elems else math.nan
    flops = math.nan
    if elems:
        flops = 8.0 * total
        if classes["matmul"] and len(shapes) >= 2 and shapes[0][-1] in shapes[1]:
            flops = max(flops, 2.0 * math.prod(shapes[0]) * shapes[1][-1])
        elif classes["matmul"] and len(shapes) == 1 and init_numbers:
            flops = max(flops, 2.0 * elems[0] * max(init_numbers))
        if classes["conv"] and init_numbers:
            taps = min(init_numbers) ** 2 if min(init_numbers) > 0 else 1.0
            flops = max(flops, 2.0 * elems[0] * max(init_numbers) * taps)
    out["log_est_bytes"] = math.log10(est_bytes) if elems else math.nan
    out["log_est_flops"] = math.log10(flops) if elems else math.nan
    out["log_intensity"] = math.log10(flops / est_bytes) if elems else math.nan
    return out


def request_features(request) -> np.ndarray:
    """One row of features for a ForecastRequest whose reference and candidate are PyTorch programs."""
    candidate = request.candidate.get("source", "") or ""
    own, cand_ops, digest = candidate_facts(candidate)
    ref_part, hw_part, ref_ops, ref_lines = _reference_part(request.reference.get("source", "") or "",
                                                            _hardware_key(request.hardware), request.reference_ms)
    kept = replaced = 0.0
    for i in _HEAVY:
        kept += min(cand_ops[i], ref_ops[i])
        replaced += max(ref_ops[i] - cand_ops[i], 0.0)
    delta = [c - r for c, r in zip(cand_ops, ref_ops)] + [own[_CUDA_LINES] + own[_PY_LINES] - ref_lines, kept, replaced]
    guards = 0.0 if (request.problem or {}).get("rule") == "authors" else 1.0
    return np.array(own + tuple(compiler_values(request.compiler_facts, digest)) + cand_ops + ref_part
                    + tuple(delta) + hw_part + (guards,), dtype=float)


def _hardware_key(hardware: dict | None) -> tuple:
    return tuple(sorted((k, v) for k, v in (hardware or {}).items() if isinstance(v, (str, int, float))))


@lru_cache(maxsize=512)
def _reference_part(reference: str, hardware: tuple, reference_ms: float | None):
    """(REFERENCE_FEATURES values, HARDWARE_FEATURES values, the reference's op classes, its lines) for a
    reference on a GPU: computed once per run, as the run's requests share them."""
    ref = dict(reference_facts(reference))
    hw = hardware_numbers(dict(hardware))
    bandwidth, peak = hw["memory_bandwidth_gbs"], max(hw["fp32_tflops"], hw["tensor_tflops"])
    t_mem = 10 ** ref["log_est_bytes"] / (bandwidth * 1e3) if not math.isnan(ref["log_est_bytes"]) else math.nan
    t_flop = (10 ** ref["log_est_flops"] / (hw["fp32_tflops"] * 1e6)
              if not math.isnan(ref["log_est_flops"]) else math.nan)
    ref["log_t_mem_us"] = math.log10(t_mem) if t_mem > 0 else math.nan
    ref["log_t_flop_us"] = math.log10(t_flop) if t_flop > 0 else math.nan
    ref_ms = reference_ms
    ref["log_ref_ms"] = math.log10(ref_ms) if ref_ms and ref_ms > 0 else math.nan
    bound = max(t_mem, t_flop) if not (math.isnan(t_mem) or math.isnan(t_flop)) else math.nan
    ref["log_ref_over_roofline"] = math.log10(ref_ms * 1e3 / bound) if ref_ms and bound and bound > 0 else math.nan
    ref["log_ridge"] = math.log10(peak * 1e3 / bandwidth) if bandwidth and peak else math.nan
    return (tuple(ref[n] for n in REFERENCE_FEATURES), tuple(hw[n] for n in HARDWARE_FEATURES),
            ref["_class_vector"], ref["_lines"])


_CUDA_LINES = CUDA_FEATURES.index("cuda_lines")
_PY_LINES = len(CUDA_FEATURES) + PYTHON_FEATURES.index("py_lines")
_HEAVY = [OP_CLASS_NAMES.index(c) for c in ("matmul", "conv", "norm", "sequence")]


def features_matrix(requests) -> np.ndarray:
    if not requests:
        return np.zeros((0, len(feature_names())))
    return np.vstack([request_features(r) for r in requests])


def clear_caches() -> None:
    """Forget every program read so far (what a cold forecast starts from)."""
    candidate_facts.cache_clear()
    reference_facts.cache_clear()
    _reference_part.cache_clear()


def clear_candidates() -> None:
    """Forget the candidates read so far, keeping the references (a new run of a known problem)."""
    candidate_facts.cache_clear()
