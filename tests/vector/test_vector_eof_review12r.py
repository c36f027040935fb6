"""A vector session's players that close server.pipe and stay alive: the waits for their exit overlap."""

from __future__ import annotations

import sys
from pathlib import Path

import renderd
from renderd.transport import fifo
from tests.vector.conftest import every_slot_crashes, player_kwargs

#: What the tests use for renderd.transport.fifo.EOF_CLASSIFY_TIMEOUT (1 s): how long a player that closed
#: server.pipe gets to exit before it is reported as a crash.
CLASSIFY = 0.6
#: Players: one after another they would take N x CLASSIFY.
N = 3
CLOSE = {"action": "RenderdFault", "fault": "close"}


def test_players_that_close_server_pipe_and_stay_alive_take_one_classify_wait_between_them(no_leaks, monkeypatch):
    # Each reference player sends part of its answer, closes server.pipe and stays alive. Each slot's channel waited
    # EOF_CLASSIFY_TIMEOUT for its player's exit in turn: N players took N x that. Now the waits overlap.
    monkeypatch.setattr(fifo, "EOF_CLASSIFY_TIMEOUT", CLASSIFY)
    vs = renderd.launch_many(N, **player_kwargs())
    try:
        error, took = every_slot_crashes(vs, [CLOSE] * N, "the player closed server.pipe in the middle of a message",
                                         "while renderd waited for its answer", "the player process is still running")
        for i in range(N):
            assert error.failures[i].__cause__ is not None  # (the partial message, as the channel chains it)
    finally:
        vs.close()
    # (one wait and the step's own work, with room for a busy machine; one wait per player takes N x CLASSIFY)
    assert CLASSIFY <= took < 2 * CLASSIFY, f"step() took {took:.2f} s for {N} players that closed server.pipe"


PEERS = Path(__file__).parent.parent / "transport"
#: A scripted FIFO player (tests/transport/peer.py's helpers) that reads one action, closes both its pipes and stays
#: alive until killed.
CLOSE_BOTH = f"""
import os, sys, time
sys.path.insert(0, {str(PEERS)!r})
from peer import message, read_action, write_all
out = os.open(os.environ["AI2THOR_FIFO_SERVER_PIPE_PATH"], os.O_WRONLY)
write_all(out, message(0, 32, 24))
inp = os.open(os.environ["AI2THOR_FIFO_CLIENT_PIPE_PATH"], os.O_RDONLY)
read_action(inp)
os.close(inp)
os.close(out)
time.sleep(3600)
"""


def test_players_that_close_both_pipes_and_stay_alive_take_one_classify_wait_between_them(
    no_leaks, monkeypatch, tmp_path
):
    # Closed client.pipe, then (at once) server.pipe: the wait for an answer overlapped (see test_vector_review12),
    # but the end of file that came next was received slot by slot, each channel waiting for its player's exit.
    monkeypatch.setattr(fifo, "EOF_CLASSIFY_TIMEOUT", CLASSIFY)
    script = tmp_path / "close_both.py"
    script.write_text(CLOSE_BOTH)
    vs = renderd.launch_many(N, [sys.executable, str(script)], start_timeout=30.0, step_timeout=30.0)
    try:
        _, took = every_slot_crashes(vs, ["Pass"] * N, "the player closed ", "the player process is still running")
    finally:
        vs.close()
    assert took < 2 * CLASSIFY, f"step() took {took:.2f} s for {N} players that closed both pipes"
