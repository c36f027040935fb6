"""renderd start's control socket when --socket is not given: the file's [daemon] socket, else $RENDERD_SOCKET
(which renderd status and renderd.connect() read), else the default path."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import psutil

from tests.daemon.conftest import PLAYER, RENDERD, STOP_TIMEOUT
from tests.helpers.control_review14e import run_renderd
from tests.helpers.leaks import wait_for

CONFIG = f"""
[environments.demo]
executable = ["{PLAYER}", "--static-frame"]
platform = "headless"
start_timeout = 20.0
"""


def _listening_on(tmp_path: Path, config_text: str, env_socket: str, *args: str) -> tuple[str, str]:
    """Start ``renderd start`` with $RENDERD_SOCKET set, wait for its "listening on" line, stop it; the
    socket it listened on, and what it logged."""
    config = tmp_path / "renderd.toml"
    config.write_text(config_text)
    log_path = tmp_path / "daemon.log"
    argv = [*RENDERD, "start", "-c", str(config), "--runtime-dir", str(tmp_path / "run"), *args]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, "RENDERD_SOCKET": env_socket, "NOTIFY_SOCKET": ""})
    try:
        def listening() -> str | None:
            match = re.search(r"renderd \S+ listening on (\S+) \(pid", log_path.read_text(errors="replace"))
            if match:
                return match.group(1)
            if proc.poll() is not None:
                raise AssertionError(f"renderd start exited ({proc.returncode}):\n{log_path.read_text()}")
            return None

        where = wait_for(listening, 10.0, "renderd start to listen")
    finally:
        children = []
        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            pass
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        for child in children:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
    return where, log_path.read_text(errors="replace")


def test_start_listens_on_renderd_socket_when_neither_the_flag_nor_the_file_names_one(tmp_path):
    # It listened on the default path, where renderd status and renderd.connect(), reading $RENDERD_SOCKET,
    # did not look.
    env_socket = str(tmp_path / "env.sock")
    where, log = _listening_on(tmp_path, CONFIG, env_socket)
    assert where == env_socket, log
    assert "RENDERD_SOCKET" not in log, log  # (no warning: the clients find it)


def test_the_file_and_the_flag_win_over_renderd_socket_and_the_difference_is_warned_about(tmp_path):
    env_socket, file_socket = str(tmp_path / "env.sock"), str(tmp_path / "file.sock")
    text = f'[daemon]\nsocket = "{file_socket}"\n{CONFIG}'
    where, log = _listening_on(tmp_path, text, env_socket)
    assert where == file_socket, log
    assert f"not $RENDERD_SOCKET ({env_socket})" in log and "[daemon] socket" in log, log
    flag_socket = str(tmp_path / "flag.sock")
    where, log = _listening_on(tmp_path, text, env_socket, "--socket", flag_socket)
    assert where == flag_socket, log
    assert f"not $RENDERD_SOCKET ({env_socket})" in log and "--socket" in log, log


def test_a_renderd_socket_start_cannot_use_is_an_error_naming_the_variable(tmp_path):
    value, why = "/tmp/" + "x" * 120, "a unix socket path holds at most 107"
    config = tmp_path / "renderd.toml"
    config.write_text(CONFIG)
    env = {"RENDERD_SOCKET": value}
    result = run_renderd("validate", str(config), env=env)
    assert result.returncode == 1
    assert result.stderr.startswith("Error: $RENDERD_SOCKET: ") and why in result.stderr, result.stderr
    assert "--socket" in result.stderr and "[daemon] socket" in result.stderr, result.stderr
    # Not in the way when --socket (or the file) names the socket.
    result = run_renderd("validate", str(config), "--socket", str(tmp_path / "flag.sock"), env=env)
    assert result.returncode == 0, result.stderr
    assert f"socket {tmp_path / 'flag.sock'}" in result.stdout.decode()


def test_validate_shows_the_socket_renderd_start_would_use(tmp_path):
    config = tmp_path / "renderd.toml"
    config.write_text(CONFIG)
    result = run_renderd("validate", str(config), env={"RENDERD_SOCKET": str(tmp_path / "env.sock")})
    assert result.returncode == 0, result.stderr
    assert f"socket {tmp_path / 'env.sock'} (from $RENDERD_SOCKET)" in result.stdout.decode(), result.stdout
