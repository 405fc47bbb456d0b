"""What the upload page offers a newcomer: a problem.toml template with its reference kernel, and
one example per argument role. Tests parse them with gpu_runner, so they stay valid specs."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SPEC_REFERENCE_PATH = Path(__file__).resolve().parent.parent / "docs" / "spec.md"

TEMPLATE_TOML = """\
[problem]
name = "scale"                 # a slug: a-z, 0-9 and _
title = "Scale a vector"
description = "y = a * x over N floats"

[sizes]                        # the first case is timed, every case is validated
default = { N = 16777216 }
odd = { N = 1000003 }

[[args]]                       # one table per kernel parameter, roles below
name = "x"
role = "input"
dtype = "float32"
shape = ["N"]
[[args]]
name = "y"
role = "output"
dtype = "float32"
shape = ["N"]
[[args]]
name = "a"
role = "scalar"
dtype = "float32"
value = "2.5"
[[args]]
name = "n"
role = "scalar"
dtype = "int32"
value = "N"

[[launch]]                     # args in the order of the kernel's parameters
kernel = "scale"
grid = ["ceil_div(N, 256)"]
block = [256]
args = ["x", "y", "a", "n"]

[tolerance]
float32 = { rtol = 1e-5, atol = 1e-6 }

[roofline]
flops = "N"
bytes = "8*N"
"""

TEMPLATE_REFERENCE = """\
extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""


@dataclass(frozen=True)
class RoleExample:
    role: str
    meaning: str
    toml: str
    parameter: str      # the matching kernel parameter


ROLE_EXAMPLES = (
    RoleExample("input", "Filled before each run by init, read by the kernel, never changed.",
                '[[args]]\nname = "x"\nrole = "input"\ndtype = "float32"\nshape = ["N"]\ninit = "uniform"\n',
                "const float* __restrict__ x"),
    RoleExample("output", "Poisoned before each run, written by the kernel, compared with the reference.",
                '[[args]]\nname = "y"\nrole = "output"\ndtype = "float32"\nshape = ["N"]\n',
                "float* __restrict__ y"),
    RoleExample("inout", "Filled like an input, written and compared like an output (in place).",
                '[[args]]\nname = "state"\nrole = "inout"\ndtype = "float32"\nshape = ["N"]\ninit = "zeros"\n',
                "float* state"),
    RoleExample("scalar", "Passed by value; value is an expression of the sizes.",
                '[[args]]\nname = "n"\nrole = "scalar"\ndtype = "int32"\nvalue = "N"\n',
                "int n"),
    RoleExample("temp", "Scratch memory between launch steps; poisoned, never compared.",
                '[[args]]\nname = "partials"\nrole = "temp"\ndtype = "float32"\nshape = ["ceil_div(N, 256)"]\n',
                "float* partials"),
)
