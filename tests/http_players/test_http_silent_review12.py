"""Connections that never send a byte cannot shut players out of a full listener (MAX_CONNECTIONS)."""

from __future__ import annotations

import time

from renderd.protocol import encode_action
from renderd.transport.http import PlayerHttpServer

from tests.helpers.http_util import DEADLINE, RawClient, connect, frame_body, request_bytes, small_server
from tests.helpers.leaks import wait_for


def _connect(server: PlayerHttpServer, clients: list, timeout: float = DEADLINE) -> RawClient:
    return connect((None, server, clients), timeout)


def _all_idle(server: PlayerHttpServer, count: int) -> None:
    wait_for(lambda: len(server._connections) == count and all(c.waiting_idle for c in server._connections),
             DEADLINE, f"{count} connections waiting for a request")


def test_connections_that_never_send_a_byte_give_way_to_a_player(no_leaks):
    # A connection that never begins a request is closed after FIRST_REQUEST_TIMEOUT (60 s); meanwhile, with the
    # listener full of them, each new one takes the place of the one silent longest: they cannot shut players out.
    with small_server(3) as (registry, server, clients):
        silent = []
        for _ in range(3):
            silent.append(_connect(server, clients, timeout=0.5))
            time.sleep(0.01)
        _all_idle(server, 3)
        bridge = registry.register(alive=lambda: True)
        player = _connect(server, clients)
        player.send(request_bytes(frame_body(bridge.token)))
        bridge.recv(time.monotonic() + 5.0)
        bridge.send(encode_action({"action": "Pass"}), time.monotonic() + DEADLINE)
        assert player.response().status == 200
        assert silent[0].closed_by_server()
        assert not silent[1].closed_by_server() and not silent[2].closed_by_server()  # (each waits its 0.5 s)
