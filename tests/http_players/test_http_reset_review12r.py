"""A connection reset between requests by a player whose process renderd watches: the process tells whether the
player is gone (and how it ended), not the reset."""

from __future__ import annotations

import os
import socket
import struct
import sys
import time

import pytest

from renderd.errors import PlayerCrashed
from renderd.process import PlayerProcess
from renderd.protocol import encode_action

from tests.helpers.http_util import DEADLINE, connect, frame_body, request_bytes
from tests.helpers.leaks import wait_for


def _abort(sock: socket.socket) -> None:
    """Close ``sock`` abortively: a reset (RST), not an end of file."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_a_live_watched_player_that_resets_its_idle_connection_posts_on(no_leaks, served):
    # HTTP lets a client close an idle connection at any time, and a client may close it abortively (SO_LINGER 0,
    # as some do to keep no TIME_WAIT): while the watched process lives, that is no crash. Before, the reset failed
    # the stream ("is gone ... its host restarted"), and the daemon stopped the player as crashed.
    registry, server, _ = served
    bridge = registry.register(name="live player", alive=lambda: True)
    first = connect(served)
    first.send(request_bytes(frame_body(bridge.token, seq=1)))
    bridge.recv(time.monotonic() + DEADLINE)
    bridge.send(encode_action({"action": "Pass"}), time.monotonic() + DEADLINE)
    assert first.response().status == 200
    _abort(first.sock)
    wait_for(lambda: not server._connections, DEADLINE, "the reset connection to be closed")
    assert bridge.error is None, bridge.error
    second = connect(served)
    second.send(request_bytes(frame_body(bridge.token, seq=2)))
    message = bridge.recv(time.monotonic() + DEADLINE)
    assert message is not None
    bridge.send(encode_action({"action": "Pass"}), time.monotonic() + DEADLINE)
    assert second.response().status == 200


# Posts one frame and exits (code 3) without reading its answer: closing a socket with unread data resets it.
EXIT_UNREAD = r"""
import select, socket, sys
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
sock.sendall(sys.stdin.buffer.read())
select.select([sock], [], [], 20)  # the answer has arrived: leave it unread
sys.exit(3)
"""


def test_a_watched_player_that_exits_with_its_answer_unread_is_reported_by_its_exit(no_leaks, served, tmp_path):
    registry, server, _ = served
    bridge = registry.register(name="exiting player")
    body = tmp_path / "frame"
    body.write_bytes(request_bytes(frame_body(bridge.token)))
    log = tmp_path / "player.log"
    # (PlayerProcess.spawn gives the player /dev/null as stdin: the script opens the request's file as its stdin)
    proc = PlayerProcess.spawn(
        [sys.executable, "-c", f"import os; os.dup2(os.open({str(body)!r}, os.O_RDONLY), 0)\n{EXIT_UNREAD}",
         str(server.port)],
        None, str(log),
    )
    try:
        bridge.attach(proc)
        bridge.recv(time.monotonic() + DEADLINE)
        bridge.send(encode_action({"action": "Pass"}), time.monotonic() + DEADLINE)
        assert proc.wait(DEADLINE) == 3
        wait_for(lambda: not server._connections, DEADLINE, "the player's connection to be closed")
        with pytest.raises(PlayerCrashed) as info:
            bridge.recv(time.monotonic() + DEADLINE)
        message = str(info.value)
        # Its exit, not a reset blamed on a restarted host
        assert "exited" in message and "exit code 3" in message, message
        assert "reset" not in message and "restarted" not in message, message
    finally:
        proc.stop(1.0)
        if os.path.exists(log):
            os.unlink(log)


def test_an_unwatched_players_connection_reset_between_requests_fails_its_stream(no_leaks, served):
    # With no process watched (an embedder's bridge for a remote player), a reset is all there is to tell that the
    # player is gone (say its host restarted): the stream fails naming the player, the peer and the reset.
    registry, server, _ = served
    bridge = registry.register(name="remote player")
    client = connect(served)
    client.send(request_bytes(frame_body(bridge.token)))
    bridge.recv(time.monotonic() + DEADLINE)
    bridge.send(encode_action({"action": "Pass"}), time.monotonic() + DEADLINE)
    assert client.response().status == 200
    peer = f"127.0.0.1:{client.sock.getsockname()[1]}"
    _abort(client.sock)
    with pytest.raises(PlayerCrashed) as info:
        bridge.recv(time.monotonic() + DEADLINE)
    message = str(info.value)
    assert "remote player is gone" in message and peer in message and "ECONNRESET" in message, message
