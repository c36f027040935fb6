"""A slot's own session (``vs.sessions[i]``) used from outside the VectorSession while a call of it is under way: a
close() of it fails that slot only (replaced, or reported), and a call of it made while the vector session sends to
it is refused by the session's lock instead of writing into the middle of the vector's action."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

import renderd
from renderd.errors import CallOrderError, PlayerTimeout, RenderdError
from tests.helpers.pause import line_of
from tests.vector.conftest import START_TIMEOUT, tracing, wait_for

PEER = str(Path(__file__).parent.parent / "transport" / "peer.py")
SLEEP = {"action": "RenderdFault", "fault": "sleep", "seconds": 1.0}
CLOSED = "was closed from outside the VectorSession (a close() of vs.sessions[0]"


def _close_slot0_from(vs: renderd.VectorSession, thread: bool):
    """An on_event that closes slot 0's session when slot 1 answers (slot 0 still sleeps on its action): in this
    thread, or in another one joined at once."""
    closed = []

    def on_event(slot, event):
        if slot == 1 and not closed:
            closed.append(vs.sessions[0])
            if thread:
                t = threading.Thread(target=vs.sessions[0].close)
                t.start()
                t.join(10)
            else:
                vs.sessions[0].close()

    vs.on_event = on_event
    return closed


@pytest.mark.parametrize("thread", [False, True], ids=["same-thread", "other-thread"])
def test_a_slots_session_closed_while_a_step_waits_is_replaced(no_leaks, launch, thread):
    # The step polled the closed session's pipes and raised "ValueError: I/O on a closed FifoChannel", breaking the
    # whole vector session, replace_on_crash or not.
    vs = launch(2, replace_on_crash=True)
    closed = _close_slot0_from(vs, thread)
    result = vs.step([SLEEP, "Pass"])
    assert closed and closed[0].closed
    err = result.infos[0]["error"]
    assert isinstance(err, CallOrderError) and CLOSED in str(err), err
    assert result.infos[0]["replaced"] is True and result.dones == [True, False]
    assert result.observations[1] is not None and "error" not in result.infos[1]
    vs.on_event = None
    result = vs.step(["Pass", "Pass"], wait_resets=True)
    assert result.infos[0].get("reset_complete") and result.observations[0] is not None
    assert vs.sessions[0] is not closed[0] and not vs.closed and vs.error is None


def test_a_slots_session_closed_while_a_step_waits_is_reported(no_leaks, launch):
    vs = launch(2)
    _close_slot0_from(vs, False)
    with pytest.raises(RenderdError) as info:
        vs.step([SLEEP, "Pass"])
    assert not isinstance(info.value, ValueError)
    assert info.value.slots == [0] and CLOSED in str(info.value.failures[0]), info.value
    assert vs.sessions[1].last_event.last_action == "Pass"  # the other slot's answer was received


def _inside_send(thread: threading.Thread, session: renderd.Session) -> bool:
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code is renderd.Session._send.__code__ and frame.f_locals.get("self") is session:
            return True
        frame = frame.f_back
    return False


def test_a_slots_session_stepped_while_the_vector_sends_to_it_is_refused(no_leaks):
    # The vector session wrote through Session._send without the session's lock: a step of vs.sessions[0] from
    # another thread meanwhile took the free lock and wrote its own action on the same client.pipe.
    vs = renderd.launch_many(1, [sys.executable, PEER, "no-client"], start_timeout=START_TIMEOUT, step_timeout=1.0)
    try:
        vs.sessions[0].stop_grace = 0.5
        session = vs.sessions[0]
        outcome: dict[str, BaseException] = {}

        def step() -> None:
            try:
                vs.step(["Pass"])
            except BaseException as exc:  # noqa: BLE001 - checked below
                outcome["vector"] = exc

        stepper = threading.Thread(target=step, name="vector-stepper")
        stepper.start()
        try:
            # (The player never opens client.pipe: the vector's send waits inside Session._send for its deadline.)
            wait_for(lambda: _inside_send(stepper, session), 5.0, "the vector's send to be under way")
            started = time.monotonic()
            with pytest.raises(CallOrderError, match="while thread 'vector-stepper' is inside a call of this session"):
                session.step("Pass")
            # (at once: the vector's send, which waits out its 1 s deadline, is still under way)
            assert _inside_send(stepper, session), f"refused after {time.monotonic() - started:.2f} s"
        finally:
            stepper.join(10)
        assert not stepper.is_alive()
        err = outcome.get("vector")
        assert isinstance(err, PlayerTimeout) and err.slots == [0], err
        assert "did not take its action" in str(err.failures[0])
    finally:
        vs.close()


def test_a_slots_session_closed_just_before_its_answer_is_read_is_replaced(no_leaks, launch):
    # Closed from another thread after the step's check and before it read the ready slot (where a thread switch
    # can land): the read raised "ValueError: I/O on a closed FifoChannel" and broke the vector session.
    vs = launch(2, replace_on_crash=True)
    code = renderd.VectorSession._sweep.__code__
    at = line_of(renderd.VectorSession._sweep, "if _answer_ready(slot.session):")
    closed: list[renderd.Session] = []

    def trace(frame, event, arg):
        if frame.f_code is not code:
            return None

        def line(frame, event, arg):
            if event == "line" and frame.f_lineno == at and not closed and frame.f_locals["slot"].index == 0:
                closed.append(vs.sessions[0])
                closer = threading.Thread(target=vs.sessions[0].close)
                closer.start()
                closer.join(10)
            return line

        return line

    with tracing(trace):
        result = vs.step(["Pass", "Pass"])
    assert closed and closed[0].closed
    err = result.infos[0]["error"]
    assert isinstance(err, CallOrderError) and CLOSED in str(err), err
    assert result.observations[1] is not None and "error" not in result.infos[1]
    result = vs.step(["Pass", "Pass"], wait_resets=True)
    assert result.infos[0].get("reset_complete") and vs.error is None


def _inside(thread: threading.Thread, function, session: renderd.Session) -> bool:
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code is function.__code__ and frame.f_locals.get("self") is session:
            return True
        frame = frame.f_back
    return False


def test_a_step_of_a_slots_session_under_way_when_the_vector_sends_fails_that_slot_saying_so(no_leaks, launch):
    # The vector session's send found the session PENDING with the other call's action and reported
    # "AlreadyPendingCallError: send() while an earlier action's answer is pending; call recv() first" as the slot's
    # failure: now it says the slot's session was stepped directly, and that nothing was sent to it.
    vs = launch(2, replace_on_crash=True)
    session = vs.sessions[0]
    outcome: dict[str, BaseException] = {}

    def user() -> None:
        try:
            session.step(SLEEP)
        except BaseException as exc:  # noqa: BLE001 - checked below
            outcome["user"] = exc

    stepper = threading.Thread(target=user, name="user-stepper")
    stepper.start()
    try:
        wait_for(lambda: _inside(stepper, renderd.Session._receive, session), 5.0, "the user's step to wait")
        result = vs.step(["Pass", "Pass"])
    finally:
        stepper.join(10)
    err = result.infos[0]["error"]
    assert type(err) is CallOrderError, err
    assert "slot 0's session" in str(err) and "is inside a call of its own in another thread" in str(err), err
    assert "vs.sessions[0] was stepped directly" in str(err) and "Nothing was sent to it" in str(err), err
    assert result.observations[1] is not None and "error" not in result.infos[1]
    assert isinstance(outcome.get("user"), CallOrderError)  # (its session was closed under it)
    assert vs.step(["Pass", "Pass"], wait_resets=True).infos[0].get("reset_complete")
