"""Players that do not answer and do not exit on SIGTERM (stopped with SIGSTOP here, as a player stuck in a
driver is): the vector session stops them all together, so a call takes one stop grace, not one per slot."""

from __future__ import annotations

import os
import signal
import time

import pytest

import renderd
from renderd.errors import PlayerTimeout
from tests.vector.conftest import player_kwargs

N = 4
#: Each session's SIGTERM grace in these tests (the default is 5 s).
GRACE = 1.0
#: Stopping N hung players one after another takes N x GRACE; together, GRACE and some scheduling.
TOGETHER_WITHIN = GRACE + 1.5


def _stopped_players() -> renderd.VectorSession:
    vs = renderd.launch_many(N, **player_kwargs())
    vs.step(["Pass"] * N)  # every player has opened client.pipe: a send only writes
    for session in vs.sessions:
        session.stop_grace = GRACE
        os.kill(session.pid, signal.SIGSTOP)
    return vs


def test_close_stops_hung_players_together(no_leaks):
    vs = _stopped_players()
    try:
        started = time.monotonic()
        vs.close()
        took = time.monotonic() - started
    finally:
        vs.close()
    assert took < TOGETHER_WITHIN, f"close() took {took:.2f} s for {N} hung players"


def test_a_recv_timeout_stops_hung_players_together(no_leaks):
    vs = _stopped_players()
    try:
        started = time.monotonic()
        with pytest.raises(PlayerTimeout) as info:
            vs.step(["Pass"] * N, timeout=0.2)
        took = time.monotonic() - started
        assert info.value.slots == list(range(N))
        assert all(s.closed for s in vs.sessions)
    finally:
        vs.close()
    assert took < 0.2 + TOGETHER_WITHIN, f"step(timeout=0.2) took {took:.2f} s for {N} hung players"
