"""A vector session's launch threads and its failed slots: a factory that closes its own vector session, and players
that close client.pipe but stay alive."""

from __future__ import annotations

import threading
import time

import pytest

import renderd
import renderd.vector
from renderd.errors import CallOrderError
from tests.helpers.leaks import pid_gone
from tests.vector.conftest import GONE_TIMEOUT, STEP_TIMEOUT, player_kwargs, wait_for

EXIT = {"action": "RenderdFault", "fault": "exit", "code": 3}


def test_a_factory_that_closes_its_own_vector_session_does_not_wait_for_itself(no_leaks):
    # The factory runs in the failed slot's launch thread; close() waited for every replacement on its way, this one
    # included: for the thread it ran in, forever. Now it closes everything else and returns, and the session the
    # factory makes after that is closed as it returns.
    go, returned = threading.Event(), threading.Event()
    raised: list[BaseException] = []
    made: list[renderd.Session] = []
    launch_threads: list[threading.Thread] = []

    def factory(slot: int):
        launch_threads.append(threading.current_thread())
        go.wait(STEP_TIMEOUT)
        try:
            vs.close()
        except BaseException as exc:  # noqa: BLE001 - checked below
            raised.append(exc)
        returned.set()
        session = renderd.launch(**player_kwargs())
        made.append(session)
        return session

    vs = renderd.VectorSession([renderd.launch(**player_kwargs()) for _ in range(2)], factory=factory,
                               replace_on_crash=True)
    pids = vs.pids
    running = None
    try:
        result = vs.step([EXIT, "Pass"])
        assert result.infos[0]["replaced"] and vs.slot_states[0] is renderd.vector.SlotState.REPLACING
        running = vs._slots[0].future  # (only to end the launch thread's wait, should close() wait for it after all)
        go.set()
        assert returned.wait(5.0), "close() called by the factory waits for its own launch thread"
        assert raised == []
        assert vs.closed
        wait_for(lambda: made and made[0].closed, GONE_TIMEOUT, "the session the factory made after close() to close")
        with pytest.raises(CallOrderError, match="closed"):
            vs.step(["Pass", "Pass"])
        started = time.monotonic()
        vs.close()  # (returns at once: the factory's close() has finished)
        assert time.monotonic() - started < 1.0
        assert all(pid_gone(pid) for pid in pids)
        assert launch_threads[0].name.startswith("renderd-vector")
        wait_for(lambda: not launch_threads[0].is_alive(), GONE_TIMEOUT, "the launch thread to end")
    finally:
        go.set()
        if not returned.is_set() and running is not None and not running.done():
            running.set_result(None)  # (lets the stuck close() go on, so that the test ends)
            returned.wait(5.0)
        vs.close()
