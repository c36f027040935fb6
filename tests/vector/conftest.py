"""Fixtures for the vector session's tests: real reference players on real FIFOs, checked for leaks.

``launch(n, **kw)`` starts a :class:`renderd.VectorSession` of small static-frame players (closed after the
test whatever happened); ``no_leaks`` fails a test that leaves a child process, an open file descriptor,
a launch thread or a pipe directory behind. The signal helpers play a program's SIGINT (Ctrl-C) and SIGTERM (a
batch job's) handlers, and the two scenarios the tests put them in. ``close_at`` places a close() just before a
given line of renderd's code runs, where a signal handler (or another thread) would land.
"""

from __future__ import annotations

import inspect
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Sequence

import psutil
import pytest

import renderd
from renderd.errors import CallOrderError, PlayerCrashed, PlayerTimeout
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


#: An action after which the player stays alive and never answers (SIGTERM ends it).
HANG = {"action": "RenderdFault", "fault": "hang"}


def vector_env_that_hangs():
    """A Gymnasium vector env (renderd.gym; the test is skipped without it) of two of these players, whose action 0
    is Pass and action 1 :data:`HANG`."""
    gym = pytest.importorskip("renderd.gym")
    kw = player_kwargs()
    return gym.RenderdVectorEnv(2, actions=["Pass", HANG], width=kw["width"], height=kw["height"], args=kw["args"],
                                start_timeout=kw["start_timeout"], step_timeout=kw["step_timeout"])


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


def every_slot_times_out(vs: renderd.VectorSession, actions: Sequence[Any],
                         **step_kwargs: Any) -> tuple[PlayerTimeout, float]:
    """Step ``vs`` with ``actions`` (and ``step_kwargs``: a timeout, say): it must raise PlayerTimeout for every
    slot. Returns the error and how long the step took (seconds)."""
    started = time.monotonic()
    with pytest.raises(PlayerTimeout) as info:
        vs.step(list(actions), **step_kwargs)
    took = time.monotonic() - started
    assert info.value.slots == list(range(len(actions)))
    return info.value, took


# -- a program's signal handlers ---------------------------------------------------------------------------------


def raised_by(signum: int) -> type[BaseException]:
    """What the handler of :func:`signal_raising` raises for ``signum``."""
    return KeyboardInterrupt if signum == signal.SIGINT else SystemExit


@contextmanager
def signal_raising(signum: int, handled: list[float]) -> Iterator[None]:
    """While it lasts, ``signum`` runs a handler that notes when (``time.monotonic()``, in ``handled``) and raises as
    a program's does: KeyboardInterrupt for SIGINT (Ctrl-C), ``SystemExit(143)`` for SIGTERM (a batch job's handler
    calling sys.exit()). The handler before it is put back at the end."""

    def handler(signum: int, frame: object) -> None:
        handled.append(time.monotonic())
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    previous = signal.signal(signum, handler)
    try:
        yield
    finally:
        signal.signal(signum, previous)


def send_signal(signum: int) -> None:
    """Deliver ``signum`` to the main thread (its handler runs there, whatever that thread is doing)."""
    signal.pthread_kill(threading.main_thread().ident, signum)


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def running_children() -> list[psutil.Process]:
    """This process's children that still run (not the zombies of those that exited, nor those gone)."""
    return [p for p in psutil.Process().children() if _running(p)]


def check_signal_while_players_hang_at_start(signum: int, wait: float, after: str, **overrides: Any) -> None:
    """``signum`` (see :func:`signal_raising`) while launch_many waits for two players that never send their first
    frame (``overrides``: their start_timeout and more): what the handler raises is raised within 2 s of it, not
    once the start_timeouts have passed. ``wait``: how long to wait for both players to start; ``after``: the
    signal, as the failure message names it."""
    handled: list[float] = []

    def send() -> None:
        wait_for(lambda: len(running_children()) == 2, wait, "both players to start")
        send_signal(signum)

    helper = threading.Thread(target=send)
    try:
        with signal_raising(signum, handled):
            helper.start()
            with pytest.raises(raised_by(signum)):
                renderd.launch_many(2, **player_kwargs(args=["--fault-at-start", "hang"], **overrides))
            raised = time.monotonic()
    finally:
        helper.join()
    name = raised_by(signum).__name__
    assert handled and raised - handled[0] < 2.0, f"{name} raised {raised - handled[0]:.2f} s after {after}"


def check_signal_during_close_is_raised_once_everything_is_closed(signum: int, wait: float) -> None:
    """``signum`` (see :func:`signal_raising`) while close() waits for a replacement on its way (the test's factory,
    which takes until the signal has been handled, at most ``wait`` seconds): close() raises what the handler raises,
    once it has closed every slot, the replacement that arrived after the signal included."""
    entered, release = threading.Event(), threading.Event()
    handled: list[float] = []

    def factory(slot):
        entered.set()
        release.wait(wait)
        return renderd.launch(**player_kwargs())

    vs = renderd.VectorSession([renderd.launch(**player_kwargs()) for _ in range(2)], factory=factory,
                               replace_on_crash=True)

    def send() -> None:
        wait_for(lambda: vs.closed, wait, "close() to begin")
        send_signal(signum)
        wait_for(lambda: handled, wait, f"the {signal.Signals(signum).name} to be handled")
        release.set()

    helper = threading.Thread(target=send)
    try:
        with signal_raising(signum, handled):
            vs.step(["Pass", {"action": "RenderdFault", "fault": "segfault"}])
            assert entered.wait(wait), "the replacement did not start"
            helper.start()
            with pytest.raises(raised_by(signum)):
                vs.close()
    finally:
        release.set()
        if helper.ident is not None:
            helper.join()
        vs.close()
    # The replacement that arrived after the signal was closed too (no_leaks: its player is gone).
    assert vs.closed and all(s is not None and s.closed for s in vs.sessions), vs.sessions


# -- a close() landing at one line -------------------------------------------------------------------------------


@contextmanager
def tracing(trace) -> Iterator[None]:
    """Run the block under the trace function ``trace`` (see :func:`close_at`)."""
    sys.settrace(trace)
    try:
        yield
    finally:
        sys.settrace(None)


def close_at(closed, function, source: str, owner: object = None):
    """A trace function that calls ``closed.close()`` once (a vector session, an env), just before ``function`` (a
    method of ``owner``, if given) runs its line ``source``: where a signal handler (which runs between any two
    lines) would land. Returns it and a list that holds True once it has closed."""
    code = function.__code__
    lines, first = inspect.getsourcelines(function)
    at = first + next(k for k, text in enumerate(lines) if text.strip() == source)
    landed: list[bool] = []

    def trace(frame, event, arg):
        if frame.f_code is not code:
            return None

        def line(frame, event, arg):
            if event == "line" and frame.f_lineno == at and not landed and owner in (None, frame.f_locals["self"]):
                landed.append(True)
                closed.close()
            return line

        return line

    return trace, landed


def step_closed_at(vs: renderd.VectorSession, function, source: str, owner: object = None, *,
                   actions: Sequence[Any] = ("Pass", "Pass"),
                   match: str = r"step\(\): the VectorSession was closed") -> None:
    """Step ``vs`` with ``actions`` (two Pass by default) with a close() landing just before ``function`` runs
    ``source`` (see :func:`close_at`): the step raises CallOrderError whose message matches ``match`` (by default:
    saying the vector session was closed), and the vector session is closed."""
    trace, landed = close_at(vs, function, source, owner)
    with tracing(trace), pytest.raises(CallOrderError, match=match):
        vs.step(list(actions))
    assert landed and vs.closed
