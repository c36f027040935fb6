"""The fault matrix through the daemon: a leased player that fails, a client that dies holding a lease,
and the daemon itself stopped or killed during a lease.

Leased-player and client rows share one daemon (one player, fast restarts). After each row:
the old player is gone and a new one is READY, the next client gets a clean stream (its first answer is
sequenceId 1 for *its* action), the daemon has exactly one player process and one pipe directory, its
descriptors and threads are back to what they were, and this process (the client) has no descriptor or
child left. Daemon rows start a daemon of their own each.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from renderd.client import Session
from renderd.daemon.client import connect
from renderd.errors import LeaseError, PlayerCrashed, PlayerTimeout, ProtocolError, RenderdError
from renderd.transport import fifo
from tests.daemon.conftest import DaemonProcess, fast_config

from .conftest import Timer, pid_gone, wait_for

#: A crash under a lease is reported within this many seconds.
AT_ONCE = 1.5
#: The step deadline of hang rows (the client's own step_timeout).
HANG_TIMEOUT = 0.5
LATE = 1.0
#: A player that closed its pipe mid-message but lives on: the client waits up to 1 s for an exit status.
EOF_ALIVE = 1.0 + AT_ONCE
#: How long the daemon may take to replace a player (stop the old one, back off, boot the new one).
REPLACED_WITHIN = 10.0
#: Players must be gone this soon after the daemon is SIGTERMed or SIGKILLed (design.md).
PLAYERS_GONE_WITHIN = 2.0
#: Seconds the player sleeps in its ``sleep`` fault while the test does something to it or its client.
SLEEP = 30.0


def fault(kind: str, **params: Any) -> dict[str, Any]:
    return {"action": "RenderdFault", "fault": kind, **params}


def log_has(session: Session, text: str) -> bool:
    path = session.channel.player.log_path
    try:
        return path is not None and text in Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def shared_daemon(tmp_path_factory):
    d = DaemonProcess(tmp_path_factory.mktemp("faults-daemon"), fast_config())
    try:
        d.wait_ready()
        yield d
    finally:
        d.cleanup()


def daemon_state(d: DaemonProcess) -> dict[str, Any]:
    proc = psutil.Process(d.pid)
    return {"fds": proc.num_fds(), "threads": proc.num_threads()}


def player_dirs(d: DaemonProcess) -> list[str]:
    return os.listdir(os.path.join(d.runtime_dir, "players"))


# -- leased-player rows --------------------------------------------------------------------------------


def step(action: Any) -> Callable[[Session], Callable[[], Any]]:
    return lambda s: lambda: s.step(action)


def signal_mid_step(sig: signal.Signals) -> Callable[[Session], Callable[[], Any]]:
    def prepare(s: Session) -> Callable[[], Any]:
        s.send(fault("sleep", seconds=SLEEP))
        wait_for(lambda: log_has(s, "fault: sleeping"), 10, "the player to be inside its step")
        os.kill(s.pid, sig)
        return s.recv

    return prepare


def after(kind: str, **params: Any) -> Callable[[Session], Callable[[], Any]]:
    def prepare(s: Session) -> Callable[[], Any]:
        assert s.step(fault(kind, when="after", **params)).metadata["lastActionSuccess"]
        return lambda: s.step("Pass")

    return prepare


def signal_between_steps(sig: signal.Signals) -> Callable[[Session], Callable[[], Any]]:
    def prepare(s: Session) -> Callable[[], Any]:
        s.step("Pass")
        os.kill(s.pid, sig)
        return lambda: s.step("Pass")

    return prepare


@dataclass(frozen=True)
class LeaseRow:
    id: str
    fault: Callable[[Session], Callable[[], Any]]
    expect: type[RenderdError]
    match: str
    within: float
    deadline: str | None = None
    step_timeout: float = 10.0

    def __str__(self) -> str:
        return self.id


LEASE_ROWS = [
    LeaseRow("mid-step/SIGABRT", step(fault("abort")), PlayerCrashed, "leased player pid .*killed by SIGABRT",
             AT_ONCE),
    LeaseRow("mid-step/exit", step(fault("exit", code=3)), PlayerCrashed, "exit code 3", AT_ONCE),
    LeaseRow("mid-step/SIGKILL", signal_mid_step(signal.SIGKILL), PlayerCrashed, "killed by SIGKILL", AT_ONCE),
    LeaseRow("mid-step/hang", step(fault("hang")), PlayerTimeout, "step_timeout = 0.5 s", HANG_TIMEOUT + LATE,
             deadline="step_timeout", step_timeout=HANG_TIMEOUT),
    LeaseRow("mid-step/garbage", step(fault("garbage")), ProtocolError, "unknown field type 42", AT_ONCE),
    LeaseRow("mid-step/oversize", step(fault("oversize")), ProtocolError, "over the limit", AT_ONCE),
    LeaseRow("mid-step/truncated", step(fault("truncate", code=9)), PlayerCrashed, "middle of a message",
             AT_ONCE),
    LeaseRow("mid-step/unterminated+alive", step(fault("close")), PlayerCrashed,
             "middle of a message.*still running", EOF_ALIVE),
    LeaseRow("between-steps/SIGSEGV", after("segfault"), PlayerCrashed, "killed by SIGSEGV", AT_ONCE),
    LeaseRow("between-steps/SIGKILL", signal_between_steps(signal.SIGKILL), PlayerCrashed, "killed by SIGKILL",
             AT_ONCE),
    LeaseRow("between-steps/hang", after("hang"), PlayerTimeout, "step_timeout = 0.5 s", HANG_TIMEOUT + LATE,
             deadline="step_timeout", step_timeout=HANG_TIMEOUT),
]


def _check_replaced_and_clean(d: DaemonProcess, old_pid: int, before: dict[str, Any]) -> None:
    """The old player is gone, a new one is READY and gives the next client a clean stream, and the
    daemon holds no more than it did."""
    (player,) = d.wait_players(
        lambda ps: ps[0]["state"] == "READY" and ps[0]["pid"] != old_pid, timeout=REPLACED_WITHIN,
        what="a new READY player",
    )
    assert pid_gone(old_pid)
    assert d.descendants() == [player["pid"]], d.descendants()
    assert len(player_dirs(d)) == 1, player_dirs(d)
    with connect("demo", socket=d.socket, timeout=10) as session:
        assert session.pid == player["pid"]
        event = session.step("MoveAhead")
        assert event.sequence_id == 1 and event.metadata["lastAction"] == "MoveAhead"
        assert session.step("Pass").sequence_id == 2
    d.wait_players(lambda ps: ps[0]["state"] == "READY", what="the player released")
    wait_for(lambda: daemon_state(d)["fds"] <= before["fds"], 5,
             f"the daemon's descriptors back to {before['fds']} (now {daemon_state(d)['fds']})")
    wait_for(lambda: daemon_state(d)["threads"] <= before["threads"], 5,
             f"the daemon's threads back to {before['threads']} (now {daemon_state(d)['threads']})")


@pytest.mark.parametrize("row", LEASE_ROWS, ids=str)
def test_leased_player_fault(row: LeaseRow, shared_daemon: DaemonProcess, nothing_left, monkeypatch) -> None:
    if "still running" in row.match:  # (no exit ever comes: the wait for one is only waited out, 0.2 s as well as 1 s)
        monkeypatch.setattr(fifo, "EOF_CLASSIFY_TIMEOUT", 0.2)
    d = shared_daemon
    nothing_left.ignore.add(d.pid)
    (before_player,) = d.wait_players(lambda ps: ps[0]["state"] == "READY", what="a READY player")
    before = daemon_state(d)
    with connect("demo", socket=d.socket, timeout=10, step_timeout=row.step_timeout) as session:
        old_pid = session.pid
        assert old_pid == before_player["pid"]
        assert session.step("Pass").sequence_id == 1
        trigger = row.fault(session)
        with Timer() as t, pytest.raises(RenderdError) as info:
            trigger()
    err = info.value
    assert isinstance(err, row.expect), f"{row}: {type(err).__name__}: {err}"
    assert t.elapsed < row.within, f"{row}: raised after {t.elapsed:.2f} s"
    assert re.search(row.match, str(err), re.DOTALL), f"{row}: {err}"
    if row.deadline is not None:
        assert err.deadline == row.deadline and t.elapsed >= row.step_timeout
    _check_replaced_and_clean(d, old_pid, before)


# -- a client that dies holding a lease ----------------------------------------------------------------

CLIENT_PRELUDE = """
import os, select, sys, time
import renderd
from renderd.protocol import encode_action

