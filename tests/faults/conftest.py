"""Fixtures for the fault matrix: what must be left after a fault (nothing), measured, with deadlines.

``nothing_left`` records this process's descriptors (``/proc/self/fd``) and children before a test and,
after it, polls briefly until the descriptors are the same set again and no child process (running or
zombie) remains, then fails naming what is left. ``launch()`` is made to create its private pipe
directories under ``tmp_path/runtime`` (``tempfile.tempdir``), so that directory must be empty again.
Processes that ran before the test (a daemon shared by several rows) and the processes a test declares
in ``nothing_left.ignore`` (a daemon it started itself), with their descendants, are not counted.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers.leaks import (  # noqa: F401  (used by the tests)
    POLL,
    SETTLE_TIMEOUT,
    Leaks,
    children,
    describe,
    open_fds,
    pid_gone,
    wait_for,
)


@pytest.fixture
def nothing_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Fail the test if it leaves a descriptor, a process, or a pipe directory behind (see module doc)."""
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(runtime))
    leaks = Leaks(runtime, zombies=True)
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
