"""The control API on the HTTP listener (``[daemon] http``): every route but the players' ``/ping`` and
``/train`` needs ``Authorization: Bearer TOKEN`` (the token generated into ``RUNTIME_DIR/control.token``,
or read from ``control_token_file``); without it, 401 JSON and nothing reaches the API."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.daemon.conftest import DaemonProcess, fast_config
from tests.helpers.http_control_review14e import call, control_token, http_address


def test_the_control_api_on_the_http_listener_needs_the_token(secure_daemon) -> None:
    d = secure_daemon
    token = control_token(d)
    for path in ("/v1/health", "/v1/environments", "/metrics", "/v1/leases/x", "/nope"):
        for given, scheme in ((None, "Bearer"), ("wrong", "Bearer"), (token[:-1], "Bearer"), (token + "x", "Bearer"),
                              (token, "Basic"), ("", "Bearer")):
            status, headers, body = call(d, "GET", path, token=given, scheme=scheme)
            assert status == 401 and headers["content-type"] == "application/json", (path, given, status)
            assert headers["www-authenticate"].startswith("Bearer")
            assert set(json.loads(body)["error"]) == {"type", "message"}
    status, _, body = call(d, "GET", "/v1/health", token=token)
    assert status == 200 and json.loads(body)["status"] == "ready"
    status, _, body = call(d, "GET", "/metrics", token=token)
    assert status == 200 and b"renderd_players" in body
    status, _, body = call(d, "GET", "/nope", token=token)
    assert status == 404 and json.loads(body)["error"]["type"] == "RenderdError"
    status, _, body = call(d, "GET", "/ping")  # the players' routes keep their own (form) token
    assert status == 200 and body == b"pong"
    assert token not in d.output()  # never logged
    assert "refused GET" in d.output()  # refusals are


def test_remote_control_can_declare_and_remove_an_environment(secure_daemon) -> None:
    d = secure_daemon
    token = control_token(d)
    status, _, body = call(d, "PUT", "/v1/environments/remote", token=token, body={"instances": 0})
    assert status == 201, body
    assert "remote" in [e["name"] for e in d.client.environments()]
    status, _, body = call(d, "DELETE", "/v1/environments/remote", token=token)
    assert status == 202, body
    status, _, _ = call(d, "PUT", "/v1/environments/remote2", body={"instances": 0})
    assert status == 401 and "remote2" not in [e["name"] for e in d.client.environments()]


def test_a_configured_token_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("  s3cr3t-control-token-0123456789\n")
    token_file.chmod(0o600)
    d = DaemonProcess(tmp_path / "d", fast_config(daemon=f'http = "127.0.0.1:0"\ncontrol_token_file = "{token_file}"'))
    try:
        d.wait_ready()
        assert not os.path.exists(os.path.join(d.runtime_dir, "control.token"))
        assert call(d, "GET", "/v1/health", token="s3cr3t-control-token-0123456789")[0] == 200
        assert call(d, "GET", "/v1/health", token="s3cr3t")[0] == 401
    finally:
        d.cleanup()


@pytest.mark.parametrize("content", ["short", ""])
def test_a_bad_token_file_stops_the_start(tmp_path: Path, content: str) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(content)
    d = DaemonProcess(tmp_path / "d", fast_config(daemon=f'http = "127.0.0.1:0"\ncontrol_token_file = "{token_file}"'))
    try:
        assert d.wait_exit(20) == 1
        assert "at least 16 characters" in d.output()
    finally:
        d.cleanup()


def test_the_generated_token_is_removed_at_stop(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path / "d", fast_config(daemon='http = "127.0.0.1:0"'))
    try:
        d.wait_ready()
        token = control_token(d)
        assert call(d, "GET", "/v1/health", token=token)[0] == 200
        d.signal(15)
        assert d.wait_exit() == 0
        assert not os.path.exists(d.runtime_dir)  # the token with everything else the daemon made
    finally:
        d.cleanup()


def test_a_large_control_request_is_refused_from_its_head_before_any_token_check(secure_daemon) -> None:
    # Without the token a peer could otherwise make the daemon read (and hold) a 256 MiB body per connection
    # only to be told 401: a control request's body is limited from its Content-Length, before it is read.
    import socket
    import time

    d = secure_daemon
    host, port = http_address(d)
    with socket.create_connection((host, port), timeout=20) as sock:
        sock.sendall(b"PUT /v1/environments/x HTTP/1.1\r\nHost: h\r\nContent-Length: 209715200\r\n\r\n" + b"{" * 1000)
        deadline = time.monotonic() + 20
        answer = b""
        while b"\r\n\r\n" not in answer and time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"over the limit of 1048576 bytes" in answer
    # The players' routes keep the frames' limit.
    status, _, _ = call(d, "POST", "/train", body={"x": "y" * 2_000_000})
    assert status != 413
