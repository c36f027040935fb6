"""The players' HTTP server over real sockets: how long a connection may stay without a request."""

from __future__ import annotations

import time

from renderd.transport import http as http_transport

from tests.helpers.http_util import DEADLINE, connect


def _trickle_blank_lines(client, seconds: float, every: float = 0.1) -> float | None:
    """Send an empty line (CRLF) every ``every`` s for ``seconds``; how long until the server closed the
    connection (None if it stayed open)."""
    started = time.monotonic()
    client.sock.settimeout(every)
    while time.monotonic() - started < seconds:
        try:
            client.send(b"\r\n")
        except OSError:  # (a reset: the server closed while we sent)
            return time.monotonic() - started
        if client.closed_by_server():
            return time.monotonic() - started
    return None


def test_blank_lines_do_not_hold_a_new_connection_past_the_first_request_timeout(served, monkeypatch):
    # Empty lines before a request line are ignored (RFC 9112 2.2): they begin no request, so a connection
    # that sends only them has not begun its first request and is closed FIRST_REQUEST_TIMEOUT after it was
    # accepted, however often they come.
    monkeypatch.setattr(http_transport, "FIRST_REQUEST_TIMEOUT", 0.4)
    client = connect(served)
    closed_after = _trickle_blank_lines(client, 2.0)
    assert closed_after is not None, "blank lines kept the connection open past FIRST_REQUEST_TIMEOUT"
    assert closed_after < 1.5


def test_blank_lines_do_not_hold_an_idle_keep_alive_connection_past_the_idle_timeout(served, monkeypatch):
    monkeypatch.setattr(http_transport, "IDLE_TIMEOUT", 0.4)
    client = connect(served)
    client.sock.settimeout(DEADLINE)
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")
    assert client.response().body == b"pong"
    closed_after = _trickle_blank_lines(client, 2.0)
    assert closed_after is not None, "blank lines kept an idle connection open past IDLE_TIMEOUT"
    assert closed_after < 1.5


def test_a_request_begun_before_the_idle_deadline_is_served(served, monkeypatch):
    # The idle deadline ends the wait for a request line, never a request already begun.
    monkeypatch.setattr(http_transport, "IDLE_TIMEOUT", 0.3)
    client = connect(served)
    client.sock.settimeout(DEADLINE)
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")
    assert client.response().body == b"pong"
    client.send(b"\r\nGET /pi")
    time.sleep(0.5)  # past the idle deadline, inside the request (REQUEST_TIMEOUT)
    client.send(b"ng HTTP/1.1\r\n\r\n")
    assert client.response().body == b"pong"
