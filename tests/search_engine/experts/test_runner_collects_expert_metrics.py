from gpu_runner.observers.ncu import METRICS, NcuObserver
from search_engine.experts.ncu_metrics import EXTRA


def test_the_runner_profiles_every_metric_the_experts_read():
    assert set(EXTRA) <= set(METRICS)


def test_the_ncu_command_asks_for_the_extra_metrics(monkeypatch):
    monkeypatch.setattr("gpu_runner.observers.ncu.find_tool", lambda name: "/usr/bin/ncu")
    command = NcuObserver().command(["k"], 1, "/tmp/job.pkl")
    assert command[command.index("--metrics") + 1].split(",") == list(METRICS)
