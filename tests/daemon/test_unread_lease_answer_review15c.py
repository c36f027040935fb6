"""A lease granted in an answer its client never read (it closed its connection with the answer unread, as a
client does that gives up just as the player comes) is ended by the daemon and its player recycled, instead of
staying LEASED to a lease nobody knows for as long as the client process lives. A client that reads its answer
keeps its lease. Real daemon, real players, real unix sockets."""

from __future__ import annotations

import json
import os
import select
import socket

from renderd.daemon.client import ControlClient
from tests.daemon.conftest import fast_config, wait_for

#: Deadline for what the daemon does at once (a hang, not a speed, is what it catches).
DEADLINE = 20.0


def _lease_request(pid: int) -> bytes:
    body = json.dumps({"client_pid": pid, "timeout": 10}).encode()
    return (b"POST /v1/environments/demo/leases HTTP/1.1\r\nHost: renderd\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def _leased(d) -> list[dict]:
    return [p for p in d.players() if p["state"] == "LEASED"]


def test_a_lease_whose_answer_the_client_never_read_is_ended_and_its_player_recycled(daemon):
    d = daemon(fast_config())
    before = d.players()[0]["pid"]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(DEADLINE)
        sock.connect(d.socket)
        sock.sendall(_lease_request(os.getpid()))
        # The answer (the lease) is in this socket's receive buffer: the lease was granted.
        assert select.select([sock], [], [], DEADLINE)[0], "no answer to the lease request"
        wait_for(lambda: _leased(d), DEADLINE, "the player to be LEASED")
    # Closed unread; this process (the lease's client_pid) lives on.
    wait_for(lambda: not _leased(d), DEADLINE, "the lease nobody read to end")
    wait_for(lambda: [p for p in d.players() if p["state"] == "READY" and p["pid"] != before], DEADLINE,
             "a new player in place of the recycled one")
    assert "closed its connection without reading the answer" in d.output()
    # The next client gets the player.
    client = ControlClient(d.socket)
    lease = client.lease("demo", timeout=DEADLINE)
    client.release(lease["lease"])


def test_a_client_that_reads_its_lease_answer_keeps_its_lease(daemon):
    # (guard: the answers renderd's own client reads in full never count as lost)
    d = daemon(fast_config())
    client = ControlClient(d.socket)
    for _ in range(5):
        lease = client.lease("demo", timeout=DEADLINE)
        assert client.health()["environments"]["demo"]["leased"] == 1
        assert client.lease_status(lease["lease"])["ended"] is None
        assert client.release(lease["lease"]) == {"released": True, "recycled": False}
    # A raw client reading the whole answer, then closing, keeps it too.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(DEADLINE)
        sock.connect(d.socket)
        sock.sendall(_lease_request(os.getpid()))
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
    lease_id = json.loads(data.partition(b"\r\n\r\n")[2])["lease"]
    assert client.lease_status(lease_id)["ended"] is None
    assert client.release(lease_id)["released"] is True
    assert "without reading the answer" not in d.output()
