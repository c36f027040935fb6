"""What an operator finds in the log when the players' HTTP server refuses a request.

Every answer of 400 or more leaves a line in the log naming the request, the connection and whose it is (a
served player's, by name), the status and why, at most once per REFUSAL_LOG_INTERVAL for each status (with a count
of the ones not logged), so that a client sending bad requests in a loop cannot flood it. Real loopback sockets.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

from renderd.protocol import encode_action
from renderd.transport import http as http_transport
from renderd.transport.http import PlayerBridgeRegistry, PlayerHttpServer

from tests.helpers.http_util import DEADLINE, RawClient, connect, frame_body, request_bytes
from tests.helpers.leaks import wait_for

LOGGER = "renderd.transport.http"


def _refusals(caplog, status: int) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.getMessage().startswith("refused") and f": {status} " in r.getMessage()]


def _head(length: int) -> bytes:
    return (b"POST /train HTTP/1.1\r\nContent-Type: multipart/form-data; boundary=x\r\n"
            b"Content-Length: %d\r\n\r\n" % length)


@pytest.fixture
def budget(monkeypatch, no_leaks):
    """A server whose strangers' bodies may hold 64 KiB at once, waiting 0.2 s for room; a connect() for it."""
    monkeypatch.setattr(http_transport, "BODY_ROOM_TIMEOUT", 0.2)
    server = PlayerHttpServer(PlayerBridgeRegistry(max_request_size=1 << 20), max_unattributed=64 * 1024).start()
    clients: list[RawClient] = []

    def connect_one() -> RawClient:
        clients.append(RawClient(server.port))
        return clients[-1]

    try:
        yield server, connect_one
    finally:
        for client in clients:
            client.close()
        server.stop()


def test_a_body_refused_for_lack_of_room_is_logged_once_per_interval(budget, caplog, monkeypatch):
    # A body refused 503 because strangers' bodies fill MAX_UNATTRIBUTED_BODY_BYTES was answered without a word in
    # the log: an operator whose players got 503s could not see why.
    caplog.set_level(logging.INFO, logger=LOGGER)
    server, connect_one = budget
    holder = connect_one()
    holder.send(_head(64 * 1024) + b"x" * 100)  # a body begun and left unfinished: it holds the whole room
    wait_for(lambda: server._held == 64 * 1024, DEADLINE, "the first body to be held")
    refused = []
    for _ in range(2):
        client = connect_one()
        client.send(_head(1000))
        assert client.response().status == 503
        refused.append(client)
    lines = _refusals(caplog, 503)
    assert len(lines) == 1, lines  # the second within REFUSAL_LOG_INTERVAL is counted, not logged
    line = lines[0]
    port = refused[0].sock.getsockname()[1]
    assert f"127.0.0.1:{port}" in line and "POST /train" in line, line  # which connection, which request
    assert "not known as a served player's" in line, line  # whose (no player's: only strangers wait for room)
    assert "1000 bytes" in line, line  # how many bytes
    assert "MAX_UNATTRIBUTED_BODY_BYTES" in line and str(64 * 1024) in line, line  # which limit
    monkeypatch.setattr(http_transport, "REFUSAL_LOG_INTERVAL", 0.0)
    client = connect_one()
    client.send(_head(2000))
    assert client.response().status == 503
    wait_for(lambda: len(_refusals(caplog, 503)) == 2, DEADLINE, "the next refusal to be logged")
    assert "2000 bytes" in _refusals(caplog, 503)[1] and "1 more refused" in _refusals(caplog, 503)[1]


