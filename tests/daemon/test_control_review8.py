"""The control API and the ``renderd`` command line: names holding '/', 405's Allow, output that cannot be
written, empty option values."""

from __future__ import annotations

import http.client
import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from renderd.daemon.client import ControlClient, connect
from renderd.errors import ConfigError, LeaseError, RenderdError
from tests.daemon.conftest import PLAYER, fast_config
from tests.helpers.control_review14e import raw_request, run_renderd

# -- names holding '/' -------------------------------------------------------------------------------------------

def test_an_environment_name_holding_a_slash_reaches_the_api_and_is_told_apart(shared_daemon):
    # The configuration allows no '/' in a name; a client that asks for one (percent-encoded, as ControlClient
    # and connect() send it) was answered "no such route", which said nothing about the name.
    d = shared_daemon
    c = d.client
    with pytest.raises(RenderdError) as info:
        connect("a/b", socket=d.socket, timeout=1)
    assert type(info.value) is LeaseError and info.value.status == 404
    assert "no environment named 'a/b'" in str(info.value)
    with pytest.raises(RenderdError) as info:
        c.request("GET", "/v1/environments/a%2Fb")
    assert info.value.status == 404 and "no environment named 'a/b'" in str(info.value)
    with pytest.raises(RenderdError) as info:
        c.request("DELETE", "/v1/environments/demo%2F")
    assert info.value.status == 404 and "no environment named 'demo/'" in str(info.value)
    with pytest.raises(ConfigError) as info:
        c.request("PUT", "/v1/environments/a%2fb", {"executable": [PLAYER], "platform": "headless"})
    assert info.value.status == 400
    assert "environments.a/b: an environment name is 1-64 letters, digits, '_', '.' or '-'" in str(info.value)
    assert [e["name"] for e in c.environments()] == ["demo"]
    # A '/' written as such still separates segments, and literal parts may be percent-encoded.
    with pytest.raises(RenderdError) as info:
        c.request("GET", "/v1/environments/a/b")
    assert info.value.status == 404 and "no such route" in str(info.value)
    assert c.get("/v1/%68ealth")["status"] == "ready"
    assert c.get("/v1/environments/d%65mo")["name"] == "demo"
    assert "Traceback" not in d.output()


def test_a_name_holding_a_slash_on_the_http_listener_is_told_apart(daemon):
    # The HTTP listener's server hands the application the decoded path only: a '/' in a name cannot be told
    # from a separator there, and the 404 says that names never hold one.
    d = daemon(fast_config(daemon='http = "127.0.0.1:0"'))
    token = Path(d.runtime_dir, "control.token").read_text().strip()
    (address,) = [c.laddr for c in psutil.Process(d.pid).net_connections(kind="inet")
                  if c.status == psutil.CONN_LISTEN]
    conn = http.client.HTTPConnection(address.ip, address.port, timeout=20)
    try:
        conn.request("GET", "/v1/environments/a%2Fb", headers={"Authorization": f"Bearer {token}"})
        response = conn.getresponse()
        status, body = response.status, json.loads(response.read())
    finally:
        conn.close()
    assert status == 404, body
    assert "never hold '/'" in body["error"]["message"], body


# -- 405 ---------------------------------------------------------------------------------------------------------

def test_a_405_allows_head_wherever_get_is(shared_daemon):
    d = shared_daemon
    for request, allowed in [
        (b"PATCH /v1/health HTTP/1.0\r\n\r\n", "GET, HEAD"),
        (b"POST /metrics HTTP/1.0\r\n\r\n", "GET, HEAD"),
        (b"POST /v1/environments/demo HTTP/1.0\r\n\r\n", "DELETE, GET, HEAD, PUT"),
        (b"PUT /v1/leases/x HTTP/1.0\r\n\r\n", "DELETE, GET, HEAD"),
        (b"GET /v1/environments/demo/leases HTTP/1.0\r\n\r\n", "POST"),
        (b"HEAD /v1/environments/demo/leases HTTP/1.0\r\n\r\n", "POST"),
    ]:
        status, headers, body = raw_request(d.socket, request)
        assert status == 405 and headers["allow"] == allowed, (request, headers)
        if not request.startswith(b"HEAD"):
            assert f"(allowed: {allowed})" in json.loads(body)["error"]["message"]
    # What Allow offers is served.
    status, _, body = raw_request(d.socket, b"HEAD /v1/health HTTP/1.0\r\n\r\n")
    assert (status, body) == (200, b"")


