"""Vector sessions and the Gymnasium envs interrupted by a signal handler (a batch job's SIGTERM handler): closed
while a call of theirs is under way (from the handler, or from a callback the call runs), and a handler's
sys.exit() while players start or while close() works."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest

import renderd
from renderd.errors import CallOrderError
from tests.vector.conftest import (
    HANG,
    START_TIMEOUT,
    check_signal_during_close_is_raised_once_everything_is_closed,
    check_signal_while_players_hang_at_start,
    player_kwargs,
    vector_env_that_hangs,
    wait_for,
)

#: When the alarm closes the vector session: well inside the hung step.
ALARM = 0.2


@contextmanager
def alarm(seconds: float, handler: Callable[[], None]) -> Iterator[None]:
    """Run ``handler`` from a SIGALRM handler ``seconds`` from now (in this thread, whatever it is doing)."""
    previous = signal.signal(signal.SIGALRM, lambda *_: handler())
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("replace", [False, True], ids=["plain", "replace_on_crash"])
def test_a_step_closed_by_a_signal_handler_raises_and_the_vector_session_stays_closed(no_leaks, replace):
    # The step went on after the handler's close(): it returned None for the hung slot with no error and set the
    # vector session ready again, so the next step used closed sessions (and, with replace_on_crash, replaced them).
    vs = renderd.launch_many(2, replace_on_crash=replace, **player_kwargs())
    try:
        started = time.monotonic()
        with alarm(ALARM, vs.close), pytest.raises(CallOrderError, match=r"step\(\): the VectorSession was closed"):
            vs.step([HANG, "Pass"])
        assert time.monotonic() - started < 5
        assert vs.closed and repr(vs).startswith("<renderd.VectorSession n=2 closed")
        with pytest.raises(CallOrderError, match="on a closed VectorSession"):
            vs.step(["Pass", "Pass"])
    finally:
        vs.close()


def test_a_reset_closed_by_a_signal_handler_raises(no_leaks):
    vs = renderd.launch_many(2, **player_kwargs())
    try:
        vs.step([{**HANG, "when": "after"}, "Pass"])  # answered; the player hangs from now on
        with alarm(ALARM, vs.close), pytest.raises(CallOrderError, match=r"reset\(\): the VectorSession was closed"):
            vs.reset()
        assert vs.closed
    finally:
        vs.close()


def test_a_step_waiting_for_a_replacement_closed_by_a_signal_handler_ends(no_leaks):
    # A step with wait_resets whose slot was being replaced spun forever once the handler's close() had cancelled
    # the replacement (the slot stayed "replacing", with nothing left to wait on).
    vs = renderd.launch_many(2, replace_on_crash=True, **player_kwargs(args=["--static-frame", "--start-delay", "0.5"]))
    calls = []

    def close_then_give_up() -> None:  # (the second alarm ends a step that would never return)
        calls.append(time.monotonic())
        if len(calls) > 1:
            raise TimeoutError("the step did not end after close()")
        vs.close()

    try:
        previous = signal.signal(signal.SIGALRM, lambda *_: close_then_give_up())
        signal.setitimer(signal.ITIMER_REAL, ALARM, 3.0)
        try:
            with pytest.raises(CallOrderError, match=r"step\(\): the VectorSession was closed"):
                vs.step([{"action": "RenderdFault", "fault": "segfault"}, "Pass"], wait_resets=True)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        assert vs.closed and len(calls) == 1
    finally:
        vs.close()


def test_closing_from_on_event_starts_no_replacement(no_leaks):
    # A replacement ready at send() gives its first frame to on_event, which closes the vector session: the other
    # slots' actions then failed on their closed sessions and were replaced (launch threads and players of a vector
    # session already closed, which nothing closed again), and the step went on.
    vs = renderd.launch_many(3, replace_on_crash=True, **player_kwargs())
    try:
        vs.step([{"action": "RenderdFault", "fault": "segfault"}, "Pass", "Pass"])
        replacement = vs._slots[0].future  # white box: the moment it is ready, between two steps
        wait_for(lambda: replacement.done(), START_TIMEOUT, "the replacement to be ready")
        vs.on_event = lambda slot, event: vs.close()
        with pytest.raises(CallOrderError, match=r"step\(\): the VectorSession was closed"):
            vs.step(["Pass", "Pass", "Pass"])
        assert vs.closed
    finally:
        vs.close()


def test_a_vector_env_closed_by_a_signal_handler_during_a_step(no_leaks):
    # The env's step failed with a bare AssertionError from inside renderd.gym (a slot without an observation).
    envs = vector_env_that_hangs()
    try:
        envs.reset(seed=0)
        with alarm(ALARM, envs.close), pytest.raises(CallOrderError, match="the VectorSession was closed"):
            envs.step(np.array([1, 0]))
        assert envs.closed and envs.vector_session.closed
    finally:
        envs.close()


def test_a_single_env_closed_by_a_signal_handler_while_its_player_starts(no_leaks):
    # reset() launches the player; a close() meanwhile found no session to close, and the reset then kept the new
    # player and returned an observation: the env closed by the handler ran a player nothing would stop.
    gym = pytest.importorskip("renderd.gym")
    env = gym.RenderdEnv(**player_kwargs(args=["--static-frame", "--start-delay", "0.5"]))
    try:
        with alarm(ALARM, env.close), pytest.raises(CallOrderError, match=r"reset\(\): the env was closed"):
            env.reset(seed=0)
        assert env.session is None
        with pytest.raises(CallOrderError, match="after close"):
            env.step(0)
    finally:
        env.close()


def test_a_sigterm_handlers_exit_while_players_start_returns_at_once(no_leaks):
    # A batch job's SIGTERM handler that calls sys.exit() while launch_many waits for players stuck loading: the
    # SystemExit was taken as that slot's launch failure, and raised only once every other launch had waited out
    # its start_timeout (300 s by default); as a Ctrl-C does, it now stops the players still booting at once.
    check_signal_while_players_hang_at_start(signal.SIGTERM, START_TIMEOUT, "SIGTERM", start_timeout=5.0,
                                             platform="CloudRendering")


def test_a_sigterm_handlers_exit_during_close_is_raised_once_everything_is_closed(no_leaks):
    # A SystemExit from a SIGTERM handler while close() waited (here for a replacement on its way) ended close()
    # there: the replacement that came after, and the other slot's player, were never closed.
    check_signal_during_close_is_raised_once_everything_is_closed(signal.SIGTERM, START_TIMEOUT)
