"""Session, review 9: what a session accepts as its step deadline, and copies of a session. Real processes,
real FIFOs; nothing may be left behind (``no_leaks``)."""

from __future__ import annotations

import copy
import gc
import pickle
import time

import pytest

import renderd
from renderd.client import Session, SessionState
from renderd.config import ArgumentError

from .conftest import START, blocked_in_poll, peer_argv

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_a_bad_step_timeout_is_refused_when_set_and_the_session_keeps_its_deadline():
    # session.step_timeout "may be changed between steps", but anything was taken: inf had the next step on a
    # hung player wait for ever (poll's longest wait, 24 days), -1, 0 or NaN broke the session at its next
    # step with a PlayerTimeout "within step_timeout = -1 s", None or "5" raised a bare TypeError from
    # inside send(). Like launch()'s step_timeout, it is an ArgumentError (a ValueError) at once, naming it.
    with renderd.launch(peer_argv(), start_timeout=START, step_timeout=20) as session:
        for bad in (float("inf"), float("nan"), -1, 0, None, "5", True):
            with pytest.raises(ArgumentError) as info:
                session.step_timeout = bad
            assert info.value.key == "step_timeout"
            assert session.step_timeout == 20.0
        session.step_timeout = 7  # a good one is taken, as a float
        assert session.step_timeout == 7.0 and isinstance(session.step_timeout, float)
        assert session.step("Pass").sequence_id == 1 and session.state is SessionState.READY


def test_a_session_built_with_a_bad_step_timeout_is_refused():
    class NoChannel:
        def close(self):
            pass

    with pytest.raises(ArgumentError, match="step_timeout"):
        Session(NoChannel(), step_timeout=float("nan"))


def test_a_session_cannot_be_copied_and_a_copy_attempt_leaves_it_working():
    # copy.copy(session) made a second Session sharing the channel and the player, whose garbage collection
    # closed them (its __del__), so the original's next step failed (its pipes closed, its player stopped);
    # pickle and deepcopy failed with "cannot pickle memoryview objects", which names nothing of renderd.
    # Each is a TypeError saying that a session is its player's pipes and process, and the session goes on.
    with renderd.launch(peer_argv(), start_timeout=START) as session:
        for how, copier in (("copy", copy.copy), ("deepcopy", copy.deepcopy), ("pickle", pickle.dumps)):
            refused: TypeError | None = None
            try:
                copier(session)  # (a copy, if one is made, is dropped at once)
            except TypeError as exc:
                refused = exc
            gc.collect()
            assert session.step("Pass") and session.state is SessionState.READY, how
            assert refused is not None, f"{how} of a session succeeded"
            assert "Session" in str(refused) and "pipes" in str(refused), str(refused)


def test_a_step_or_reset_out_of_order_is_named_as_the_call_made():
    # step() and reset() on a closed, broken or pending session said "send() on a closed session", "send()
    # while an earlier action's answer is pending": a call the program never made. Each names its own call.
    from renderd.errors import AlreadyPendingCallError, CallOrderError

    with renderd.launch(peer_argv(), start_timeout=START) as session:
        session.send("Pass")
        for name, call in (("step()", lambda: session.step("Pass")), ("reset()", session.reset)):
            with pytest.raises(AlreadyPendingCallError, match=rf"^{name[:-2]}\(\) while .* call recv\(\) first"):
                call()
        assert session.recv().sequence_id == 1  # (the pending answer is still there)
    for name, call in (("step()", lambda: session.step("Pass")), ("reset()", session.reset)):
        with pytest.raises(CallOrderError, match=rf"^{name[:-2]}\(\) on a closed session"):
            call()
    with renderd.launch(peer_argv("wrong-seq"), start_timeout=START) as session:
        with pytest.raises(renderd.ProtocolError):
            session.step("Pass")
        for name, call in (("step()", lambda: session.step("Pass")), ("reset()", session.reset)):
            with pytest.raises(CallOrderError, match=rf"^{name[:-2]}\(\) on a broken session"):
                call()


def test_a_step_interrupted_by_ctrl_c_leaves_a_session_that_says_so():
    # Ctrl-C while a step waits for its answer breaks the session (the stream may be half-read). The next call
    # said "an earlier call failed with KeyboardInterrupt: . Close this session ...": it now says that the
    # earlier call was interrupted, and what to do.
    import os
    import signal
    import threading

    from renderd.errors import CallOrderError

    with renderd.launch(peer_argv(), start_timeout=START, step_timeout=30) as session:
        main = threading.main_thread()

        def interrupt():
            deadline = time.monotonic() + START
            while not blocked_in_poll(main) and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)

        interrupter = threading.Thread(target=interrupt)
        interrupter.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                session.step("HalfThenHang")
        finally:
            interrupter.join(START)
        assert session.state is SessionState.BROKEN
        with pytest.raises(CallOrderError) as info:
            session.step("Pass")
        text = str(info.value)
        assert "HalfThenHang" in text and "interrupted" in text and "KeyboardInterrupt" in text, text
        assert ": ." not in text and "Close this session" in text, text
