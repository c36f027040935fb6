"""The control socket's answer to a request that begins and never becomes whole: one that stalls past the read
deadline is answered 408 (JSON, saying how much of it came) before the connection closes, and one whose client shuts
its sending side half-way is answered 400 saying so; a connection that began no request is still closed without a
word. Real unix sockets against the real control server (renderd.daemon.service._ControlServer), in-process."""

from __future__ import annotations

import json
import socket
import time
from typing import Any, Iterator

import pytest

from renderd.daemon import service
from tests.helpers.leaks import Leaks

#: The read deadline these tests give the server (seconds), instead of the daemon's.
READ_TIMEOUT = 1
#: How long a test waits for the server's answer or close before it calls it a hang (many times the deadline).
HANG = READ_TIMEOUT * 10 + 10

LEASE_HEAD = (b"POST /v1/environments/demo/leases HTTP/1.1\r\nHost: renderd\r\nContent-Type: application/json\r\n"
              b"Content-Length: 100\r\n\r\n")


def _app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    body = json.dumps({"status": "ready", "path": environ["PATH_INFO"]}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


@pytest.fixture
def control_server(tmp_path, monkeypatch) -> Iterator[service._ControlServer]:
    monkeypatch.setattr(service, "API_READ_TIMEOUT", READ_TIMEOUT)
    leaks = Leaks()
    server = service._ControlServer(_app, str(tmp_path / "renderd.sock"), 2)
    server.start()
    try:
        yield server
    finally:
        server.stop()
    leaks.check()


def _exchange(path: str, data: bytes, *, shut: bool = False) -> bytes:
    """Send ``data`` (then shut the sending side with ``shut``) and read until the server closes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(HANG)
        sock.connect(path)
        sock.sendall(data)
        if shut:
            sock.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def _error(answer: bytes) -> tuple[bytes, dict[str, Any]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), answer
    return head.split(b"\r\n")[0], json.loads(body)["error"]


@pytest.mark.parametrize("data, came", [
    (b"GET /v1/health HTTP/1.1\r\nHost: x\r\n", "34 byte(s) of its head came"),
    (LEASE_HEAD + b'{"client_pid": 1', "16 of its 100 body byte(s) came"),
])
def test_a_request_that_stalls_half_way_is_answered_408_saying_how_much_came(control_server, data, came):
    answer = _exchange(control_server.path, data)
    status, error = _error(answer)
    assert status.split(b" ")[1] == b"408", answer
    assert error["type"] == "RenderdError"
    assert f"not whole within {READ_TIMEOUT:g} s" in error["message"] and "API_READ_TIMEOUT" in error["message"]
    assert came in error["message"], error
    if data.startswith(b"POST"):
        assert "POST /v1/environments/demo/leases request" in error["message"], error


def test_a_request_cut_short_by_a_half_close_is_answered_400_saying_so(control_server):
    answer = _exchange(control_server.path, LEASE_HEAD + b'{"client', shut=True)
    status, error = _error(answer)
    assert status.split(b" ")[1] == b"400", answer
    assert "cut short: the client shut its sending side" in error["message"], error
    assert "8 of its 100 body byte(s) came" in error["message"], error


def test_a_connection_that_began_no_request_is_closed_without_an_answer(control_server):
    # (guard: an idle keep-alive connection gets no stray 408 a client could take for its next request's answer)
    started = time.monotonic()
    assert _exchange(control_server.path, b"") == b""
    assert _exchange(control_server.path, b"\r\n") == b""
    assert time.monotonic() - started < HANG


def test_a_whole_request_then_a_stalled_one_gets_both_answers_in_order(control_server):
    answer = _exchange(control_server.path, b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/envi")
    first, _, rest = answer.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200"), answer
    assert b"HTTP/1.0 408" in rest or b"HTTP/1.1 408" in rest, answer
