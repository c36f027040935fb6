"""The control socket's server (renderd.daemon.service._ControlServer) and client (ControlClient) against peers that
hold connections: idle ones, ones that trickle a request or an answer in, ones that shut their sending side, and
the daemon stopping under waiting requests. Real unix sockets: the server in-process, or a real daemon."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from typing import Any, Iterator

import pytest

from renderd.daemon import service
from renderd.daemon.client import ControlClient
from renderd.errors import LeaseError, RenderdError

from tests.daemon.conftest import fast_config, wait_for

#: The read deadline these tests give the server (seconds), instead of the daemon's.
READ_TIMEOUT = 1
#: A player that never sends its first frame (within the fast configuration's start_timeout, 20 s): lease requests
#: for it wait. (An environment of instances = 0 refuses them at once.)
NEVER_READY = '["/bin/sh", "-c", "exec sleep 60"]'


def _waiting_daemon(daemon):
    """A daemon whose one player never becomes ready, once it answers."""
    d = daemon(fast_config(executable=NEVER_READY), ready=False)
    wait_for(d.health, 20, "the daemon to answer")
    return d


def _app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    if environ["PATH_INFO"] == "/slow":  # a request served for longer than the read deadline (a lease that waits)
        time.sleep(READ_TIMEOUT * 2.5)
    body = json.dumps({"status": "ready", "path": environ["PATH_INFO"]}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


@pytest.fixture
def control_server(tmp_path, monkeypatch) -> Iterator[service._ControlServer]:
    monkeypatch.setattr(service, "API_READ_TIMEOUT", READ_TIMEOUT, raising=False)
    server = service._ControlServer(_app, str(tmp_path / "renderd.sock"), 2)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(path)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(4096) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        sock.setblocking(True)


def test_idle_and_trickling_connections_never_keep_the_control_socket_from_answering(control_server):
    # Every connection the socket takes, held by clients that send nothing, half a request, or a request one
    # byte at a time (which keeps a connection "active" for ever when only silence counts): the server drops
    # each once it has had the read deadline to send a whole request, so `renderd status` gets in.
    path = control_server.path
    limit = control_server.server.adj.connection_limit - 2  # (its listening socket and wake-up trigger count)
    held: list[socket.socket] = []
    trickling: list[socket.socket] = []
    stop = threading.Event()
    try:
        for i in range(limit):
            sock = _connect(path)
            held.append(sock)
            if i % 3 == 1:
                sock.sendall(b"POST /v1/environments/demo/leases HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{")
            elif i % 3 == 2:
                trickling.append(sock)

        def trickle() -> None:
            request = b"GET /v1/health HTTP/1.1\r\nHost: localhost\r\nX-Padding: " + b"a" * 4000
            for i in range(len(request)):
                for sock in trickling:
                    try:
                        sock.send(request[i:i + 1])
                    except OSError:
                        pass
                if stop.wait(0.1):
                    return

        threading.Thread(target=trickle, daemon=True).start()
        started = time.monotonic()
        health = ControlClient(path, timeout=READ_TIMEOUT + 4).health()
        assert health["status"] == "ready"
        assert time.monotonic() - started < READ_TIMEOUT + 4
        wait_for(lambda: all(_closed_by_server(s) for s in held), 5, "every held connection to be closed")
    finally:
        stop.set()
        for sock in held:
            sock.close()


def test_a_request_being_served_is_never_cut_by_the_read_deadline(control_server):
    # A lease request waits for a player for as long as its timeout: its connection is served, not idle.
    with _connect(control_server.path) as sock:
        sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while b'"/slow"' not in data:
            chunk = sock.recv(4096)
            assert chunk, f"the server closed a connection whose request it was serving: {data!r}"
            data += chunk
        assert data.startswith(b"HTTP/1.1 200")


def test_a_keep_alive_connection_serves_requests_then_is_closed_once_idle(control_server):
    with _connect(control_server.path) as sock:
        for _ in range(2):
            sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while b'"ready"' not in data:
                chunk = sock.recv(4096)
                assert chunk
                data += chunk
        started = time.monotonic()
        sock.settimeout(READ_TIMEOUT + 4)
        assert sock.recv(4096) == b""  # end of file: closed once idle for the read deadline
        assert time.monotonic() - started < READ_TIMEOUT + 3


def test_lease_requests_waiting_when_the_daemon_stops_get_its_answer_not_a_cut_connection(daemon):
    # The daemon answers each waiting request "the daemon is stopping" (503): the control socket's server must
    # hand those answers over before it closes the connections, not drop them half-sent.
    d = _waiting_daemon(daemon)
    errors: list[BaseException] = []
    waiting = 8

    def lease() -> None:
        try:
            d.client.lease("demo", timeout=20)
        except RenderdError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=lease, daemon=True) for _ in range(waiting)]
    for t in threads:
        t.start()
    wait_for(lambda: d.client.environments()[0]["waiting_clients"] == waiting, 10, "every request to wait")
    d.signal(signal.SIGTERM)
    for t in threads:
        t.join(15)
    assert d.wait_exit() == 0
    assert [type(e) for e in errors] == [LeaseError] * waiting, errors
    assert all("the daemon is stopping" in str(e) for e in errors), errors


def test_a_control_request_gives_up_at_its_timeout_however_slowly_the_answer_trickles_in(tmp_path):
    # Something on the socket that sends its answer a byte now and then (a daemon stuck half-way, or not
    # renderd) must not hold the client past its timeout: the timeout bounds the whole request, not each read.
    path = str(tmp_path / "slow.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    server.settimeout(5)
    stop = threading.Event()

    def trickle() -> None:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.recv(65536)
            answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
            answer += b" " * 100000
            for i in range(len(answer)):
                if stop.wait(0.05):
                    return
                try:
                    conn.send(answer[i:i + 1])
                except OSError:
                    return

    serving = threading.Thread(target=trickle, daemon=True)
    serving.start()
    result: list[BaseException] = []

    def ask() -> None:
        try:
            ControlClient(path, timeout=1).health()
        except BaseException as exc:  # noqa: BLE001 (reported below)
            result.append(exc)

    asking = threading.Thread(target=ask, daemon=True)
    started = time.monotonic()
    asking.start()
    try:
        asking.join(5)
        assert not asking.is_alive(), "the request outlived its 1 s timeout by far"
        assert time.monotonic() - started < 3
        assert len(result) == 1 and isinstance(result[0], RenderdError), result
        assert "did not answer GET /v1/health in time" in str(result[0])
    finally:
        stop.set()
        serving.join(5)
        server.close()


def _half_closed_exchange(path: str, request: bytes, timeout: float = 10) -> bytes:
    """Send ``request``, shut the sending side (as `socat`, `nc -N` or `curl --data @-`-style scripts do at the
    end of their input), and read the answer to the end."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data


