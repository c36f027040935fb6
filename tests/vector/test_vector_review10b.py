"""Vector sessions closed from another thread (a watchdog thread, a web handler) while a call of theirs is under
way, and from a signal handler that lands while the call reads one slot's answer."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import psutil
import pytest

import renderd
from renderd.errors import CallOrderError
from tests.daemon.conftest import daemon, fast_config  # noqa: F401 - daemon is a fixture
from tests.vector.conftest import (HANG, START_TIMEOUT, close_at, pipe_dirs, player_kwargs, step_closed_at, tracing,
                                  vector_env_that_hangs, wait_for)


def pids(envs) -> list[int]:
    return [s.pid for s in envs.vector_session.sessions if s is not None]


def _deadline_wait(predicate, seconds: float) -> bool:
    """Poll ``predicate`` until it is true or ``seconds`` pass; whether it became true."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


def _close_from_a_watchdog(vs: renderd.VectorSession) -> threading.Thread:
    """Start a thread (``watchdog``) closing ``vs``, and wait until ``vs`` is closed (at most 5 s): the thread
    goes on stopping its players."""
    closer = threading.Thread(target=vs.close, name="watchdog")
    closer.start()
    assert _deadline_wait(lambda: vs.closed, 5.0)
    return closer


def test_a_close_from_another_thread_while_a_step_sends_raises_call_order_error(no_leaks):
    # close() from another thread closed every slot's pipes under the step, which then wrote to a closed channel:
    # the step raised ValueError("I/O on a closed FifoChannel") instead of saying the vector session was closed.
    vs = renderd.launch_many(2, replace_on_crash=True, **player_kwargs())
    closer: threading.Thread | None = None
    try:
        vs.step([{"action": "RenderdFault", "fault": "segfault"}, "Pass"])
        replacement = vs._slots[0].future  # white box: ready before the next step, which installs it first
        wait_for(lambda: replacement.done(), START_TIMEOUT, "the replacement to be ready")
        pipe = vs.sessions[1].channel
        # Slot 1's session is closed once the step has raised (at the latest 5 s later): until then only its pipes
        # are closed, if close() closes them under the step.
        stepped = threading.Event()
        session_close = vs.sessions[1].close
        vs.sessions[1].close = lambda: (stepped.wait(5.0), session_close())

        def close_from_another_thread(slot: int, event: object) -> None:
            # (runs inside the step, before slot 1's action is written: the other thread closes meanwhile)
            nonlocal closer
            if closer is None:
                closer = _close_from_a_watchdog(vs)
                _deadline_wait(lambda: pipe.closed, 0.5)

        vs.on_event = close_from_another_thread
        try:
            with pytest.raises(CallOrderError, match=r"step\(\): the VectorSession was closed"):
                vs.step(["Pass", "Pass"])
        finally:
            stepped.set()
        assert closer is not None
        closer.join(10.0)
        assert not closer.is_alive() and vs.closed and pipe.closed
    finally:
        if closer is not None:
            closer.join(10.0)
        vs.close()


def test_a_close_from_another_thread_while_a_step_waits_returns_soon(no_leaks):
    vs = renderd.launch_many(2, **player_kwargs())
    closer = threading.Thread(target=lambda: (_deadline_wait(lambda: vs.pending, 5.0), time.sleep(0.1), vs.close()))
    try:
        closer.start()
        started = time.monotonic()
        with pytest.raises(CallOrderError, match=r"step\(\): the VectorSession was closed"):
            vs.step([HANG, "Pass"])
        closer.join(10.0)
        assert not closer.is_alive() and time.monotonic() - started < 5
    finally:
        closer.join(10.0)
        vs.close()


def test_a_signal_handlers_close_while_a_slots_answer_is_read_costs_no_wait(no_leaks):
    # A signal handler's close() that landed while the step read one slot's answer closed that slot's session in a
    # thread of its own, which waited (5 s) for the step to leave the pipes: the step the handler interrupted.
    vs = renderd.launch_many(2, **player_kwargs())
    vs._sequential_recv = True  # white box: the step reads slot by slot, so it waits inside slot 1's read
    previous = signal.signal(signal.SIGALRM, lambda *_: vs.close())
    try:
        started = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(CallOrderError, match="closed"):
            vs.step(["Pass", HANG])
        assert vs.closed
        assert time.monotonic() - started < 3.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        vs.close()


def test_a_close_while_another_threads_close_is_under_way_returns_once_it_has_finished(no_leaks):
    # A watchdog thread's close() ended the step; the step's own `with` exit (a second close()) returned at once, while
    # the watchdog still stopped the players: the caller went on with them running.
    vs = renderd.launch_many(2, **player_kwargs())
    for session in vs.sessions:
        session.stop_grace = 0.5  # (a stopped player takes the whole grace, then SIGKILL)
    stopped = vs.pids[0]
    dirs = pipe_dirs(vs)
    closer = threading.Thread(target=lambda: (_deadline_wait(lambda: vs.pending, 5.0), time.sleep(0.1), vs.close()))
    try:
        os.kill(stopped, signal.SIGSTOP)  # it never answers, and does not exit on SIGTERM
        closer.start()
        with pytest.raises(CallOrderError, match=r"step\(\): the VectorSession was closed"):
            vs.step(["Pass", "Pass"])
        vs.close()
        assert not psutil.pid_exists(stopped) or psutil.Process(stopped).status() == psutil.STATUS_ZOMBIE
        assert all(not os.path.exists(d) for d in dirs)
    finally:
        closer.join(10.0)
        vs.close()


