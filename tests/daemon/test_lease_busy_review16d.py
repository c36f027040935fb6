"""A lease request refused with LeaseBusyError (as many lease requests wait already as the control socket's
connections allow) is answered and its connection closed (``Connection: close``), as a server shedding load does:
raw clients that never close must not keep the spare connections (releases', status requests') until the read
deadline evicts them. renderd's own client asks again on a new connection. Real daemon, real unix sockets."""

from __future__ import annotations

import json
import os
import socket
import threading

from renderd.daemon.client import ControlClient
from renderd.errors import LeaseBusyError, RenderdError
from tests.daemon.conftest import fast_config, wait_for

#: Deadline for what the daemon does at once (a hang, not a speed, is what it catches).
DEADLINE = 20.0
#: A player that never sends its first frame: lease requests for it wait.
NEVER_READY = '["/bin/sh", "-c", "exec sleep 60"]'
#: Run in the daemon's process first: the control socket takes 16 connections (6 waiting lease requests, 8 kept
#: free), and the read deadline is far off, so that only the daemon's choice can close an idle connection here.
FEW_CONNECTIONS = """
import waitress.adjustments
waitress.adjustments.Adjustments.connection_limit = 16
import renderd.daemon.service
renderd.daemon.service.API_READ_TIMEOUT = 600
"""
#: Lease requests that wait at most, with the connection limit above (16 - 2 - API_CONNECTION_HEADROOM).
WAITING = 6


def _lease_request(timeout: float = 30) -> bytes:
    body = json.dumps({"client_pid": os.getpid(), "timeout": timeout}).encode()
    return (b"POST /v1/environments/demo/leases HTTP/1.1\r\nHost: renderd\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def _connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(DEADLINE)
    sock.connect(path)
    return sock


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], dict]:
    """One whole answer read from ``sock`` (its Content-Length), nothing more."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed before an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed in the answer's body: {data!r}"
        body += chunk
    return int(lines[0].split()[1]), headers, json.loads(body)


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def _fill_with_waiting_requests(d) -> list[socket.socket]:
    waiting = []
    for _ in range(WAITING):
        sock = _connect(d.socket)
        waiting.append(sock)
        sock.sendall(_lease_request())
    wait_for(lambda: d.client.environments()[0]["waiting_clients"] >= WAITING, DEADLINE,
             f"{WAITING} lease requests waiting")
    return waiting


def test_a_busy_refusal_closes_its_connection_so_clients_that_never_close_hold_none(daemon):
    d = daemon(fast_config(executable=NEVER_READY), ready=False, preamble=FEW_CONNECTIONS)
    wait_for(d.health, DEADLINE, "the daemon to answer")
    held = _fill_with_waiting_requests(d)
    try:
        # More refused clients than connections are kept free: none of them closes its end.
        for i in range(10):
            sock = _connect(d.socket)
            held.append(sock)
            sock.sendall(_lease_request())
            status, headers, body = _answer(sock)
            assert status == 503 and body["error"]["type"] == "LeaseBusyError", (status, body)
            assert "retry shortly" in body["error"]["message"]
            assert headers.get("retry-after") == "1"
            assert headers.get("connection", "").lower() == "close", (i, headers)
            assert _closed_within(sock, 5.0), f"refusal {i}: the daemon kept the connection open"
        # Status requests and releases still get in, at once.
        assert ControlClient(d.socket, timeout=DEADLINE).health()["pid"] == d.pid
    finally:
        for sock in held:
            sock.close()
    wait_for(lambda: d.client.environments()[0]["waiting_clients"] == 0, DEADLINE, "the waiters gone")


class _CountingClient(ControlClient):
    """renderd's control client, counting the busy refusals it was answered."""

    busy = 0

    def request(self, *args, **kwargs):
        try:
            return super().request(*args, **kwargs)
        except LeaseBusyError:
            self.busy += 1
            raise


def test_the_control_client_asks_again_on_a_new_connection_after_a_busy_refusal(daemon):
    d = daemon(fast_config(), preamble=FEW_CONNECTIONS)
    holder = d.client.lease("demo", timeout=DEADLINE)  # the one player: the requests below wait
    held = _fill_with_waiting_requests(d)
    client = _CountingClient(d.socket)
    result: list[object] = []

    def lease() -> None:
        try:
            result.append(client.lease("demo", timeout=DEADLINE))
        except RenderdError as exc:
            result.append(exc)

    asker = threading.Thread(target=lease)
    asker.start()
    try:
        wait_for(lambda: client.busy >= 2, DEADLINE, "the client to be refused, and to ask again")
        for sock in held:  # the waiters hang up; the player comes back: the next try gets it
            sock.close()
        d.client.release(holder["lease"])
        wait_for(lambda: result, DEADLINE, "the client's lease")
    finally:
        for sock in held:
            sock.close()
        asker.join(DEADLINE)
    assert isinstance(result[0], dict), result
    assert d.client.release(result[0]["lease"]) == {"released": True, "recycled": False}
