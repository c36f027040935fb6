"""The daemon as a lab admin runs it: reloads with mistakes in the file, reloads under leases, what systemd is
told. Real daemons, real players (tests/daemon/conftest.py)."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from renderd.errors import ConfigError

from tests.daemon.conftest import PLAYER, fast_config, wait_for

DEADLINE = 20.0


def _notify_socket(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.2)
    return sock


class _Notifications:
    """What the daemon sent to its NOTIFY_SOCKET, read as it comes."""

    def __init__(self, path: str) -> None:
        self.sock = _notify_socket(path)
        self.got: list[list[str]] = []

    def until(self, assignment: str, timeout: float = DEADLINE) -> list[str]:
        """Read datagrams until one holds ``assignment``; returns that datagram's assignments."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data = self.sock.recv(65536).decode()
            except TimeoutError:
                continue
            self.got.append(data.split("\n"))
            if assignment in self.got[-1]:
                return self.got[-1]
        raise AssertionError(f"no {assignment} within {timeout} s; got {self.got}")

    def status_where(self, predicate, timeout: float = DEADLINE) -> str:
        """Read datagrams until a STATUS= whose text satisfies ``predicate``; returns that text."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for datagram in self.got:
                for a in datagram:
                    if a.startswith("STATUS=") and predicate(a[len("STATUS="):]):
                        self.got.remove(datagram)
                        return a[len("STATUS="):]
            try:
                self.got.append(self.sock.recv(65536).decode().split("\n"))
            except TimeoutError:
                continue
        raise AssertionError(f"no such STATUS= within {timeout} s; got {self.got}")

    def close(self) -> None:
        self.sock.close()


def _status(datagrams: list[list[str]]) -> str | None:
    """The last STATUS= among ``datagrams``."""
    last = None
    for datagram in datagrams:
        for a in datagram:
            if a.startswith("STATUS="):
                last = a[len("STATUS="):]
    return last


# -- what systemd is told -------------------------------------------------------------------------------------
def test_a_good_reload_after_a_failed_one_clears_the_failure_from_the_status_line(daemon, tmp_path):
    """`systemctl status` showed 'reload failed: ...' for ever once a reload had failed: the fixed file's reload
    (same players, same summary) sent READY=1 but no STATUS, and the supervisor sends one only when its summary
    changes."""
    notes = _Notifications(str(tmp_path / "notify.sock"))
    try:
        d = daemon(fast_config(), env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
        notes.until("READY=1")
        good = Path(d.config_path).read_text()
        with open(d.config_path, "w") as f:
            f.write("[environments.demo]\nwidth = -1\n")
        d.signal(signal.SIGHUP)
        notes.until("READY=1")
        assert "reload failed" in _status(notes.got)
        # The players' summary changes (a player killed and restarted): the failure stays in the status line.
        pid = d.players()[0]["pid"]
        os.kill(pid, signal.SIGKILL)
        d.wait_players(lambda ps: ps[0]["state"] == "READY" and ps[0]["pid"] != pid, what="the player restarted")
        restarted = notes.status_where(lambda text: text.startswith("demo 0/1 up"))
        assert "reload failed" in restarted, notes.got
        with open(d.config_path, "w") as f:
            f.write(good)
        d.signal(signal.SIGHUP)
        notes.until("READY=1")
        status = _status(notes.got)
        assert "reload failed" not in status, notes.got
        assert "demo 1/1 up" in status, notes.got
    finally:
        notes.close()


# -- reloads with mistakes in the file --------------------------------------------------------------------------
def test_a_reload_to_http_players_without_the_http_listener_is_refused_and_keeps_the_players(daemon):
    """[daemon] http takes effect only at a restart, yet a reload that added it with a `transport = "http"`
    environment passed the file's own cross-check: the daemon, which has no HTTP listener, replaced its running
    FIFO players one by one with players that could never start, and lost them all."""
    d = daemon(fast_config(instances=2))
    pids = sorted(p["pid"] for p in d.players())
    with open(d.config_path, "w") as f:
        f.write(fast_config(instances=2, extra='transport = "http"', daemon='http = "127.0.0.1:0"'))
    d.signal(signal.SIGHUP)
    wait_for(lambda: "reload failed" in d.output(), DEADLINE, "the reload to be refused")
    out = d.output()
    assert "environments.demo.transport" in out and "restart" in out, out
    players = d.players()  # (the reload was refused on the loop's thread: nothing was replaced)
    assert [p["state"] for p in players] == ["READY", "READY"], players
    assert sorted(p["pid"] for p in players) == pids


def test_a_reload_that_cannot_resolve_a_relative_executable_fails_as_a_reload_and_systemd_is_told(daemon, tmp_path):
    """A relative executable in the file, and the daemon's working directory removed since it started (a build
    directory rebuilt): the reload raised FileNotFoundError out of the SIGHUP handler (a traceback), after
    RELOADING=1 and never followed by READY=1, so systemd kept the service 'reloading'."""
    workdir = tmp_path / "build"
    workdir.mkdir()
    notify = str(tmp_path / "notify.sock")
    notes = _Notifications(notify)
    try:
        d = daemon(fast_config(), env={"NOTIFY_SOCKET": notify}, preamble=f"import os; os.chdir({str(workdir)!r})")
        notes.until("READY=1")
        pid = d.players()[0]["pid"]
        workdir.rmdir()
        with open(d.config_path, "w") as f:
            f.write(fast_config(executable='"./player"'))
        d.signal(signal.SIGHUP)
        notes.until("RELOADING=1")
        ready = notes.until("READY=1")
        assert any(a.startswith("STATUS=") and "reload failed" in a for a in ready), notes.got
        wait_for(lambda: "reload failed" in d.output(), DEADLINE, "the reload error in the log")
        out = d.output()
        assert "environments.demo.executable" in out and "Traceback" not in out, out
        assert [(p["state"], p["pid"]) for p in d.players()] == [("READY", pid)]
    finally:
        notes.close()


#: Run in the daemon's process first: a configuration text holding ``# FAULT`` makes loading it raise what no
#: check should let through (a bug), not a ConfigError.
LOAD_FAULT = """
import renderd.config
_loads = renderd.config.loads
def _faulty_loads(text, *args, **kwargs):
    if "# FAULT" in text:
        raise RuntimeError("fault injected by the test")
    return _loads(text, *args, **kwargs)
