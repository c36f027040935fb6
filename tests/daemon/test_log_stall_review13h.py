"""The daemon's logging never blocks it: a ``renderd start`` whose stderr is a pipe nobody reads still answers
status and lease requests and pings the systemd watchdog, reports the log lines it dropped once stderr is read
again, and still ends on SIGTERM.

Before, records went through a ``StreamHandler(sys.stderr)``: once the pipe was full the next log call blocked,
in the supervisor's loop (often with its lock held) or in a request's thread; the loop stopped (no player was
restarted, none became ready for a lease, no watchdog ping) and so did every request wanting the lock.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import termios
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from renderd.daemon.client import ControlClient
from renderd.errors import RenderdError
from renderd.protocol import FieldType, encode_message, encode_metadata
from tests.daemon.conftest import PLAYER, RENDERD, STOP_TIMEOUT, wait_for

F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
#: Seconds a request to a daemon whose stderr is not read may take (it answers in milliseconds).
ANSWER = 3.0
#: The daemon's log queue, made small (the default is 1000 records) so that the test fills it in well under a
#: second: the code that drops records is the same whatever the bound.
QUEUE = 20
#: Records logged per restart of a crashing player at --log-level debug, at least (started, spawned, first
#: frame, ready, exited, restarting, stopped: 7), and bytes of them.
RECORDS_PER_RESTART = 3
BYTES_PER_RESTART = 300
LINE = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")
DROPPED = re.compile(r"^WARNING renderd: (\d+) log lines dropped while stderr was not being read$", re.M)


def _pending(fd: int) -> int:
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def _first_frame() -> bytes:
    metadata = encode_metadata({
        "agents": [{"screenWidth": 2, "screenHeight": 2, "lastAction": "", "lastActionSuccess": True}],
        "sequenceId": 0, "activeAgentId": 0,
    })
    return b"".join(bytes(memoryview(b).cast("B")) for b in encode_message([(FieldType.METADATA, metadata)]))


@pytest.fixture
def stalled(tmp_path: Path):
    """A ``renderd start --log-level debug`` whose stderr is a one-page pipe the test reads only when it says,
    with a steady environment, and a configuration file to which ``add_noisy()`` adds an environment of
    crash-looping players (a log line every few milliseconds) for a SIGHUP to start."""
    frame = tmp_path / "frame.bin"
    frame.write_bytes(_first_frame())
    # A player that sends its first frame, opens client.pipe (ready), and exits at once: restarted, again and again.
    crasher = (f'cat {frame} > "$AI2THOR_FIFO_SERVER_PIPE_PATH"; exec 3< "$AI2THOR_FIFO_CLIENT_PIPE_PATH"; '
               "sleep 0.02; exit 3")
    steady = textwrap.dedent(f"""
        [daemon]
        backoff_initial = 0.02
        backoff_max = 0.05
        stop_grace = 2.0
        max_boot_failures = 1000000

        [environments.steady]
        executable = ["{PLAYER}", "--static-frame"]
        platform = "headless"
        instances = 1
        start_timeout = 20.0
    """)
    noisy = textwrap.dedent(f"""
        [environments.noisy]
        executable = ["/bin/sh", "-c", '{crasher}']
        platform = "headless"
        instances = 6
        start_timeout = 20.0
    """)
    config = tmp_path / "renderd.toml"
    config.write_text(steady)
    sock = str(tmp_path / "renderd.sock")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify.sock"))
    notify.setblocking(False)
    env = dict(os.environ, NOTIFY_SOCKET=str(tmp_path / "notify.sock"), WATCHDOG_USEC="200000")
    env.pop("WATCHDOG_PID", None)
    env.pop("JOURNAL_STREAM", None)
    preamble = f"import renderd.daemon.commands as c; c.LOG_QUEUE_SIZE = {QUEUE}\n"
    argv = [*RENDERD[:-1], preamble + RENDERD[-1], "start", "--socket", sock, "--runtime-dir", str(tmp_path / "run"),
            "-c", str(config), "--log-level", "debug"]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=env)
    err = proc.stderr.fileno()
    try:
        fcntl.fcntl(err, F_SETPIPE_SZ, 4096)
    except OSError:  # (already fuller than that: the test then waits for more restarts)
        pass
    os.set_blocking(err, False)
    seen: set[int] = set()
    try:
        yield proc, ControlClient(sock, timeout=ANSWER), notify, seen, lambda: config.write_text(steady + noisy)
    finally:
        try:
            seen.update(c.pid for c in psutil.Process(proc.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass
        if proc.poll() is None:
            proc.kill()
            proc.wait(STOP_TIMEOUT)
        for pid in seen:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass
        proc.stderr.close()
        notify.close()
        shutil.rmtree(tmp_path / "run", ignore_errors=True)


def _ask(what: str, fn, *args, **kwargs):
    """``fn(*args)``, a request to the daemon, which must answer within ANSWER seconds."""
    try:
        return fn(*args, **kwargs)
    except RenderdError as exc:
        pytest.fail(f"{what}: the daemon did not answer while its stderr was not read ({exc})")


def _players(client: ControlClient, name: str) -> list[dict]:
    envs = _ask("GET /v1/environments", client.environments)
    return next(e["players"] for e in envs if e["name"] == name)


def _wait_restarts(proc: subprocess.Popen, client: ControlClient, count: int) -> None:
    """Until the noisy players have restarted ``count`` times more (and logged as much)."""
    def restarts() -> int:
        if proc.poll() is not None:
            raise AssertionError(f"the daemon exited ({proc.returncode})")
        return sum(p["restarts"] for p in _players(client, "noisy"))

    start = done = restarts()
    deadline = time.monotonic() + 10.0
    while done < start + count:
        if time.monotonic() > deadline:
            pytest.fail(f"the daemon restarted its crashing players {done - start} times in 10 s, not {count}, "
                        "while its stderr was not read")
        time.sleep(0.02)
        done = restarts()


def _wait_full(proc: subprocess.Popen, fd: int, capacity: int) -> None:
    """Until the daemon's stderr pipe is (all but) full."""
    def full() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the daemon exited ({proc.returncode})")
        return _pending(fd) > capacity - 1024

    wait_for(full, 10.0, "the daemon's stderr pipe to fill")


