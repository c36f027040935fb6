"""The FIFO link against a client that leaves or misbehaves at the pipe level (real player processes)."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.helpers.fifo_driver import PlayerProcess

#: Catches a hang only: a player that notices its client is gone exits within a second here.
HANG = 15.0


def _ended(player: PlayerProcess) -> int:
    try:
        return player.wait(HANG)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the player was still alive {HANG} s after its client left; log:\n{player.log_text()}")


def test_client_that_closes_server_pipe_before_opening_client_pipe_ends_the_player(tmp_path):
    # A client that reads the first message and leaves (or dies) without ever opening client.pipe: nobody
    # will open it, so a player blocked in open(client.pipe) would wait forever.
    with PlayerProcess(tmp_path, ["-screen-width", "32", "-screen-height", "32"]) as player:
        first = player.recv_event()
        assert first.sequence_id == 0
        os.close(player.server_fd)
        player.server_fd = None
        assert _ended(player) == 0
        log = player.log_text()
        assert "the client closed server.pipe without opening client.pipe after 0 step(s); exiting" in log


def test_client_that_keeps_server_pipe_open_is_waited_for(tmp_path):
    # Guard (already right before): a client that holds server.pipe open and opens client.pipe late is served.
    with PlayerProcess(tmp_path, ["-screen-width", "32", "-screen-height", "32"]) as player:
        player.recv_event()
        with pytest.raises(subprocess.TimeoutExpired):
            player.wait(0.5)  # still waiting for client.pipe
        player.open_client()
        event = player.step("Pass")
        assert event.metadata["lastActionSuccess"] is True
        player.close_client_pipe()
        assert _ended(player) == 0


def test_sigterm_while_waiting_for_client_pipe_is_still_a_clean_exit(tmp_path):
    # Guard (already right before): the wait that now also watches server.pipe still ends on SIGTERM.
    with PlayerProcess(tmp_path, ["-screen-width", "32", "-screen-height", "32"]) as player:
        player.recv_event()
        assert player.terminate(HANG) == 0
        assert "received SIGTERM; exiting" in player.log_text()
