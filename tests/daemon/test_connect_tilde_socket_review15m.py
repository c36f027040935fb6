"""``renderd.connect()`` reads ``$RENDERD_SOCKET=~/...`` as under the home directory, as ``renderd start`` does
(a unit file's ``Environment=`` or a quoted export leaves the ``~`` unexpanded)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.daemon_cli_review15m import DEADLINE, renderd_start, short_home, wait_for_path


@pytest.fixture
def home():
    with short_home("rm15-") as path:
        yield path


def test_connect_finds_the_daemon_at_a_renderd_socket_written_with_a_tilde(home):
    config = os.path.join(home, "renderd.toml")
    with open(config, "w") as f:
        f.write(f'[daemon]\nruntime_dir = "{home}/rt"\n[environments.demo]\nexecutable = "renderd-player"\n'
                'width = 32\nheight = 24\nplatform = "headless"\n')
    env = {k: v for k, v in os.environ.items() if k not in ("RENDERD_SOCKET", "NOTIFY_SOCKET")}
    env.update(HOME=home, RENDERD_SOCKET="~/d.sock")
    socket = os.path.join(home, "d.sock")
    with renderd_start(["-c", config], env=env, cwd=home) as daemon:
        assert wait_for_path(daemon, socket), daemon.stderr.read().decode()
        elsewhere = os.path.join(home, "elsewhere")
        os.mkdir(elsewhere)
        agent = ("import renderd\n"
                 "with renderd.connect('demo', timeout=30) as s:\n"
                 "    print(s.step('Pass').metadata['lastActionSuccess'])\n")
        done = subprocess.run([sys.executable, "-c", agent], env=env, cwd=elsewhere, capture_output=True, text=True,
                              timeout=DEADLINE)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "True"
    assert not os.path.exists(socket)
