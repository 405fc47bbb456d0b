"""A newcomer's first start, timed: a fresh clone, `./kl run` until the login page answers, and `./kl test`.

    python benchmarks/first_start.py [--cold-pip-cache] [--skip-test] [--out-dir benchmarks/results]

Clones this repository's HEAD into a temporary folder (nothing of the working tree's `.venv` or
`data/` comes along), runs the README's first command there and polls http://127.0.0.1:PORT/accounts/login/
until it answers 200, then stops it; then runs the second command (the whole test suite, with the
environment `.ci/run` gives it) in another fresh clone. `--cold-pip-cache` gives pip an empty cache for
`./kl run`, as on a machine that never installed anything (the test command always uses pip's usual
cache: building llama-cpp-python from source alone takes over 20 minutes on two cores).

Prints a table and writes benchmarks/results/first_start_<machine>_<date>.json with `run_to_login_s`
and `test_wall_s` (null when skipped or failed, with the reason beside it).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clone(into: Path) -> Path:
    target = into / "kernellab"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(target)], check=True)
    return target


def machine() -> str:
    cores = os.cpu_count() or 0
    gpu = shutil.which("nvidia-smi") is not None
    return f"{'gpu' if gpu else 'cpu'}-{cores}core"


def time_run(workdir: Path, cold_cache: bool, limit_s: float) -> dict:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "VIRTUAL_ENV")}
    if cold_cache:
        env["PIP_CACHE_DIR"] = str(workdir.parent / "pip-cache")
    log_path = workdir.parent / "kl-run.log"
    started = time.monotonic()
    with open(log_path, "w") as log:
        process = subprocess.Popen(["./kl", "run", "--port", str(port)], cwd=workdir, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        answered = None
        try:
            while time.monotonic() - started < limit_s and process.poll() is None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=2) as response:
                        if response.status == 200:
                            answered = time.monotonic() - started
                            break
                except OSError:
                    pass
                time.sleep(0.5)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
    lines = log_path.read_text(errors="replace").splitlines()
    return {"run_to_login_s": round(answered, 1) if answered else None,
            "run_reason": "" if answered else f"no login page within {limit_s:.0f} s: " + " | ".join(lines[-5:]),
            "run_log_lines": len(lines), "venv_mb": _size_mb(workdir / ".venv")}


def time_test(workdir: Path) -> dict:
    env = dict(os.environ)
    env.setdefault("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/kernellab")
    env.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
    env["CI"] = "true"
    log_path = workdir.parent / "kl-test.log"
    started = time.monotonic()
    with open(log_path, "w") as log:
        code = subprocess.run(["./kl", "test", "-p", "no:cacheprovider", "-q"], cwd=workdir, env=env, stdout=log,
                              stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - started
    lines = log_path.read_text(errors="replace").strip().splitlines()
    return {"test_wall_s": round(wall, 1) if code == 0 else None, "test_exit_code": code,
            "test_summary": (lines or [""])[-1], "test_attempt_wall_s": round(wall, 1),
            "test_failures": [line for line in lines if line.startswith(("FAILED", "ERROR"))][:50]}


def _size_mb(path: Path) -> float | None:
    if not path.exists():
        return None
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
    return round(total / 1e6, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold-pip-cache", action="store_true")
    parser.add_argument("--skip-test", action="store_true")
    parser.add_argument("--run-limit-s", type=float, default=1800)
    parser.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    result: dict = {"commit": commit, "machine": machine(), "python": platform.python_version(),
                    "cold_pip_cache": args.cold_pip_cache, "date": dt.date.today().isoformat()}
    with tempfile.TemporaryDirectory(prefix="kl-first-start-") as tmp:
        result.update(time_run(clone(Path(tmp) / "run"), args.cold_pip_cache, args.run_limit_s))
    if args.skip_test:
        result.update({"test_wall_s": None, "test_reason": "skipped (--skip-test)"})
    else:
        with tempfile.TemporaryDirectory(prefix="kl-first-test-") as tmp:
            result.update(time_test(clone(Path(tmp) / "test")))
    print(f"{'measure':<28}{'value':>12}")
    for key in ("run_to_login_s", "venv_mb", "test_wall_s", "test_summary"):
        print(f"{key:<28}{str(result.get(key)):>12}")
    out = Path(args.out_dir) / f"first_start_{result['machine']}_{result['date']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0 if result["run_to_login_s"] is not None else 1


if __name__ == "__main__":
    sys.exit(main())
