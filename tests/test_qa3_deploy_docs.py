"""QA3 deploy findings 5, 8 and 9: what the README and docs tell an operator is what the code does.

- The SECRET_KEY rule is config.secret_key's (50 characters, 5 different ones, no django-insecure- prefix).
- Behind a TLS proxy the web tier is bound where only the proxy reaches it (a client that reaches the port
  directly writes its own X-Forwarded-For and escapes the log-in lockout).
- The search worker's beat keeps its schedule in the data folder (as serve's does), not in the checkout, and the
  checkout ignores the files a beat run from it leaves.
- The README and docs/architecture.md agree on which variables are checked at start-up and which are read where
  they are used, and neither leaves KERNELLAB_WARM_START unchecked.
- What a GPU worker does without a GPU is written down where the commands that start one are.
"""
from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()
SCALEOUT = (ROOT / "docs" / "scaleout.md").read_text()
TEAM = README[README.index("## Team deployment"):README.index("## LLM endpoints")]
CONFIGURATION = README[README.index("## Configuration"):README.index("## KernelBench problems")]


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_readme_states_the_secret_key_rule_of_the_code():
    from kernellab import config

    team, table = _flat(TEAM), _flat(CONFIGURATION)
    assert f"at least {config.SECRET_KEY_MIN_LENGTH} characters" in team
    assert f"at least {config.SECRET_KEY_MIN_LENGTH} characters long, with at least {config.SECRET_KEY_MIN_DISTINCT} "\
           "different characters and not starting with `django-insecure-`" in table
    assert not re.search(r"at least (?!50\b|5\b)\d+ (different )?characters", team + table)


def test_the_web_tier_behind_the_tls_proxy_is_not_bound_to_every_interface():
    assert "KERNELLAB_BEHIND_TLS_PROXY=true" in TEAM
    assert "0.0.0.0" not in TEAM
    assert "daphne -b 127.0.0.1" in TEAM and "serve --no-worker --host 127.0.0.1" in TEAM
    assert "only through the proxy" in _flat(TEAM)


def test_the_search_worker_command_keeps_the_beat_schedule_in_the_data_folder():
    commands = [line for line in TEAM.splitlines() if "-Q search,replay" in line]
    assert commands, "the README lost the search worker's command"
    for command in commands:
        assert "-B" in command
        assert re.search(r'-s "\$\{KERNELLAB_DATA_DIR:-data\}/celerybeat-schedule"', command), command


def test_the_checkout_ignores_the_beat_schedule_files():
    patterns = [line.strip() for line in (ROOT / ".gitignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    for name in ("celerybeat-schedule", "celerybeat-schedule.bak", "celerybeat-schedule.dat",
                 "celerybeat-schedule.dir", "celerybeat-schedule-shm"):
        assert any(fnmatch.fnmatch(name, pattern.lstrip("/")) for pattern in patterns), name


def _read_where_used(text: str, marker: str) -> set[str]:
    sentence = _flat(text)
    start = sentence.index(marker)
    end = sentence.index(".", sentence.index(":", start))
    return set(re.findall(r"`(KERNELLAB_\w+)`", sentence[start:end]))


def test_the_readme_and_the_architecture_agree_on_what_is_read_only_where_it_is_used():
    readme = _read_where_used(CONFIGURATION, "in this table are read only where they are used")
    architecture = _read_where_used(ARCHITECTURE, "are read only where they are used")
    assert readme == {"KERNELLAB_COMPILE_SANDBOX", "KERNELLAB_NVRTC", "KERNELLAB_NVRTC_SERVERS",
                      "KERNELLAB_INCLUDE_DIR"}
    assert readme <= architecture
    table = set(re.findall(r"^\| `(KERNELLAB_\w+)`", CONFIGURATION, re.M))
    # Of the README table's variables, those the architecture reads where used are exactly those the README says so.
    assert architecture & table == readme
    assert "KERNELLAB_WARM_START" not in architecture
    settings_section = _flat(ARCHITECTURE[ARCHITECTURE.index("## Settings"):])
    assert "`KERNELLAB_WARM_START`, which `serve` and `kernellab/asgi.py` read" in settings_section
    assert "(all three checked at start-up" in settings_section


def test_what_a_gpu_worker_does_without_a_gpu_is_written_where_it_is_started():
    assert "refuses to start" in _flat(TEAM)
    assert "A GPU worker without a GPU refuses to start." in _flat(SCALEOUT)
    for text in (_flat(TEAM), _flat(SCALEOUT)):
        assert "-Q replay" in text or "`replay` queue" in text
        assert "KERNELLAB_RUNNER_BACKEND" in text