# -- output that cannot be written -------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [("status",), ("status", "--json"), ("validate", "CONFIG"), ("--version",),
                                  ("--help",), ("status", "--help")])
def test_output_that_cannot_be_written_is_a_one_line_error(shared_daemon, tmp_path, args):
    d = shared_daemon
    config = tmp_path / "ok.toml"
    config.write_text(f'[environments.demo]\nexecutable = ["{PLAYER}"]\nplatform = "headless"\n')
    args = tuple(str(config) if a == "CONFIG" else a for a in args)
    with open("/dev/full", "wb") as full:
        result = run_renderd(*args, stdout=full, env={"RENDERD_SOCKET": d.socket})
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Error: cannot write to standard output: no space left on the device [ENOSPC]" in result.stderr
    # The same commands with somewhere to write succeed.
    assert run_renderd(*args, env={"RENDERD_SOCKET": d.socket}).returncode == 0


def test_a_closed_pipe_on_stdout_is_still_a_quiet_exit_1(shared_daemon):
    # (what `renderd status | head -0` gives: no message, as click does for EPIPE)
    d = shared_daemon
    read, write = os.pipe()
    os.close(read)
    try:
        result = run_renderd("status", "--socket", d.socket, stdout=write)
    finally:
        os.close(write)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result


# -- empty option values -----------------------------------------------------------------------------------------

def test_start_refuses_an_empty_http_address(tmp_path):
    # An unset variable in `--http "$ADDR"` turned the listener off without a word, even over the file's.
    config = tmp_path / "renderd.toml"
    config.write_text(f'[daemon]\nhttp = "127.0.0.1:0"\n[environments.demo]\nexecutable = ["{PLAYER}"]\n'
                      'platform = "headless"\ninstances = 0\n')
    sock = tmp_path / "renderd.sock"
    result = run_renderd("start", "-c", str(config), "--socket", str(sock), "--runtime-dir", str(tmp_path / "run"),
                         "--http", "", timeout=20)
    assert result.returncode == 2, result
    assert "--http" in result.stderr and "empty" in result.stderr, result.stderr
    assert not sock.exists()


# -- the control client ------------------------------------------------------------------------------------------

def test_a_request_the_daemon_does_not_answer_says_how_long_and_keeps_the_lease_id_secret(daemon, caplog):
    # The lease id is its holder's secret (whoever has it can end the lease); the client's timeout error named
    # the request's path with it, and connect()'s session logs that error when a release fails.
    d = daemon(fast_config())
    lease_id = d.client.lease("demo", timeout=20)["lease"]
    c = ControlClient(d.socket, timeout=0.2)
    os.kill(d.pid, signal.SIGSTOP)  # a daemon that takes the connection and never answers
    try:
        for call, what in ((lambda: c.release(lease_id, clean=False), "DELETE /v1/leases/ID"),
                           (lambda: c.lease_status(lease_id), "GET /v1/leases/ID")):
            started = time.monotonic()
            with pytest.raises(RenderdError) as info:
                call()
            assert time.monotonic() - started < 10
            assert f"did not answer {what} in time (within 0.2 s)" in str(info.value)
            assert lease_id not in str(info.value)
    finally:
        os.kill(d.pid, signal.SIGCONT)
    try:
        d.client.release(lease_id, clean=False)
    except LeaseError:  # (the DELETE sent before, served once the daemon ran again)
        pass
    d.wait_players(lambda players: [p["lease"] for p in players] == [None], what="the lease to end")


def test_a_lease_timeout_that_is_not_a_number_of_seconds_is_refused_before_any_request(daemon):
    # A NaN passed every comparison: sent as a 0 s wait (a ready player leased at once), and busy answers
    # (LeaseBusyError) retried for ever, never "until - now <= 0.5".
    d = daemon(fast_config())
    c = ControlClient(d.socket)
    for bad in (float("nan"), -1.0, "30", None, True):
        with pytest.raises(ValueError, match="timeout") as info:
            c.lease("demo", timeout=bad)
        assert isinstance(info.value, ConfigError)
    assert [p["state"] for p in d.players()] == ["READY"]  # nothing was leased
    answer = c.lease("demo", timeout=1e9)  # (more than the daemon waits: as much as it does)
    assert c.release(answer["lease"])["released"] is True
