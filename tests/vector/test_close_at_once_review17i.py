"""Two threads' close() of one VectorSession at the same moment (a watchdog's, and the `with` exit of the call it
ended): everything is closed once (each slot's player stopped by one thread, never signalled and reaped by two at
once), and each close() returns once that is done."""

from __future__ import annotations

import threading

import psutil

import renderd
from renderd.vector import VectorSession
from tests.vector.conftest import START_TIMEOUT, player_kwargs


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class _SlowLookVector(VectorSession):
    """A VectorSession whose first look at its state, in each of two threads named ``closer-*``, waits (up to a
    deadline) until the other thread has looked too: both close() calls are then past their first look before either
    goes on."""

    looked: dict[int, bool]
    both: threading.Event

    @property
    def _state(self):
        value = self.__dict__["_state"]
        me = threading.get_ident()
        if threading.current_thread().name.startswith("closer") and me not in self.looked:
            self.looked[me] = True
            if len(self.looked) == 2:
                self.both.set()
            self.both.wait(10)
        return value

    @_state.setter
    def _state(self, value):
        self.__dict__["_state"] = value


def test_two_threads_closing_a_vector_session_at_once_close_it_once_and_both_return_after_it():
    vs = renderd.launch_many(2, **player_kwargs())
    pids = [s.pid for s in vs.sessions]
    closes = []
    close_all = vs._close_all

    def counted_close_all(together):
        closes.append(threading.current_thread().name)
        close_all(together)

    vs._close_all = counted_close_all
    vs.looked, vs.both = {}, threading.Event()
    vs.__class__ = _SlowLookVector
    returned = []

    def close():
        vs.close()
        returned.append(all(_gone(pid) for pid in pids))

    threads = [threading.Thread(target=close, name=f"closer-{i}") for i in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(START_TIMEOUT)
        assert not any(t.is_alive() for t in threads)
        assert vs.both.is_set(), "the two close() calls did not both look at the state"
        assert len(closes) == 1, f"closed by {closes}"
        assert returned == [True, True], returned  # (each returned once the players were stopped)
    finally:
        vs.__class__ = VectorSession
        vs.close()
