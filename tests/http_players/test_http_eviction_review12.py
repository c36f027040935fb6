"""Which idle connections make room for a new one when the listener is full (MAX_CONNECTIONS): never a starting
player's that has pinged and not yet posted its first frame."""

from __future__ import annotations

import time

from renderd.protocol import encode_action
from renderd.transport.http import PlayerHttpServer

from tests.helpers.http_util import DEADLINE, RawClient, connect, frame_body, request_bytes, small_server
from tests.helpers.leaks import wait_for


def _connect(server: PlayerHttpServer, clients: list, timeout: float = DEADLINE) -> RawClient:
    return connect((None, server, clients), timeout)


def _pinged(server: PlayerHttpServer, clients: list) -> RawClient:
    client = _connect(server, clients)
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")
    assert client.response().body == b"pong"
    return client


def _all_idle(server: PlayerHttpServer, count: int) -> None:
    wait_for(lambda: len(server._connections) == count and all(c.waiting_idle for c in server._connections),
             DEADLINE, f"{count} connections waiting for a request")


def _first_frame(bridge, client: RawClient) -> None:
    client.send(request_bytes(frame_body(bridge.token)))
    bridge.recv(time.monotonic() + 5.0)
    bridge.send(encode_action({"action": "Pass"}), time.monotonic() + DEADLINE)
    assert client.response().status == 200


def test_a_starting_players_pinged_connection_is_not_closed_to_make_room(no_leaks):
    # The reference player pings, then starts (loads its scene) before posting its first frame on the same
    # connection: meanwhile that connection is idle and no served player's as far as the bridge knows. It was
    # the one idle longest, so it was closed to make room, and the player failed on its first post.
    with small_server(2) as (registry, server, clients):
        bridge = registry.register(alive=lambda: True)  # a player starting: no frame posted yet
        starting = _pinged(server, clients)
        time.sleep(0.02)  # (idle_since must differ: the other is idle less long)
        other = _pinged(server, clients)  # a ping of someone else's, kept alive
        _all_idle(server, 2)
        newcomer = _pinged(server, clients)  # the listener is full: room is made
        assert other.closed_by_server()
        _first_frame(bridge, starting)
        assert bridge.error is None
        newcomer.send(b"GET /ping HTTP/1.1\r\n\r\n")
        assert newcomer.response().body == b"pong"


def test_one_pinged_connection_per_starting_player_is_kept(no_leaks):
    # A ping carries no token: a starting player is taken to own the first connection pinged after its bridge was
    # made. A ping from before that, or a later one, spares nothing; nor does any once the player has posted.
    with small_server(3) as (registry, server, clients):
        before = _pinged(server, clients)  # someone else's, before the player's bridge was made
        bridge = registry.register(alive=lambda: True)
        first = _pinged(server, clients)  # the starting player's
        second = _pinged(server, clients)  # someone else's
        _all_idle(server, 3)
        a = _pinged(server, clients)
        assert before.closed_by_server()  # idle longest, and pinged before the bridge was made
        _all_idle(server, 3)
        b = _pinged(server, clients)
        assert second.closed_by_server()  # idle longer than a, and not the first pinged after the bridge
        _first_frame(bridge, first)
        _all_idle(server, 3)
        _pinged(server, clients)  # no player starting now: the idle one longest makes room, never the player's
        assert a.closed_by_server()
        b.send(b"GET /ping HTTP/1.1\r\n\r\n")
        assert b.response().body == b"pong"
        first.send(request_bytes(frame_body(bridge.token, seq=1)))
        bridge.recv(time.monotonic() + 5.0)
        bridge.send(encode_action({"action": "Pass"}), time.monotonic() + DEADLINE)
        assert first.response().status == 200 and bridge.error is None


def test_a_full_listener_of_starting_players_refuses_a_newcomer(no_leaks):
    with small_server(1) as (registry, server, clients):
        bridge = registry.register(alive=lambda: True)
        starting = _pinged(server, clients)
        _all_idle(server, 1)
        refused = _connect(server, clients)
        refused.send(b"GET /ping HTTP/1.1\r\n\r\n")
        response = refused.response()
        assert response.status == 503 and "too many connections" in response.json()["error"]["message"]
        _first_frame(bridge, starting)
