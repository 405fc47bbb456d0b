"""`serve --web-processes N`: N daphne processes share one listening socket and all answer."""
import urllib.request

from kernellab.management.commands.serve import web_commands
from tests.browser.harness import KernelLabServer


def test_several_web_processes_each_listen_on_the_same_port():
    commands, listeners = web_commands("127.0.0.1", 0, 3)
    try:
        assert len(commands) == 3 and len({fds for _, fds in commands}) == 3
        assert len({s.getsockname()[1] for s in listeners}) == 1
        assert all("--fd" in command for command, _ in commands)
    finally:
        for listener in listeners:
            listener.close()
    single, none = web_commands("127.0.0.1", 8123, 1)
    assert none == [] and "-p" in single[0][0]


def test_two_web_processes_both_serve_requests():
    with KernelLabServer(web_processes=2) as server:
        assert len(server.webs) == 2 and all(web.poll() is None for web in server.webs)
        for _ in range(20):
            with urllib.request.urlopen(server.url + "/accounts/login/", timeout=10) as response:
                assert response.status == 200


def test_web_processes_get_two_malloc_arenas_unless_told_otherwise():
    from kernellab.management.commands.serve import web_environment

    assert web_environment({"PATH": "/usr/bin"})["MALLOC_ARENA_MAX"] == "2"
    assert web_environment({"MALLOC_ARENA_MAX": "8"})["MALLOC_ARENA_MAX"] == "8"


def test_freed_memory_is_trimmed_on_an_interval_that_zero_turns_off():
    import ctypes

    from kernellab.asgi import return_freed_memory

    assert return_freed_memory(0) is None
    try:
        ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return  # not glibc: nothing to trim
    thread = return_freed_memory(3600)
    assert thread is not None and thread.daemon and thread.is_alive()
