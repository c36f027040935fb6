"""Lease answers a raw client never reads, in the ways the control socket's server could miss: two lease requests
sent on one connection (pipelined) and left unread, and a lease request whose answer closes the connection
(``Connection: close``, HTTP/1.0), where the server closed first and never saw the client leave the answer
unread. Every such lease ends (its player recycled) instead of staying LEASED for as long as the client process
lives; a client that reads its answers keeps its leases. Real daemon, real players, real unix sockets."""

from __future__ import annotations

import json
import os
import socket

from tests.daemon.conftest import fast_config, wait_for

#: Deadline for what the daemon does at once (a hang, not a speed, is what it catches).
DEADLINE = 20.0


def _lease_request(*, version: bytes = b"1.1", headers: bytes = b"") -> bytes:
    body = json.dumps({"client_pid": os.getpid(), "timeout": 10}).encode()
    return (b"POST /v1/environments/demo/leases HTTP/%s\r\nHost: renderd\r\nContent-Type: application/json\r\n"
            b"%sContent-Length: %d\r\n\r\n%s" % (version, headers, len(body), body))


def _states(d) -> list[str]:
    return [p["state"] for p in d.players()]


def _pids(d) -> set[int]:
    return {p["pid"] for p in d.players()}


def _all_recycled(d, before: set[int], count: int) -> None:
    """Wait until no player is LEASED and ``count`` new READY ones replaced those of ``before``."""
    wait_for(lambda: "LEASED" not in _states(d), DEADLINE, f"the unread leases to end: {_states(d)}")
    wait_for(lambda: len([p for p in d.players() if p["state"] == "READY" and p["pid"] not in before]) == count,
             DEADLINE, "new players in place of the recycled ones")


def test_two_pipelined_lease_requests_left_unread_both_end(daemon):
    d = daemon(fast_config(instances=2))
    before = _pids(d)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(DEADLINE)
        sock.connect(d.socket)
        sock.sendall(_lease_request() + _lease_request())
        wait_for(lambda: _states(d).count("LEASED") == 2, DEADLINE, "both players LEASED")
    # Closed with both answers unread; this process (the leases' client_pid) lives on.
    _all_recycled(d, before, 2)
    assert d.output().count("granted, but its client (pid") == 2, d.output()


def test_a_lease_answer_that_closes_the_connection_left_unread_ends_the_lease(daemon):
    d = daemon(fast_config())
    for request in (_lease_request(headers=b"Connection: close\r\n"), _lease_request(version=b"1.0")):
        before = _pids(d)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(DEADLINE)
            sock.connect(d.socket)
            sock.sendall(request)
            wait_for(lambda: "LEASED" in _states(d), DEADLINE, "the player LEASED")
            # The daemon is done with the connection (it has shut its sending side) before the client closes.
            sock.settimeout(DEADLINE)
            sock.recv(1)  # (one byte of the answer: most of it stays unread)
        _all_recycled(d, before, 1)
    assert d.output().count("granted, but its client (pid") == 2, d.output()


def test_lease_answers_that_close_the_connection_read_whole_keep_their_leases(daemon):
    # (guard: a client that reads to the end of the answer, then closes, keeps its lease)
    d = daemon(fast_config(instances=2))
    leases = []
    for request in (_lease_request(headers=b"Connection: close\r\n"), _lease_request(version=b"1.0")):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(DEADLINE)
            sock.connect(d.socket)
            sock.sendall(request)
            data = b""
            while chunk := sock.recv(65536):  # to the end: the daemon closes (shuts its side) after the answer
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        assert b"connection: close" in head.lower(), head
        leases.append(json.loads(body)["lease"])
    for lease in leases:
        assert d.client.lease_status(lease)["ended"] is None
        assert d.client.release(lease)["released"] is True
    assert "without reading the answer" not in d.output()


def _recv_answer(sock: socket.socket) -> dict:
    """One whole answer read from ``sock`` (its Content-Length), nothing more."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))[15:])
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, data
        body += chunk
    return json.loads(body)


def test_a_lease_request_sent_after_another_answer_left_unread_leaves_that_lease_to_end(daemon):
    # The client sends its second request once the first lease is granted, without reading that answer: sending
    # on does not mean it read it. Both end when it closes with both unread.
    d = daemon(fast_config(instances=2))
    before = _pids(d)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(DEADLINE)
        sock.connect(d.socket)
        sock.sendall(_lease_request())
        wait_for(lambda: _states(d).count("LEASED") == 1, DEADLINE, "the first player LEASED")
        sock.sendall(_lease_request())
        wait_for(lambda: _states(d).count("LEASED") == 2, DEADLINE, "both players LEASED")
    _all_recycled(d, before, 2)
    assert d.output().count("granted, but its client (pid") == 2, d.output()


def test_of_two_lease_answers_the_one_read_keeps_its_lease_and_the_unread_one_ends(daemon):
    d = daemon(fast_config(instances=2))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(DEADLINE)
        sock.connect(d.socket)
        sock.sendall(_lease_request())
        kept = _recv_answer(sock)["lease"]  # read whole
        sock.sendall(_lease_request())
        wait_for(lambda: _states(d).count("LEASED") == 2, DEADLINE, "both players LEASED")
    wait_for(lambda: _states(d).count("LEASED") == 1 and _states(d).count("READY") == 1, DEADLINE,
             f"the unread lease to end: {_states(d)}")
    assert d.client.lease_status(kept)["ended"] is None
    assert d.client.release(kept) == {"released": True, "recycled": False}
    assert d.output().count("granted, but its client (pid") == 1, d.output()
