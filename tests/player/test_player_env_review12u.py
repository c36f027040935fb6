"""renderd-player run by hand without its pipes: it says FIFO is the default it took, which pipe variables are
missing, and that renderd normally starts it."""

from __future__ import annotations

import os
import subprocess
import sys

SMALL = ["-screen-width", "48", "-screen-height", "32"]


def run_player(args, *, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AI2THOR_", "RENDERD_"))}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "renderd.player", *args], env=env, capture_output=True, text=True,
                          timeout=10)


def test_run_by_hand_with_no_server_type_says_fifo_is_the_default_and_how_it_is_normally_started():
    result = run_player(SMALL)
    assert result.returncode == 2, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("renderd-player: error: AI2THOR_SERVER_TYPE is unset, so FIFO (the default), which "
                            "needs AI2THOR_FIFO_SERVER_PIPE_PATH and AI2THOR_FIFO_CLIENT_PIPE_PATH"), error
    assert "(neither is set)" in error
    assert "renderd.launch(...)" in error and "`renderd start`" in error


def test_an_explicit_fifo_server_type_with_one_pipe_names_the_missing_one():
    pipe = {"AI2THOR_SERVER_TYPE": "FIFO", "AI2THOR_FIFO_SERVER_PIPE_PATH": "/nonexistent"}
    result = run_player(SMALL, env_extra=pipe)
    assert result.returncode == 2, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("renderd-player: error: AI2THOR_SERVER_TYPE=FIFO needs"), error
    assert "(AI2THOR_FIFO_CLIENT_PIPE_PATH is not set)" in error
    assert "renderd.launch(...)" in error