session = renderd.connect("demo", socket=sys.argv[1], timeout=20)
assert session.step("Pass").sequence_id == 1
"""

CLIENTS = {
    # Half of an ACTION message is in client.pipe when the client dies.
    "mid-write": """
data = b"".join(bytes(b) for b in encode_action({"action": "MoveAhead", "sequenceId": 2}))
session.channel.send([data[: len(data) // 2]], time.monotonic() + 10)
""",
    # The answer is in server.pipe and the client has read 7 bytes of it (a header and a bit) when it dies.
    "mid-read": """
session.send("MoveAhead")
fd = session.channel.fileno()
assert select.select([fd], [], [], 10)[0]
assert len(os.read(fd, 7)) == 7
""",
    # Between steps: idle, holding the lease.
    "between-steps": "",
}

CLIENT_EPILOGUE = """
print(session.pid, flush=True)
time.sleep(60)  # killed by the test before this ends
"""


@pytest.mark.parametrize("where", list(CLIENTS))
def test_client_killed_holding_a_lease(where: str, shared_daemon: DaemonProcess, tmp_path: Path,
                                       nothing_left) -> None:
    d = shared_daemon
    nothing_left.ignore.add(d.pid)
    d.wait_players(lambda ps: ps[0]["state"] == "READY", what="a READY player")
    before = daemon_state(d)
    script = tmp_path / "client.py"
    script.write_text(textwrap.dedent(CLIENT_PRELUDE + CLIENTS[where] + CLIENT_EPILOGUE))
    client = subprocess.Popen([sys.executable, str(script), d.socket], stdout=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL)
    try:
        line = client.stdout.readline()
        assert line.strip().isdigit(), f"the client did not get its lease: {line!r}"
        old_pid = int(line)
        assert d.players()[0]["state"] == "LEASED"
        client.kill()
        client.wait(10)
        with Timer() as t:
            wait_for(lambda: pid_gone(old_pid), REPLACED_WITHIN, "the held player to be recycled")
        assert t.elapsed < REPLACED_WITHIN
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(10)
        client.stdout.close()
    assert "exited holding the lease" in d.output()
    _check_replaced_and_clean(d, old_pid, before)


# -- the daemon stopped or killed during a lease ----------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_daemon_signalled_during_a_lease(sig: signal.Signals, tmp_path: Path, nothing_left) -> None:
    """The client is mid-step (its player sleeping inside the action) when the daemon gets ``sig``: the
    players are gone within 2 s, the client's wait ends with PlayerCrashed at once, nothing is left."""
    d = DaemonProcess(tmp_path / "d", fast_config(instances=2))
    nothing_left.ignore.add(d.pid)
    again = None
    try:
        d.wait_ready()
        pids = [p["pid"] for p in d.players()]
        session = connect("demo", socket=d.socket, timeout=10, step_timeout=30)
        try:
            session.step("Pass")
            session.send(fault("sleep", seconds=SLEEP))
            wait_for(lambda: log_has(session, "fault: sleeping"), 10, "the player to be inside its step")
            with Timer() as t:
                d.signal(sig)
                with pytest.raises(PlayerCrashed):
                    session.recv()
            assert t.elapsed < PLAYERS_GONE_WITHIN + AT_ONCE, f"the client waited {t.elapsed:.2f} s"
            wait_for(lambda: all(pid_gone(pid) for pid in pids), PLAYERS_GONE_WITHIN, "the players to be gone")
        finally:
            session.close()  # the release cannot reach the daemon any more: logged, not raised
        code = d.wait_exit()
        if sig == signal.SIGTERM:
            assert code == 0
            # A graceful stop removes everything it made: socket, runtime directory, pipes, logs.
            assert not os.path.exists(d.socket) and not os.path.exists(d.runtime_dir)
        else:
            assert code == -signal.SIGKILL
            # Nobody could clean up; the next daemon on the same paths removes the stale socket and
            # pipes, and its graceful stop leaves nothing in the runtime directory (which it found
            # existing, so it keeps the directory itself).
            again = DaemonProcess(tmp_path / "again", fast_config(), socket=d.socket, runtime_dir=d.runtime_dir)
            nothing_left.ignore.add(again.pid)
            again.wait_ready()
            assert len(player_dirs(again)) == 1
            again.signal(signal.SIGTERM)
            assert again.wait_exit() == 0
            assert not os.path.exists(d.socket) and os.listdir(d.runtime_dir) == []
    finally:
        for daemon in (d, again):
            if daemon is not None:
                daemon.cleanup()


# -- every crash under a lease is classified, whichever the daemon sees first ----------------------------

EXITS_BY_SIGNAL = re.compile(r'^renderd_player_exits_total\{environment="demo",how="signal"\} ([0-9.]+)$',
                             re.MULTILINE)


def signal_exits(d: DaemonProcess) -> float:
    found = EXITS_BY_SIGNAL.search(d.client.request("GET", "/metrics")[1])
    return float(found.group(1)) if found else 0.0


def test_every_crash_under_a_lease_is_classified(shared_daemon: DaemonProcess, nothing_left) -> None:
    """Ten crashes with the client's release close behind (through a session that sees the crash, and
    bare: SIGSEGV then an immediate release): each is logged with its signal and counted, never taken
    for a plain recycle."""
    d = shared_daemon
    nothing_left.ignore.add(d.pid)
    d.wait_players(lambda ps: ps[0]["state"] == "READY", what="a READY player")
    counted = signal_exits(d)
    pids = []
    for i in range(10):
        if i % 2:
            answer = d.client.lease("demo", timeout=10)
            pids.append(answer["pid"])
            os.kill(answer["pid"], signal.SIGSEGV)
            try:
                d.client.release(answer["lease"], clean=False)  # races the daemon's reaping of the player
            except LeaseError:
                pass  # the daemon reaped the player first: the lease had ended
        else:
            with connect("demo", socket=d.socket, timeout=10) as session:
                pids.append(session.pid)
                session.step("Pass")
                with pytest.raises(PlayerCrashed):
                    session.step(fault("segfault"))
        d.wait_players(lambda ps: ps[0]["state"] == "READY" and ps[0]["pid"] != pids[-1], what="a new player")
    log = d.output()
    for pid in pids:
        assert f"pid {pid} killed by SIGSEGV while leased" in log, [line for line in log.splitlines()
                                                                    if str(pid) in line]
    exits = [line for line in log.splitlines() if "killed by" in line or "exited" in line]
    assert signal_exits(d) == counted + 10, "\n".join(exits)


def test_leased_player_crash_names_the_signal(shared_daemon: DaemonProcess, nothing_left) -> None:
    d = shared_daemon
    nothing_left.ignore.add(d.pid)
    d.wait_players(lambda ps: ps[0]["state"] == "READY", what="a READY player")
    with connect("demo", socket=d.socket, timeout=10) as session:
        session.step("Pass")
        os.kill(session.pid, signal.SIGKILL)
        with Timer() as t, pytest.raises(PlayerCrashed) as info:
            session.step("Pass")
        assert session.channel.player.returncode == -signal.SIGKILL
    assert "killed by SIGKILL" in str(info.value) and info.value.returncode == -signal.SIGKILL
    assert info.value.signal_name == "SIGKILL" and "out-of-memory" in str(info.value)
    assert t.elapsed < AT_ONCE
