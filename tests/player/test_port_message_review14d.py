"""renderd-player under AI2THOR_SERVER_TYPE=WSGI without AI2THOR_PORT: exit 2 saying the variable is not set (not
"got None", Python's word for it)."""

from __future__ import annotations

import os
import subprocess
import sys


def _run(port: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AI2THOR_", "RENDERD_"))}
    env["AI2THOR_SERVER_TYPE"] = "WSGI"
    if port is not None:
        env["AI2THOR_PORT"] = port
    return subprocess.run([sys.executable, "-m", "renderd.player"], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=30)


def test_an_unset_port_is_said_to_be_unset():
    done = _run(None)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert "AI2THOR_PORT (a port number, 1-65535), which is not set" in line and "None" not in line, line


def test_a_bad_port_is_quoted():
    done = _run("http")
    assert done.returncode == 2, done.stderr
    assert "AI2THOR_PORT (a port number, 1-65535), got 'http'" in done.stderr.strip().splitlines()[-1]
