"""The command line as an operator meets it: real `renderd` and `renderd-player` processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.daemon_cli_review15m import renderd_start, short_home, wait_for_path

RENDERD = [sys.executable, "-m", "renderd"]
PLAYER = [sys.executable, "-m", "renderd.player"]
DEADLINE = 60.0  # seconds: catches a hang only


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RENDERD_SOCKET", "NOTIFY_SOCKET", "JOURNAL_STREAM")}
    env.update(extra)
    return env


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=DEADLINE, **kwargs)


@pytest.fixture
def home():
    with short_home("rj15-") as path:
        yield path


def test_status_finds_the_daemon_at_a_renderd_socket_written_with_a_tilde(home):
    # `renderd start` reads $RENDERD_SOCKET=~/... as under the home directory (as --socket=~/...); renderd status,
    # run with the same environment from another directory, must look there too, not at a relative "~/...".
    config = os.path.join(home, "renderd.toml")
    with open(config, "w") as f:
        f.write(f'[daemon]\nruntime_dir = "{home}/rt"\n[environments.demo]\nexecutable = "renderd-player"\n'
                "instances = 0\n")
    env = _env(HOME=home, RENDERD_SOCKET="~/d.sock")
    socket = os.path.join(home, "d.sock")
    with renderd_start(["-c", config], env=env, cwd=home) as daemon:
        assert wait_for_path(daemon, socket), daemon.stderr.read().decode()
        elsewhere = os.path.join(home, "elsewhere")
        os.mkdir(elsewhere)
        result = _run([*RENDERD, "status"], env=env, cwd=elsewhere)
        assert result.returncode == 0, result.stderr
        assert f"pid {daemon.pid}" in result.stdout
        result = _run([*RENDERD, "status", "--json"], env=env, cwd=elsewhere)
        assert result.returncode == 0, result.stderr
        assert f'"pid": {daemon.pid}' in result.stdout
    assert not os.path.exists(socket)


def test_a_missing_daemon_at_a_tilde_socket_is_named_by_its_full_path(home):
    result = _run([*RENDERD, "status"], env=_env(HOME=home, RENDERD_SOCKET="~/none.sock"))
    assert result.returncode == 1
    assert result.stdout == ""
    assert f"at {home}/none.sock:" in result.stderr
    assert "Traceback" not in result.stderr


def _closed_pipe() -> int:
    """The write end of a pipe whose read end is already closed."""
    read, write = os.pipe()
    os.close(read)
    return write


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_player_help_that_cannot_be_written_is_an_error_not_a_silent_success():
    with open("/dev/full", "w") as full:
        result = subprocess.run([*PLAYER, "--help"], stdout=full, stderr=subprocess.PIPE, text=True,
                                timeout=DEADLINE)
    assert result.returncode == 1
    assert result.stderr == ("renderd-player: error: cannot write to standard output: no space left on the device "
                             "[ENOSPC]\n")


def test_player_help_into_a_closed_pipe_exits_1_quietly():
    write = _closed_pipe()
    try:
        result = subprocess.run([*PLAYER, "--help"], stdout=write, stderr=subprocess.PIPE, text=True,
                                timeout=DEADLINE)
    finally:
        os.close(write)
    assert result.returncode == 1
    assert result.stderr == ""


def test_player_help_and_usage_errors_still_work():
    # (guard: behaviour that was already right)
    result = _run([*PLAYER, "--help"])
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith("usage: renderd-player")
    assert "exit codes:" in result.stdout
    result = _run([*PLAYER, "-screen-width", "x"])
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines()[-1] == "renderd-player: error: argument -screen-width: invalid int value: 'x'"
