"""A vector send shares one deadline between its slots: players that do not take their action (they never
opened client.pipe, or they are stopped with a full pipe) cost one wait between them, not one each, and
``step(timeout=T)`` returns within T (and a stop grace) whatever the players do."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

import renderd
from renderd.errors import PlayerCrashed, PlayerTimeout
from renderd.transport import fifo
from tests.vector.conftest import START_TIMEOUT, every_slot_times_out, player_kwargs

PEER = str(Path(__file__).parent.parent / "transport" / "peer.py")
N = 3
#: Each slot's step_timeout: one send waiting that long per slot is N x this.
STEP = 1.5
#: A step_timeout the step's own timeout must keep the send from waiting.
LONG_STEP = 5.0
#: The SIGTERM grace of the failed slots (stopped together).
GRACE = 0.5
#: An action that does not fit in client.pipe (64 KiB), so a stopped player's pipe fills up.
BIG = "x" * (256 * 1024)


def _no_client(n: int, **kw) -> renderd.VectorSession:
    """Players that send their first frame and never open client.pipe."""
    vs = renderd.launch_many(n, [sys.executable, PEER, "no-client"], start_timeout=START_TIMEOUT,
                             step_timeout=STEP, **kw)
    for session in vs.sessions:
        session.stop_grace = GRACE
    return vs


def test_players_that_never_open_their_pipe_cost_one_step_timeout_not_one_each(no_leaks):
    vs = _no_client(N)
    try:
        error, took = every_slot_times_out(vs, ["Pass"] * N)
        assert "It has not opened client.pipe, or does not read it" in str(error)
        # Every slot's error names the deadline it shared with the others, and how long ago it began.
        for err in error.failures.values():
            text = str(err)
            assert "did not take its action within step_timeout = 1.5 s" in text, text
            assert float(re.search(r"\(([0-9.e+-]+) s after the call began", text)[1]) >= STEP
    finally:
        vs.close()
    assert took < STEP + GRACE + 1.0, f"step() took {took:.2f} s for {N} players that never read"


def test_step_timeout_bounds_the_send_too(no_leaks):
    vs = _no_client(N)
    try:
        error, took = every_slot_times_out(vs, ["Pass"] * N, timeout=0.3)
        assert all(e.deadline == "recv timeout" for e in error.failures.values()), error.failures
    finally:
        vs.close()
    assert took < 0.3 + GRACE + 1.0, f"step(timeout=0.3) took {took:.2f} s"


def _stopped(n_stopped: int, n: int, step_timeout: float = STEP, **kw) -> renderd.VectorSession:
    """n players of which the first n_stopped have opened client.pipe and are then stopped (SIGSTOP)."""
    vs = renderd.launch_many(n, **player_kwargs(step_timeout=step_timeout), **kw)
    vs.step(["Pass"] * n)  # every player has opened client.pipe
    for session in vs.sessions[:n_stopped]:
        session.stop_grace = GRACE
        os.kill(session.pid, signal.SIGSTOP)
    return vs


def test_stopped_players_with_a_full_pipe_are_bounded_by_the_step_timeout(no_leaks):
    # A long step_timeout of their own (never reached when the step's timeout holds): a send that waited one per slot
    # would take N x 5 s, one that waited one in all 5 s, either far beyond the bound below, which leaves a busy
    # machine seconds for the stop (SIGTERM, grace, SIGKILL) of the stopped players.
    vs = _stopped(N, N, step_timeout=LONG_STEP)
    try:
        error, took = every_slot_times_out(vs, [{"action": "Pass", "padding": BIG}] * N, timeout=0.3)
        assert "did not take its action within the recv timeout of 0.3 s" in str(error)
    finally:
        vs.close()
    assert took < 0.3 + GRACE + 3.0 < LONG_STEP, f"step(timeout=0.3) took {took:.2f} s for {N} stopped players"


def test_a_healthy_slot_after_stopped_ones_still_steps(no_leaks):
    # The stopped players use up the shared step_timeout; the last slot's action fits in its pipe, so it is
    # still written, and its answer has its own step_timeout.
    vs = _stopped(N, N + 1, replace_on_crash=True)
    try:
        started = time.monotonic()
        out = vs.step([{"action": "Pass", "padding": BIG}] * N + ["MoveAhead"])
        took = time.monotonic() - started
        assert out.observations[N] is not None and out.observations[N].metadata["lastAction"] == "MoveAhead"
        assert [i.get("error_type") for i in out.infos[:N]] == ["PlayerTimeout"] * N
    finally:
        vs.close()
    assert took < STEP + 1.0, f"step() took {took:.2f} s for {N} stopped players"


def test_reset_timeout_bounds_the_reset_actions_sent(no_leaks):
    vs = _no_client(N)
    try:
        started = time.monotonic()
        with pytest.raises(PlayerTimeout) as info:
            vs.reset(scene="FloorPlan1", timeout=0.3)
        took = time.monotonic() - started
        assert info.value.slots == list(range(N))
    finally:
        vs.close()
    assert took < 0.3 + GRACE + 1.0, f"reset(timeout=0.3) took {took:.2f} s"


def test_a_player_that_closes_client_pipe_is_a_crash_at_once_not_at_its_step_timeout(no_leaks, monkeypatch):
    # It reads the action and closes client.pipe without answering (it will read no other): the vector
    # session reports it within the channel's grace (EOF_CLASSIFY_TIMEOUT, 1 s; 0.2 s here, as no answer
    # ever comes), as a single session does, not after 30 s.
    monkeypatch.setattr(fifo, "EOF_CLASSIFY_TIMEOUT", 0.2)
    vs = renderd.launch_many(2, [sys.executable, PEER, "read-close"], start_timeout=START_TIMEOUT,
                             step_timeout=30.0)
    try:
        started = time.monotonic()
        with pytest.raises(PlayerCrashed) as info:
            vs.step(["Pass", "Pass"])
        took = time.monotonic() - started
        assert info.value.slots == [0, 1]
        assert "closed client.pipe and sent no answer" in str(info.value.failures[0])
    finally:
        vs.close()
    assert took < 15.0, f"step() took {took:.1f} s to notice players that closed client.pipe"
