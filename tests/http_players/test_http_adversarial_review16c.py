"""An adversarial client against the players' HTTP server, over real loopback sockets: requests the server cannot
serve are answered with a clear error, never a silent close."""

from __future__ import annotations

import logging

from renderd.transport.http import PlayerBridgeRegistry, PlayerHttpServer

from tests.helpers.http_util import DEADLINE, RawClient, connect


def test_a_request_the_server_fails_on_is_answered_500_not_dropped(no_leaks, caplog):
    # A failure of the server's own while answering (here an application's header it cannot encode) closed the
    # connection without a word: the client read end of file, and a player's client was told that the player had
    # closed its connection. It is answered 500 naming the failure, and the connection closed.
    caplog.set_level(logging.ERROR, logger="renderd.transport.http")

    def app(environ, start_response):
        start_response("200 OK", [("X-Price", "5 \u20ac")])
        return [b"ok"]

    server = PlayerHttpServer(PlayerBridgeRegistry(), app=app).start()
    client = RawClient(server.port, timeout=DEADLINE)
    try:
        client.send(b"GET /ping HTTP/1.1\r\n\r\n")
        response = client.response()
        assert response.status == 500, response
        assert "UnicodeEncodeError" in response.json()["error"]["message"]
        assert client.closed_by_server()
    finally:
        client.close()
        server.stop()


def test_a_content_length_with_leading_zeros_is_its_number(served):
    # RFC 9110 allows leading zeros in Content-Length: 0...05 (20 digits) is 5. It was answered 413 ("a 20-digit
    # number of bytes, over the limit") and the connection closed.
    client = connect(served)
    client.send(b"GET /ping HTTP/1.1\r\nContent-Length: " + b"0" * 30 + b"5\r\n\r\nhelloGET /ping HTTP/1.1\r\n\r\n")
    for _ in range(2):  # the body is read as 5 bytes: the pipelined request after it is served too
        response = client.response()
        assert response.status == 200 and response.body == b"pong", response
