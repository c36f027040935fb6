"""The daemon under odd-but-legal use: more waiting clients than control threads, and the like."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from renderd.daemon.client import ControlClient, connect
from renderd.errors import LeaseBusyError, LeaseError, PlayerCrashed, RenderdError
from tests.daemon.conftest import fast_config, wait_for

DEADLINE = 20.0


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_lease_requests_waiting_for_a_player_never_hold_up_a_release(daemon):
    """Every control thread taken by a lease request that waits for a player (more clients than players,
    as in a training run with many workers) must not keep the holder's release, or a status request, in
    the queue: the release is what lets the waiting requests be served."""
    d = daemon(fast_config(daemon="api_threads = 2"), args=("--log-level", "debug"))
    baseline = _threads(d.pid)
    held = d.client.lease("demo", timeout=5)
    results: dict[int, object] = {}

    def wait_for_lease(i: int) -> None:
        try:
            results[i] = ControlClient(d.socket).lease("demo", timeout=4)
        except RenderdError as exc:
            results[i] = exc

    waiters = [threading.Thread(target=wait_for_lease, args=(i,)) for i in range(3)]
    for t in waiters:
        t.start()
    try:
        wait_for(lambda: d.output().count("waits for a player of demo") >= 2, DEADLINE, "waiting lease requests")
        quick = ControlClient(d.socket, timeout=2.0)
        started = time.monotonic()
        assert quick.health()["status"] == "ready"
        assert quick.release(held["lease"]) == {"released": True, "recycled": False}
        assert time.monotonic() - started < 2.0
        # Each release hands the player to the next waiting request, in turn.
        for _ in range(3):
            got = wait_for(lambda: [r for r in results.values() if isinstance(r, dict) and "done" not in r],
                           DEADLINE, "a waiting request to get the player")
            for answer in got:
                assert quick.release(answer["lease"]) == {"released": True, "recycled": False}
                answer["done"] = True
    finally:
        for t in waiters:
            t.join(DEADLINE)
    assert len(results) == 3 and all(isinstance(r, dict) for r in results.values()), results
    # The threads the waiting requests had go away again.
    wait_for(lambda: _threads(d.pid) <= baseline, DEADLINE, f"the daemon back to {baseline} threads")


#: Run in the daemon's process first: the control socket takes 16 connections (waitress's default is 100).
FEW_CONNECTIONS = """
import waitress.adjustments
waitress.adjustments.Adjustments.connection_limit = 16
"""


def test_waiting_lease_requests_never_take_every_connection_of_the_control_socket(daemon):
    """More clients waiting for a player than the control socket takes connections: the ones over the
    bound are refused at once (503, saying so), so that the holder's release and status requests can still
    connect; otherwise they would wait in the listen backlog until waiting requests time out."""
    d = daemon(fast_config(), preamble=FEW_CONNECTIONS)
    held = d.client.lease("demo", timeout=5)
    results: dict[int, object] = {}

    def wait_for_lease(i: int) -> None:
        # The request as such (ControlClient.lease would send a refused one again until its timeout).
        body = {"client_pid": os.getpid(), "timeout": 2, "deadline": time.monotonic() + 7}
        try:
            results[i] = ControlClient(d.socket).request("POST", "/v1/environments/demo/leases", body, timeout=12)[1]
        except RenderdError as exc:
            results[i] = exc

    waiters = [threading.Thread(target=wait_for_lease, args=(i,)) for i in range(16)]
    for t in waiters:
        t.start()
    try:
        refused = wait_for(lambda: [r for r in results.values() if isinstance(r, LeaseError)], DEADLINE,
                           "lease requests over the bound refused")
        assert "lease requests wait for a player already" in str(refused[0]) and refused[0].status == 503
        assert isinstance(refused[0], LeaseBusyError)
        quick = ControlClient(d.socket, timeout=2.0)
        started = time.monotonic()
        assert quick.health()["status"] == "ready"
        assert quick.release(held["lease"]) == {"released": True, "recycled": False}
        assert time.monotonic() - started < 2.0
        granted = wait_for(lambda: [r for r in results.values() if isinstance(r, dict)], DEADLINE, "a lease")
        quick.release(granted[0]["lease"])
    finally:
        for t in waiters:
            t.join(DEADLINE)
    for r in results.values():
        if isinstance(r, dict) and r is not granted[0]:
            d.client.release(r["lease"])


#: Run in the daemon's process first: giving the socket its group fails as for a user outside socket_group.
SOCKET_CHOWN_FAILS = """
import os
_chown = os.chown
def _failing_chown(path, *args, **kwargs):
    if str(path).endswith(".sock"):
        raise PermissionError(1, "Operation not permitted", path)
    return _chown(path, *args, **kwargs)