def test_a_vector_env_closed_from_another_thread_during_a_step(no_leaks):
    envs = vector_env_that_hangs()
    closer = threading.Thread(target=lambda: (_deadline_wait(lambda: envs.vector_session.pending, 5.0),
                                              time.sleep(0.1), envs.close()))
    try:
        envs.reset(seed=0)
        closer.start()
        with pytest.raises(CallOrderError, match="the VectorSession was closed"):
            envs.step(np.array([1, 0]))
        envs.close()  # (returns once the other thread's close has finished)
        assert envs.vector_session.closed and all(not psutil.pid_exists(p) for p in pids(envs))
    finally:
        closer.join(10.0)
        envs.close()


def test_leased_players_closed_from_another_thread_during_a_step(no_leaks, daemon):
    d = daemon(fast_config(instances=2))
    vs = renderd.connect_many("demo", 2, socket=d.socket, timeout=15)
    closer = threading.Thread(target=lambda: (_deadline_wait(lambda: vs.pending, 5.0), time.sleep(0.1), vs.close()))
    try:
        vs.reset()
        closer.start()
        with pytest.raises(CallOrderError, match=r"step\(\): the VectorSession was closed"):
            vs.step([HANG, "Pass"])
        vs.close()
    finally:
        closer.join(10.0)
        vs.close()
    # Released (the hung one uncleanly: the daemon restarts it): both players are READY for the next client.
    d.wait_players(lambda ps: len(ps) == 2 and all(p["state"] == "READY" for p in ps), what="released players")


def test_a_close_from_on_event_while_another_threads_close_waits_for_the_step_returns_at_once(no_leaks):
    # The other thread's close() waits for the step to leave the pipes; a close() from the step's own callback must
    # not wait for that close in turn (each would wait for the other).
    vs = renderd.launch_many(2, **player_kwargs())
    closer: threading.Thread | None = None

    def close_twice(slot: int, event: object) -> None:
        nonlocal closer
        if closer is None:
            closer = _close_from_a_watchdog(vs)
            vs.close()

    try:
        vs.on_event = close_twice
        started = time.monotonic()
        with pytest.raises(CallOrderError, match=r"step\(\): the VectorSession was closed"):
            vs.step(["Pass", "Pass"])
        assert time.monotonic() - started < 3.0
    finally:
        if closer is not None:
            closer.join(10.0)
        vs.close()


def test_a_single_env_closed_just_before_reset_keeps_its_new_player_stops_it(no_leaks):
    # A close() (a signal handler's, or another thread's) that lands between reset()'s check for a close during the
    # launch and its keeping the new player found no player to stop; the reset then raised CallOrderError but kept
    # the player, which went on running in the env the caller had closed.
    gym = pytest.importorskip("renderd.gym")
    env = gym.RenderdEnv(**player_kwargs())
    trace, landed = close_at(env, gym.RenderdEnv.reset, "self.session = session")
    try:
        with tracing(trace), pytest.raises(CallOrderError, match=r"reset\(\): the env was closed"):
            env.reset(seed=0)
        assert landed and env.session is None
    finally:
        env.close()


def test_a_signal_handlers_close_after_the_poll_returned_makes_the_step_raise_call_order_error(no_leaks):
    # The handler closed the pipes between the poll and the reading of the slots it found ready: the step then read
    # a closed channel and raised ValueError("I/O on a closed FifoChannel").
    vs = renderd.launch_many(2, **player_kwargs())
    try:
        step_closed_at(vs, renderd.VectorSession._sweep, "if _answer_ready(slot.session):")
    finally:
        vs.close()


def test_a_signal_handlers_close_inside_a_slots_receive_costs_no_wait(no_leaks):
    # The handler landed in a slot's receive, outside its channel's read: that slot's session was closed in a thread
    # of its own, which waited 5 s for the receive (the one the handler interrupted) to leave.
    vs = renderd.launch_many(2, **player_kwargs())
    try:
        started = time.monotonic()
        step_closed_at(vs, renderd.Session._receive, "message = self.channel.recv(deadline, deadline_name)",
                        vs.sessions[1])
        assert time.monotonic() - started < 3.0
    finally:
        vs.close()


def test_a_signal_handlers_close_as_a_step_ends_leaves_the_vector_session_closed(no_leaks):
    # The handler's close() landed between the step's check for a close and its setting the vector session ready:
    # the closed vector session became ready again, and the next step sent to its closed sessions, replaced them with
    # players of a new launch pool, and raised "2 of 2 slots failed" instead of saying it was closed.
    vs = renderd.launch_many(2, replace_on_crash=True, **player_kwargs())
    trace, landed = close_at(vs, renderd.VectorSession._recv, "self._state = _VectorState.READY")
    try:
        with tracing(trace):
            vs.step(["Pass", "Pass"])  # (its answers were in: they are given)
        assert landed and vs.closed
        with pytest.raises(CallOrderError, match="on a closed VectorSession"):
            vs.step(["Pass", "Pass"])
        assert vs._executor is None and vs._wake_fd is None  # no launch pool, no wake-up descriptor made again
    finally:
        vs.close()


def test_a_signal_handlers_close_as_a_step_begins_makes_it_raise_call_order_error(no_leaks):
    vs = renderd.launch_many(2, replace_on_crash=True, **player_kwargs())
    try:
        step_closed_at(vs, renderd.VectorSession._send_actions, "self._state = _VectorState.PENDING")
        assert vs._executor is None and vs._wake_fd is None
    finally:
        vs.close()
