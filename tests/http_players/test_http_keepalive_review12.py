"""TCP keepalive on the players' HTTP listener: a player whose host vanishes without a word (no FIN, no reset)
is found gone within the keepalive time, naming the player and its peer address, not at its step deadline."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from renderd.transport import http as http_transport

from tests.helpers.http_util import DEADLINE, connect
from tests.helpers.leaks import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_accepted_connections_have_tcp_keepalive(served):
    _, server, _ = served
    client = connect(served)
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")
    assert client.response().body == b"pong"
    wait_for(lambda: len(server._connections) == 1, DEADLINE, "the connection to be served")
    (connection,) = server._connections
    sock = connection.sock  # the server's side of a real accepted connection
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == http_transport.KEEPALIVE_IDLE
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == http_transport.KEEPALIVE_INTERVAL
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == http_transport.KEEPALIVE_COUNT
    total = http_transport.KEEPALIVE_IDLE + http_transport.KEEPALIVE_INTERVAL * http_transport.KEEPALIVE_COUNT
    assert total <= 60  # well within step_timeout's default of 100 s
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == total * 1000


# Run in a network namespace of its own (an unprivileged user namespace), so that taking its loopback interface
# down makes the player's host vanish for the server without touching this machine's network: the player's
# kernel never answers a keepalive probe, no FIN, no reset.
VANISH = r"""
import fcntl, json, socket, struct, time
from renderd.errors import PlayerCrashed
from renderd.protocol import encode_action
from renderd.transport import http as H
from tests.helpers.http_util import RawClient, frame_body, request_bytes

H.KEEPALIVE_IDLE = H.KEEPALIVE_INTERVAL = H.KEEPALIVE_COUNT = 1  # found gone within about 2 s

def loopback(up):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        flags = struct.unpack("16sh", fcntl.ioctl(s, 0x8913, struct.pack("16sh", b"lo", 0)))[1]  # SIOCGIFFLAGS
        flags = flags | 1 if up else flags & ~1  # IFF_UP
        fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"lo", flags))  # SIOCSIFFLAGS
    finally:
        s.close()

loopback(True)
registry = H.PlayerBridgeRegistry(max_request_size=1 << 20)
server = H.PlayerHttpServer(registry).start()
clients, out = [], {}
try:
    between = registry.register(name="player between frames")  # no process watched: a remote player's bridge
    waiting = registry.register(name="player waiting for its action")
    a, b = RawClient(server.port, 10.0), RawClient(server.port, 10.0)
    clients += [a, b]
    a.send(request_bytes(frame_body(between.token)))
    between.recv(time.monotonic() + 5)
    between.send(encode_action({"action": "Pass"}), time.monotonic() + 5)
    assert a.response().status == 200  # a's player now works out its answer: its connection is idle
    b.send(request_bytes(frame_body(waiting.token)))
    waiting.recv(time.monotonic() + 5)  # b's request waits for its action
    out["peers"] = [f"127.0.0.1:{c.sock.getsockname()[1]}" for c in clients]
    loopback(False)
    started = time.monotonic()
    for key, bridge in (("between", between), ("waiting", waiting)):
        try:
            bridge.recv(started + 6.0)
            out[key] = ["frame", "", 0]
        except Exception as exc:
            out[key] = [type(exc).__name__, str(exc), time.monotonic() - started]
finally:
    for c in clients:
        c.close()
    server.stop()
print("RESULT " + json.dumps(out))
"""


def _namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--net", "true"], capture_output=True, timeout=10)
    return probe.returncode == 0


def test_a_player_whose_host_vanishes_is_reported_gone_within_the_keepalive_time(no_leaks):
    if not _namespaces_work():
        pytest.skip("needs unshare and unprivileged user and network namespaces")
    run = subprocess.run(["unshare", "--user", "--map-root-user", "--net", sys.executable, "-c", VANISH],
                         cwd=ROOT, capture_output=True, text=True, timeout=30)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, f"exit {run.returncode}\n{run.stdout}\n{run.stderr}"
    out = json.loads(lines[0][len("RESULT "):])
    for key, peer, name in (("between", out["peers"][0], "player between frames"),
                            ("waiting", out["peers"][1], "player waiting for its action")):
        kind, message, seconds = out[key]
        # before: nothing noticed (no keepalive), or a keepalive timeout taken for the socket's own timeout
        # and the close then for an idle close: a PlayerTimeout at the deadline
        assert kind == "PlayerCrashed", (key, kind, message)
        assert name in message and peer in message and "ETIMEDOUT" in message and "keepalive" in message, message
        assert seconds < 5.0, (key, seconds)