def _lease_request(body: bytes) -> bytes:
    return (b"POST /v1/environments/demo/leases HTTP/1.1\r\nHost: renderd\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def test_a_client_that_shuts_its_sending_side_still_gets_its_answer(daemon):
    # Half a close is not a hang-up: the client reads on. waitress took end of file for a client gone and
    # dropped the answer (most of the time: whenever the end of file was read before the answer was written).
    d = _waiting_daemon(daemon)
    for request in (b"GET /v1/health HTTP/1.0\r\n\r\n", b"GET /v1/environments HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"):
        for _ in range(20):
            answer = _half_closed_exchange(d.socket, request)
            assert answer.startswith((b"HTTP/1.0 200", b"HTTP/1.1 200", b"HTTP/1.1 404")), (request, answer)
            assert answer.rstrip().endswith(b"}"), answer  # the whole body
    # A lease request that waits (no player: it waits its timeout out, then is answered 503).
    answer = _half_closed_exchange(d.socket, _lease_request(b'{"client_pid": %d, "timeout": 0.5}' % os.getpid()))
    assert answer.startswith(b"HTTP/1.1 503") and b"no ready player" in answer, answer
    assert "hung up" not in d.output()


def test_a_half_closed_client_that_then_closes_while_its_lease_request_waits_is_granted_nothing(daemon):
    d = _waiting_daemon(daemon)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(d.socket)
        sock.sendall(_lease_request(b'{"client_pid": %d, "timeout": 60}' % os.getpid()))
        sock.shutdown(socket.SHUT_WR)
        wait_for(lambda: d.client.get("/v1/environments/demo")["waiting_clients"] == 1, 5, "the request to wait")
    wait_for(lambda: d.client.get("/v1/environments/demo")["waiting_clients"] == 0, 5,
             "the abandoned request to stop waiting")
    wait_for(lambda: "hung up" in d.output(), 5, "the hang-up to be logged")
