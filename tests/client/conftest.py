"""Fixtures for client tests: the reference player and a tiny scripted peer, leak checks, deadlines."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

PEER = str(Path(__file__).parent.parent / "transport" / "peer.py")

#: Generous deadline for a player's first frame on a busy 2-CPU machine (a test that hits it failed).
START = 30.0


def peer_argv(mode: str = "serve", *args: object) -> list[str]:
    return [sys.executable, PEER, mode, *(str(a) for a in args)]


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def live_children() -> list[psutil.Process]:
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                out.append(child)
        except psutil.NoSuchProcess:
            pass
    return out


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
    before = open_fds()
    yield
    leaked = open_fds() - before
    children = live_children()
    assert not leaked, f"file descriptors left open: {sorted(leaked)}"
    assert not children, f"child processes left running: {[(c.pid, c.cmdline()) for c in children]}"
    assert os.listdir(private_tmp) == [], f"left in the runtime directory: {os.listdir(private_tmp)}"


class Timer:
    def __enter__(self) -> "Timer":
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.monotonic() - self.start
