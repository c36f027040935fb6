"""A client that opens client.pipe and closes server.pipe right after is not taken for one that left without
opening client.pipe: the player's open of client.pipe, completing in its thread, is given time to say so (it
exited 0, "without opening client.pipe", when the closed server.pipe was seen first), and the player then
meets the closed server.pipe when it answers (exit 1, EPIPE)."""

from __future__ import annotations

import os

from tests.helpers.fifo_driver import PlayerProcess

HANG = 15.0  # seconds: catches a hang only
ROUNDS = 15


def test_open_then_close_at_once_is_an_epipe_every_time(tmp_path):
    for i in range(ROUNDS):
        directory = tmp_path / str(i)
        directory.mkdir()
        with PlayerProcess(directory, ["-screen-width", "8", "-screen-height", "8"]) as player:
            player.recv_event()
            player.open_client()
            os.close(player.server_fd)  # at once: the player's open of client.pipe may not have returned yet
            player.server_fd = None
            player.send("Pass")
            assert player.wait(HANG) == 1, player.log_text()
            assert "without opening client.pipe" not in player.log_text()
