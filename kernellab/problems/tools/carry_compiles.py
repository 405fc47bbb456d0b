"""Compile a family's variants here and carry the cubins to the GPU machine's compile cache.

    python kernellab/problems/tools/carry_compiles.py pack hgemm|FOLDER OUT.tar.gz [--jobs N]
    python kernellab/problems/tools/carry_compiles.py unpack IN.tar.gz

`pack` compiles every variant of a bundled problem with gpu_runner.compiler.compile_cubin (the
compile the recorder makes, SASS counts included where cuobjdump is found) and writes each report,
cubin and source into one archive; it prints each variant's registers, spills and stack, and fails
if any variant does not build. `unpack` stores them in this machine's compile cache under its own
keys (gpu_runner.compiler.seed_cache), so that `python -m gpu_runner.record` measures without
compiling again. A compile by another nvcc release or with other CUTLASS headers is not taken:
those variants are compiled where they are recorded, as before.

Why: a CuTe variant takes 30 s or more to compile on one core, and GPU time is the scarce part.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tarfile
import time
from dataclasses import asdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from gpu_runner.compiler import DEFAULT_ARCH, compile_cubin, seed_cache  # noqa: E402
from gpu_runner.family import enumerate_variants, render_variant, variant_id  # noqa: E402
from gpu_runner.spec import load_problem  # noqa: E402

PROBLEMS = ROOT / "kernellab" / "problems"


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    tar.addfile(info, io.BytesIO(data))


def pack(problem_name: str, out: Path, jobs: int) -> int:
    folder = PROBLEMS / problem_name if (PROBLEMS / problem_name).is_dir() else Path(problem_name)
    problem = load_problem(folder)
    problem_name = problem.name
    candidates = [render_variant(problem, knobs) for knobs in enumerate_variants(problem)]
    started = time.perf_counter()

    def build(candidate):
        return candidate, compile_cubin(candidate.source, candidate.compile_options, DEFAULT_ARCH)

    failed = 0
    with tarfile.open(out, "w:gz") as tar, ThreadPoolExecutor(jobs) as pool:
        for n, (candidate, output) in enumerate(pool.map(build, candidates), 1):
            name = variant_id(candidate.knobs or {})
            report = output.report
            if not report.ok or output.cubin is None:
                failed += 1
                print(f"{name}: FAILED\n{report.log[-1500:]}", flush=True)
                continue
            facts = report.facts
            print(f"[{n}/{len(candidates)} {time.perf_counter() - started:.0f}s] {name}: {facts.registers} registers, "
                  f"{facts.spill_stores}/{facts.spill_loads} B spilled, {facts.stack_bytes} B stack, "
                  f"HGMMA {sum(v for k, v in (facts.sass or {}).items() if k.startswith('HGMMA'))}, "
                  f"compile {report.compile_s:.0f} s", flush=True)
            meta = {"variant": name, "options": list(candidate.compile_options), "arch": DEFAULT_ARCH}
            entry = f"{problem_name}/{candidate.source_hash[:16]}"
            _add(tar, f"{entry}/meta.json", json.dumps(meta).encode())
            _add(tar, f"{entry}/source.cu", candidate.source.encode())
            _add(tar, f"{entry}/report.json", json.dumps(asdict(report)).encode())
            _add(tar, f"{entry}/k.cubin", output.cubin)
    print(f"{problem_name}: {len(candidates)} variants, {failed} failed to compile, {out} "
          f"({out.stat().st_size / 1e6:.1f} MB)")
    return 1 if failed else 0


def unpack(archive: Path) -> int:
    entries: dict[str, dict[str, bytes]] = {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            if member.isfile():
                folder, leaf = member.name.rsplit("/", 1)
                entries.setdefault(folder, {})[leaf] = tar.extractfile(member).read()
    seeded = 0
    for folder, files in entries.items():
        meta = json.loads(files["meta.json"])
        if seed_cache(files["source.cu"].decode(), meta["options"], meta["arch"],
                      report=json.loads(files["report.json"]), cubin=files["k.cubin"]):
            seeded += 1
    print(f"{archive}: {seeded} of {len(entries)} compiles seeded into the cache"
          + ("" if seeded == len(entries) else " (the rest compile here: another nvcc or CUTLASS)"))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack")
    p.add_argument("problem", help="a bundled problem's name or a problem folder")
    p.add_argument("out", type=Path)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    u = sub.add_parser("unpack")
    u.add_argument("archive", type=Path)
    args = parser.parse_args()
    if args.command == "pack":
        return pack(args.problem, args.out, args.jobs)
    return unpack(args.archive)


if __name__ == "__main__":
    raise SystemExit(main())
