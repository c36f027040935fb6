"""Who can reach a player over the network: nobody unless configured. The control API is a unix socket
(and, on the HTTP listener, behind a bearer token: test_remote_control.py); the HTTP listener for HTTP
players is off by default, binds loopback when renderd picks the address, and refuses a post whose token
is missing or wrong (403) after a constant-time comparison."""

from __future__ import annotations

import ast
import http.client
import io
import ipaddress
import json
import time
from pathlib import Path

import psutil

import renderd
from renderd.config import DaemonConfig
from renderd.protocol import encode_action
from renderd.transport.http import PlayerBridgeRegistry, make_player_app

RENDERD_SOURCE = Path(renderd.__file__).parent
HTTP_SOURCE = RENDERD_SOURCE / "transport" / "http.py"
BOUNDARY = "securityTestBoundary"


def listening(pid: int) -> list[tuple[str, int]]:
    """The TCP/UDP addresses process ``pid`` listens on."""
    return [
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN or not c.raddr
    ]


def test_http_listener_is_off_by_default() -> None:
    assert DaemonConfig().http == ""


def test_daemon_listens_on_loopback_only(secure_daemon) -> None:
    addresses = listening(secure_daemon.pid)
    assert addresses, "the configured HTTP listener is missing"
    for ip, _port in addresses:
        assert ipaddress.ip_address(ip).is_loopback, addresses


def test_launch_http_binds_loopback(nothing_left) -> None:
    with renderd.launch(["renderd-player", "--static-frame"], transport="http", width=32, height=24,
                        platform="headless", start_timeout=20) as session:
        addresses = listening(psutil.Process().pid)
        assert addresses and all(ipaddress.ip_address(ip).is_loopback for ip, _ in addresses), addresses
        assert psutil.Process(session.pid).environ()["AI2THOR_HOST"] == "127.0.0.1"
        session.step("Pass")


def _form(token: str | None) -> bytes:
    md = {"agents": [{"screenWidth": 2, "screenHeight": 1}], "sequenceId": 0}
    parts = [("image", bytes(6)), ("metadata", json.dumps(md).encode())]
    if token is not None:
        parts.append(("token", token.encode()))
    out = b""
    for name, body in parts:
        out += (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n").encode() + body + b"\r\n"
    return out + f"--{BOUNDARY}--\r\n".encode()


def _post(app, body: bytes) -> tuple[int, dict]:
    environ = {
        "REQUEST_METHOD": "POST", "PATH_INFO": "/train", "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": f"multipart/form-data; boundary={BOUNDARY}", "wsgi.input": io.BytesIO(body),
        "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "1", "SERVER_PROTOCOL": "HTTP/1.1",
    }
    got = {}

    def start_response(status, headers, exc_info=None):
        got["status"] = int(status.split()[0])
        got["headers"] = dict(headers)

    data = b"".join(app(environ, start_response))
    return got["status"], json.loads(data)


def test_wrong_or_missing_token_is_403_and_the_right_one_is_served() -> None:
    registry = PlayerBridgeRegistry()
    bridge = registry.register()
    app = make_player_app(registry)
    for token in (None, "", "wrong", bridge.token[:-1], bridge.token + "x", bridge.token.upper()):
        if token == bridge.token:
            continue
        status, body = _post(app, _form(token))
        assert status == 403 and body["error"]["type"] == "LeaseError", (token, body)
        assert bridge.frames_posted == 0
    bridge.send(encode_action({"action": "Pass", "sequenceId": 1}), time.monotonic() + 5)  # the answer
    status, body = _post(app, _form(bridge.token))
    assert status == 200 and body == {"action": "Pass", "sequenceId": 1}
    registry.close()


def test_daemon_http_listener_refuses_a_wrong_token(secure_daemon) -> None:
    ((ip, port),) = listening(secure_daemon.pid)
    conn = http.client.HTTPConnection(ip, port, timeout=10)
    try:
        body = _form("not-the-token")
        conn.request("POST", "/train", body, {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
        response = conn.getresponse()
        assert response.status == 403
        assert json.loads(response.read())["error"]["type"] == "LeaseError"
    finally:
        conn.close()


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_tokens_are_compared_in_constant_time() -> None:
    tree = ast.parse(HTTP_SOURCE.read_text())
    (lookup,) = [f for f in _functions(tree) if f.name == "lookup"]
    calls = {ast.unparse(n.func) for n in ast.walk(lookup) if isinstance(n, ast.Call)}
    assert "hmac.compare_digest" in calls, calls
    # Nowhere in renderd is a token (or secret) compared with == / != against anything but a literal.
    offenders = []
    for path in RENDERD_SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare) or not any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
                continue
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Constant) for o in operands):
                continue
            names = [ast.unparse(o).lower() for o in operands]
            if any("token" in n or "secret" in n for n in names):
                offenders.append(f"{path.relative_to(RENDERD_SOURCE.parent)}:{node.lineno}: {ast.unparse(node)}")
    assert not offenders, offenders
