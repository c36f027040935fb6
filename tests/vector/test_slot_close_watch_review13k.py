"""A slot's session closed from another thread while a VectorSession call is about to watch its player's exit.

A player that closed client.pipe under its action and lives on is waited for in the call's poll (its pidfd), which
the call read from the player's watch (``fileno()``) after its check that the session was open. A close() of
``vs.sessions[i]`` landing in between stopped the player, whose stop had closed (set to None) the pidfd the call then
read: the call registered None in its poll and the vector session broke with a TypeError (or, reading a duplicate
about to be closed, it polled a number the stop closed). Now the call reads the watch first and checks the session
after: a close from then on keeps the number it read open for it, and a close before fails the slot, as any close
of a slot's session from outside does (CallOrderError)."""

from __future__ import annotations

import inspect
import sys
import threading
from pathlib import Path

import pytest

import renderd
import renderd.vector
from renderd.errors import CallOrderError, RenderdError
from renderd.transport import fifo
from renderd.vector import VectorSession
from tests.helpers.pause import traced_thread

pytestmark = pytest.mark.usefixtures("no_leaks")

PEER = str(Path(__file__).parent.parent / "transport" / "peer.py")
START = 30.0


def test_a_slot_closed_from_outside_as_the_call_watches_its_player_fails_that_slot(monkeypatch):
    monkeypatch.setattr(fifo, "EOF_CLASSIFY_TIMEOUT", 0.3)
    code = VectorSession._await_exit.__code__
    lines, first = inspect.getsourcelines(VectorSession._await_exit)
    body = first + next(k for k, text in enumerate(lines) if text.strip().startswith("channel = "))
    reached, release = threading.Event(), threading.Event()

    def trace(frame, event, arg):
        if frame.f_code is not code or getattr(frame.f_locals.get("slot"), "index", None) != 1:
            return None

        def line(frame, event, arg):
            if event == "line" and frame.f_lineno == body and not reached.is_set():
                reached.set()  # (the call checked that slot 1's session is open, and is about to watch its player)
                assert release.wait(30), "the test never let the call go on"
            return line

        return line

    # Each player reads its action, closes client.pipe and lives on (until it is stopped).
    vs = renderd.launch_many(2, [sys.executable, PEER, "read-close"], start_timeout=START, step_timeout=START)
    outcome: dict[str, object] = {}
    stepper = traced_thread(trace, lambda: vs.step(["Pass", "Pass"]), outcome, "step", "error", "stepper")
    try:
        session = vs.sessions[1]
        stepper.start()
        while not reached.wait(0.01) and stepper.is_alive():
            pass
        assert reached.is_set(), f"the call never waited for slot 1's player: {outcome}"
        session.close()  # (stops the player; its pipes and pidfd are left to the call)
        release.set()
        stepper.join(START)
        assert not stepper.is_alive(), "the step never returned"
        error = outcome.get("error")
        # Both slots failed (slot 0's player closed client.pipe too): one error names them; slot 1's is the close.
        assert isinstance(error, RenderdError) and not isinstance(error, CallOrderError), repr(error)
        failures = getattr(error, "failures", {})
        assert isinstance(failures.get(1), CallOrderError), failures
        assert "closed from outside the VectorSession" in str(failures[1])
    finally:
        release.set()
        stepper.join(START)
        vs.close()
