"""Request bodies a JSON encoder would never write but a hand-written request can: a key given twice in one object
is refused with the key named (json.loads kept the last silently), and a PUT's ``null`` says "null" and that
leaving the key out gives the default (was "got NoneType")."""

from __future__ import annotations

import json
import socket
from typing import Any

from renderd.errors import RenderdError
from tests.daemon.conftest import fast_config

DEADLINE = 20.0


def _raw(sock_path: str, method: str, path: str, body: bytes) -> tuple[int, Any]:
    """One request with ``body`` sent as it is; (status, decoded JSON answer)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(DEADLINE)
        s.connect(sock_path)
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload)


def test_a_key_given_twice_is_refused_and_changes_nothing(daemon):
    d = daemon(fast_config())
    status, answer = _raw(d.socket, "PUT", "/v1/environments/other",
                          b'{"platform": "headless", "width": 64, "width": 80}')
    assert status == 400, answer
    assert answer["error"]["type"] == "RenderdError"
    assert "'width' twice" in answer["error"]["message"]
    assert [e["name"] for e in d.environments()] == ["demo"]  # nothing declared

    # Nested: two values for one variable of env.
    status, answer = _raw(d.socket, "PUT", "/v1/environments/demo",
                          b'{"platform": "headless", "env": {"A": "1", "A": "2"}}')
    assert status == 400 and "'A' twice" in answer["error"]["message"], answer
    assert d.environments()[0]["config"]["env"] == {}

    # A release that says both clean and not clean: refused, the lease left as it was.
    lease = d.client.lease("demo", timeout=DEADLINE)
    try:
        status, answer = _raw(d.socket, "DELETE", f"/v1/leases/{lease['lease']}",
                              b'{"clean": false, "clean": true}')
        assert status == 400 and "'clean' twice" in answer["error"]["message"], answer
        assert d.client.request("GET", f"/v1/leases/{lease['lease']}")[1]["ended"] is None
        assert d.players()[0]["state"] == "LEASED"
    finally:
        d.client.release(lease["lease"], clean=False)


def test_a_null_value_is_named_null(daemon):
    d = daemon(fast_config())
    status, answer = _raw(d.socket, "PUT", "/v1/environments/demo", b'{"platform": "headless", "width": null}')
    assert status == 400, answer
    assert answer["error"]["type"] == "ConfigError"
    message = answer["error"]["message"]
    assert "environments.demo.width" in message and "got null" in message and "NoneType" not in message
    assert "leave the key out" in message
    try:
        d.client.request("PUT", "/v1/environments/demo", {"platform": "headless", "gpus": [None]})
    except RenderdError as exc:
        assert "[0] is null" in str(exc)
    else:
        raise AssertionError("a null GPU index was taken")
