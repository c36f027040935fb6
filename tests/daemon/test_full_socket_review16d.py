"""Every connection of the control socket taken by clients that trickle their requests in (slowloris), more of them
queued behind: with every connection taken, those that serve no request get a short read deadline
(API_BUSY_READ_TIMEOUT) instead of the usual one, so a status request gets in within a second or two, not after
each batch of slow clients has had its full read deadline. Real daemon, real unix sockets."""

from __future__ import annotations

import json
import socket

from renderd.daemon import service
from renderd.daemon.client import ControlClient
from tests.daemon.conftest import fast_config, wait_for

#: Deadline of what is expected well within it (a hang, not a speed, is what it catches).
DEADLINE = 10.0
#: Run in the daemon's process first: the control socket takes 16 connections (14 for clients), and the usual
#: read deadline is far off, so that only the full socket's can let the status request in here.
FEW_CONNECTIONS = """
import waitress.adjustments
waitress.adjustments.Adjustments.connection_limit = 16
import renderd.daemon.service
renderd.daemon.service.API_READ_TIMEOUT = 600
"""


def test_slow_clients_holding_every_connection_never_keep_a_status_request_out(daemon):
    d = daemon(fast_config(instances=0), preamble=FEW_CONNECTIONS)
    slow = []
    try:
        for _ in range(14 + 10):  # every connection, and more waiting to be accepted
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            slow.append(sock)
            sock.setblocking(False)
            sock.connect(d.socket)
            sock.send(b"GET /v1/health HTTP/1.1\r\nHost: ")  # and never the rest
        health = ControlClient(d.socket, timeout=DEADLINE).health()
        assert health["pid"] == d.pid
        # The slow clients were told why their connection ended.
        first = slow[0]
        first.setblocking(True)
        first.settimeout(DEADLINE)
        data = b""
        while chunk := first.recv(65536):
            data += chunk
        assert data.startswith(b"HTTP/1.") and b" 408 " in data.split(b"\r\n")[0], data
        message = json.loads(data.partition(b"\r\n\r\n")[2])["error"]["message"]
        assert f"not whole within {service.API_BUSY_READ_TIMEOUT:g} s" in message, message
        assert "while every connection of the control socket was taken" in message, message
    finally:
        for sock in slow:
            sock.close()
    wait_for(lambda: d.health(), DEADLINE, "the daemon answering")
