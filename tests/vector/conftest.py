"""Fixtures for the vector session's tests: real reference players on real FIFOs, checked for leaks.

``launch(n, **kw)`` starts a :class:`renderd.VectorSession` of small static-frame players (closed after the
test whatever happened); ``no_leaks`` fails a test that leaves a child process, an open file descriptor,
a launch thread or a pipe directory behind.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil
import pytest

import renderd

#: Small frames keep 8 players x 500 steps well inside the test budget on 2 CPUs.
SIZE = 64
#: Deadlines for these tests (players start in well under a second each).
START_TIMEOUT = 30.0
STEP_TIMEOUT = 20.0
#: How long a test waits for processes to disappear after close().
GONE_TIMEOUT = 10.0
POLL = 0.02


def player_kwargs(**overrides: Any) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "width": SIZE,
        "height": SIZE,
        "args": ["--static-frame"],
        "start_timeout": START_TIMEOUT,
        "step_timeout": STEP_TIMEOUT,
    }
    kw.update(overrides)
    return kw


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(POLL)


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


def vector_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("renderd-vector")]


def pipe_dirs(vs: renderd.VectorSession) -> list[str]:
    """The private directories of the slots' pipes (gone once the vector session is closed)."""
    return [os.path.dirname(s.channel.server_path) for s in vs.sessions if s is not None]


@pytest.fixture
def no_leaks():
    """Fail the test if it leaves children, fds or launch threads (compared with before it ran)."""
    fds = open_fds()
    children = {p.pid for p in live_children()}
    yield
    wait_for(lambda: not ({p.pid for p in live_children()} - children), GONE_TIMEOUT, "child processes to exit")
    leaked = open_fds() - fds
    # An fd number listed then may name something else now; only new numbers that are still open count.
    assert not leaked, f"file descriptors left open: {sorted(leaked)} -> " + ", ".join(
        os.readlink(f"/proc/self/fd/{fd}") for fd in sorted(leaked) if os.path.exists(f"/proc/self/fd/{fd}")
    )
    assert not vector_threads(), f"launch threads left running: {vector_threads()}"


@pytest.fixture
def launch():
    """``launch(n, replace_on_crash=False, **player_kwargs)``: a VectorSession closed after the test."""
    made: list[renderd.VectorSession] = []

    def _launch(n: int, **kwargs: Any) -> renderd.VectorSession:
        replace = kwargs.pop("replace_on_crash", False)
        extra = {k: kwargs.pop(k) for k in ("reward_fn", "done_fn") if k in kwargs}
        vs = renderd.launch_many(n, replace_on_crash=replace, **extra, **player_kwargs(**kwargs))
        made.append(vs)
        return vs

    yield _launch
    for vs in made:
        vs.close()
