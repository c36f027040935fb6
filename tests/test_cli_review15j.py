"""The command line as an operator meets it: real `renderd` and `renderd-player` processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

RENDERD = [sys.executable, "-m", "renderd"]
DEADLINE = 60.0  # seconds: catches a hang only


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RENDERD_SOCKET", "NOTIFY_SOCKET", "JOURNAL_STREAM")}
    env.update(extra)
    return env


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=DEADLINE, **kwargs)


@pytest.fixture
def home():
    # Short: the socket under it must fit a unix socket path.
    path = tempfile.mkdtemp(prefix="rj15-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_status_finds_the_daemon_at_a_renderd_socket_written_with_a_tilde(home):
    # `renderd start` reads $RENDERD_SOCKET=~/... as under the home directory (as --socket=~/...); renderd status,
    # run with the same environment from another directory, must look there too, not at a relative "~/...".
    config = os.path.join(home, "renderd.toml")
    with open(config, "w") as f:
        f.write(f'[daemon]\nruntime_dir = "{home}/rt"\n[environments.demo]\nexecutable = "renderd-player"\n'
                "instances = 0\n")
    env = _env(HOME=home, RENDERD_SOCKET="~/d.sock")
    socket = os.path.join(home, "d.sock")
    daemon = subprocess.Popen([*RENDERD, "start", "-c", config], env=env, cwd=home,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + DEADLINE
        while not os.path.exists(socket):
            assert daemon.poll() is None, daemon.stderr.read().decode()
            assert time.monotonic() < deadline, "the daemon never made its socket"
            time.sleep(0.05)
        elsewhere = os.path.join(home, "elsewhere")
        os.mkdir(elsewhere)
        result = _run([*RENDERD, "status"], env=env, cwd=elsewhere)
        assert result.returncode == 0, result.stderr
        assert f"pid {daemon.pid}" in result.stdout
        result = _run([*RENDERD, "status", "--json"], env=env, cwd=elsewhere)
        assert result.returncode == 0, result.stderr
        assert f'"pid": {daemon.pid}' in result.stdout
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
        daemon.stderr.close()
    assert not os.path.exists(socket)


def test_a_missing_daemon_at_a_tilde_socket_is_named_by_its_full_path(home):
    result = _run([*RENDERD, "status"], env=_env(HOME=home, RENDERD_SOCKET="~/none.sock"))
    assert result.returncode == 1
    assert result.stdout == ""
    assert f"at {home}/none.sock:" in result.stderr
    assert "Traceback" not in result.stderr