@pytest.mark.parametrize("request_, status, why", [
    (b"GET /ping HTTP/1.1\r\nX-A: " + b"a" * 20000 + b"\r\n\r\n", 431, "longer than 16384 bytes"),
    (b"POST /train HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411, "chunked"),
    (b"POST /train HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", 413, "over the limit of 1048576 bytes"),
    (b"GET /ping HTTP/2.0\r\n\r\n", 505, "HTTP/2.0"),
    (b"GET /ping HTTP/1.1\r\nBad Header: x\r\n\r\n", 400, "malformed header line"),
], ids=["431", "411", "413", "505", "400"])
def test_a_request_the_server_refuses_is_logged(served, caplog, request_, status, why):
    caplog.set_level(logging.INFO, logger=LOGGER)
    client = connect(served)
    client.send(request_)
    assert client.response().status == status
    wait_for(lambda: _refusals(caplog, status), DEADLINE, f"the {status} to be logged")
    line = _refusals(caplog, status)[0]
    assert why in line and f"127.0.0.1:{client.sock.getsockname()[1]}" in line, line


def test_a_request_cut_short_by_a_half_close_is_logged(served, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    client = connect(served)
    client.send(_head(1000) + b"x" * 10)
    client.sock.shutdown(socket.SHUT_WR)
    assert client.response().status == 400
    wait_for(lambda: _refusals(caplog, 400), DEADLINE, "the 400 to be logged")
    assert "stopped after 10 of its 1000 bytes" in _refusals(caplog, 400)[0]


def test_a_refusal_on_a_players_connection_names_the_player(served, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    registry, _, _ = served
    bridge = registry.register(name="thor[7]")
    answered: list = []

    def answer() -> None:
        try:
            answered.append(bridge.recv(time.monotonic() + DEADLINE))
            bridge.send(encode_action({"action": "Pass"}), time.monotonic() + DEADLINE)
        except Exception as exc:  # (the test looks at what it got)
            answered.append(exc)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    client = connect(served)
    client.send(request_bytes(frame_body(bridge.token)))
    assert client.response().status == 200
    thread.join(DEADLINE)
    client.send(b"POST /train HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    assert client.response().status == 411
    wait_for(lambda: _refusals(caplog, 411), DEADLINE, "the 411 to be logged")
    assert "thor[7]'s" in _refusals(caplog, 411)[0], _refusals(caplog, 411)


# -- refusals by the application (the same under any WSGI server) ------------------------------------------------


def test_the_applications_refusals_are_logged_and_a_loop_of_them_is_not(served, caplog):
    # 404, 405, 400 (malformed multipart), 410 and 409 were answered without a trace in the log (only 403s and 500s
    # were logged); a client repeating one is logged once per REFUSAL_LOG_INTERVAL, the rest counted.
    caplog.set_level(logging.INFO, logger=LOGGER)
    registry, _, _ = served
    client = connect(served)
    for _ in range(5):
        client.send(b"GET /nope\x1b[2J HTTP/1.1\r\n\r\n")
        assert client.response().status == 404
    client.send(b"GET /train HTTP/1.1\r\n\r\n")
    assert client.response().status == 405
    client.send(request_bytes(b"garbage", boundary=b"other"))
    assert client.response().status == 400
    retired = registry.register(name="thor[3]")
    registry.unregister(retired)
    client.send(request_bytes(frame_body(retired.token)))
    assert client.response().status == 410
    port = client.sock.getsockname()[1]
    assert len(_refusals(caplog, 404)) == 1, _refusals(caplog, 404)
    assert f"from 127.0.0.1:{port}" in _refusals(caplog, 404)[0]
    assert "\x1b" not in _refusals(caplog, 404)[0]  # (a client's bytes are shown escaped)
    assert "GET /train" in _refusals(caplog, 405)[0] and "takes POST" in _refusals(caplog, 405)[0]
    assert "malformed multipart/form-data" in _refusals(caplog, 400)[0]
    [gone] = [r for r in caplog.records if r.getMessage().startswith("refused") and ": 410 " in r.getMessage()]
    assert gone.levelno == logging.INFO and "no longer served" in gone.getMessage()

    bridge = registry.register(name="thor[4]")
    first = connect(served)
    first.send(request_bytes(frame_body(bridge.token)))  # waits for its action
    wait_for(lambda: bridge.ready(), DEADLINE, "the first frame")
    second = connect(served)
    second.send(request_bytes(frame_body(bridge.token)))
    assert second.response().status == 409
    assert "(thor[4])" in _refusals(caplog, 409)[0] and "already waiting" in _refusals(caplog, 409)[0]
    bridge.recv(time.monotonic() + DEADLINE)
    bridge.send(encode_action({"action": "Pass"}), time.monotonic() + DEADLINE)
    assert first.response().status == 200
