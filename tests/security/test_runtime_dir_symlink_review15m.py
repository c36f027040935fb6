"""``renderd start`` refuses a runtime or socket directory that is a symlink another user made, wherever it leads (its
maker can point it at a directory of theirs at any moment), as the clients refuse such a socket directory."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

OTHER_UID = 61517  # someone else, who made the symlink
DEADLINE = 60.0  # seconds: catches a hang only


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a symlink owned by another user")
@pytest.mark.parametrize("maker", [OTHER_UID, 0])
@pytest.mark.parametrize("which", ["runtime", "socket"])
def test_a_runtime_dir_that_is_another_users_symlink_is_refused(maker, which):
    base = tempfile.mkdtemp(prefix="rs15-")
    try:
        target = os.path.join(base, "mine")
        os.mkdir(target, 0o700)  # the service user's own directory: where the link leads passes every check
        link = os.path.join(base, "rt")
        os.symlink(target, link)
        os.lchown(link, maker, maker)
        config = os.path.join(base, "renderd.toml")
        sock = f"{link}/d.sock" if which == "socket" else f"{base}/d.sock"
        runtime = f"{base}/run" if which == "socket" else link
        with open(config, "w") as f:
            f.write(f'[daemon]\nsocket = "{sock}"\n')
        daemon = subprocess.Popen([sys.executable, "-m", "renderd", "start", "-c", config, "--runtime-dir", runtime],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        try:
            deadline = time.monotonic() + DEADLINE
            while daemon.poll() is None and not os.path.exists(sock):
                assert time.monotonic() < deadline, "the daemon neither started nor exited"
                time.sleep(0.05)
            if maker == OTHER_UID:
                assert daemon.poll() is not None, "the daemon started behind another user's symlink"
                assert daemon.returncode == 1
                error = daemon.stderr.read()
                assert f"{link} is a symlink made by uid {OTHER_UID}" in error, error
                assert "Traceback" not in error, error
                assert os.listdir(target) == [], "the daemon put something behind the symlink"
            else:  # root's own link (root is the service user here): used
                assert daemon.poll() is None, daemon.stderr.read()
        finally:
            if daemon.poll() is None:
                os.killpg(daemon.pid, signal.SIGTERM)
                try:
                    daemon.wait(DEADLINE)
                except subprocess.TimeoutExpired:
                    os.killpg(daemon.pid, signal.SIGKILL)
                    daemon.wait()
            daemon.stderr.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
