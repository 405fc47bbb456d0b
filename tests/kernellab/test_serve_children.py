"""manage.py serve stops everything it started: each child leads its own process group, and stopping
ends the whole group, including what a child left behind (a Celery worker's embedded beat outliving a
worker whose pool process was killed at a task's hard time limit). The stand-in child here starts a
grandchild that ignores SIGTERM, as such a beat would go on running."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernellab.management.commands.serve import ChildProcesses, group_alive

ROOT = Path(__file__).resolve().parents[2]

# The child: starts a grandchild that ignores SIGTERM, writes its pid, then sleeps; exits on SIGTERM
# unless told to ignore it too.
STAND_IN = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    pid_file, ignore_term = sys.argv[1], sys.argv[2] == "1"
    grandchild = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); open(%r, 'w').write('ready'); time.sleep(600)"
        % (pid_file + ".ready")])
    while not os.path.exists(pid_file + ".ready"):
        time.sleep(0.02)
    open(pid_file, "w").write(str(grandchild.pid))
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)
""")


def wait_for(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def group_gone(pgid: int) -> bool:
    """No process of the group left, zombies included (init reaps the orphans within a moment)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def start_stand_in(children: ChildProcesses, tmp_path: Path, name: str, ignore_term: bool = False):
    pid_file = tmp_path / f"{name}.pid"
    process = children.start([sys.executable, "-c", STAND_IN, str(pid_file), "1" if ignore_term else "0"])
    assert wait_for(pid_file.exists, 30), "the stand-in child did not start its grandchild"
    time.sleep(0.05)
    return process, int(pid_file.read_text())


@pytest.fixture
def children():
    """Quick timeouts; whatever a failed test leaves is killed."""
    children = ChildProcesses(timeout=2, grace=1)
    yield children
    children.signal_groups(signal.SIGKILL)
    for process in children.processes:
        process.wait()


def test_each_child_leads_its_own_process_group(children, tmp_path):
    process, grandchild = start_stand_in(children, tmp_path, "a")
    assert os.getpgid(process.pid) == process.pid != os.getpgid(0)
    assert os.getsid(process.pid) == process.pid
    assert os.getpgid(grandchild) == process.pid


@pytest.mark.parametrize("ignore_term", [False, True], ids=["leader-stops", "leader-ignores-sigterm"])
def test_stop_ends_the_whole_group_even_a_grandchild_that_ignores_sigterm(children, tmp_path, ignore_term):
    process, grandchild = start_stand_in(children, tmp_path, "b", ignore_term=ignore_term)
    started = time.monotonic()
    children.stop()
    assert time.monotonic() - started < 15
    assert process.returncode is not None
    assert not group_alive(process.pid)
    assert wait_for(lambda: group_gone(process.pid), 10), f"process group {process.pid} survived the stop"
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)
    children.stop()  # again (the atexit hook after the finally): nothing to do, no error


def test_stop_ends_what_a_dead_leader_left_behind(children, tmp_path):
    """The worker's main process gone already (killed, crashed): its orphans are still in its group."""
    process, grandchild = start_stand_in(children, tmp_path, "c")
    process.kill()
    process.wait()
    assert group_alive(process.pid)  # the grandchild, now an orphan
    children.stop()
    assert wait_for(lambda: group_gone(process.pid), 10), f"process group {process.pid} survived the stop"


SERVE = textwrap.dedent("""
    import sys
    import django
    django.setup()
    from django.core.management import call_command
    from kernellab.management.commands import serve

    stand_in, tmp = sys.argv[1], sys.argv[2]
    serve.check_services = lambda: None
    serve.require_migrated_database = lambda: None
    serve.local_gpu_queue = lambda: None
    serve.worker_command = lambda queues, concurrency=2: [sys.executable, "-c", stand_in, tmp + "/worker.pid", "0"]
    serve.web_commands = lambda host, port, count: ([([sys.executable, "-c", stand_in, tmp + "/web.pid", "1"], ())], [])
    serve.ChildProcesses.__init__.__kwdefaults__ = {"timeout": 3.0, "grace": 1.0}  # a quick test
    call_command("serve", "--port", "0")
    print("serve returned", flush=True)
""")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_serve_stopped_by_a_signal_leaves_no_process_of_its_children_groups(tmp_path, signum):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update({"KERNELLAB_DATA_DIR": str(tmp_path / "data"), "DJANGO_SETTINGS_MODULE": "kernellab.settings",
                "KERNELLAB_COMPILE_SANDBOX": "none"})
    server = subprocess.Popen([sys.executable, "-c", SERVE, STAND_IN, str(tmp_path)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        files = [tmp_path / "worker.pid", tmp_path / "web.pid"]
        assert wait_for(lambda: all(f.exists() for f in files), 60), server.communicate(timeout=5)[0] \
            if server.poll() is not None else "the stand-ins did not start"
        grandchildren = [int(f.read_text()) for f in files]
        groups = sorted({os.getpgid(pid) for pid in grandchildren})
        assert len(groups) == 2 and server.pid not in groups  # the worker's and the web's, not serve's
        server.send_signal(signum)
        output, _ = server.communicate(timeout=30)
        assert server.returncode == 0, output
        assert "serve returned" in output
        for pgid in groups:
            assert wait_for(lambda: group_gone(pgid), 10), f"process group {pgid} survived serve"
            with pytest.raises(ProcessLookupError):
                os.killpg(pgid, 0)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        for pid_file in tmp_path.glob("*.pid"):  # a failed test leaves nothing running either
            try:
                os.killpg(os.getpgid(int(pid_file.read_text())), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


def test_children_of_a_killed_serve_are_told_to_stop(tmp_path):
    """serve killed outright (SIGKILL: no handler, no atexit): each child gets SIGTERM from the kernel."""
    children_script = textwrap.dedent("""
        import sys, time
        from kernellab.management.commands.serve import ChildProcesses
        children = ChildProcesses()
        child = children.start([sys.executable, "-c", "import time; time.sleep(600)"])
        print(child.pid, flush=True)
        time.sleep(600)
    """)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "kernellab.settings", "KERNELLAB_DATA_DIR": str(tmp_path)}
    parent = subprocess.Popen([sys.executable, "-c", children_script], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              text=True)
    try:
        child = int(parent.stdout.readline())
        parent.kill()
        parent.wait()
        assert wait_for(lambda: group_gone(child), 10), "the child outlived its serve"
    finally:
        if parent.poll() is None:
            parent.kill()
        try:
            os.killpg(child, signal.SIGKILL)
        except (ProcessLookupError, NameError, UnboundLocalError):
            pass


def test_a_dead_worker_is_replaced_and_what_its_group_left_is_ended(children, tmp_path):
    """The worker's leader dies (a crash on a broker reconnect); its grandchild (an embedded beat) ignores SIGTERM.
    The keeper ends the old group, then starts the same command again, and says so."""
    from kernellab.management.commands.serve import WorkerKeeper

    said = []
    pid_file = tmp_path / "worker.pid"
    command = [sys.executable, "-c", STAND_IN, str(pid_file), "0"]
    keeper = WorkerKeeper(children, command, say=said.append, limit=3, window=60)
    first = keeper.process
    assert wait_for(pid_file.exists, 30)
    time.sleep(0.05)
    grandchild = int(pid_file.read_text())
    pid_file.unlink()
    keeper.check()
    assert keeper.process is first and not said  # alive: nothing to do
    os.kill(first.pid, signal.SIGKILL)
    assert wait_for(lambda: first.poll() is not None, 10)
    keeper.check()
    assert keeper.process is not first and keeper.process.poll() is None
    assert first not in children.processes and keeper.process in children.processes
    assert wait_for(lambda: group_gone(first.pid), 10), "the dead worker's beat was left running"
    assert not os.path.exists(f"/proc/{grandchild}") or open(f"/proc/{grandchild}/stat").read().split()[2] in "ZX"
    assert said and "exited (code -9)" in said[0] and "starting a new one" in said[0]
    assert wait_for(pid_file.exists, 30), "the new worker did not start"


def test_a_worker_that_keeps_dying_stops_serve_with_a_sentence(children):
    from django.core.management.base import CommandError

    from kernellab.management.commands.serve import WorkerKeeper

    said = []
    keeper = WorkerKeeper(children, [sys.executable, "-c", "raise SystemExit(3)"], say=said.append, limit=3, window=60)
    with pytest.raises(CommandError, match=r"exited 3 times in 60 seconds \(last exit code 3\)"):
        for _ in range(3):
            assert wait_for(lambda: keeper.process.poll() is not None, 30)
            keeper.check()
    assert len(said) == 2


def test_no_restart_while_serve_stops(children):
    from kernellab.management.commands.serve import WorkerKeeper

    keeper = WorkerKeeper(children, [sys.executable, "-c", "raise SystemExit(0)"], say=lambda text: None)
    first = keeper.process
    assert wait_for(lambda: first.poll() is not None, 30)
    children.request_stop()
    keeper.check()
    assert keeper.process is first


def test_a_killed_web_process_is_started_again_and_a_failed_one_stops_serve(children):
    """One web process killed (the out-of-memory killer) no longer takes the site down; one that exits with an error
    by itself (it could not listen, it failed to start) would fail again, so serve stops with a sentence."""
    from django.core.management.base import CommandError

    from kernellab.management.commands.serve import WebKeeper

    said = []
    web = WebKeeper(children, [sys.executable, "-c", "import time; time.sleep(600)"], say=said.append, limit=3, window=60)
    first = web.process
    os.kill(first.pid, signal.SIGKILL)
    assert wait_for(lambda: first.poll() is not None, 10)
    web.check()
    assert web.process is not first and web.process.poll() is None
    assert said and said[0].startswith("The web server exited (code -9); starting a new one")
    failing = WebKeeper(children, [sys.executable, "-c", "raise SystemExit(3)"], say=said.append)
    assert wait_for(lambda: failing.process.poll() is not None, 30)
    with pytest.raises(CommandError, match=r"^The web server exited \(code 3\); its log is above\.$"):
        failing.check()
