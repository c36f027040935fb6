"""The players' HTTP server against connections that never send a request, over real sockets."""

from __future__ import annotations

import time

from renderd.transport import http as http_transport

from tests.helpers.http_util import DEADLINE, connect


def test_a_connection_that_never_sends_a_request_is_closed_after_first_request_timeout(served, monkeypatch):
    # A connection held open without a request counts against MAX_CONNECTIONS. Were it idle for
    # IDLE_TIMEOUT (an hour) like a keep-alive connection between requests, 256 of them would shut every
    # player out for an hour; a new connection must begin its first request within FIRST_REQUEST_TIMEOUT.
    monkeypatch.setattr(http_transport, "FIRST_REQUEST_TIMEOUT", 0.3, raising=False)
    silent = connect(served)
    started = time.monotonic()
    silent.sock.settimeout(DEADLINE)
    assert silent.closed_by_server()
    assert time.monotonic() - started < DEADLINE / 2


def test_a_keep_alive_connection_that_served_a_request_is_not_held_to_the_first_request_timeout(served, monkeypatch):
    monkeypatch.setattr(http_transport, "FIRST_REQUEST_TIMEOUT", 0.2)
    client = connect(served)
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")
    assert client.response().body == b"pong"
    client.sock.settimeout(1.0)  # five FIRST_REQUEST_TIMEOUTs: the connection must stay open (IDLE_TIMEOUT)
    assert not client.closed_by_server(), client.buf
    client.sock.settimeout(DEADLINE)
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")
    assert client.response().body == b"pong"
