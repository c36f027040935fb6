"""The players' HTTP server against connections that never send a request, over real sockets; the FIFO
pump's errors name the pipe they happened on."""

from __future__ import annotations

import os
import time

from renderd.errors import ProtocolError
from renderd.transport import http as http_transport

from tests.helpers.http_util import DEADLINE, connect
from tests.helpers.pump_review14b import raw_player, wait_until_ended


def test_a_connection_that_never_sends_a_request_is_closed_after_first_request_timeout(served, monkeypatch):
    # A connection held open without a request counts against MAX_CONNECTIONS. Were it idle for
    # IDLE_TIMEOUT (an hour) like a keep-alive connection between requests, 256 of them would shut every
    # player out for an hour; a new connection must begin its first request within FIRST_REQUEST_TIMEOUT.
    monkeypatch.setattr(http_transport, "FIRST_REQUEST_TIMEOUT", 0.3, raising=False)
    silent = connect(served)
    started = time.monotonic()
    silent.sock.settimeout(DEADLINE)
    assert silent.closed_by_server()
    assert time.monotonic() - started < DEADLINE / 2


def test_a_keep_alive_connection_that_served_a_request_is_not_held_to_the_first_request_timeout(served, monkeypatch):
    monkeypatch.setattr(http_transport, "FIRST_REQUEST_TIMEOUT", 0.2)
    client = connect(served)
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")
    assert client.response().body == b"pong"
    client.sock.settimeout(1.0)  # five FIRST_REQUEST_TIMEOUTs: the connection must stay open (IDLE_TIMEOUT)
    assert not client.closed_by_server(), client.buf
    client.sock.settimeout(DEADLINE)
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")
    assert client.response().body == b"pong"


# -- FifoPump errors name the pipe -----------------------------------------------------------------------


def test_a_malformed_client_message_names_client_pipe(no_leaks):
    with raw_player() as made:
        pump, pair = made.pump, made.pair
        wfd = None
        try:
            end = time.monotonic() + DEADLINE
            while wfd is None:  # the pump opens client.pipe for reading after the first frame
                try:
                    wfd = os.open(pair.client_path, os.O_WRONLY | os.O_NONBLOCK)
                except OSError:
                    assert time.monotonic() < end, "the pump never opened client.pipe"
                    time.sleep(0.01)
            os.write(wfd, b"\x63garbage")  # no field type 0x63
            wait_until_ended(pump)
            assert not pump.running
            assert isinstance(pump.error, ProtocolError), pump.error
            assert pair.client_path in str(pump.error) and "client.pipe" in str(pump.error), pump.error
        finally:
            if wfd is not None:
                os.close(wfd)
