"""One daemon for the security tests, started the way an attacker would like it to be: umask 000, debug
logging, secrets in its environment and in an environment's ``env`` table, an HTTP listener with an
HTTP player, and players that log at debug level too.

``secure_daemon`` is that daemon once its players are ready; ``SECRETS`` are the values that must never
show up in a log, a status output or an API answer (HTTP player tokens and lease ids are added by the
tests that know them).
"""

from __future__ import annotations

import os
import secrets
import subprocess
from typing import Any

import pytest

from renderd.daemon.client import ControlClient
from tests.daemon.conftest import PLAYER, RENDERD, DaemonProcess
from tests.faults.conftest import nothing_left  # noqa: F401  (the leak-check fixture)


def _secret(tag: str) -> str:
    return f"{tag}-{secrets.token_hex(12)}"


#: Secret-looking variables in the daemon's own environment (the players inherit them).
DAEMON_ENV_SECRETS = {
    "RENDERD_TEST_API_TOKEN": _secret("daemon-token"),
    "RENDERD_TEST_SECRET": _secret("daemon-secret"),
    "RENDERD_TEST_DB_PASSWORD": _secret("daemon-password"),
    "RENDERD_TEST_SIGNING_KEY": _secret("daemon-key"),
}
#: Secret-looking variables of an environment's ``env`` table (given to its players).
CONFIG_ENV_SECRETS = {
    "DB_PASSWORD": _secret("config-password"),
    "SERVICE_API_KEY": _secret("config-key"),
    "GITHUB_TOKEN": _secret("config-token"),
    "CLIENT_SECRET": _secret("config-secret"),
}
SECRETS = {**DAEMON_ENV_SECRETS, **CONFIG_ENV_SECRETS}

PLAYER_ARGV = f'["{PLAYER}", "--static-frame", "--log-level", "debug"]'


def _inline_table(values: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k} = "{v}"' for k, v in values.items()) + "}"


CONFIG = f"""
[daemon]
http = "127.0.0.1:0"
backoff_initial = 0.05
backoff_max = 0.2
stop_grace = 2.0

[environments.demo]
executable = {PLAYER_ARGV}
platform = "headless"
width = 64
height = 48
start_timeout = 20.0
env = {_inline_table(CONFIG_ENV_SECRETS)}

[environments.web]
executable = {PLAYER_ARGV}
platform = "headless"
transport = "http"
width = 64
height = 48
start_timeout = 20.0
"""


@pytest.fixture(scope="package")
def secure_daemon(tmp_path_factory):
    base = tmp_path_factory.mktemp("security")
    old = os.umask(0)  # renderd must set its modes explicitly, whatever umask it inherits
    try:
        d = DaemonProcess(base, CONFIG, args=("--log-level", "debug"), env=DAEMON_ENV_SECRETS,
                          socket=str(base / "sockdir" / "renderd.sock"))
    finally:
        os.umask(old)
    try:
        d.wait_ready()
        yield d
    finally:
        d.cleanup()


def status_output(d: DaemonProcess, *args: str) -> str:
    out = subprocess.run([*RENDERD, "status", "--socket", d.socket, *args], capture_output=True, text=True,
                         timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def api_outputs(d: DaemonProcess) -> dict[str, Any]:
    """Everything the daemon tells anyone who asks, as text."""
    client = ControlClient(d.socket)
    return {
        "renderd status --json": status_output(d, "--json"),
        "renderd status": status_output(d),
        "GET /v1/health": str(client.request("GET", "/v1/health")[1]),
        "GET /v1/environments": str(client.request("GET", "/v1/environments")[1]),
        "GET /v1/environments/demo": str(client.request("GET", "/v1/environments/demo")[1]),
        "GET /metrics": str(client.request("GET", "/metrics")[1]),
    }
