"""The child that ncu profiles: one run of a candidate's launch plan on fresh inputs."""
from __future__ import annotations

import importlib
import pickle
import sys


def main(job_path: str) -> None:
    from ..plan import Inputs, Side
    from ..runtime_ops import RuntimeOps, derive_seed
    from ..validation import prepare_side

    with open(job_path, "rb") as handle:
        job = pickle.load(handle)
    problem, candidate = job["problem"], job["candidate"]
    device = importlib.import_module(job["device_module"]).make_device()
    ops = RuntimeOps(device, device.hardware().sm_count)
    if job["cubin"] is not None:
        module = device.load_cubin(job["cubin"])
    else:
        module = device.compile(candidate.source, list(candidate.compile_options), candidate.kernel_names)
    functions = {name: device.function(module, name) for name in candidate.kernel_names}
    case = problem.default_case
    inputs = Inputs(device, ops, problem, case.sizes)
    side = Side("candidate", device, ops, problem, case.sizes, candidate.launch, functions, candidate.temps,
                inputs.buffers)
    seed = derive_seed(job["seed"], "profile")
    inputs.fill(seed)
    prepare_side(side, 0, seed)
    side.run()
    device.synchronize()


if __name__ == "__main__":
    main(sys.argv[1])
