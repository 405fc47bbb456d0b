"""Children that hang, crash or eat memory fail their request; the parent carries on."""
import time

import pytest

from gpu_runner.sandbox import Sandbox, SandboxFault

TARGET = "tests.gpu_runner.sandbox_targets:serve"


def _sandbox(behaviour: str, **kwargs) -> Sandbox:
    sandbox = Sandbox(TARGET, [behaviour], **kwargs)
    assert sandbox.start(60)[0] == "hello"
    return sandbox


def test_a_well_behaved_child_answers_requests():
    sandbox = _sandbox("echo")
    assert sandbox.request(("job", {"n": 1}), timeout_s=10) == ("echo", {"n": 1})
    sandbox.close()
    assert not sandbox.alive


def test_a_hanging_child_is_killed_at_its_time_limit():
    sandbox = _sandbox("hang")
    started = time.monotonic()
    with pytest.raises(SandboxFault) as info:
        sandbox.request(("job", 1), timeout_s=1.0)
    assert info.value.kind == "timeout" and "1 s" in info.value.reason
    assert time.monotonic() - started < 10
    assert not sandbox.alive


@pytest.mark.parametrize("behaviour, cause", [("abort", "SIGABRT"), ("segfault", "SIGSEGV"), ("exit", "code 7")])
def test_a_crashing_child_is_reported_with_its_cause(behaviour, cause):
    sandbox = _sandbox(behaviour)
    with pytest.raises(SandboxFault) as info:
        sandbox.request(("job", 1), timeout_s=20)
    assert info.value.kind == "crash" and cause in info.value.reason


def test_a_child_over_its_host_memory_limit_is_killed():
    sandbox = _sandbox("hog", host_memory_bytes=400 << 20)
    with pytest.raises(SandboxFault) as info:
        sandbox.request(("job", 1), timeout_s=60)
    assert info.value.kind == "host-memory" and "limit" in info.value.reason


def test_after_a_fault_the_next_start_gives_a_fresh_working_child():
    sandbox = Sandbox(TARGET, ["abort"])
    sandbox.start(60)
    with pytest.raises(SandboxFault):
        sandbox.request(("job", 1), timeout_s=20)
    sandbox.start(60)
    assert sandbox.request(("echo", 5), timeout_s=10) == ("echo", 5)
    assert sandbox.restarts == 2
    sandbox.close()
