"""A CUDA kernel run on the CPU, one thread after another, for the recipes' numeric checks where there
is no GPU: g++ compiles the kernel's source with a few definitions standing for CUDA's (blockIdx,
threadIdx, float4, __ldg, min/max, ...) and a main that launches it over the grid, with
AddressSanitizer and the alignment check of UBSan, so a load or store outside a buffer or a float4
access that is not 16-byte aligned stops the run instead of passing silently.

Only kernels whose threads do not talk to each other mean the same here as on the GPU: no shared
memory, barriers, warp shuffles or atomics (run_on_cpu refuses a source that mentions them)."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import numpy as np

SHIM = r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
struct kl_dim3 { unsigned x, y, z; };
static kl_dim3 blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
static inline float2 make_float2(float a, float b) { return float2{a, b}; }
template <typename T> static inline T __ldg(const T* p) { return *p; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
"""
_NOT_PER_THREAD = ("__shared__", "__syncthreads", "__syncwarp", "__shfl", "atomic", "__ballot")


def compiler() -> str | None:
    return shutil.which("g++")


def build(source: str, kernel: str, kinds: list[str], workdir: Path) -> Path:
    """An executable running `kernel` (parameters of `kinds`: "in"/"out" float buffers, "int") over a
    grid given on its command line: in: FILE COUNT, out: FILE COUNT, int: VALUE, then gx gy bx by."""
    for word in _NOT_PER_THREAD:
        if word in source:
            raise ValueError(f"the kernel uses {word}, which a thread-by-thread run on the CPU does not model")
    reads, params, at = [], [], 1
    for position, kind in enumerate(kinds):
        if kind in ("in", "out"):
            reads.append(f"    long long n{position} = atoll(argv[{at + 1}]);\n"
                         f"    float* a{position} = (float*)malloc(sizeof(float) * n{position});\n"
                         + (f"    {{ FILE* f = fopen(argv[{at}], \"rb\"); fread(a{position}, sizeof(float), n{position}, f); fclose(f); }}\n"
                            if kind == "in" else
                            f"    for (long long i = 0; i < n{position}; ++i) a{position}[i] = NAN;\n"))
            params.append(f"a{position}")
            at += 2
        else:
            reads.append(f"    int a{position} = atoi(argv[{at}]);\n")
            params.append(f"a{position}")
            at += 1
    writes = "".join(f"    {{ FILE* f = fopen(argv[{_position_of(kinds, p)}], \"wb\"); fwrite(a{p}, sizeof(float), n{p}, f); "
                     "fclose(f); }\n" for p, kind in enumerate(kinds) if kind == "out")
    main = (
        "int main(int argc, char** argv) {\n" + "".join(reads)
        + f"    gridDim = kl_dim3{{(unsigned)atoi(argv[{at}]), (unsigned)atoi(argv[{at + 1}]), 1}};\n"
        f"    blockDim = kl_dim3{{(unsigned)atoi(argv[{at + 2}]), (unsigned)atoi(argv[{at + 3}]), 1}};\n"
        "    for (unsigned by = 0; by < gridDim.y; ++by) for (unsigned bx = 0; bx < gridDim.x; ++bx)\n"
        "    for (unsigned ty = 0; ty < blockDim.y; ++ty) for (unsigned tx = 0; tx < blockDim.x; ++tx) {\n"
        "        blockIdx = kl_dim3{bx, by, 0}; threadIdx = kl_dim3{tx, ty, 0};\n"
        f"        {kernel}({', '.join(params)});\n"
        "    }\n" + writes
        + "".join(f"    free(a{p});\n" for p, kind in enumerate(kinds) if kind in ("in", "out")) + "    return 0;\n}\n")
    text = SHIM + source + "\n" + main
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    executable = workdir / f"kernel_{digest}"
    if not executable.exists():
        (workdir / f"kernel_{digest}.cpp").write_text(text)
        subprocess.run([compiler(), "-std=c++17", "-O1", "-g", "-w", "-fsanitize=address,alignment",
                        "-fno-sanitize-recover=all", "-o", str(executable), str(workdir / f"kernel_{digest}.cpp")],
                       check=True, capture_output=True, text=True)
    return executable


def _position_of(kinds: list[str], position: int) -> int:
    at = 1
    for p, kind in enumerate(kinds):
        if p == position:
            return at
        at += 2 if kind in ("in", "out") else 1
    raise IndexError(position)


def run(executable: Path, args: list, grid: tuple[int, int], block: tuple[int, int], workdir: Path) -> list[np.ndarray]:
    """Launch it: args are float32 arrays (inputs), ("out", shape) and ints; returns the outputs."""
    argv, outputs = [str(executable)], []
    for position, arg in enumerate(args):
        if isinstance(arg, np.ndarray):
            path = workdir / f"in{position}.bin"
            arg.astype(np.float32).tofile(path)
            argv += [str(path), str(arg.size)]
        elif isinstance(arg, tuple):
            path = workdir / f"out{position}.bin"
            argv += [str(path), str(int(np.prod(arg[1])))]
            outputs.append((path, arg[1]))
        else:
            argv.append(str(int(arg)))
    argv += [str(v) for v in (*grid, *block)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise AssertionError(f"the kernel failed on the CPU (grid {grid}, block {block}):\n{done.stderr[-3000:]}")
    return [np.fromfile(path, dtype=np.float32).reshape(shape) for path, shape in outputs]
