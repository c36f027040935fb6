"""``renderd.connect()`` reads ``$RENDERD_SOCKET=~/...`` as under the home directory, as ``renderd start`` does
(a unit file's ``Environment=`` or a quoted export leaves the ``~`` unexpanded)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

DEADLINE = 60.0  # seconds: catches a hang only


@pytest.fixture
def home():
    path = tempfile.mkdtemp(prefix="rm15-")  # (short: the socket under it must fit a unix socket path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_connect_finds_the_daemon_at_a_renderd_socket_written_with_a_tilde(home):
    config = os.path.join(home, "renderd.toml")
    with open(config, "w") as f:
        f.write(f'[daemon]\nruntime_dir = "{home}/rt"\n[environments.demo]\nexecutable = "renderd-player"\n'
                'width = 32\nheight = 24\nplatform = "headless"\n')
    env = {k: v for k, v in os.environ.items() if k not in ("RENDERD_SOCKET", "NOTIFY_SOCKET")}
    env.update(HOME=home, RENDERD_SOCKET="~/d.sock")
    socket = os.path.join(home, "d.sock")
    daemon = subprocess.Popen([sys.executable, "-m", "renderd", "start", "-c", config], env=env, cwd=home,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + DEADLINE
        while not os.path.exists(socket):
            assert daemon.poll() is None, daemon.stderr.read().decode()
            assert time.monotonic() < deadline, "the daemon never made its socket"
            time.sleep(0.05)
        elsewhere = os.path.join(home, "elsewhere")
        os.mkdir(elsewhere)
        agent = ("import renderd\n"
                 "with renderd.connect('demo', timeout=30) as s:\n"
                 "    print(s.step('Pass').metadata['lastActionSuccess'])\n")
        done = subprocess.run([sys.executable, "-c", agent], env=env, cwd=elsewhere, capture_output=True, text=True,
                              timeout=DEADLINE)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "True"
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
        daemon.stderr.close()
    assert not os.path.exists(socket)
