"""Compile checks with nvcc and with NVRTC (issue 21, point 4): seconds per compile and checks per second.

    python benchmarks/compile_bench.py [--n 40] [--sass-n 8] [--parity 10] [--tag cpu-2core] [--out-dir benchmarks/results]

Compiles N distinct generated candidates (valid variants of the bundled families and the recipes' cures of
the own naive kernels at several knob points, those NVRTC compiles, in a fixed order, so both engines get
the same sources) through `compile_cubin`, the one compile
path, with an empty cache:
- serial: one compile after another (`compile_cubin(..., use_cache=False)`), per engine;
- parallel: `Runner("static").check_many` per problem, one compile per core (NVRTC servers, or nvcc
  processes), as the search's compile checks run;
- SASS (--sass-n K, 0 to skip): K serial compiles with `sass=True`, to show what cuobjdump adds (the
  search's checks ask for no SASS).
- parity (--parity K, 0 to skip): the bundled references, K evenly spaced valid variants of each
  family and the own kernels' references, each compiled by both engines with SASS counts: whether
  registers, spills and every opcode count are the same, and the registers of each where not.
The engine is chosen by KERNELLAB_COMPILE_ENGINE (nvcc for the baseline, auto for NVRTC). The NVRTC
servers are started before timing (their start is reported apart). Prints a table and writes
benchmarks/results/compile_<tag>_<date>.json.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_runner import Runner, compiler, nvrtc  # noqa: E402
from gpu_runner.candidate import Candidate  # noqa: E402
from gpu_runner.compile_sandbox import sandbox_status  # noqa: E402
from gpu_runner.family import render_variant, valid_variants  # noqa: E402
from gpu_runner.spec import Problem, SpecError, load_problem  # noqa: E402


def cuda_problems() -> list[Problem]:
    """The bundled problems with a CUDA reference, in a fixed order (kernellab.datasets.bundled_problem_dirs'
    rule, without importing the kernellab package, whose Celery app a GPU host without Django cannot load)."""
    from gpu_runner.spec import reference_kind

    folders = sorted(p.parent for p in (ROOT / "kernellab" / "problems").glob("*/problem.toml"))
    return [load_problem(f) for f in folders if reference_kind((f / "problem.toml").read_text()) == "cuda"]


def candidates(n: int, refused: list[str] | None = None) -> list[tuple[Problem, Candidate]]:
    """Up to `n` distinct variants, taken round-robin over the bundled families NVRTC compiles
    (`refused`: as for recipe_cures)."""
    per_problem: list[list[tuple[Problem, Candidate]]] = []
    for problem in cuda_problems():
        try:
            variants = valid_variants(problem)
        except Exception:  # noqa: BLE001 - a problem without a family
            continue
        rendered = [(problem, render_variant(problem, knobs)) for knobs in variants]
        rendered = [(p, c) for p, c in rendered if nvrtc.source_engine(c.source).name == "nvrtc"]
        if rendered:
            per_problem.append(rendered)
    per_problem.extend(recipe_cures(refused=refused))
    out, seen = [], set()
    for i in range(max(len(r) for r in per_problem)):
        for rendered in per_problem:
            if i < len(rendered) and rendered[i][1].source not in seen and len(out) < n:
                seen.add(rendered[i][1].source)
                out.append(rendered[i])
    return out


def recipe_cures(per_recipe: int = 12, refused: list[str] | None = None) -> list[list[tuple[Problem, Candidate]]]:
    """What a search of a user's own kernel compiles most: each recipe's cure of each own naive kernel
    (tests/gpu_runner/own_kernels) at up to `per_recipe` points of its knobs, its start first, those
    NVRTC compiles. A knob point whose candidate the spec's checks refuse (a launch over the GPU's limits,
    such as more than 1,024 threads a block) is no candidate, as in a search: it is skipped, and named in
    `refused` when a list is given."""
    import itertools

    from gpu_runner import reference_candidate
    from search_engine.generators.recipes import RECIPES, CannotApply

    groups = []
    for path in sorted((ROOT / "tests" / "gpu_runner" / "own_kernels").glob("*/problem.toml")):
        problem = load_problem(path.parent)
        reference = reference_candidate(problem).to_dict()
        for recipe in RECIPES:
            try:
                family = recipe.derive(reference)
            except CannotApply:
                continue
            points = [dict(zip(family.knobs, values)) for values in itertools.product(*family.knobs.values())]
            step = max(1, len(points) // per_recipe)
            # the cure's start first (what the search measures first), then knob points evenly spread
            points = [family.start] + [k for k in points[::step] if k != family.start]
            rendered = []
            for knobs in points:
                try:
                    rendered.append((problem, Candidate.from_dict(family.render(knobs), problem)))
                except SpecError as exc:
                    if refused is not None:
                        refused.append(f"{problem.name} {recipe.name} {knobs}: {exc}")
            rendered = [(p, c) for p, c in rendered if nvrtc.source_engine(c.source).name == "nvrtc"]
            if rendered:
                groups.append(rendered[:per_recipe])
    return groups


def _stats(seconds: list[float]) -> dict:
    ordered = sorted(seconds)
    return {"n": len(seconds), "median_s": statistics.median(ordered),
            "p90_s": ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))],
            "mean_s": statistics.fmean(ordered), "total_s": sum(ordered)}


def _seconds(stats: dict | None, width: int) -> str:
    """A median in a table column, or "-" where nothing was timed."""
    return f"{stats['median_s']:>{width}.3f}s" if stats else f"{'-':>{width + 1}}"


def run_engine(engine: str, items: list[tuple[Problem, Candidate]], sass_n: int) -> dict:
    os.environ["KERNELLAB_COMPILE_ENGINE"] = "nvcc" if engine == "nvcc" else "auto"
    result: dict = {"engine": engine}
    if engine == "nvrtc":
        started = time.perf_counter()
        nvrtc.close_servers()
        pool = nvrtc.server_pool()
        warm = [pool._take() for _ in range(pool.size)]   # every server started, as a long search has them
        for server in warm:
            pool._give_back(server)
        result["servers"] = pool.size
        result["server_start_s"] = time.perf_counter() - started
    with tempfile.TemporaryDirectory(prefix="kl-compile-bench-") as cache:
        os.environ["KERNELLAB_CACHE"] = cache
        # serial, no SASS (what a compile check costs)
        seconds, labels = [], set()
        for _, cand in items:
            started = time.perf_counter()
            report = compiler.compile_cubin(cand.source, cand.compile_options, sass=False, use_cache=False).report
            seconds.append(time.perf_counter() - started)
            assert report.ok, report.log[-500:]
            labels.add(report.compiler)
        result["compiler"] = sorted(labels)
        result["serial"] = _stats(seconds)
        result["serial"]["checks_per_s"] = len(seconds) / sum(seconds)
        # serial, with SASS counts (--sass-n 0: none, and no figure)
        seconds = []
        for _, cand in items[:sass_n]:
            started = time.perf_counter()
            report = compiler.compile_cubin(cand.source, cand.compile_options, sass=True, use_cache=False).report
            seconds.append(time.perf_counter() - started)
            assert report.ok and report.facts.sass, report.log[-500:]
        result["serial_with_sass"] = _stats(seconds) if seconds else None
        # parallel, through Runner.check_many per problem (an empty cache: every source is new)
        groups: dict[str, tuple[Problem, list[Candidate]]] = {}
        for problem, cand in items:
            groups.setdefault(problem.name, (problem, []))[1].append(cand)
        runner = Runner(backend="static")
        per_compile = []
        started = time.perf_counter()
        for problem, cands in groups.values():
            reports = runner.check_many(problem, cands, sass=False)
            assert all(r.ok for r in reports), [r.log[-300:] for r in reports if not r.ok]
            per_compile += [r.compile_s for r in reports]
        wall = time.perf_counter() - started
        result["parallel"] = {**_stats(per_compile), "wall_s": wall, "checks_per_s": len(items) / wall,
                              "workers": os.cpu_count()}
    return result


def parity_sources(per_family: int, refused: list[str] | None = None) -> list[tuple[str, str, list[str]]]:
    items = []
    for problem in cuda_problems():
        folder = problem.folder
        items.append((f"{folder.name}/reference", problem.reference.source, list(problem.reference.compile_options)))
        try:
            variants = valid_variants(problem)
        except Exception:  # noqa: BLE001 - a problem without a family
            variants = []
        step = max(1, len(variants) // per_family) if per_family else 1
        for knobs in variants[::step][:per_family]:
            cand = render_variant(problem, knobs)
            items.append((f"{folder.name}/{json.dumps(knobs)}", cand.source, list(cand.compile_options)))
    for path in sorted((ROOT / "tests" / "gpu_runner" / "own_kernels").glob("*/reference.cu")):
        items.append((f"own/{path.parent.name}", path.read_text(), []))
    for group in recipe_cures(per_recipe=2, refused=refused):
        for problem, cand in group:
            name = cand.source.split("\n", 1)[0].removeprefix("// Written by KernelLab's ").split(" recipe")[0]
            items.append((f"own/{problem.name}/{name}", cand.source, list(cand.compile_options)))
    return items


def parity(per_family: int) -> dict:
    rows, nvcc_only, refused = [], [], []
    with tempfile.TemporaryDirectory(prefix="kl-compile-parity-") as cache:
        os.environ["KERNELLAB_CACHE"] = cache
        for name, source, options in parity_sources(per_family, refused):
            if nvrtc.source_engine(source).name != "nvrtc":
                nvcc_only.append(name)
                continue
            reports = {}
            for engine in ("nvrtc", "nvcc"):
                os.environ["KERNELLAB_COMPILE_ENGINE"] = "auto" if engine == "nvrtc" else "nvcc"
                reports[engine] = compiler.compile_cubin(source, options, use_cache=False).report
            fast, slow = reports["nvrtc"], reports["nvcc"]
            row = {"source": name, "ok": fast.ok and slow.ok}
            if row["ok"]:
                row["identical"] = fast.facts.sass == slow.facts.sass and fast.facts.kernels == slow.facts.kernels
                row["registers"] = {"nvrtc": fast.facts.registers, "nvcc": slow.facts.registers}
                row["spill_bytes"] = {"nvrtc": fast.facts.spill_stores, "nvcc": slow.facts.spill_stores}
                row["opcodes_differing"] = sum(1 for op in set(fast.facts.sass) | set(slow.facts.sass)
                                               if fast.facts.sass.get(op) != slow.facts.sass.get(op))
            rows.append(row)
    compared = [r for r in rows if r["ok"]]
    families: dict[str, list[int]] = {}
    for r in compared:
        counts = families.setdefault(r["source"].split("/")[0], [0, 0])
        counts[0] += r["identical"]
        counts[1] += 1
    return {"per_family": per_family, "compared": len(compared), "failed": [r["source"] for r in rows if not r["ok"]],
            "identical": sum(r["identical"] for r in compared),
            "registers_differ": sum(r["registers"]["nvrtc"] != r["registers"]["nvcc"] for r in compared),
            "spills_differ": sum(r["spill_bytes"]["nvrtc"] != r["spill_bytes"]["nvcc"] for r in compared),
            "identical_by_family": {k: f"{v[0]}/{v[1]}" for k, v in sorted(families.items())},
            "nvcc_only": nvcc_only, "recipe_points_refused": len(refused), "rows": rows}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--sass-n", type=int, default=8, help="serial compiles with SASS counts (0: none)")
    parser.add_argument("--parity", type=int, default=10, help="variants per family in the parity sample (0: none)")
    parser.add_argument("--tag", default="cpu-2core")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    # Checked before the first compile, not found wrong after every one of them.
    for flag, value, least in (("--n", args.n, 1), ("--sass-n", args.sass_n, 0), ("--parity", args.parity, 0)):
        if value < least:
            parser.error(f"{flag} must be at least {least}, not {value}")
    if args.out_dir.exists() and not args.out_dir.is_dir():
        parser.error(f"--out-dir {args.out_dir} is a file, not a folder")

    refused: list[str] = []
    items = candidates(args.n, refused)
    library, problem = nvrtc.find_nvrtc()
    if library is None:
        sys.exit(f"NVRTC is unavailable: {problem}")
    results = {"date": dt.date.today().isoformat(), "machine": f"{os.cpu_count()} cores, {args.tag}",
               "sandbox": sandbox_status().mode, "nvcc": compiler.nvcc_version(), "nvrtc": library.version,
               "nvrtc_library": library.path, "candidates": len(items),
               "problems": sorted({p.name for p, _ in items}), "cache": "empty (a fresh folder per engine)",
               "recipe_points_refused": len(refused),
               "engines": [run_engine(engine, items, args.sass_n) for engine in ("nvcc", "nvrtc")]}
    nvcc_r, nvrtc_r = results["engines"]
    results["speedup_serial"] = nvcc_r["serial"]["median_s"] / nvrtc_r["serial"]["median_s"]
    results["speedup_parallel_checks_per_s"] = nvrtc_r["parallel"]["checks_per_s"] / nvcc_r["parallel"]["checks_per_s"]
    if args.parity:
        results["parity"] = parity(args.parity)
    nvrtc.close_servers()

    print(f"{len(items)} candidates from {', '.join(results['problems'])}; nvcc {results['nvcc']}, "
          f"NVRTC {results['nvrtc']}; sandbox: {results['sandbox']}")
    print(f"skipped {len(refused)} knob points of the recipes' cures that the spec's checks refuse (SpecError)"
          + (f", e.g. {refused[0]}" if refused else ""))
    print(f"{'engine':<8}{'serial median':>15}{'serial p90':>12}{'checks/s':>10}{'+SASS median':>14}"
          f"{'parallel median':>17}{'parallel p90':>14}{'checks/s':>10}")
    for r in results["engines"]:
        print(f"{r['engine']:<8}{r['serial']['median_s']:>14.3f}s{r['serial']['p90_s']:>11.3f}s"
              f"{r['serial']['checks_per_s']:>10.2f}{_seconds(r['serial_with_sass'], 13)}"
              f"{r['parallel']['median_s']:>16.3f}s{r['parallel']['p90_s']:>13.3f}s{r['parallel']['checks_per_s']:>10.2f}")
    if "server_start_s" in nvrtc_r:
        print(f"NVRTC servers: {nvrtc_r['servers']}, all started in {nvrtc_r['server_start_s']:.2f} s (before timing)")
    print(f"serial speed-up {results['speedup_serial']:.1f}x, parallel checks/s "
          f"{results['speedup_parallel_checks_per_s']:.1f}x")
    if args.parity:
        par = results["parity"]
        print(f"parity sample: skipped {par['recipe_points_refused']} refused knob points of the recipes' cures")
        print(f"same code (registers, spills, every SASS opcode count) from both engines: {par['identical']} of "
              f"{par['compared']}; registers differ in {par['registers_differ']}, spills in {par['spills_differ']}; "
              f"by family {par['identical_by_family']}")
        worst = sorted((r for r in par["rows"] if r["ok"] and not r["identical"]),
                       key=lambda r: -abs(r["registers"]["nvrtc"] - r["registers"]["nvcc"]))[:3]
        for r in worst:
            print(f"  {r['source']}: registers NVRTC {r['registers']['nvrtc']}, nvcc {r['registers']['nvcc']}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"compile_{args.tag}_{results['date']}.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


if __name__ == "__main__":
    main()
