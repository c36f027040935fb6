"""The control token of the HTTP listener at its edges: what an unauthenticated peer can put in the log, token
files renderd cannot honour (non-ASCII, not a regular file, endless), and SIGHUP re-reading the token file."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonProcess, fast_config, wait_for
from tests.helpers.http_control_review14e import call, http_address

TOKEN = "first-control-token-0123456789"


def _token_daemon(base: Path, token_file: Path) -> DaemonProcess:
    return DaemonProcess(base, fast_config(instances=0, daemon=f'http = "127.0.0.1:0"\n'
                                                                f'control_token_file = "{token_file}"'))


def _raw(d: DaemonProcess, request: bytes) -> bytes:
    with socket.create_connection(http_address(d), timeout=10) as s:
        s.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
    return answer


def test_a_refused_request_cannot_write_lines_into_the_log(tmp_path: Path) -> None:
    """The path of a request refused for want of the token is logged; an escaped CR/LF in it must not start
    a log line of the peer's choosing."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    d = _token_daemon(tmp_path / "d", token_file)
    try:
        d.wait_ready()
        forged = "ERROR renderd.daemon.supervisor: forged"
        path = "/v1/health%0d%0a" + forged.replace(" ", "%20") + "%1b[2J" + "x" * 2000
        answer = _raw(d, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
        wait_for(lambda: "refused GET" in d.output(), 10, "the refusal to be logged")
        out = d.output()
        assert not any(line.startswith(forged) for line in out.splitlines()), out
        assert "\x1b" not in out and "x" * 1000 not in out  # no terminal escapes, and not 2000 bytes of it
        (line,) = [line for line in out.splitlines() if "refused GET" in line]
        assert "/v1/health\\r\\nERROR" in line, line
    finally:
        d.cleanup()


@pytest.mark.parametrize("content", ["pässwörd-0123456789abcdef", "control\x01token-0123456789"],
                         ids=["non-ascii", "control-character"])
def test_a_token_no_client_can_send_stops_the_start(tmp_path: Path, content: str) -> None:
    """A header carries the token's bytes as the client encodes them (curl: UTF-8, Python's http.client:
    latin-1), so a non-ASCII token would match for some clients and never for others: refused at start."""
    token_file = tmp_path / "token"
    token_file.write_text(content, encoding="utf-8")
    token_file.chmod(0o600)
    d = _token_daemon(tmp_path / "d", token_file)
    try:
        assert d.wait_exit(20) == 1
        assert "printable ASCII" in d.output()
    finally:
        d.cleanup()


def test_a_token_file_that_is_not_a_regular_file_stops_the_start(tmp_path: Path) -> None:
    """A FIFO (or a device) in control_token_file: a clear error at once, not a start-up blocked forever on
    the open or the read."""
    fifo = tmp_path / "token.fifo"
    os.mkfifo(fifo, 0o600)
    d = _token_daemon(tmp_path / "d", fifo)
    try:
        assert d.wait_exit(10) == 1
        assert "not a regular file" in d.output()
    finally:
        d.cleanup()


def test_sighup_rereads_the_token_file(tmp_path: Path) -> None:
    """Rotating the token is writing the file and reloading: the old token stops working at once. A file
    that cannot be used at the reload is logged and the token in use is kept."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    d = _token_daemon(tmp_path / "d", token_file)
    try:
        d.wait_ready()
        assert call(d, "GET", "/v1/health", token=TOKEN)[0] == 200
        new = "second-control-token-9876543210"
        token_file.write_text(new + "\n")
        d.signal(1)
        wait_for(lambda: call(d, "GET", "/v1/health", token=new)[0] == 200, 10, "the new token to be accepted")
        assert call(d, "GET", "/v1/health", token=TOKEN)[0] == 401
        assert "control token re-read" in d.output()

        token_file.write_text("short")
        d.signal(1)
        wait_for(lambda: "keeps the control token it had" in d.output(), 10, "the bad token file to be reported")
        assert call(d, "GET", "/v1/health", token=new)[0] == 200
        assert call(d, "GET", "/v1/health", token="short")[0] == 401
        assert new not in d.output() and TOKEN not in d.output()
    finally:
        d.cleanup()
