"""A session closed from another thread while a step is still inside it after ``CLOSE_WAITER_TIMEOUT``: the
pipes are left to that step and closed as it ends, never under it. Real players, real FIFOs; nothing may be left
behind (``no_leaks``)."""

from __future__ import annotations

import logging
import threading

import pytest

import renderd
import renderd.client
from renderd.errors import CallOrderError

from .conftest import START, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")


def _hold_inside(session, fail: bool = False):
    """Make the session's next step stop, once its answer is read, until the returned event is set: a step
    still inside the session (a thread not scheduled, a slow signal handler), as long as the test wants. With
    ``fail`` the step then fails on the answer, as on one it cannot take apart."""
    reached, release = threading.Event(), threading.Event()
    build = session._assembler.event

    def held(message, seq=None):
        reached.set()
        assert release.wait(30), "the test never let the step go on"
        if fail:
            raise OSError("the answer could not be read")
        return build(message, seq)

    session._assembler.event = held
    return reached, release


@pytest.mark.parametrize("step_ends", ["answered", "raising"])
def test_a_close_that_stops_waiting_leaves_the_pipes_to_the_step_still_inside(monkeypatch, caplog, step_ends):
    # close() from another thread stops the player and waits for the step to leave the pipes; past
    # CLOSE_WAITER_TIMEOUT it closed them under the step anyway, whose next poll, read or write then used
    # descriptor numbers the next files opened in the process take. Now it leaves them to the step, which
    # closes them as it ends, however it ends.
    monkeypatch.setattr(renderd.client, "CLOSE_WAITER_TIMEOUT", 0.2)
    with renderd.launch(width=64, height=48, start_timeout=START) as session:
        reached, release = _hold_inside(session, fail=step_ends == "raising")
        outcome: dict[str, object] = {}

        def step():
            try:
                outcome["event"] = session.step("Pass")
            except BaseException as exc:  # noqa: BLE001 - the test looks at it
                outcome["error"] = exc

        stepper = threading.Thread(target=step)
        stepper.start()
        try:
            assert reached.wait(START), "the step never read its answer"
            with caplog.at_level(logging.WARNING, logger="renderd.client"):
                session.close()
            assert session.closed
            assert not session.channel.closed, "close() closed the pipes under a step still inside the session"
            assert "closed as that step ends" in caplog.text
        finally:
            release.set()
            stepper.join(START)
        assert not stepper.is_alive()
        wait_for(lambda: session.channel.closed, 5.0, "the pipes to be closed once the step ended")
    if step_ends == "answered":
        assert outcome["event"] and "error" not in outcome  # (an answer read before the close is still given)
    else:
        assert isinstance(outcome["error"], CallOrderError), repr(outcome.get("error"))


def test_a_close_that_waited_enough_closes_the_pipes_itself(monkeypatch):
    # The step leaves while close() waits for it: the pipes are closed by close() itself, before it returns.
    monkeypatch.setattr(renderd.client, "CLOSE_WAITER_TIMEOUT", 30.0)
    with renderd.launch(width=64, height=48, start_timeout=START) as session:
        reached, release = _hold_inside(session)
        stepper = threading.Thread(target=lambda: session.step("Pass"))
        stepper.start()
        try:
            assert reached.wait(START)
            threading.Timer(0.2, release.set).start()
            session.close()
            assert session.channel.closed
        finally:
            release.set()
            stepper.join(START)
