"""Fixtures for transport and process tests: real FIFOs, real child processes, leak checks."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.helpers.leaks import Leaks

PEER = str(Path(__file__).with_name("peer.py"))


def peer_argv(mode: str, *args: object) -> list[str]:
    """The command line of the scripted peer (tests/transport/peer.py)."""
    return [sys.executable, PEER, mode, *(str(a) for a in args)]


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
    leaks = Leaks()
    yield leaks
    leaks.check()
