"""The control API on a daemon's HTTP listener (``[daemon] http``): its address, one request with a token, and
the generated control token (checked to be the daemon user's, mode 0600)."""

from __future__ import annotations

import http.client
import json
import os
import stat
from pathlib import Path

import psutil

from tests.daemon.conftest import DaemonProcess


def http_address(d: DaemonProcess) -> tuple[str, int]:
    (address,) = [c.laddr for c in psutil.Process(d.pid).net_connections(kind="inet")
                  if c.status == psutil.CONN_LISTEN]
    return address.ip, address.port


def call(d: DaemonProcess, method: str, path: str, *, token: str | None = None, scheme: str = "Bearer",
         body: object = None) -> tuple[int, dict[str, str], bytes]:
    host, port = http_address(d)
    conn = http.client.HTTPConnection(host, port, timeout=20)
    try:
        headers = {"Authorization": f"{scheme} {token}"} if token is not None else {}
        data = json.dumps(body).encode() if body is not None else None
        if data is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def control_token(d: DaemonProcess) -> str:
    path = os.path.join(d.runtime_dir, "control.token")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and os.stat(path).st_uid == os.geteuid()
    return Path(path).read_text().strip()
