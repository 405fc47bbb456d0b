"""Compile every variant of the bundled families with nvcc (no GPU needed).

    python kernellab/problems/tools/compile_variants.py OUT_DIR [--problems a,b] [--jobs N]

Writes OUT_DIR/<problem>/<index>.cubin and OUT_DIR/<problem>/index.json (knobs, source hash,
registers, shared memory, spills, compile error) for every variant. The cubins can travel to the
GPU machine, where check_families.py loads them instead of compiling there.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import variants  # noqa: E402

_RESOURCES = re.compile(
    r"Function properties for (\w+)\s+(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
    r"|Compiling entry function '(\w+)'|Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes smem)?")


def nvcc_compile(source: str, cubin: Path, flags: list[str]) -> dict:
    """Compile to a cubin with the family's flags (sm_90 by default); registers/spills per kernel or the error."""
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / "variant.cu"
        cu.write_text(source)
        proc = subprocess.run(
            ["nvcc", *flags, "-std=c++17", "-cubin", "-Xptxas", "-v", "-o", str(cubin), str(cu)],
            capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        return {"error": log[-2000:]}
    kernels: dict[str, dict] = {}
    current = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            current = kernels.setdefault(m.group(1), {})
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and current is not None:
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m and current is not None:
            current["registers"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            current["smem"] = int(s.group(1)) if s else 0
    return {"kernels": kernels, "warnings": [l for l in log.splitlines() if "warning" in l.lower()]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--problems", default="")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    wanted = set(filter(None, args.problems.split(",")))
    out = Path(args.out)
    for problem in variants.bundled():
        if wanted and problem.name not in wanted:
            continue
        folder = out / problem.name
        folder.mkdir(parents=True, exist_ok=True)
        index_path = folder / "index.json"
        entries = json.loads(index_path.read_text()) if index_path.is_file() else {}
        todo = []
        for i, variant in enumerate(problem.variants()):
            old = entries.get(str(i))
            if old and old["source_hash"] == variant.source_hash and ("error" in old or (folder / f"{i}.cubin").is_file()):
                continue
            todo.append((i, variant))
        started = time.time()

        def work(item):
            i, variant = item
            facts = nvcc_compile(variant.source, folder / f"{i}.cubin", problem.nvcc_flags())
            return i, {"knobs": variant.knobs, "source_hash": variant.source_hash, **facts}

        with ThreadPoolExecutor(args.jobs) as pool:
            for n, (i, entry) in enumerate(pool.map(work, todo), 1):
                entries[str(i)] = entry
                if n % 50 == 0 or n == len(todo):
                    index_path.write_text(json.dumps(entries))
                    print(f"{problem.name}: {n}/{len(todo)} compiled, {time.time() - started:.0f}s", flush=True)
        index_path.write_text(json.dumps(entries))
        errors = [e for e in entries.values() if "error" in e]
        print(f"{problem.name}: {len(entries)} variants, {len(errors)} failed to compile", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