def _read_until(fd: int, pattern: re.Pattern[str], timeout: float) -> str:
    """What the pipe gives until ``pattern`` appears in it."""
    data = b""
    deadline = time.monotonic() + timeout
    while not pattern.search(data.decode(errors="replace")):
        assert time.monotonic() < deadline, f"no {pattern.pattern!r} in the daemon's stderr:\n{data[-3000:]!r}"
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        assert chunk, f"the daemon's stderr ended without {pattern.pattern!r}:\n{data[-3000:]!r}"
        data += chunk
    return data.decode(errors="replace")


def _notified(notify: socket.socket, assignment: bytes, timeout: float, *, drain: bool = False) -> bool:
    """Whether the daemon sends ``assignment`` (``WATCHDOG=1``) to the test's NOTIFY_SOCKET within ``timeout``
    seconds (with ``drain``: not counting what it sent before)."""
    while drain:
        try:
            notify.recv(4096)
        except BlockingIOError:
            break
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if assignment in notify.recv(4096).split(b"\n"):
                return True
        except BlockingIOError:
            time.sleep(0.01)
    return False


def test_a_daemon_whose_stderr_is_not_read_answers_reports_the_dropped_lines_and_stops(stalled):
    proc, client, notify, seen, add_noisy = stalled
    err = proc.stderr.fileno()
    capacity = fcntl.fcntl(err, F_GETPIPE_SZ)

    def ready():
        if proc.poll() is not None:
            raise AssertionError(f"the daemon exited ({proc.returncode})")
        try:
            return client.health()["status"] == "ready"
        except RenderdError:
            return False

    wait_for(ready, 30.0, "the daemon to be ready")
    assert _notified(notify, b"READY=1", 2.0)
    add_noisy()
    proc.send_signal(signal.SIGHUP)
    _wait_full(proc, err, capacity)
    # The daemon goes on: status, a lease and its release are answered; the crashing players are restarted,
    # each restart logged, enough to fill the log queue too (from here on lines are dropped); the watchdog is
    # pinged.
    try:
        out = subprocess.run([*RENDERD, "status", "--socket", client.socket], capture_output=True, text=True,
                             timeout=ANSWER + 10)
    except subprocess.TimeoutExpired:
        pytest.fail("renderd status did not answer while the daemon's stderr was not read")
    assert out.returncode == 0 and "steady" in out.stdout and "noisy" in out.stdout, out.stderr
    lease = _ask("a lease", client.lease, "steady", timeout=ANSWER)
    seen.add(lease["pid"])
    _ask("the release", client.release, lease["lease"])
    _wait_restarts(proc, client, capacity // BYTES_PER_RESTART + QUEUE // RECORDS_PER_RESTART + 10)
    assert _notified(notify, b"WATCHDOG=1", 2.0, drain=True), "no WATCHDOG=1 while stderr was not read"
    assert _pending(err) > capacity - 1024, "the daemon's stderr was read meanwhile"

    # Read: the lines come, whole, and one of them says how many were dropped.
    text = _read_until(err, DROPPED, 5.0)
    assert int(DROPPED.search(text).group(1)) > 0
    lines = text.splitlines()[1:-1]  # (the first and last may be cut by the pipe's reads)
    assert lines and all(LINE.match(line) for line in lines), [line for line in lines if not LINE.match(line)][:5]

    # Stop reading again; SIGTERM still ends the daemon, in its usual time (stop_grace and a little more).
    _wait_full(proc, err, capacity)
    _wait_restarts(proc, client, 5)
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(10.0)
    except subprocess.TimeoutExpired:
        pytest.fail("SIGTERM did not end the daemon whose stderr was not read")
    assert code == 0
