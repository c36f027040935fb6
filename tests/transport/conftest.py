"""Fixtures for transport and process tests: real FIFOs, real child processes, leak checks."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

PEER = str(Path(__file__).with_name("peer.py"))


def peer_argv(mode: str, *args: object) -> list[str]:
    """The command line of the scripted peer (tests/transport/peer.py)."""
    return [sys.executable, PEER, mode, *(str(a) for a in args)]


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.01) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` passes (never a bare sleep in a test)."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


@pytest.fixture
def no_leaks():
    """Fail the test if it leaves a file descriptor open or a child process running."""
    before = open_fds()
    yield
    # Give reaped children's descriptors a moment: everything here is closed synchronously anyway.
    leaked_fds = open_fds() - before
    children = [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    assert not leaked_fds, f"file descriptors left open: {sorted(leaked_fds)}"
    assert not children, f"child processes left running: {[(c.pid, c.cmdline()) for c in children]}"
