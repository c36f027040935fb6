"""HTTP conformance and clean shutdown of the players' server and the FIFO pump, over real sockets and FIFOs:
an empty body, blank lines before a request line, an answer that must survive the connection's close,
a pump stopped without a time limit."""

from __future__ import annotations

import socket

import pytest

from renderd.transport import http as http_transport
from renderd.transport.fifo import FifoPair
from renderd.transport.http import FifoPump, PlayerBridgeRegistry

from tests.helpers.http_util import DEADLINE, connect, request_bytes
from tests.helpers.leaks import wait_for


# -- Content-Length: 0 ----------------------------------------------------------------------------------


def test_content_length_zero_is_an_empty_body_not_a_missing_length(served):
    # RFC 9110 15.5.12: 411 is for a request without a Content-Length. "Content-Length: 0" is an empty
    # body: /train refuses it as malformed multipart (400), saying so, and the connection stays usable.
    client = connect(served)
    client.send(request_bytes(b""))
    response = client.response()
    assert response.status == 400, response
    assert "empty" in response.json()["error"]["message"]
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")
    assert client.response().body == b"pong"
    client.send(b"POST /train HTTP/1.1\r\n\r\n")  # no Content-Length at all: still 411
    assert client.response().status == 411


# -- blank lines before a request line (RFC 9112 2.2) ---------------------------------------------------


def test_blank_lines_before_a_request_line_are_ignored_on_a_keep_alive_connection(served):
    client = connect(served)
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")
    assert client.response().body == b"pong"
    for blank in (b"\r\n", b"\r\n\r\n", b"\r\n" * 10):
        client.send(blank + b"GET /ping HTTP/1.1\r\n\r\n")
        response = client.response()
        assert (response.status, response.body) == (200, b"pong"), (blank, response)
    client.send(b"\r")  # a blank line split between two reads
    client.send(b"\nGET /ping HTTP/1.1\r\n\r\n")
    assert client.response().body == b"pong"


def test_a_blank_line_after_a_request_leaves_the_connection_idle(served, monkeypatch):
    # Some clients end a POST body with an extra CRLF. That line is no request begun: the connection is
    # idle until the next request line (IDLE_TIMEOUT), not a request head that must arrive within
    # REQUEST_TIMEOUT (a 408 and a closed connection for a player whose next frame took that long).
    monkeypatch.setattr(http_transport, "REQUEST_TIMEOUT", 0.2)
    client = connect(served)
    client.send(b"GET /ping HTTP/1.1\r\n\r\n\r\n")
    assert client.response().body == b"pong"
    client.sock.settimeout(1.0)  # five REQUEST_TIMEOUTs: the connection must stay open
    assert not client.closed_by_server(), client.buf
    client.sock.settimeout(DEADLINE)
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")
    assert client.response().body == b"pong"


def test_a_flood_of_blank_lines_is_refused(served):
    client = connect(served)
    client.send(b"\r\n" * (http_transport.MAX_HEAD_SIZE // 2 + 10))
    assert client.response().status == 400
    assert client.closed_by_server()


# -- an error answer must not be lost to a reset ----------------------------------------------------------


def test_the_last_answer_survives_unread_request_bytes(served, monkeypatch):
    # The server refuses a request and closes while bytes the client sent are still unread. A close()
    # with unread data sends a TCP reset, which discards the answers still queued in the server's send
    # buffer: the client read its earlier answers, then "connection reset", never the refusal. The
    # server must half-close, drain what the client sent (for a bounded time), then close.
    monkeypatch.setattr(http_transport, "LINGER_TIMEOUT", 0.5, raising=False)  # (absent before the fix)
    _, server, _ = served
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # answers pile up in the server's send buffer
    sock.settimeout(DEADLINE)
    try:
        sock.connect(("127.0.0.1", server.port))
        pings = 300
        sock.sendall(b"GET /ping HTTP/1.1\r\n\r\n" * pings + b"BROKEN\r\n\r\n" + b"j" * 100_000)
        wait_for(lambda: not server._connections, DEADLINE, "the server to close the connection")
        data = b""
        while True:
            chunk = sock.recv(65536)  # ConnectionResetError here is the defect
            if not chunk:
                break
            data += chunk
    finally:
        sock.close()
    assert data.count(b"pong") == pings
    assert b"HTTP/1.1 400 Bad Request" in data and b"malformed request line" in data


# -- FifoPump.stop without a time limit --------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [float("inf"), 1e300, float("nan"), -1.0, None])
def test_pump_stop_takes_any_timeout(timeout):
    # stop(inf) raised OverflowError (a lock takes no timeout that large) and stop(nan) ValueError,
    # leaving the pump running; inf (or None) waits without a limit, NaN or a negative one not at all.
    registry = PlayerBridgeRegistry()
    pair = FifoPair.create()
    pump = None
    try:
        bridge = registry.register(name="stopped player")
        pump = FifoPump(bridge, pair.server_path, pair.client_path).start()
        pump.stop(timeout)
        if timeout is None or timeout > 0:
            assert not pump.running
        wait_for(lambda: not pump.running, DEADLINE, "the pump's thread to end")
        assert pump.reason == "stopped"
    finally:
        if pump is not None and pump.running:
            pump.stop()
        registry.close()
        pair.remove()


# -- an answer the player does not read ------------------------------------------------------------------


def test_an_answer_the_player_never_reads_closes_its_connection_in_bounded_time(served, monkeypatch):
    # The answer to a post (the next action) is sent with REQUEST_TIMEOUT plus its size at MIN_BODY_RATE,
    # not with the timeout the request's last read left on the socket (IDLE_TIMEOUT, an hour, when the
    # request arrived in one read): a player that reads nothing held a connection thread that long.
    import time

    from renderd.errors import PlayerCrashed
    from renderd.protocol import encode_action
    from tests.helpers.http_util import frame_body

    monkeypatch.setattr(http_transport, "REQUEST_TIMEOUT", 0.3)
    monkeypatch.setattr(http_transport, "MIN_BODY_RATE", 1e12)
    registry, _, _ = served
    bridge = registry.register()
    client = connect(served)
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.send(request_bytes(frame_body(bridge.token)))
    bridge.recv(time.monotonic() + DEADLINE)
    big = {"action": "Pass", "blob": "x" * (8 << 20)}  # far more than the socket buffers hold
    started = time.monotonic()
    try:
        bridge.send(encode_action(big), time.monotonic() + DEADLINE)
    except PlayerCrashed:
        pass
    wait_for(lambda: bridge.error is not None, DEADLINE, "the unread answer's connection to be closed")
    assert isinstance(bridge.error, PlayerCrashed), bridge.error
    assert time.monotonic() - started < DEADLINE
