"""The control API on a real daemon: routes, JSON errors, declaring environments, lease waits."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time

import pytest

from renderd.daemon.client import ControlClient, connect
from renderd.errors import ConfigError, LeaseError, PlayerCrashed, RenderdError

from tests.daemon.conftest import PLAYER, fast_config, wait_for
from tests.helpers.control_review14e import raw_request


def env_body(**keys):
    body = {"executable": [PLAYER, "--static-frame"], "platform": "headless", "start_timeout": 20.0}
    body.update(keys)
    return body


def test_errors_are_json_never_a_traceback_page(daemon):
    d = daemon(fast_config())
    c = d.client
    for method, path, body, status in [
        ("GET", "/nope", None, 404),
        ("GET", "/v1/environments/nope", None, 404),
        ("POST", "/v1/environments/nope/leases", {"client_pid": os.getpid()}, 404),
        ("DELETE", "/v1/leases/abc", None, 404),
        ("POST", "/v1/environments/demo/leases", {"client_pid": "me"}, 400),
        ("POST", "/v1/environments/demo/leases", {"client_pid": 2**22 + 12345}, 400),
        ("POST", "/v1/environments/demo/leases", {"client_pid": 2**31}, 400),  # beyond pid_t
        ("POST", "/v1/environments/demo/leases", {"client_pid": 10**20}, 400),
        ("POST", "/v1/environments/demo/leases", {"client_pid": os.getpid(), "timeout": -1}, 400),
        ("POST", "/v1/environments/demo/leases", {"client_pid": os.getpid(), "color": 1}, 400),
        ("PUT", "/v1/environments/demo", {"widht": 3}, 400),
        ("PUT", "/v1/environments/demo", {"width": "wide"}, 400),
        ("PUT", "/v1/environments/demo", {"transport": "http"}, 400),
        ("PUT", "/v1/environments/bad%20name", {}, 400),
    ]:
        with pytest.raises(RenderdError) as info:
            c.request(method, path, body)
        assert info.value.status == status, (method, path, info.value)
    with pytest.raises(ConfigError, match=r"PUT /v1/environments/demo: environments\.demo\.widht: unknown key"):
        c.request("PUT", "/v1/environments/demo", {"widht": 3})
    with pytest.raises(LeaseError, match="is not a running process"):
        c.request("POST", "/v1/environments/demo/leases", {"client_pid": 2**22 + 12345})

    status, headers, body = raw_request(d.socket, b"PATCH /v1/health HTTP/1.0\r\n\r\n")
    assert status == 405 and headers["allow"] == "GET, HEAD" and headers["content-type"] == "application/json"
    assert b'"type":"RenderdError"' in body
    bad = b"{not json"
    status, _, body = raw_request(
        d.socket,
        b"PUT /v1/environments/demo HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(bad)).encode() + b"\r\n\r\n" + bad,
    )
    assert status == 400 and b"not UTF-8 JSON" in body
    status, _, body = raw_request(
        d.socket, b"PUT /v1/environments/demo HTTP/1.0\r\nContent-Length: 2\r\n\r\n[]"
    )
    assert status == 400 and b"JSON object" in body
    assert d.health()["status"] == "ready"  # none of that disturbed the daemon


def test_health_environments_and_metrics(daemon):
    d = daemon(fast_config())
    health = d.client.health()
    assert health["pid"] == d.pid and health["environments"]["demo"] == {
        "wanted": 1, "ready": 1, "leased": 0, "failed": 0}
    (env,) = d.client.environments()
    assert env["config"]["platform"] == "headless" and env["config"]["executable"][0] == PLAYER
    assert d.client.get("/v1/environments/demo")["name"] == "demo"
    status, headers, body = raw_request(d.socket, b"GET /metrics HTTP/1.0\r\n\r\n")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    text = body.decode()
    assert 'renderd_players{environment="demo",state="READY"} 1.0' in text
    for name in ("renderd_player_restarts_total", "renderd_player_boot_failures_total", "renderd_leases_total",
                 "renderd_lease_wait_seconds_bucket", "renderd_leases_active"):
        assert name in text or name.replace("_total", "") in text


def test_put_scales_and_delete_removes(daemon):
    d = daemon(fast_config())
    c = d.client
    status, state = c.request("PUT", "/v1/environments/other", env_body(instances=2))
    assert status == 201 and state["wanted"] == 2
    d.wait_players(lambda ps: [p["state"] for p in ps] == ["READY", "READY"], name="other", what="2 players")
    status, _ = c.request("PUT", "/v1/environments/other", env_body(instances=1))
    assert status == 200
    (kept,) = d.wait_players(lambda ps: len(ps) == 1, name="other", what="a scale down")
    assert kept["index"] == 0
    # Scaling down a leased player waits for its lease to end.
    with connect("other", socket=d.socket) as session:
        c.request("PUT", "/v1/environments/other", env_body(instances=0))
        time.sleep(0.2)
        assert session.step("Pass")
        assert [p["state"] for p in d.players("other")] == ["LEASED"]
    d.wait_players(lambda ps: ps == [], name="other", what="the leased player retired")
    with pytest.raises(LeaseError, match="wants 0 instances"):
        connect("other", socket=d.socket, timeout=0.1)
    assert c.request("DELETE", "/v1/environments/other")[0] == 202
    wait_for(lambda: [e["name"] for e in c.environments()] == ["demo"], 10, "the environment removed")


def test_changed_resolution_replaces_players_one_by_one(daemon):
    d = daemon(fast_config(instances=2))
    old = {p["pid"] for p in d.players()}
    d.client.request("PUT", "/v1/environments/demo", env_body(instances=2, width=64, height=48))
    seen_ready_counts = []

    def replaced():
        players = d.players()
        seen_ready_counts.append(sum(p["state"] == "READY" for p in players))
        return (len(players) == 2 and all(p["state"] == "READY" and p["width"] == 64 for p in players)
                and not old & {p["pid"] for p in players})

    wait_for(replaced, 30, "both players replaced")
    assert min(seen_ready_counts) >= 1  # one at a time: a ready player was there throughout
    with connect("demo", socket=d.socket) as session:
        event = session.step("Pass")
        assert (event.screen_width, event.screen_height) == (64, 48)


def test_an_idle_player_of_the_previous_configuration_serves_while_the_new_one_boots(daemon):
    d = daemon(fast_config(instances=2))
    old = {p["pid"] for p in d.players()}
    body = env_body(instances=2, width=64, height=48)
    body["executable"] = [PLAYER, "--static-frame", "--start-delay", "3"]  # the replacements boot slowly
    d.client.request("PUT", "/v1/environments/demo", body)
    wait_for(lambda: any(p["state"] == "STARTING" for p in d.players()), 10, "the first replacement to boot")
    lease = d.client.lease("demo", timeout=0)  # no waiting: the idle outdated player is there
    try:
        assert lease["pid"] in old and (lease["width"], lease["height"]) == (300, 300), lease
    finally:
        d.client.release(lease["lease"])


def test_removing_an_environment_under_a_lease_recycles_nothing(daemon):
    d = daemon(fast_config())
    session = connect("demo", socket=d.socket, timeout=7200)  # over the daemon's hour: it waits an hour at most
    try:
        assert session.step("Pass").sequence_id == 1
        d.client.request("DELETE", "/v1/environments/demo")
        wait_for(lambda: not any(e["name"] == "demo" for e in d.environments()), 20, "demo to be gone")
        # The holder learns why its player went: the daemon stopped it, not an exit status it cannot know.
        with pytest.raises(PlayerCrashed, match=r"the daemon stopped it: environment removed\)") as info:
            session.step("Pass")
        assert info.value.returncode is None
    finally:
        session.close()
    metrics = d.client.request("GET", "/metrics")[1]
    assert 'renderd_player_recycles_total{environment="demo"} 1.0' not in metrics
    assert "recycling demo[0]" not in d.output()
    assert 'renderd_lease_ends_total{environment="demo",how="stopped"} 1.0' in metrics


def test_lease_waiters_are_served_when_a_player_is_released(daemon):
    d = daemon(fast_config())
    first = connect("demo", socket=d.socket)
    try:
        with pytest.raises(LeaseError, match="1 of 1 leased"):
            connect("demo", socket=d.socket, timeout=0.2)
        got: list = []
        waiter = threading.Thread(target=lambda: got.append(connect("demo", socket=d.socket, timeout=10)))
        waiter.start()
        wait_for(lambda: d.client.get("/v1/environments/demo")["waiting_clients"] == 1, 5, "a waiting client")
        first.step("Pass")
        first.close()
        waiter.join(10)
        (second,) = got
        with second:
            assert second.step("Pass").sequence_id == 1
    finally:
        first.close()
    metrics = ControlClient(d.socket).request("GET", "/metrics")[1]
    assert 'renderd_lease_timeouts_total{environment="demo"} 1.0' in metrics


def test_a_lease_request_whose_client_hung_up_is_never_granted(daemon):
    # A client that gives up on its lease request and closes the connection, while its process lives on
    # (a thread of a trainer that timed out): the player released meanwhile must stay READY, not go
    # LEASED to a lease nobody knows for as long as that process lives.
    d = daemon(fast_config())
    first = connect("demo", socket=d.socket)
    try:
        body = b'{"client_pid": %d, "timeout": 60}' % os.getpid()
        request = (b"POST /v1/environments/demo/leases HTTP/1.1\r\nHost: renderd\r\n"
                   b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(d.socket)
            s.sendall(request)
            wait_for(lambda: d.client.get("/v1/environments/demo")["waiting_clients"] == 1, 5, "the request to wait")
        # Hung up. The request stops waiting soon after, without a lease.
        wait_for(lambda: d.client.get("/v1/environments/demo")["waiting_clients"] == 0, 5,
                 "the abandoned request to stop waiting")
        first.close()
        wait_for(lambda: d.players()[0]["state"] == "READY", 10, "the released player to be READY")
        assert "hung up" in d.output()
        with connect("demo", socket=d.socket, timeout=10) as again:
            assert again.step("Pass").sequence_id == 1
    finally:
        first.close()


def test_socket_pipes_and_logs_are_private(daemon):
    import stat

    d = daemon(fast_config())
    assert stat.S_IMODE(os.stat(d.socket).st_mode) == 0o600
    run = d.runtime_dir
    assert stat.S_IMODE(os.stat(run).st_mode) == 0o700
    for sub in ("players", "logs"):
        assert stat.S_IMODE(os.stat(os.path.join(run, sub)).st_mode) == 0o700
    (pair,) = os.listdir(os.path.join(run, "players"))
    pair_dir = os.path.join(run, "players", pair)
    assert stat.S_IMODE(os.stat(pair_dir).st_mode) == 0o700
    for name in ("server.pipe", "client.pipe"):
        st = os.stat(os.path.join(pair_dir, name))
        assert stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    (log,) = os.listdir(os.path.join(run, "logs"))
    assert stat.S_IMODE(os.stat(os.path.join(run, "logs", log)).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.join(run, "renderd.lock")).st_mode) == 0o600


def test_a_lease_tells_its_holder_how_its_player_exited(daemon):
    d = daemon(fast_config())
    c = d.client
    answer = c.lease("demo", timeout=10)
    status = c.lease_status(answer["lease"])
    assert status["ended"] is None and status["player_exit"] is None and status["pid"] == answer["pid"]
    os.kill(answer["pid"], signal.SIGKILL)
    status = wait_for(lambda: c.lease_status(answer["lease"])["player_exit"] and c.lease_status(answer["lease"]),
                      10, "the daemon to reap the player")
    assert status["ended"] == "player_exited"
    assert status["player_exit"] == {"returncode": -signal.SIGKILL, "description": "killed by SIGKILL"}
    with pytest.raises(LeaseError):
        c.lease_status("0" * 32)  # only the holder knows the id
    with pytest.raises(LeaseError):
        c.release(answer["lease"])  # ended already


def test_a_head_request_is_answered_without_a_body(daemon):
    # HEAD is GET's head only: a body after it would be read as the start of the next answer on the connection.
    d = daemon(fast_config())
    for path, status in [("/v1/health", 200), ("/metrics", 200), ("/v1/environments/nope", 404), ("/nope", 404)]:
        got, headers, body = raw_request(d.socket, f"HEAD {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        assert (got, body) == (status, b""), path
        assert int(headers["content-length"]) > 0  # the length of the GET's body, as HEAD should say
    # On one connection: the answer to the HEAD, then the GET's whole answer.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(d.socket)
        s.sendall(b"HEAD /v1/health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/environments/nope HTTP/1.1\r\nHost: x\r\n"
                  b"Connection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    first, _, rest = data.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200") and rest.startswith(b"HTTP/1.1 404"), data


def test_a_body_nested_too_deep_for_the_json_parser_is_a_400(daemon):
    d = daemon(fast_config())
    for body in (b"[" * 100000 + b"]" * 100000, b'{"a":' * 50000 + b"1" + b"}" * 50000):
        for method, path in (("PUT", "/v1/environments/deep"), ("POST", "/v1/environments/demo/leases"),
                             ("DELETE", "/v1/leases/x")):
            status, headers, answer = raw_request(
                d.socket, f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                          f"Connection: close\r\n\r\n".encode() + body)
            error = json.loads(answer)["error"]
            assert (status, error["type"]) == (400, "RenderdError"), (method, path, answer)
            assert "nested too deep" in error["message"]
    assert "Traceback" not in d.output()


@pytest.mark.parametrize("name", ["démo", "x?y", "a#b", "a b", "%2e%2e"])
def test_an_environment_name_reaches_the_daemon_as_given(daemon, name):
    # The name is a path segment of the request: sent as it was written, a "?" cut it short, "%2e%2e" asked
    # for "..", and a non-ASCII or space in it broke the request in the client (UnicodeEncodeError, InvalidURL).
    d = daemon(fast_config())
    with pytest.raises(RenderdError) as info:
        connect(name, socket=d.socket, timeout=1)
    assert type(info.value) is LeaseError and info.value.status == 404  # (no lease can be granted there)
    assert f"no environment named {name!r}" in str(info.value)
