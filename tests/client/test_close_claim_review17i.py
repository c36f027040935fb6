"""A close() of another thread that has just begun (it has claimed the close but not yet gone on) is waited for by a
second close(), as one further along is: the second returns once the player is stopped and on_close has run, never
while the first is still to do it."""

from __future__ import annotations

import sys
import threading
import time

import psutil

import renderd
from renderd.client import Session
from tests.client.conftest import START

SMALL = {"width": 16, "height": 16, "platform": "headless", "start_timeout": START, "step_timeout": START}


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _waiting_in_close(ident: int) -> bool:
    """Whether thread ``ident`` waits (an Event's wait) inside Session.close."""
    frame = sys._current_frames().get(ident)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return "wait" in names and "close" in names


class _PausedClaimSession(Session):
    """A Session whose first close(), in the thread named ``first``, pauses as it notes which thread runs it (right
    after it claimed the close) until the thread named ``second`` has returned from its close() or waits inside it."""

    second: threading.Thread
    paused: threading.Event

    @property
    def _closer(self):
        return self.__dict__.get("_closer")

    @_closer.setter
    def _closer(self, value):
        if threading.current_thread().name == "first" and value is not None:
            self.paused.set()
            deadline = time.monotonic() + START
            while time.monotonic() < deadline:
                second = self.second
                if second.ident is not None and (not second.is_alive() or _waiting_in_close(second.ident)):
                    break
                time.sleep(0.005)
        self.__dict__["_closer"] = value


def test_a_close_that_has_just_claimed_the_session_is_waited_for():
    session = renderd.launch(**SMALL)
    pid = session.pid
    ran = []
    on_close = session._on_close

    def noted_on_close(error):
        on_close(error)
        ran.append(True)

    session._on_close = noted_on_close
    seen_by_second = {}

    def second_close():
        session.close()
        seen_by_second.update(player_gone=_gone(pid), on_close_ran=bool(ran))

    first = threading.Thread(target=session.close, name="first")
    second = threading.Thread(target=second_close, name="second")
    session.second, session.paused = second, threading.Event()
    session.__class__ = _PausedClaimSession
    try:
        first.start()
        assert session.paused.wait(START), "the first close() did not begin"
        second.start()
        second.join(START * 2)
        first.join(START * 2)
        assert not first.is_alive() and not second.is_alive()
        assert seen_by_second == {"player_gone": True, "on_close_ran": True}, seen_by_second
    finally:
        session.__class__ = Session
        session.close()
