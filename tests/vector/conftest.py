"""Fixtures for the vector session's tests: real reference players on real FIFOs, checked for leaks.

``launch(n, **kw)`` starts a :class:`renderd.VectorSession` of small static-frame players (closed after the
test whatever happened); ``no_leaks`` fails a test that leaves a child process, an open file descriptor,
a launch thread or a pipe directory behind.
"""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

import pytest

import renderd
from renderd.errors import PlayerCrashed
from tests.helpers.leaks import Leaks, wait_for  # noqa: F401  (wait_for: used by the tests)

#: Small frames keep 8 players x 500 steps well inside the test budget on 2 CPUs.
SIZE = 64
#: Deadlines for these tests (players start in well under a second each).
START_TIMEOUT = 30.0
STEP_TIMEOUT = 20.0
#: How long a test waits for processes to disappear after close().
GONE_TIMEOUT = 10.0


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


def pipe_dirs(vs: renderd.VectorSession) -> list[str]:
    """The private directories of the slots' pipes (gone once the vector session is closed)."""
    return [os.path.dirname(s.channel.server_path) for s in vs.sessions if s is not None]


@pytest.fixture
def no_leaks():
    """Fail the test if it leaves children, fds or threads (launch threads included) behind."""
    leaks = Leaks(threads=True)
    yield leaks
    leaks.check(GONE_TIMEOUT)


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


def every_slot_crashes(vs: renderd.VectorSession, actions: Sequence[Any], *phrases: str) -> tuple[PlayerCrashed, float]:
    """Step ``vs`` with ``actions``: it must raise PlayerCrashed for every slot, each failure's message holding
    every one of ``phrases``. Returns the error and how long the step took (seconds)."""
    started = time.monotonic()
    with pytest.raises(PlayerCrashed) as info:
        vs.step(list(actions))
    took = time.monotonic() - started
    assert info.value.slots == list(range(len(actions)))
    for i in range(len(actions)):
        text = str(info.value.failures[i])
        for phrase in phrases:
            assert phrase in text, text
    return info.value, took
