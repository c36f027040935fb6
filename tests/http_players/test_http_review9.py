"""The players' HTTP server over real sockets: the 503 of a full server reaches the client whole (not lost to
a TCP reset), refused connections are drained for a bounded time and logged at a bounded rate, and a
connection renderd closes because its player does not read its answer is not called a hang-up, and stop()
does not wait for such an answer."""

from __future__ import annotations

import logging
import select
import socket
import threading

from renderd.transport import http as http_transport
from renderd.transport.http import PlayerBridgeRegistry, PlayerHttpServer

from tests.helpers.http_util import DEADLINE, RawClient, connect
from tests.helpers.leaks import open_fds, wait_for

_POLL_CLOSED = select.POLLHUP | select.POLLERR | select.POLLRDHUP


def _refused_answer(port: int, request: bytes) -> bytes:
    """Connect, send ``request`` at once, wait until the server has closed its end, then read everything.

    Raises ConnectionResetError when the server's close reset the connection (the answer is lost)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
    try:
        sock.sendall(request)
        poller = select.poll()
        poller.register(sock.fileno(), _POLL_CLOSED)
        assert poller.poll(DEADLINE * 1000), "the server never closed the refused connection"
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return data
            data += chunk
    finally:
        sock.close()


# -- 503: the answer of a full server ----------------------------------------------------------------------


def test_a_full_servers_503_survives_the_request_it_did_not_read(no_leaks):
    # The 503 for one connection too many was sent and the socket closed at once, with the client's request
    # unread: a close with unread bytes resets the connection, and the client saw "connection reset"
    # instead of the answer (most of the time, on loopback). The refused connection is half-closed and
    # drained (as LINGER_TIMEOUT says for every answer the server closes after) without holding up accepts.
    server = PlayerHttpServer(PlayerBridgeRegistry(), max_connections=1).start()
    first = None
    try:
        first = RawClient(server.port)
        first.send(b"GET /ping HTTP/1.1\r\n")  # the one connection allowed is taken, its request in progress
        # (an idle one would make room for the next: test_http_review11)
        wait_for(lambda: any(c.in_request for c in server._connections), DEADLINE, "the request to begin")
        for _ in range(8):
            data = _refused_answer(server.port, b"POST /train HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")
            assert data.startswith(b"HTTP/1.1 503 Service Unavailable") and b"too many connections" in data, data
        first.send(b"\r\n")  # the connection being served is unaffected
        assert first.response().body == b"pong"
    finally:
        if first is not None:
            first.close()
        server.stop()


def test_a_503_for_a_connection_no_thread_can_serve_survives_its_request(served, monkeypatch):
    real_start = threading.Thread.start
    failed = []

    def start_failing(self):
        if self.name.startswith("renderd-http-conn") and len(failed) < 4:
            failed.append(self.name)
            raise RuntimeError("can't start new thread")
        return real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start_failing)
    _, server, _ = served
    for _ in range(4):
        data = _refused_answer(server.port, b"GET /ping HTTP/1.1\r\n\r\n")
        assert data.startswith(b"HTTP/1.1 503 Service Unavailable") and b"cannot start a thread" in data, data
    client = connect(served)  # then connections are served again
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")
    assert client.response().body == b"pong"


def test_refused_connections_are_closed_when_their_client_lingers_and_at_stop(no_leaks, monkeypatch):
    # A refused client that neither reads nor closes is closed after LINGER_TIMEOUT; one still lingering
    # when the server stops is closed by stop() (no descriptor is left: no_leaks).
    monkeypatch.setattr(http_transport, "LINGER_TIMEOUT", 0.3)
    server = PlayerHttpServer(PlayerBridgeRegistry(), max_connections=0).start()
    clients = []
    try:
        before = open_fds()
        clients.append(RawClient(server.port))
        assert clients[0].response().status == 503  # (so the server has accepted it: one more descriptor)
        ours = before | {str(clients[0].sock.fileno())}
        wait_for(lambda: open_fds() == ours, DEADLINE, "the server to close the refused connection")
        monkeypatch.setattr(http_transport, "LINGER_TIMEOUT", 3600.0)
        clients.append(RawClient(server.port))
        assert clients[1].response().status == 503
        wait_for(lambda: len(server._refused) == 1, DEADLINE, "the refused connection to linger")
    finally:
        server.stop()
        for client in clients:
            client.close()
    assert not server._refused



def test_refused_connections_linger_only_up_to_a_limit(no_leaks, monkeypatch):
    # Past MAX_REFUSED_LINGERING refused connections held open at once, the next is closed at once: a flood
    # of connections cannot make the accepting thread hold a descriptor for each for LINGER_TIMEOUT.
    monkeypatch.setattr(http_transport, "LINGER_TIMEOUT", 3600.0)
    monkeypatch.setattr(http_transport, "MAX_REFUSED_LINGERING", 2)
    server = PlayerHttpServer(PlayerBridgeRegistry(), max_connections=0).start()
    clients = []
    try:
        for _ in range(2):
            clients.append(RawClient(server.port))
            assert clients[-1].response().status == 503
        wait_for(lambda: len(server._refused) == 2, DEADLINE, "two refused connections to linger")
        before = open_fds()
        clients.append(RawClient(server.port))
        assert clients[-1].response().status == 503  # still answered
        ours = before | {str(clients[-1].sock.fileno())}
        wait_for(lambda: open_fds() == ours, DEADLINE, "the third refused connection to be closed at once")
        assert len(server._refused) == 2
    finally:
        server.stop()
        for client in clients:
            client.close()


def test_refused_connections_are_logged_once_per_interval_with_a_count(caplog, no_leaks, monkeypatch):
    # Every connection over the limit logged a warning: a client reconnecting in a loop (or anyone who can
    # reach the port) wrote a log line per connection. They are logged at most once per
    # REFUSAL_LOG_INTERVAL, the next line counting the ones not logged, as refused tokens are.
    caplog.set_level(logging.WARNING, logger="renderd.transport.http")
    server = PlayerHttpServer(PlayerBridgeRegistry(), max_connections=0).start()
    try:
        for _ in range(5):
            data = _refused_answer(server.port, b"GET /ping HTTP/1.1\r\n\r\n")
            assert b" 503 " in data, data
        lines = [r.getMessage() for r in caplog.records if "refused an HTTP connection" in r.getMessage()]
        assert len(lines) == 1, lines
        monkeypatch.setattr(http_transport, "REFUSAL_LOG_INTERVAL", 0.0)
        assert b" 503 " in _refused_answer(server.port, b"GET /ping HTTP/1.1\r\n\r\n")
        wait_for(lambda: len([r for r in caplog.records if "refused an HTTP connection" in r.getMessage()]) == 2,
                 DEADLINE, "the next refusal to be logged")
        lines = [r.getMessage() for r in caplog.records if "refused an HTTP connection" in r.getMessage()]
        assert "4 more refused" in lines[1], lines
    finally:
        server.stop()


# -- who closed the connection ---------------------------------------------------------------------------


def test_an_answer_the_player_does_not_read_in_time_is_not_blamed_on_a_hang_up(served, monkeypatch):
    # The server gives up sending an answer the player does not read (REQUEST_TIMEOUT plus its size at
    # MIN_BODY_RATE) and closes the connection. The client's PlayerCrashed said "<player> closed its HTTP
    # connection", a hang-up the player never did; it says renderd closed it, and why.
    import time

    from renderd.errors import PlayerCrashed
    from renderd.protocol import encode_action
    from tests.helpers.http_util import frame_body, request_bytes

    monkeypatch.setattr(http_transport, "REQUEST_TIMEOUT", 0.3)
    monkeypatch.setattr(http_transport, "MIN_BODY_RATE", 1e12)
    registry, _, _ = served
    bridge = registry.register(name="slow reader")
    client = connect(served)
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.send(request_bytes(frame_body(bridge.token)))
    bridge.recv(time.monotonic() + DEADLINE)
    bridge.send(encode_action({"action": "Pass", "blob": "x" * (8 << 20)}), time.monotonic() + DEADLINE)
    wait_for(lambda: bridge.error is not None, DEADLINE, "the unread answer's connection to be closed")
    message = str(bridge.error)
    assert isinstance(bridge.error, PlayerCrashed), bridge.error
    assert "renderd closed the HTTP connection of slow reader" in message, message
    assert "did not read" in message and "REQUEST_TIMEOUT" in message, message


# -- stop() and an answer nobody reads --------------------------------------------------------------------


def test_stop_does_not_wait_for_an_answer_its_player_is_not_reading(no_leaks):
    # A connection blocked sending an answer its player does not read (a hung player, an action larger
    # than the socket buffers) held stop() for STOP_TIMEOUT (5 s): the first round only shut the reading
    # ends, which does not wake a send. An answer already being sent when stop() began is cut at once; the
    # 410s that stop() itself causes still get out (test_http_app's stop test).
    import time

    from renderd.protocol import encode_action
    from tests.helpers.http_util import frame_body, request_bytes

    registry = PlayerBridgeRegistry()
    server = PlayerHttpServer(registry).start()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        bridge = registry.register(name="hung player")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(DEADLINE)
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(request_bytes(frame_body(bridge.token)))
        bridge.recv(time.monotonic() + DEADLINE)
        bridge.send(encode_action({"action": "Pass", "blob": "x" * (8 << 20)}), time.monotonic() + DEADLINE)
        (connection,) = server._connections
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        assert poller.poll(DEADLINE * 1000), "the answer never started"  # (8 MiB: the rest waits in send)
        started = time.monotonic()
        server.stop()
        took = time.monotonic() - started
        assert took < http_transport.STOP_TIMEOUT / 2, f"stop() took {took:.2f} s"
        assert not connection.thread.is_alive()
    finally:
        server.stop()
        sock.close()