os.chown = _failing_chown
"""


def test_a_start_that_fails_after_binding_the_socket_says_why_and_leaves_nothing(daemon):
    """socket_group names a group the daemon's user is not in: giving the bound socket that group fails.
    The start must end at once with that one error and remove the socket, lock and directories it made
    (stopping a control server that never ran used to wait 5 s, then raise RuntimeError over the error)."""
    d = daemon(fast_config(daemon='socket_group = "daemon"'), ready=False, preamble=SOCKET_CHOWN_FAILS)
    started = time.monotonic()
    assert d.wait_exit() == 1, d.output()
    assert time.monotonic() - started < 4.0
    out = d.output()
    assert "cannot give the control socket the group 'daemon' (socket_group)" in out, out
    assert "operation not permitted" in out.lower(), out
    assert "Traceback" not in out and "RuntimeError" not in out, out
    assert not os.path.lexists(d.socket) and not os.path.lexists(d.runtime_dir), os.listdir(d.base)


#: Run in the daemon's process first: a leased HTTP player's closed connection reaches the loop before its
#: exit does (the kernel closes a dying process's sockets before its pidfd reports it).
STREAM_FAILURE_FIRST = """
import time
from renderd.daemon import supervisor as _s
_reap = _s.Supervisor._reap
def _reap_after_failure(self, p):
    deadline = time.monotonic() + 2.0
    while not self._failures and time.monotonic() < deadline:
        time.sleep(0.01)
    self._handle_failures()
    return _reap(self, p)
_s.Supervisor._reap = _reap_after_failure
"""


def test_a_leased_http_player_that_dies_is_not_said_to_be_stopped_by_the_daemon(daemon):
    """An HTTP player dies (SIGKILL from outside) under its lease; its closed connection fails its stream,
    and the daemon stops what is left of it. Its client must learn how it died (SIGKILL), not be told
    that "the daemon stopped it" because its HTTP stream failed."""
    d = daemon(fast_config(instances=1, extra='transport = "http"', daemon='http = "127.0.0.1:0"'),
               preamble=STREAM_FAILURE_FIRST)
    with connect("demo", socket=d.socket, timeout=10) as session:
        assert session.step("Pass").sequence_id == 1
        os.kill(session.pid, signal.SIGKILL)
        with pytest.raises(PlayerCrashed) as info:
            session.step("Pass")
    assert "the daemon stopped it" not in str(info.value), info.value
    assert info.value.returncode == -signal.SIGKILL, info.value
    assert "killed by SIGKILL" in str(info.value)


def test_a_lease_request_the_daemon_is_too_busy_to_take_is_sent_again_within_its_timeout(tmp_path):
    """LeaseBusyError (as many requests wait already as the control socket holds) means "ask again": the
    client does, until its own timeout, and only then gives up with it."""
    import json
    import socket

    path = str(tmp_path / "control.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    listener.settimeout(10)
    busy = json.dumps({"error": {"type": "LeaseBusyError", "message": "92 lease requests wait already"}}).encode()
    granted = json.dumps({"lease": "x" * 32, "pid": 1, "environment": "demo"}).encode()
    plan = [(503, busy), (503, busy), (201, granted)]
    seen: list[bytes] = []

    def serve(n: int) -> None:
        for status, payload in plan[:n]:
            conn, _ = listener.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, rest = data.partition(b"\r\n\r\n")
                length = int([line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")][0])
                while len(rest) < length:
                    rest += conn.recv(65536)
                seen.append(rest)
                conn.sendall(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                             b"Connection: close\r\n\r\n%s" % (status, len(payload), payload))

    server = threading.Thread(target=serve, args=(3,))
    server.start()
    try:
        assert ControlClient(path).lease("demo", timeout=10)["environment"] == "demo"
    finally:
        server.join(20)
        listener.close()
    assert len(seen) == 3  # asked again twice
    timeouts = [json.loads(body)["timeout"] for body in seen]
    assert timeouts == sorted(timeouts, reverse=True) and timeouts[0] <= 10  # within the one timeout

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    os.unlink(path)
    listener.bind(path)
    listener.listen(8)
    listener.settimeout(10)
    plan[:] = [(503, busy)] * 3
    seen.clear()
    server = threading.Thread(target=serve, args=(1,))
    server.start()
    try:
        with pytest.raises(LeaseBusyError, match="wait already"):
            ControlClient(path).lease("demo", timeout=0.2)  # no time to ask again
    finally:
        server.join(20)
        listener.close()
