"""Building the CUTLASS/CuTe code index into the data folder."""
from __future__ import annotations

from gpu_runner.cutlass_headers import cutlass_source_root, cutlass_version
from gpu_runner.cutlass_index import build_index, index_facts
from kernellab.selectors.cutlass import cutlass_index_path
from kernellab.services.errors import ServiceError


def cutlass_index_build(*, rebuild: bool = False) -> dict[str, str]:
    """Index the installed wheel's headers and examples once (again with `rebuild`); returns the index's facts."""
    path = cutlass_index_path()
    root = cutlass_source_root()
    if root is None:
        raise ServiceError("The CUTLASS headers are not installed (pip install nvidia-cutlass).")
    if path.is_file() and not rebuild:
        facts = index_facts(path)
        if facts.get("root") == str(root) and facts.get("version") == (cutlass_version() or ""):
            return facts
    build_index(root, path, version=cutlass_version() or "")
    return index_facts(path)
