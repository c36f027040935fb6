"""The daemon end to end: a real ``renderd start``, real players, real clients, real signals."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

import renderd
from renderd.daemon.client import connect
from renderd.errors import LeaseError, PlayerCrashed

from tests.daemon.conftest import RENDERD, fast_config, pid_gone, wait_for


def status_text(d, *extra: str) -> str:
    out = subprocess.run([*RENDERD, "status", "--socket", d.socket, *extra], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_demo_without_config_serves_1000_steps_and_status_shows_the_lease(daemon):
    d = daemon()  # no configuration: environment demo on renderd-player, platform auto
    with renderd.connect("demo", socket=d.socket, timeout=10) as session:
        assert session.last_event is None
        first = session.step("MoveAhead")
        assert first.metadata["lastAction"] == "MoveAhead" and first.sequence_id == 1
        assert first.frame.shape == (300, 300, 3) and first.frame.dtype == np.uint8
        for i in range(2, 1001):
            # Render every 100th frame (the pipes carry the same framing either way); the rest skip it.
            event = session.step("RotateLeft", degrees=1, renderImage=(i % 100 == 0))
            assert event.sequence_id == i
        assert event.frame.shape == (300, 300, 3)

        table = status_text(d)
        row = next(line for line in table.splitlines() if line.startswith("demo"))
        assert "LEASED" in row and f"client pid {os.getpid()}" in row, table
        data = json.loads(status_text(d, "--json"))
        (player,) = data["environments"][0]["players"]
        assert player["state"] == "LEASED" and player["lease"]["client_pid"] == os.getpid()
        assert player["pid"] == session.pid
        assert "lease" not in json.dumps(player["lease"])  # the lease id is the holder's secret
    # Released cleanly: the same player is handed to the next client, which gets a clean stream.
    d.wait_players(lambda ps: ps[0]["state"] == "READY", what="the player to be READY again")
    with connect("demo", socket=d.socket) as again:
        assert again.pid == player["pid"]
        assert again.step("Pass").sequence_id == 1


def test_sigkilled_player_is_restarted_and_next_lease_works(daemon):
    d = daemon(fast_config())
    (before,) = d.players()
    os.kill(before["pid"], signal.SIGKILL)
    (after,) = d.wait_players(
        lambda ps: ps[0]["state"] == "READY" and ps[0]["pid"] != before["pid"], what="a restarted player"
    )
    assert after["restarts"] == 1
    assert "SIGKILL" in d.output()
    with connect("demo", socket=d.socket, timeout=10) as session:
        assert session.pid == after["pid"]
        assert session.step("Pass").metadata["lastAction"] == "Pass"


def test_player_killed_under_a_lease_is_a_crash_for_the_client(daemon):
    d = daemon(fast_config())
    with connect("demo", socket=d.socket) as session:
        session.step("Pass")
        os.kill(session.pid, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(PlayerCrashed):
            session.step("Pass")
        assert time.monotonic() - started < 2.0
    d.wait_players(lambda ps: ps[0]["state"] == "READY" and ps[0]["restarts"] == 1, what="a restarted player")


CLIENT_KILLED_MID_STEP = """
import sys, renderd
session = renderd.connect("demo", socket=sys.argv[1])
session.step("Pass")
print(session.pid, flush=True)
# The player sleeps, then answers into server.pipe: this process is killed before it reads the answer.
session.step({"action": "RenderdFault", "fault": "sleep", "seconds": 1.0})
"""


def test_client_sigkilled_mid_step_gets_the_player_recycled(daemon, tmp_path):
    d = daemon(fast_config())
    script = tmp_path / "client.py"
    script.write_text(CLIENT_KILLED_MID_STEP)
    client = subprocess.Popen([sys.executable, str(script), d.socket], stdout=subprocess.PIPE, text=True)
    try:
        old_pid = int(client.stdout.readline())
        client.kill()
        client.wait(10)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        client.stdout.close()
    (player,) = d.wait_players(
        lambda ps: ps[0]["state"] == "READY" and ps[0]["pid"] != old_pid, what="a recycled player"
    )
    assert pid_gone(old_pid)
    assert "exited holding the lease" in d.output()
    with connect("demo", socket=d.socket) as session:
        assert session.pid == player["pid"]
        event = session.step("MoveAhead")  # a clean stream: the answer to *this* action
        assert event.sequence_id == 1 and event.metadata["lastAction"] == "MoveAhead"
        assert session.step("Pass").metadata["lastAction"] == "Pass"
    metrics = d.client.request("GET", "/metrics")[1]
    assert 'renderd_lease_ends_total{environment="demo",how="client_exited"} 1.0' in metrics
    assert 'renderd_player_recycles_total{environment="demo"} 1.0' in metrics


def test_unclean_release_recycles_and_unknown_lease_is_refused(daemon):
    d = daemon(fast_config())
    answer = d.client.lease("demo", timeout=5)
    pid = answer["pid"]
    with pytest.raises(LeaseError):
        d.client.release("0" * 32)  # only the holder knows the id
    assert d.client.release(answer["lease"], clean=False)["recycled"] is True
    d.wait_players(lambda ps: ps[0]["state"] == "READY" and ps[0]["pid"] != pid, what="a recycled player")
    with pytest.raises(LeaseError):
        d.client.release(answer["lease"])  # already ended


def _player_and_xvfb_pids(d) -> set[int]:
    return set(d.descendants())


@pytest.mark.xvfb
def test_sigterm_leaves_nothing_behind(daemon, tmp_path):
    if not os.path.exists("/usr/bin/Xvfb"):
        pytest.skip("Xvfb is not installed")
    d = daemon(fast_config(instances=2, extra='platform = "Linux64"\nx_display = "managed"').replace(
        'platform = "headless"', ""))
    players = d.players()
    assert {p["platform"] for p in players} == {"Linux64"}
    children = _player_and_xvfb_pids(d)
    names = {psutil.Process(pid).name() for pid in children}
    assert any("Xvfb" in n for n in names), names
    session = connect("demo", socket=d.socket)
    session.step("Pass")
    d.signal(signal.SIGTERM)
    assert d.wait_exit() == 0
    assert all(pid_gone(pid) for pid in children)
    with pytest.raises(renderd.RenderdError):  # the lease ended with the daemon: the stream closed
        session.step("Pass")
    session.close()
    assert sorted(os.listdir(d.base)) == ["daemon.log", "renderd.toml"]  # no socket, runtime dir, pipes
    assert "stopped" in d.output()


def test_sigkilled_daemon_takes_its_players_along(daemon):
    d = daemon(fast_config(instances=2))
    pids = [p["pid"] for p in d.players()]
    assert len(pids) == 2
    d.signal(signal.SIGKILL)
    d.wait_exit()
    wait_for(lambda: all(pid_gone(pid) for pid in pids), 2.0, "the players to die with the daemon")
    # A new daemon on the same socket and runtime dir starts: the stale socket and lock are no obstacle.
    again = daemon(fast_config(), socket=d.socket, runtime_dir=d.runtime_dir)
    assert again.players()[0]["state"] == "READY"


def test_second_daemon_on_the_same_socket_refuses(daemon, tmp_path):
    d = daemon(fast_config())
    out = subprocess.run(
        [*RENDERD, "start", "--socket", d.socket, "--runtime-dir", str(tmp_path / "other"), "-c", d.config_path],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 1
    assert "already listens on" in out.stderr and d.socket in out.stderr
    out = subprocess.run(
        [*RENDERD, "start", "--socket", str(tmp_path / "other.sock"), "--runtime-dir", d.runtime_dir,
         "-c", d.config_path],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 1 and "already running" in out.stderr
    assert not (tmp_path / "other").exists() and not (tmp_path / "other.sock").exists()
    assert d.health()["status"] == "ready"


def _notify_socket(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.2)
    return sock


def _datagrams(sock: socket.socket, until: str, timeout: float) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got.append(sock.recv(4096).decode())
        except TimeoutError:
            continue
        if any(until in g.split("\n") for g in got[-1:]):
            return got
    raise AssertionError(f"no {until} within {timeout} s; got {got}")


def test_ready_is_notified_only_once_players_are_ready(daemon, tmp_path):
    path = str(tmp_path / "notify.sock")
    sock = _notify_socket(path)
    try:
        exe = f'["{sys.executable}", "-m", "renderd.player", "--static-frame", "--start-delay", "0.5"]'
        started = time.monotonic()
        d = daemon(fast_config(instances=2, executable=exe),
                   env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000"}, ready=False)
        got = _datagrams(sock, "READY=1", 30)
        assert time.monotonic() - started >= 0.5  # the players' boot delay
        players = d.players()  # both were READY when READY=1 was sent (nothing leases them here)
        assert [p["state"] for p in players] == ["READY", "READY"]
        assert any(g.startswith("STATUS=") for g in got[:-1])
        assert any("MAINPID=" in g for g in got)
        assert "WATCHDOG=1" in _datagrams(sock, "WATCHDOG=1", 2)
        d.signal(signal.SIGTERM)
        rest = _datagrams(sock, "STOPPING=1", 10)
        assert any("STOPPING=1" in g for g in rest)
        assert d.wait_exit() == 0
    finally:
        sock.close()


def test_a_reload_before_the_players_are_ready_does_not_announce_ready(daemon, tmp_path):
    path = str(tmp_path / "notify.sock")
    sock = _notify_socket(path)
    try:
        exe = f'["{sys.executable}", "-m", "renderd.player", "--static-frame", "--start-delay", "1.0"]'
        d = daemon(fast_config(executable=exe), env={"NOTIFY_SOCKET": path}, ready=False)
        early = _datagrams(sock, f"MAINPID={d.pid}", 30)
        d.signal(signal.SIGHUP)
        got = early + _datagrams(sock, "READY=1", 30)
        assert d.players()[0]["state"] == "READY", got  # READY=1 came with the player's first frame
        assert not any("RELOADING=1" in g for g in got), got
        assert "reloading" in d.output()
    finally:
        sock.close()


def test_ready_notification_over_an_abstract_socket(daemon):
    name = f"renderd-test-{os.getpid()}-{time.monotonic_ns()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(0.2)
    try:
        daemon(fast_config(), env={"NOTIFY_SOCKET": "@" + name}, ready=False)
        _datagrams(sock, "READY=1", 30)
    finally:
        sock.close()


BAD_CONFIG = """
[environments.demo]
width = 0
"""


def test_bad_config_fails_validate_and_start_naming_the_key(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(BAD_CONFIG)
    out = subprocess.run([*RENDERD, "validate", str(path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert "environments.demo.width" in out.stderr and str(path) in out.stderr
    out = subprocess.run(
        [*RENDERD, "start", "-c", str(path), "--socket", str(tmp_path / "s.sock"), "--runtime-dir",
         str(tmp_path / "run")],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 1
    assert "environments.demo.width" in out.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "s.sock").exists()


def test_boot_failures_end_in_failed_with_the_reason(daemon):
    exe = f'["{sys.executable}", "-m", "renderd.player", "--fault-at-start", "garbage"]'
    d = daemon(fast_config(executable=exe))  # ready = every player READY or FAILED
    (player,) = d.players()
    assert player["state"] == "FAILED" and player["boot_failures"] == 3
    assert "undecodable first frame" in player["reason"]
    assert "FAILED" in status_text(d)
    with pytest.raises(LeaseError, match="failed to start"):
        connect("demo", socket=d.socket, timeout=0.2)


def test_players_that_exit_before_readiness(daemon):
    d = daemon(fast_config(executable='["/bin/sh", "-c", "echo no such luck; exit 3"]'))
    (player,) = d.players()
    assert player["state"] == "FAILED"
    assert "exit code 3" in player["reason"] and "no such luck" in player["reason"]


def test_sighup_reloads_the_configuration(daemon):
    d = daemon(fast_config())
    with open(d.config_path, "w") as f:
        f.write(fast_config(instances=2))
    d.signal(signal.SIGHUP)
    players = d.wait_players(lambda ps: [p["state"] for p in ps] == ["READY", "READY"], what="two players")
    assert len(players) == 2
    with open(d.config_path, "w") as f:
        f.write("[environments.demo]\nwidth = -1\n")
    d.signal(signal.SIGHUP)
    wait_for(lambda: "reload failed" in d.output(), 10, "the reload error")
    assert len(d.players()) == 2  # the running configuration is kept


def test_lease_cycles_and_crashes_leak_nothing_in_the_daemon(daemon):
    d = daemon(fast_config())
    proc = psutil.Process(d.pid)

    def cycle(n: int) -> None:
        for i in range(n):
            with connect("demo", socket=d.socket) as session:
                session.step("Pass")
                if i % 5 == 4:
                    os.kill(session.pid, signal.SIGKILL)
                    with pytest.raises(PlayerCrashed):
                        session.step("Pass")
            d.wait_players(lambda ps: ps[0]["state"] == "READY", what="a ready player")

    cycle(5)  # warm up: lazily created sockets, threads, metrics series
    fds, threads = proc.num_fds(), proc.num_threads()
    cycle(20)
    # Connections and stopper threads finish asynchronously: the counts must come back, not grow per cycle.
    wait_for(lambda: proc.num_fds() <= fds, 5, f"the daemon's descriptors back to {fds} (now {proc.num_fds()})")
    wait_for(lambda: proc.num_threads() <= threads, 5, "the daemon's threads back to their number")
    assert len(os.listdir(os.path.join(d.runtime_dir, "players"))) == 1


def test_http_players_are_leased_like_fifo_players(daemon):
    d = daemon(fast_config(instances=1, extra='transport = "http"', daemon='http = "127.0.0.1:0"'))
    (player,) = d.players()
    assert player["state"] == "READY"
    env = psutil.Process(player["pid"]).environ()
    assert env["AI2THOR_SERVER_TYPE"] == "WSGI" and env["AI2THOR_HOST"] == "127.0.0.1"
    assert int(env["AI2THOR_PORT"]) > 0 and len(env["AI2THOR_CLIENT_TOKEN"]) >= 32
    assert env["AI2THOR_CLIENT_TOKEN"] not in d.output()  # tokens are never logged
    for _ in range(2):  # the same player across two leases
        with connect("demo", socket=d.socket) as session:
            assert session.pid == player["pid"]
            for i in range(1, 21):
                event = session.step("MoveAhead")
                assert event.sequence_id == i and event.metadata["lastAction"] == "MoveAhead"
    os.kill(player["pid"], signal.SIGKILL)
    (again,) = d.wait_players(lambda ps: ps[0]["state"] == "READY" and ps[0]["pid"] != player["pid"],
                              what="a restarted HTTP player")
    with connect("demo", socket=d.socket) as session:
        assert session.step("Pass").sequence_id == 1
    # Removing the environment stops its player on purpose: the end of its HTTP stream is no warning.
    assert d.client.request("DELETE", "/v1/environments/demo")[0] == 202
    wait_for(lambda: "FIFO pump ended" in d.output() and not d.environments(), 20, "the pump to end")
    assert "WARNING renderd.transport.http: demo" not in d.output(), d.output()


def test_demo_serves_on_a_machine_without_any_platform(daemon):
    # No display, no Vulkan driver, no Xvfb on PATH: `auto` finds nothing, and the reference player
    # (which renders with numpy) runs without a platform. (An X server running on this machine, say an
    # Xvfb of another test, is hidden from the daemon: its socket in /tmp/.X11-unix would be found.)
    env = {"PATH": os.path.dirname(sys.executable), "VK_ICD_FILENAMES": "/nonexistent.json", "DISPLAY": ""}
    no_x_sockets = "import renderd.platforms.x11 as x11\nx11.socket_displays = lambda *args, **kwargs: []\n"
    d = daemon(env=env, preamble=no_x_sockets)
    (player,) = d.players()
    assert player["state"] == "READY" and player["platform"] == "none"
    assert "no platform auto considered is valid here" in d.output()
    with connect("demo", socket=d.socket) as session:
        assert session.step("MoveAhead").frame.shape == (300, 300, 3)
