"""Memory a stranger can make the HTTP listener hold.

A player's token is in its post's body, so a body must be received before renderd knows whose it is: anyone who
can connect to the listener (any local user, on 127.0.0.1) could open MAX_CONNECTIONS posts of
``max_request_size`` (256 x 256 MiB) and have renderd, as root, hold them all. Bodies on connections that are no
served player's are bounded together (``MAX_UNATTRIBUTED_BODY_BYTES``): one that does not fit waits unread, then
is answered 503. Real loopback sockets; the limit is made small so the test sends little.
"""

from __future__ import annotations

import threading
import time

import pytest

from renderd.protocol import encode_action
from renderd.transport import http as http_transport
from renderd.transport.http import PlayerBridgeRegistry, PlayerHttpServer

from tests.helpers.http_util import RawClient, frame_body, request_bytes

#: Every wait in these tests ends by this many seconds (only a hang reaches it).
DEADLINE = 20.0
BUDGET = 256 * 1024


def _deadline() -> float:
    return time.monotonic() + DEADLINE


@pytest.fixture
def small_budget(monkeypatch):
    """A server whose bodies from strangers may hold BUDGET bytes at once, waiting 0.5 s for room."""
    monkeypatch.setattr(http_transport, "MAX_UNATTRIBUTED_BODY_BYTES", BUDGET, raising=False)
    monkeypatch.setattr(http_transport, "BODY_ROOM_TIMEOUT", 0.5, raising=False)
    registry = PlayerBridgeRegistry(max_request_size=4 * BUDGET)
    server = PlayerHttpServer(registry).start()
    clients: list[RawClient] = []

    def connect() -> RawClient:
        client = RawClient(server.port, timeout=10.0)
        clients.append(client)
        return client

    try:
        yield registry, server, connect
    finally:
        for client in clients:
            client.close()
        server.stop()


def _wait_held(server: PlayerHttpServer, nbytes: int) -> None:
    """Until the server holds ``nbytes`` for strangers' bodies (at once where it keeps no such count)."""
    deadline = _deadline()
    while getattr(server, "_held", nbytes) < nbytes:
        assert time.monotonic() < deadline, "the body was never held"
        time.sleep(0.01)


def _head(length: int) -> bytes:
    return (b"POST /train HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=x\r\n"
            b"Content-Length: %d\r\n\r\n" % length)


def test_bodies_from_strangers_are_bounded_together(small_budget):
    registry, server, connect = small_budget
    holder = connect()
    holder.send(_head(BUDGET) + b"x" * 1000)  # a body begun, and left unfinished: it holds the whole budget
    _wait_held(server, BUDGET)

    late = connect()
    late.send(_head(BUDGET // 2))  # no room: refused before any of its body is read
    response = late.response()
    assert response.status == 503, response
    message = response.json()["error"]["message"]
    assert "MAX_UNATTRIBUTED_BODY_BYTES" in message and str(BUDGET // 2) in message, message
    assert late.closed_by_server()

    holder.send(b"x" * (BUDGET - 1000))  # the holder's body ends (malformed, 400) and its room is free
    assert holder.response().status == 400
    again = connect()
    again.send(_head(BUDGET // 2) + b"y" * (BUDGET // 2))
    refused = again.response()
    assert refused.status == 400, refused  # read and parsed (malformed), not refused for room
    assert server._held == 0


def test_a_served_players_post_stops_counting_once_its_token_is_known(small_budget):
    """Guard (the limit must not make a waiting player's frame hold room): a player's first frame, waiting for its
    action, and its next frame on its own connection while a stranger holds the whole budget."""
    registry, server, connect = small_budget
    bridge = registry.register()
    body = frame_body(bridge.token, width=220, height=220, seq=0)
    assert BUDGET // 2 < len(body) < BUDGET
    player = connect()
    player.send(request_bytes(body))
    bridge.recv(_deadline())  # its first frame: the post now waits for its action
    stranger = connect()
    stranger.send(request_bytes(b"z" * len(body)))  # fits only if the player's post holds nothing now
    assert stranger.response().status == 400

    answered = threading.Event()

    def answer() -> None:
        bridge.send(encode_action({"action": "Pass"}), _deadline())
        answered.set()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    assert player.response().status == 200
    thread.join(DEADLINE)
    assert answered.is_set()

    holder = connect()
    holder.send(_head(BUDGET) + b"x" * 1000)  # a stranger holds the whole budget
    _wait_held(server, BUDGET)
    player.send(request_bytes(frame_body(bridge.token, width=220, height=220, seq=1)))
    frame = bridge.recv(_deadline())  # the served player's connection is not counted: its frame arrives
    assert frame is not None
    bridge.send(encode_action({"action": "Pass"}), _deadline())
    assert player.response().status == 200