renderd.config.loads = _faulty_loads
"""


def test_any_error_in_a_reload_still_ends_it_with_ready(daemon, tmp_path):
    """Whatever goes wrong in a reload, RELOADING=1 is followed by READY=1 and the failure is in the status
    line: the daemon keeps serving with its running configuration."""
    notify = str(tmp_path / "notify.sock")
    notes = _Notifications(notify)
    try:
        d = daemon(fast_config(), env={"NOTIFY_SOCKET": notify}, preamble=LOAD_FAULT)
        notes.until("READY=1")
        pid = d.players()[0]["pid"]
        with open(d.config_path, "a") as f:
            f.write("\n# FAULT\n")
        d.signal(signal.SIGHUP)
        notes.until("RELOADING=1")
        ready = notes.until("READY=1")
        assert any(a.startswith("STATUS=") and "reload failed" in a and "fault injected" in a for a in ready), notes.got
        assert [(p["state"], p["pid"]) for p in d.players()] == [("READY", pid)]
    finally:
        notes.close()


def test_a_reload_logs_what_it_changes_key_by_key_without_secrets(daemon):
    """The log said "environment demo changed: 1 x renderd-player 300x300 platform headless transport fifo"
    whatever changed (quality, env, timeouts...), and nothing of [daemon] keys: an admin could not tell
    whether the reload did what was meant, nor whether players would be replaced."""
    d = daemon(fast_config(extra='env = {API_TOKEN = "first-secret"}'))
    with open(d.config_path, "w") as f:
        f.write(fast_config(extra='quality = "Low"\nenv = {API_TOKEN = "second-secret"}', daemon="lease_timeout = 5.0")
                + '\n[environments.other]\ninstances = 0\n')
    d.signal(signal.SIGHUP)
    line = wait_for(lambda: next((x for x in d.output().splitlines() if "reload:" in x and "quality" in x), None),
                    DEADLINE, "the reload's line of changes")
    assert "environments.demo.quality 'Ultra' -> 'Low'" in line, line
    assert "environments.demo.env" in line and "replaced" in line, line
    assert "daemon.lease_timeout 30.0 -> 5.0" in line, line
    assert "environments.other added" in line, line
    assert "first-secret" not in d.output() and "second-secret" not in d.output()
    with open(d.config_path, "w") as f:
        f.write(fast_config(extra='quality = "Low"\nenv = {API_TOKEN = "second-secret"}', daemon="lease_timeout = 5.0"))
    d.signal(signal.SIGHUP)
    wait_for(lambda: "environments.other removed" in d.output(), DEADLINE, "the removal in the reload's line")
    with open(d.config_path, "a") as f:
        f.write("\n")
    d.signal(signal.SIGHUP)
    wait_for(lambda: "reload: nothing changed" in d.output(), DEADLINE, "a reload that changed nothing said so")


# -- reloads under leases -----------------------------------------------------------------------------------------
def test_a_reload_changes_a_leased_player_only_after_its_lease_and_a_removal_tells_the_client(daemon):
    """A changed environment keeps its leased player until the lease ends; an environment gone from the file
    stops its leased player at once, and the client is told why (not an unexplained crash)."""
    import renderd
    from renderd.errors import PlayerCrashed

    d = daemon(fast_config() + f'\n[environments.other]\nexecutable = ["{PLAYER}", "--static-frame"]\nplatform = "headless"\n')
    with renderd.connect("demo", socket=d.socket, timeout=10) as session:
        session.step("Pass")
        pid = session.pid
        with open(d.config_path, "w") as f:
            f.write(fast_config(extra="width = 200"))  # demo changed, other gone
        d.signal(signal.SIGHUP)
        (player,) = d.wait_players(lambda ps: ps[0]["outdated"], what="the reload applied")
        assert (player["state"], player["pid"]) == ("LEASED", pid)
        wait_for(lambda: [e["name"] for e in d.environments()] == ["demo"], DEADLINE, "environment other removed")
        assert session.step("Pass").sequence_id == 2  # the same player serves on
    d.wait_players(lambda ps: ps[0]["state"] == "READY" and ps[0]["width"] == 200 and ps[0]["pid"] != pid,
                   what="the player replaced after its lease")
    with open(d.config_path, "w") as f:
        f.write("")  # demo gone too
    with renderd.connect("demo", socket=d.socket, timeout=10) as session:
        session.step("Pass")
        d.signal(signal.SIGHUP)
        wait_for(lambda: all(e["removing"] for e in d.environments()), DEADLINE, "the reload applied")
        try:
            for _ in range(100):
                session.step("Pass")
        except PlayerCrashed as exc:
            assert "environment removed" in str(exc), exc
        else:
            raise AssertionError("the removed environment's leased player served on")
    wait_for(lambda: not d.environments(), DEADLINE, "the environment gone")


# -- metrics --------------------------------------------------------------------------------------------------
def test_a_player_that_never_sends_its_first_frame_is_a_boot_failure_as_the_metric_and_the_key_say(daemon):
    """A Unity build that hangs while loading (no first frame within start_timeout) counts toward
    max_boot_failures and renderd_player_boot_failures_total; both their help texts spoke only of exits and
    undecodable first frames, so an admin reading them did not expect a hung build to end FAILED."""
    import sys

    from renderd.config import DaemonConfig, settings

    exe = f'["{sys.executable}", "-m", "renderd.player", "--static-frame", "--start-delay", "60"]'
    d = daemon(fast_config(executable=exe, extra="start_timeout = 0.3").replace("start_timeout = 20.0", ""),
               args=("--log-level", "debug"))  # ready: every player READY or FAILED
    (player,) = d.players()
    assert player["boot_failures"] == 3 and "start_timeout" in player["reason"], player
    metrics = d.client.request("GET", "/metrics")[1]
    text = metrics.decode() if isinstance(metrics, bytes) else str(metrics)
    assert 'renderd_player_boot_failures_total{environment="demo"} 3.0' in text, text
    help_line = next(x for x in text.splitlines() if x.startswith("# HELP renderd_player_boot_failures_total"))
    assert "start_timeout" in help_line, help_line
    key_help = next(f for f in settings(DaemonConfig) if f.name == "max_boot_failures").metadata["help"]
    assert "start_timeout" in key_help, key_help


# -- mistakes in a file or a request body ---------------------------------------------------------------------
def test_a_wrong_item_in_a_list_or_table_is_named_by_validate_and_by_put(shared_daemon, tmp_path):
    """`env = {OMP_NUM_THREADS = 4}` (a number where a string goes) was "expected a table of string to string,
    got a table": with twenty variables, or an argv list, the reader had to guess which item was wrong."""
    import subprocess

    from tests.daemon.conftest import RENDERD

    bad = tmp_path / "bad.toml"
    bad.write_text('[environments.demo]\nenv = {LANG = "C", OMP_NUM_THREADS = 4}\n')
    out = subprocess.run([*RENDERD, "validate", str(bad)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert "environments.demo.env" in out.stderr and 'OMP_NUM_THREADS is integer 4' in out.stderr, out.stderr
    assert '"4"' in out.stderr, out.stderr  # how to write it
    d = shared_daemon
    body = {"executable": [PLAYER, "--port", 8200], "platform": "headless"}
    with pytest.raises(ConfigError) as info:
        d.client.request("PUT", "/v1/environments/other", body)
    assert info.value.status == 400
    message = str(info.value)
    assert "environments.other.executable" in message and "[2] is integer 8200" in message, message


def test_a_player_script_whose_interpreter_is_missing_is_refused_when_loaded_not_at_every_start(daemon, tmp_path):
    """A player script whose #! interpreter is gone (a virtual environment removed; a file saved with CRLF line
    ends names '/bin/sh\\r') passed `renderd validate`; every start then failed with 'no such file or directory'
    for a file that is there, and a reload to it replaced every running player with one that could not start."""
    import subprocess

    from tests.daemon.conftest import RENDERD

    gone = tmp_path / "player-gone-venv"
    gone.write_text("#!/opt/removed-venv/bin/python3\nprint('never')\n")
    crlf = tmp_path / "player-crlf"
    crlf.write_bytes(b"#!/bin/sh\r\nexec true\r\n")
    for script in (gone, crlf):
        script.chmod(0o755)
        conf = tmp_path / f"{script.name}.toml"
        conf.write_text(f'[environments.demo]\nexecutable = "{script}"\n')
        out = subprocess.run([*RENDERD, "validate", str(conf)], capture_output=True, text=True, timeout=30)
        assert out.returncode == 1, out.stdout
        assert "environments.demo.executable" in out.stderr and "#! line" in out.stderr, out.stderr
    assert "CRLF" in out.stderr, out.stderr
    d = daemon(fast_config(instances=2))
    pids = sorted(p["pid"] for p in d.players())
    with open(d.config_path, "w") as f:
        f.write(fast_config(instances=2, executable=f'"{gone}"'))
    d.signal(signal.SIGHUP)
    wait_for(lambda: "reload failed" in d.output(), DEADLINE, "the reload to be refused")
    assert "/opt/removed-venv/bin/python3" in d.output()
    players = d.players()
    assert [p["state"] for p in players] == ["READY", "READY"] and sorted(p["pid"] for p in players) == pids


def test_a_reload_says_when_an_environment_gone_from_the_file_is_kept_because_the_api_declared_it(daemon):
    """An environment of the file, PUT through the control API since, belongs to the API: removing it from the
    file leaves it running. The reload said nothing of it, so the admin believed it gone."""
    d = daemon(fast_config())
    body = {"executable": [PLAYER, "--static-frame"], "platform": "headless", "instances": 2}
    d.client.request("PUT", "/v1/environments/demo", body)
    with open(d.config_path, "w") as f:
        f.write("")
    d.signal(signal.SIGHUP)
    line = wait_for(lambda: next((x for x in d.output().splitlines() if "reload:" in x), None), DEADLINE,
                    "the reload's line of changes")
    assert "environments.demo is gone from the file but kept" in line and "DELETE" in line, line
    assert [e["name"] for e in d.environments()] == ["demo"]


@pytest.mark.parametrize("platform", ["headless", "CloudRendering"])
def test_an_x_display_with_a_platform_that_uses_none_is_refused_by_validate_and_by_put(shared_daemon, tmp_path, platform):
    """`platform = "headless"` (or CloudRendering) with `x_display = ":1"` was accepted and the display silently
    ignored: the admin believed the players rendered on :1."""
    import subprocess

    from tests.daemon.conftest import RENDERD

    conf = tmp_path / "x.toml"
    conf.write_text(f'[environments.demo]\nplatform = "{platform}"\nx_display = ":1"\n')
    out = subprocess.run([*RENDERD, "validate", str(conf)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "environments.demo.x_display" in out.stderr, (out.stdout, out.stderr)
    d = shared_daemon
    with pytest.raises(ConfigError) as info:
        d.client.request("PUT", "/v1/environments/other", {"platform": platform, "x_display": "managed"})
    assert info.value.status == 400 and "environments.other.x_display" in str(info.value)


def test_a_default_lease_wait_longer_than_any_lease_request_may_wait_is_refused(tmp_path):
    """A lease request waits at most MAX_LEASE_TIMEOUT (3600 s; a client asking for longer is refused, 400), yet
    `lease_timeout = 7200` was accepted, and requests that named no timeout waited two hours."""
    import subprocess

    from renderd.daemon.leases import MAX_LEASE_TIMEOUT
    from tests.daemon.conftest import RENDERD

    conf = tmp_path / "lease.toml"
    for value, code in ((MAX_LEASE_TIMEOUT, 0), (MAX_LEASE_TIMEOUT * 2, 1)):
        conf.write_text(f"[daemon]\nlease_timeout = {value}\n")
        out = subprocess.run([*RENDERD, "validate", str(conf)], capture_output=True, text=True, timeout=30)
        assert out.returncode == code, (value, out.stdout, out.stderr)
    assert "daemon.lease_timeout" in out.stderr and "3600" in out.stderr, out.stderr
