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
