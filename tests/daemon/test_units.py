"""The daemon's small parts in-process: sd_notify, log format, status table, the control client's errors."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from renderd.daemon.client import ControlClient, socket_path
from renderd.daemon.commands import JournalFormatter, format_status
from renderd.daemon.notify import Notifier, watchdog_interval
from renderd.errors import RenderdError

from tests.daemon.conftest import RENDERD, wait_for
from tests.helpers.http_util import serving


def _receiver(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(5)
    return sock


def test_notifier_sends_datagrams_to_a_path_and_an_abstract_name(tmp_path):
    path = str(tmp_path / "notify")
    with _receiver(path) as sock:
        n = Notifier(path)
        assert n.enabled and n.ready("1 player up")
        assert sock.recv(4096) == b"READY=1\nSTATUS=1 player up"
        assert n.status("two\nlines")
        assert sock.recv(4096) == b"STATUS=two lines"
        n.close()
    name = f"renderd-unit-{os.getpid()}"
    with _receiver("\0" + name) as sock:
        n = Notifier("@" + name)
        assert n.stopping()
        assert sock.recv(4096) == b"STOPPING=1"
        n.close()


def test_notifier_without_a_socket_does_nothing_and_never_raises(tmp_path, caplog):
    assert not Notifier("").enabled and Notifier("").notify("READY=1") is False
    n = Notifier(str(tmp_path / "nobody-listens"))
    with caplog.at_level(logging.WARNING):
        assert n.watchdog() is False and n.watchdog() is False
    assert len([r for r in caplog.records if "cannot notify" in r.message]) == 1  # warned once
    n.close()


def test_a_service_manager_that_stops_reading_never_blocks_the_notifier(tmp_path, caplog):
    # Its socket's queue fills up (nobody reads it): each send must fail at once, never wait for room.
    path = str(tmp_path / "notify")
    with _receiver(path):
        n = Notifier(path)
        results: list[bool] = []
        sender = threading.Thread(target=lambda: results.extend(n.watchdog() for _ in range(2000)), daemon=True)
        with caplog.at_level(logging.WARNING):
            sender.start()
            sender.join(10)
        assert not sender.is_alive(), "a notification blocked on a full socket"
        assert results[0] and not results[-1]
        assert len([r for r in caplog.records if "cannot notify" in r.message]) == 1
        n.close()


def test_http_player_liveness_works_for_any_descriptor_number():
    # A busy daemon's pidfds can be numbered over 1023, where select() cannot go.
    import resource
    import types

    from renderd.daemon.service import _alive

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    high = 1500
    if hard != resource.RLIM_INFINITY and hard <= high:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} does not reach fd {high}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, high + 1), hard))
    child = subprocess.Popen(["sleep", "60"])
    pidfd = os.pidfd_open(child.pid)
    try:
        os.dup2(pidfd, high)
        player = types.SimpleNamespace(proc=types.SimpleNamespace(returncode=None, fileno=lambda: high))
        assert _alive(player)
        child.kill()
        child.wait(10)
        assert not _alive(player)
    finally:
        os.close(pidfd)
        os.close(high)
        if child.poll() is None:
            child.kill()
            child.wait(10)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_watchdog_interval():
    assert watchdog_interval({}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "30000000"}) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "soon"}) is None


def test_journal_format_prefixes_every_line_with_its_priority():
    fmt = JournalFormatter()

    def line(level: int, msg: str) -> str:
        return fmt.format(logging.LogRecord("renderd.daemon.x", level, __file__, 1, msg, (), None))

    assert line(logging.ERROR, "player died") == "<3>renderd.daemon.x: player died"
    assert line(logging.WARNING, "a\nb") == "<4>renderd.daemon.x: a\n<4>b"
    assert line(logging.INFO, "ok").startswith("<6>") and line(logging.DEBUG, "x").startswith("<7>")


def test_plain_log_format_without_journald(tmp_path):
    code = ("from renderd.daemon.commands import configure_logging; import logging; configure_logging('info'); "
            "logging.getLogger('renderd.daemon').error('cannot read the file')")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
        env={k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"},
    )
    assert out.returncode == 0
    assert out.stderr == "ERROR renderd.daemon: cannot read the file\n", out.stderr


def test_status_table():
    health = {"version": "0.1.0", "pid": 42, "status": "ready", "uptime": 3725.0}
    envs = [{
        "name": "demo", "removing": False, "wanted": 2,
        "players": [
            {"index": 0, "state": "LEASED", "pid": 100, "uptime": 65.0, "restarts": 0, "reason": "",
             "lease": {"client_pid": 7, "duration": 12.5}},
            {"index": 1, "state": "FAILED", "pid": None, "uptime": None, "restarts": 4,
             "reason": "exited before readiness: exit code 3", "lease": None},
        ],
    }]
    text = format_status(health, envs)
    lines = text.splitlines()
    assert lines[0] == "renderd 0.1.0 pid 42 ready, up 1h02m"
    assert lines[1].split() == ["ENVIRONMENT", "PLAYER", "STATE", "PID", "UPTIME", "RESTARTS", "LEASE"]
    assert lines[2].split() == ["demo", "0", "LEASED", "100", "1m05s", "0", "client", "pid", "7", "for", "12s"]
    assert lines[3].split()[:6] == ["demo", "1", "FAILED", "-", "-", "4"]
    assert lines[4] == "demo[1] FAILED: exited before readiness: exit code 3"
    assert format_status(health, []).endswith("no environments")


def test_unreachable_daemon_is_a_clear_error(tmp_path, monkeypatch):
    missing = str(tmp_path / "none.sock")
    with pytest.raises(RenderdError, match="cannot reach the renderd daemon at .*none.sock.*renderd start"):
        ControlClient(missing).health()
    monkeypatch.setenv("RENDERD_SOCKET", missing)
    assert socket_path() == missing and socket_path("/x.sock") == "/x.sock"
    out = subprocess.run([*RENDERD, "status"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "none.sock" in out.stderr


@pytest.mark.parametrize(
    "answer",
    [
        b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n[]",
        b"Content-Type: text/html\r\nContent-Length: 5\r\n\r\nhello",
        b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    ],
    ids=["json-list", "html", "empty-object"],
)
def test_status_of_a_socket_that_is_not_renderd_is_a_clear_error(tmp_path, answer):
    path = str(tmp_path / "other.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)
    # Every request is answered 200 with something that is not renderd's.
    with serving(server, lambda request: b"HTTP/1.1 200 OK\r\nConnection: close\r\n" + answer):
        out = subprocess.run([*RENDERD, "status", "--socket", path], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1, out
    assert "not a renderd daemon" in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_start_with_an_empty_config_path_is_refused(tmp_path):
    # (An unset variable in `ExecStart=renderd start -c ${CONFIG}`: not a reason to serve the built-in demo.)
    out = subprocess.run([*RENDERD, "start", "-c", "", "--socket", str(tmp_path / "r.sock"), "--runtime-dir",
                          str(tmp_path / "run")], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "empty" in out.stderr, out


def test_commands_are_registered_in_the_cli():
    out = subprocess.run([*RENDERD, "start", "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    for flag in ("-c, --config", "--socket", "--runtime-dir", "--http", "--log-level"):
        assert flag in out.stdout
    out = subprocess.run([*RENDERD, "status", "--help"], capture_output=True, text=True, timeout=30)
    assert "--json" in out.stdout and "--socket" in out.stdout


def test_start_http_override_serves_a_file_whose_http_environment_needs_it(daemon):
    # The file's transport = "http" environment relies on --http: checked after the override, at start and
    # on SIGHUP (the reload applies the same overrides).
    text = '[environments.h]\ntransport = "http"\nplatform = "headless"\ninstances = 0\n'
    d = daemon(text, args=("--http", "127.0.0.1:0"))
    assert [e["name"] for e in d.environments()] == ["h"]
    d.signal(signal.SIGHUP)
    wait_for(lambda: "reloading" in d.output() or "reload failed" in d.output(), 20, "the reload to be logged")
    assert "reload failed" not in d.output(), d.output()
    assert d.proc.poll() is None and d.health() is not None


@pytest.mark.parametrize("option", ["--socket", "--runtime-dir"])
def test_start_with_an_empty_socket_or_runtime_dir_is_refused(tmp_path, option):
    # (An unset variable in `--socket ${SOCKET}`: the daemon must not quietly take the default path.)
    paths = {"--socket": str(tmp_path / "r.sock"), "--runtime-dir": str(tmp_path / "run"), option: ""}
    config = tmp_path / "c.toml"
    config.write_text("[environments.demo]\ninstances = 0\n")
    out = subprocess.run([*RENDERD, "start", "-c", str(config), *(a for kv in paths.items() for a in kv)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and option in out.stderr and "empty" in out.stderr, out
    assert "listening" not in out.stderr


def test_a_control_socket_path_that_is_not_a_socket_says_so(tmp_path):
    # A directory or a file given as --socket is named as such, not "connection refused: is the daemon running?".
    (tmp_path / "file").write_text("")
    for path, kind in ((tmp_path, "directory"), (tmp_path / "file", "regular file")):
        with pytest.raises(RenderdError, match=f"that path is not a socket \\(a {kind}\\)"):
            ControlClient(str(path)).health()
    dead = tmp_path / "dead.sock"
    import socket

    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(dead))  # a socket nothing listens on
    with pytest.raises(RenderdError, match="nothing listens on it") as info:
        ControlClient(str(dead)).health()
    assert "is the daemon running?" not in str(info.value)  # (asked once, not twice)


def test_a_runtime_dir_that_cannot_be_made_names_the_key(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = subprocess.run([*RENDERD, "start", "--socket", str(tmp_path / "s" / "r.sock"),
                          "--runtime-dir", str(blocker / "rt")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert "cannot create the directory for runtime_dir (--runtime-dir)" in out.stderr and "ENOTDIR" in out.stderr


def test_the_user_unit_recipe_of_deploy_md_keeps_every_comment_and_drops_the_system_only_settings(tmp_path):
    # docs/deploy.md turns the system unit into a user unit with one sed command: run it as written (with
    # renderd's path for $(command -v renderd)) on systemd/renderd.service.
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "deploy.md").read_text()
    recipe = re.search(r"^\$ (sed .*?systemd/renderd\.service) > ", text, re.S | re.M).group(1)
    recipe = recipe.replace("$(command -v renderd)", "/opt/venv/bin/renderd")
    out = subprocess.run(["sh", "-c", recipe], cwd=root, capture_output=True, text=True, check=True).stdout
    unit = (root / "systemd" / "renderd.service").read_text()
    comments = [line.replace("/run/renderd", "%t/renderd") for line in unit.splitlines() if line.startswith("#")]
    assert [line for line in out.splitlines() if line.startswith("#")] == comments
    settings = [line.split("=", 1)[0] for line in out.splitlines() if "=" in line and not line.startswith("#")]
    for gone in ("User", "Group", "DeviceAllow", "DevicePolicy", "ProtectHome", "StateDirectory"):
        assert gone not in settings, out
    assert "WantedBy=default.target" in out and "ReadWritePaths=%h" in out and "/run/renderd" not in out
    assert "ExecStart=/opt/venv/bin/renderd " in out, out
