"""A ``renderd start`` run as a subprocess of its own, for tests of the command line: started in a new session,
stopped (SIGTERM to its process group, then SIGKILL) and reaped whatever the test did; and short temporary home
directories, whose sockets fit a unix socket's path."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

#: Seconds: catches a hang only.
DEADLINE = 60.0
RENDERD = [sys.executable, "-m", "renderd"]


@contextlib.contextmanager
def short_home(prefix: str) -> Iterator[str]:
    """A temporary directory under /tmp (short: a socket under it must fit a unix socket path), removed after."""
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def renderd_start(args: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None,
                  text: bool = False) -> Iterator[subprocess.Popen]:
    """``renderd start ARGS`` (stderr piped, stdout discarded), stopped and reaped on the way out."""
    daemon = subprocess.Popen([*RENDERD, "start", *args], env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=text, start_new_session=True)
    try:
        yield daemon
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGTERM)
            try:
                daemon.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
        daemon.stderr.close()


def wait_for_path(daemon: subprocess.Popen, path: str) -> bool:
    """Wait until ``path`` exists (True) or the daemon has exited (False), within :data:`DEADLINE`."""
    deadline = time.monotonic() + DEADLINE
    while not os.path.exists(path):
        if daemon.poll() is not None:
            return False
        assert time.monotonic() < deadline, f"the daemon neither made {path} nor exited"
        time.sleep(0.05)
    return True
