"""The control socket's HTTP below the application: an oversize body is refused from its Content-Length
before any of it is read, and malformed HTTP is answered in the API's JSON error form."""

from __future__ import annotations

import json
import socket
import time

from renderd.daemon.api import MAX_BODY_SIZE
from tests.helpers.control_review14e import raw_request


def test_oversize_control_request_is_refused_before_its_body_is_read(secure_daemon) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(secure_daemon.socket)
        s.sendall(b"PUT /v1/environments/x HTTP/1.0\r\nContent-Length: %d\r\n\r\n{" % (MAX_BODY_SIZE + 1))
        started = time.monotonic()
        head = s.recv(4096)  # nothing more is sent: the answer must not wait for the body
    assert head.startswith(b"HTTP/1.0 413") and time.monotonic() - started < 2, head


def test_a_body_of_exactly_the_limit_reaches_the_application(secure_daemon) -> None:
    # (padded with JSON whitespace: no configuration string may be that long, the kernel could not pass it on)
    body = b'{"instances": 0, "executable": "renderd-player"'
    body += b" " * (MAX_BODY_SIZE - len(body) - 1) + b"}"

    assert len(body) == MAX_BODY_SIZE
    status, _headers, answer = raw_request(
        secure_daemon.socket,
        b"PUT /v1/environments/limit HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        % len(body) + body)
    try:
        assert status == 201, answer[:300]
    finally:
        secure_daemon.client.request("DELETE", "/v1/environments/limit")


def test_malformed_http_on_the_control_socket_is_a_json_error(secure_daemon) -> None:
    for request in (b"garbage\r\n\r\n", b"GET /v1/health HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
                    b"GET /v1/health HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"):
        status, headers, body = raw_request(secure_daemon.socket, request)
        assert status == 400 and headers["content-type"] == "application/json", (request, headers, body)
        error = json.loads(body)["error"]
        assert set(error) == {"type", "message"} and error["type"] == "RenderdError", error


def test_the_oversize_answer_is_json_too(secure_daemon) -> None:
    status, headers, body = raw_request(
        secure_daemon.socket, b"PUT /v1/environments/x HTTP/1.0\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY_SIZE + 1))
    assert status == 413 and headers["content-type"] == "application/json"
    assert f"body is at most {MAX_BODY_SIZE} bytes" in json.loads(body)["error"]["message"]
