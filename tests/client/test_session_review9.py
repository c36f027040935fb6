"""Session, review 9: what a session accepts as its step deadline. Real processes, real FIFOs; nothing may be
left behind (``no_leaks``)."""

from __future__ import annotations

import pytest

import renderd
from renderd.client import Session, SessionState
from renderd.config import ArgumentError

from .conftest import START, peer_argv

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
