"""The players' HTTP server over real sockets: how long a connection may stay without a request, and the
last frame of a player that exits as soon as it has sent it."""

from __future__ import annotations

import threading
import time

import pytest

from renderd.errors import PlayerCrashed
from renderd.protocol import FieldType, encode_action
from renderd.transport import http as http_transport

from tests.helpers.http_util import DEADLINE, connect, frame_body, request_bytes


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


# -- a player that exits right after posting its answer ----------------------------------------------------


def test_a_frame_sent_whole_before_the_player_exited_is_received_not_called_a_crash(served, monkeypatch):
    # A player answers its action and exits at once (its process ends while the server still reads or
    # parses what it sent). Over FIFO the client reads the answer before the end of file; over HTTP the
    # exit must not win either: the answer is delivered, and the next call is the crash.
    registry, _, _ = served
    exited = threading.Event()
    bridge = registry.register(alive=lambda: not exited.is_set())
    client = connect(served)
    client.sock.settimeout(DEADLINE)
    client.send(request_bytes(frame_body(bridge.token, seq=0)))
    assert bridge.recv(time.monotonic() + DEADLINE).fields[0][0] == FieldType.METADATA
    bridge.send(encode_action({"action": "Pass"}), time.monotonic() + DEADLINE)
    assert client.response().status == 200

    parsed = http_transport.encode_metadata

    def slow_encode(metadata):  # the server is slow to hand the last frame over (a loaded machine)
        time.sleep(0.4)
        return parsed(metadata)

    monkeypatch.setattr(http_transport, "encode_metadata", slow_encode)
    monkeypatch.setattr(http_transport, "EXIT_DRAIN_TIMEOUT", DEADLINE, raising=False)  # (a loaded machine)
    client.send(request_bytes(frame_body(bridge.token, seq=1)))
    exited.set()  # the whole answer is sent: the player exits (and its socket closes with it)
    client.close()
    message = bridge.recv(time.monotonic() + DEADLINE)
    assert message.fields[0][0] == FieldType.METADATA
    started = time.monotonic()
    with pytest.raises(PlayerCrashed):
        bridge.recv(time.monotonic() + DEADLINE)
    assert time.monotonic() - started < 2.0
