"""Fixtures for client tests: the reference player and a tiny scripted peer, leak checks, deadlines."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers.leaks import Leaks, live_children, open_fds  # noqa: F401  (used by the tests)

PEER = str(Path(__file__).parent.parent / "transport" / "peer.py")

#: Generous deadline for a player's first frame on a busy 2-CPU machine (a test that hits it failed).
START = 30.0


def peer_argv(mode: str = "serve", *args: object) -> list[str]:
    return [sys.executable, PEER, mode, *(str(a) for a in args)]


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """Make launch() create its pipe directories under tmp_path, so a test can see what it leaves."""
    root = tmp_path / "runtime"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


@pytest.fixture
def no_leaks(private_tmp):
    """Fail the test if it leaves a descriptor, a child process, or a pipe directory behind."""
    leaks = Leaks(private_tmp)
    yield leaks
    leaks.check()


class Timer:
    def __enter__(self) -> "Timer":
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.monotonic() - self.start
