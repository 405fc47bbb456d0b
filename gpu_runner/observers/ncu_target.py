"""The child that ncu profiles: one run of a candidate's launch plan on fresh inputs, or of each
candidate in turn for a batch (one ncu start for many candidates)."""
from __future__ import annotations

import importlib
import pickle
import sys


def main(job_path: str) -> None:
    from ..runtime_ops import RuntimeOps

    with open(job_path, "rb") as handle:
        job = pickle.load(handle)
    device = importlib.import_module(job["device_module"]).make_device()
    ops = RuntimeOps(device, device.hardware().sm_count)
    items = job.get("items") or [{"candidate": job["candidate"], "cubin": job["cubin"]}]
    for item in items:
        run_one(device, ops, job["problem"], item["candidate"], item["cubin"], job["seed"])


def run_one(device, ops, problem, candidate, cubin: bytes | None, seed: int) -> None:
    from ..plan import Inputs, Side
    from ..runtime_ops import derive_seed
    from ..validation import prepare_side

    if cubin is not None:
        module = device.load_cubin(cubin)
    else:
        module = device.compile(candidate.source, list(candidate.compile_options), candidate.kernel_names)
    functions = {name: device.function(module, name) for name in candidate.kernel_names}
    case = problem.default_case
    inputs = Inputs(device, ops, problem, case.sizes)
    side = Side("candidate", device, ops, problem, case.sizes, candidate.launch, functions, candidate.temps,
                inputs.buffers)
    profile_seed = derive_seed(seed, "profile")
    inputs.fill(profile_seed)
    prepare_side(side, 0, profile_seed)
    side.run()
    device.synchronize()


if __name__ == "__main__":
    main(sys.argv[1])
