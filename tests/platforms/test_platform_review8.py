"""Managed Xvfb displays under races: a fork that comes after its caller gave up, stale locks and sockets
of a display number another server takes, and a selection released while its display is replaced."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.xvfb, pytest.mark.usefixtures("no_xvfb_left")]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _script(path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(0o755)
    return str(path)


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait(10)
    return proc.pid


def _lock_path(number: int) -> str:
    return f"/tmp/.X{number}-lock"


def _socket_path(number: int) -> str:
    return os.path.join("/tmp/.X11-unix", f"X{number}")


# -- 1. a fork that runs after its caller gave up uses only its own descriptors ------------------------

LATE_FORK = textwrap.dedent(
    """
    import os, select, signal, sys, threading, time
    from collections.abc import Mapping

    import psutil

    # Inherited by the fake Xvfb: it still writes after the late-fork cleanup sends it SIGTERM.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from renderd.errors import PlatformError
    from renderd.platforms import xvfb

    xvfb.XVFB_SPAWN_TIMEOUT = 0.5
    go = threading.Event()
    paused = threading.Event()

    class Slow(str):
        # Popen encodes the environment after it took its descriptors' numbers and before it forks:
        # holding it there is a fork that comes late.
        def encode(self, *args, **kwargs):
            if threading.current_thread().name == "renderd-xvfb-spawner" and not go.is_set():
                paused.set()
                go.wait(20)
            return str.encode(str(self), *args, **kwargs)

    class Env(Mapping):
        def __init__(self):
            self.data = {"PATH": os.environ["PATH"], "SLOW": Slow("1")}
        def __getitem__(self, key):
            return self.data[key]
        def __iter__(self):
            return iter(self.data)
        def __len__(self):
            return len(self.data)

    manager = xvfb.DisplayManager(xvfb=sys.argv[1], stop_grace=1.0)
    try:
        manager.acquire(64, 64, env=Env())
        sys.exit("acquire returned")
    except PlatformError as exc:
        message = " ".join(str(exc).split())
    assert paused.is_set()
    # Descriptors another thread opens now take the numbers the caller just closed.
    pipes = [os.pipe() for _ in range(8)]
    go.set()
    got = b""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        ready, _, _ = select.select([r for r, _ in pipes], [], [], 0.1)
        for r in ready:
            got += os.read(r, 100)
    deadline = time.monotonic() + 15
    while psutil.Process().children() and time.monotonic() < deadline:  # the late Xvfb, stopped
        time.sleep(0.05)
    print(message)
    print(repr(got))
    """
)


def test_a_late_fork_does_not_hand_xvfb_descriptors_another_thread_opened(tmp_path):
    # The caller gives up on a fork the spawner has not done yet and closes its pipe and log file; a
    # descriptor another thread opens then takes their numbers, and the late Xvfb inherited it, writing
    # its display number (and its output) into someone else's pipe, socket or file.
    fake = _script(tmp_path / "Xvfb", 'echo "99" >&$2\necho "said on stdout"\nexec sleep 30')
    done = subprocess.run(
        [sys.executable, "-c", LATE_FORK, fake],
        check=False, capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", REPO)},
    )
    assert done.returncode == 0, done.stderr
    message, got = done.stdout.strip().splitlines()[-2:]
    assert got == "b''", done.stdout
    # A fork that missed its deadline is reported as such (Python's TimeoutError is an OSError, which made it
    # "cannot start .../Xvfb: " with no reason at all).
    assert "could not fork" in message and "within 0.5 s" in message, message
