"""Two threads' close() of one session at the same moment: the player's pipes closed, the player stopped and on_close
run once, and each close() returns once that is done."""

from __future__ import annotations

import threading

import psutil

import renderd
from renderd.client import Session, SessionState
from tests.client.conftest import START

SMALL = {"width": 16, "height": 16, "platform": "headless", "start_timeout": START, "step_timeout": START}


class _SlowLookSession(Session):
    """A Session whose first look at its state, in each of two threads named ``closer-*``, waits (up to a deadline)
    until the other thread has looked too: both close() calls are then past their first look before either goes on.
    (A launched session is given this class: its state stays in its ``__dict__``.)"""

    looked: dict[int, bool]
    both: threading.Event

    @property
    def _state(self):
        value = self.__dict__["_state"]  # (what this look sees: the other thread may change it meanwhile)
        me = threading.get_ident()
        if threading.current_thread().name.startswith("closer") and me not in self.looked:
            self.looked[me] = True
            if len(self.looked) == 2:
                self.both.set()
            self.both.wait(5)
        return value

    @_state.setter
    def _state(self, value):
        self.__dict__["_state"] = value


def test_two_threads_closing_at_once_close_once_and_both_return_after_it():
    session = renderd.launch(**SMALL)
    pid = session.pid
    counts = {"channel": 0, "stop": 0, "on_close": 0}
    finished = []
    channel_close, stop, on_close = session.channel.close, session.process.stop, session._on_close

    def count_channel_close():
        counts["channel"] += 1
        channel_close()

    def count_stop(grace):
        counts["stop"] += 1
        return stop(grace)

    def count_on_close(error):
        counts["on_close"] += 1
        threading.Event().wait(0.3)  # (long enough for a second close() to come back before this ends, if it did)
        on_close(error)
        finished.append(True)

    session.channel.close = count_channel_close
    session.process.stop = count_stop
    session._on_close = count_on_close
    session.looked, session.both = {}, threading.Event()
    session.__class__ = _SlowLookSession
    returned = []

    def close():
        session.close()
        returned.append(len(finished))

    threads = [threading.Thread(target=close, name=f"closer-{i}") for i in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads)
        assert session.both.is_set(), "the two close() calls did not both look at the state"
        # (the pipes closed once: a second close() of their descriptor numbers could close another file's)
        assert counts == {"channel": 1, "stop": 1, "on_close": 1}, counts
        assert session.state is SessionState.CLOSED
        assert returned == [1, 1], returned  # (each returned once on_close had run)
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    finally:
        session.__class__ = Session
        session.close()
