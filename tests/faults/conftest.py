"""Fixtures for the fault matrix: what must be left after a fault (nothing), measured, with deadlines.

``nothing_left`` records this process's descriptors (``/proc/self/fd``) and children before a test and,
after it, polls briefly until the descriptors are the same set again and no child process (running or
zombie) remains, then fails naming what is left. ``launch()`` is made to create its private pipe
directories under ``tmp_path/runtime`` (``tempfile.tempdir``), so that directory must be empty again.
Processes that ran before the test (a daemon shared by several rows) and the processes a test declares
in ``nothing_left.ignore`` (a daemon it started itself), with their descendants, are not counted.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil
import pytest

#: How long, after a test, leftovers get to go away (reaping and closing are synchronous in renderd;
#: this only absorbs a busy machine's scheduling).
SETTLE_TIMEOUT = 3.0
#: How often the helpers poll.
POLL = 0.01


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def children(ignore: Iterable[int] = ()) -> list[psutil.Process]:
    """Every descendant of this process (zombies included), except ``ignore`` and their descendants."""
    skip = set(ignore)
    out = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.pid in skip or any(p.pid in skip for p in proc.parents()):
                continue
        except psutil.NoSuchProcess:
            continue
        out.append(proc)
    return out


def describe(procs: Iterable[psutil.Process]) -> list[str]:
    out = []
    for proc in procs:
        try:
            status = proc.status()
            cmdline = " ".join(proc.cmdline())[:120] if status != psutil.STATUS_ZOMBIE else proc.name()
        except psutil.Error:
            status, cmdline = "gone", ""
        out.append(f"{proc.pid} {status} {cmdline}")
    return out


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(POLL)


def pid_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class Leaks:
    """What a test started with; :meth:`check` fails naming what is left."""

    def __init__(self, runtime: Path) -> None:
        self.runtime = runtime
        self.fds = open_fds()
        # Processes that were there before (a daemon shared by several tests) and what they start.
        self.ignore: set[int] = {p.pid for p in psutil.Process().children()}

    def check(self, timeout: float = SETTLE_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            extra_fds = open_fds() - self.fds
            procs = children(self.ignore)
            dirs = sorted(os.listdir(self.runtime))
            if not (extra_fds or procs or dirs):
                return
            if time.monotonic() > deadline:
                break
            time.sleep(POLL)
        targets = {}
        for fd in extra_fds:
            try:
                targets[fd] = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                targets[fd] = "?"
        assert not extra_fds, f"file descriptors left open: {targets}"
        assert not procs, f"processes left: {describe(procs)}"
        assert not dirs, f"left in the runtime directory: {dirs}"


@pytest.fixture
def nothing_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Fail the test if it leaves a descriptor, a process, or a pipe directory behind (see module doc)."""
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(runtime))
    leaks = Leaks(runtime)
    yield leaks
    leaks.check()


class Timer:
    """``with Timer() as t: ...`` then ``t.elapsed`` (seconds); ``t.restart()`` moves the start."""

    def __enter__(self) -> Timer:
        self.start = time.monotonic()
        self.elapsed = 0.0
        return self

    def restart(self) -> None:
        self.start = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.monotonic() - self.start
