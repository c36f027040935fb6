"""The fault matrix of one player launched with ``renderd.launch()`` (FIFO): every way a player can fail,
at every point, with the error it must produce, how fast, and that nothing is left afterwards.

Points: before the player opens ``server.pipe``; during its first message (pipe open, nothing or part of
the message written); mid-step (the client's action is in flight); between steps (after an answer, before
the next action). Faults come from the reference player's hooks (``--fault-at-start``, the
``RenderdFault`` action, docs/player.md), from the test (a signal while the player sleeps in its
``sleep`` fault, i.e. at an exact point of a step), or from a two-line shell "player" where the reference
player has no hook (a signal before it opens its pipe, part of a first message).

Each row: the error type and text, the return code or deadline it names, and a time bound: a crash is
reported at once (no waiting for a deadline), a hang exactly at its deadline. After each row the
``nothing_left`` fixture checks: no child process, no descriptor, no pipe directory.
"""

from __future__ import annotations

import math
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import renderd
from renderd.client import Session, SessionState
from renderd.errors import (
    CallOrderError,
    ConfigError,
    PlayerCrashed,
    PlayerTimeout,
    ProtocolError,
    RenderdError,
)
from renderd.protocol import FieldType, encode_message, encode_metadata
from renderd.transport import fifo
from renderd.transport.fifo import FifoChannel, FifoPair

from .conftest import Timer, wait_for

#: A crash must be reported within this many seconds of happening (EOF or the pidfd wake the client
#: at once; the bound covers a busy 2-core machine).
AT_ONCE = 1.5
#: A player that closes its pipe but keeps running is reported after FifoChannel waited up to
#: EOF_CLASSIFY_TIMEOUT (1 s) for an exit status.
EOF_ALIVE = 1.0 + AT_ONCE
#: The deadline a hang row runs into, and how late past it the error may come.
HANG_TIMEOUT = 0.5
LATE = 1.0
#: Deadlines that are not under test in a row (generous: the machine may be busy).
START = 10.0
STEP = 5.0
#: Seconds the reference player sleeps in the ``sleep`` fault while the test signals it.
SLEEP = 30.0
SMALL = ("-screen-width", "32", "-screen-height", "24")

FIFO = '"$AI2THOR_FIFO_SERVER_PIPE_PATH"'
#: The first 8 bytes of a first message: a METADATA header declaring 16 bytes, then 3 of them.
PARTIAL = r"printf '\001\000\000\000\020abc' >&3"


def sh(script: str) -> list[str]:
    """A shell "player" (renderd appends the Unity flags; sh takes them as $0, $1...)."""
    return ["/bin/sh", "-c", script]


def fault(kind: str, **params: Any) -> dict[str, Any]:
    return {"action": "RenderdFault", "fault": kind, **params}


@dataclass
class Ctx:
    session: Session
    log_path: Path

    def log_has(self, text: str) -> bool:
        try:
            return text in self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return False


def step(action: Any) -> Callable[[Ctx], Callable[[], Any]]:
    """Mid-step: the faulting action itself is the timed call."""
    return lambda ctx: lambda: ctx.session.step(action)


def signal_mid_step(sig: signal.Signals) -> Callable[[Ctx], Callable[[], Any]]:
    """The action is in flight and the player is inside it (sleeping in its ``sleep`` fault): signal it."""

    def prepare(ctx: Ctx) -> Callable[[], Any]:
        ctx.session.send(fault("sleep", seconds=SLEEP))
        wait_for(lambda: ctx.log_has("fault: sleeping"), STEP, "the player to be inside its step")
        os.kill(ctx.session.pid, sig)
        return ctx.session.recv

    return prepare


def after(kind: str, **params: Any) -> Callable[[Ctx], Callable[[], Any]]:
    """Between steps: the player answers, then misbehaves; the next step is the timed call."""

    def prepare(ctx: Ctx) -> Callable[[], Any]:
        event = ctx.session.step(fault(kind, when="after", **params))
        assert event.metadata["lastActionSuccess"], event.metadata
        return lambda: ctx.session.step("Pass")

    return prepare


def signal_between_steps(sig: signal.Signals) -> Callable[[Ctx], Callable[[], Any]]:
    def prepare(ctx: Ctx) -> Callable[[], Any]:
        ctx.session.step("Pass")
        os.kill(ctx.session.pid, sig)
        return lambda: ctx.session.step("Pass")

    return prepare


@dataclass(frozen=True)
class Row:
    id: str
    expect: type[RenderdError]
    match: str  # a regular expression the error's text contains
    within: float  # seconds from the fault to the error
    executable: tuple[str, ...] | None = None  # default: the reference player
    args: tuple[str, ...] = ()
    fault: Callable[[Ctx], Callable[[], Any]] | None = None  # None: launch() itself raises
    returncode: int | None = None  # PlayerCrashed.returncode (None: still running, or not checked)
    deadline: str | None = None  # PlayerTimeout.deadline
    start_timeout: float = START
    step_timeout: float = STEP

    def __str__(self) -> str:
        return self.id


ABRT, SEGV, KILL = -signal.SIGABRT, -signal.SIGSEGV, -signal.SIGKILL

ROWS = [
    # -- before the player opens server.pipe -------------------------------------------------------
    Row("before-open/exit", PlayerCrashed, "exit code 1", AT_ONCE + 1, args=("--fault-at-start", "no-open"),
        returncode=1),
    Row("before-open/SIGABRT", PlayerCrashed, "killed by SIGABRT", AT_ONCE, executable=tuple(sh("kill -ABRT $$")),
        returncode=ABRT),
    Row("before-open/SIGSEGV", PlayerCrashed, "killed by SIGSEGV", AT_ONCE, executable=tuple(sh("kill -SEGV $$")),
        returncode=SEGV),
    Row("before-open/SIGKILL", PlayerCrashed, "killed by SIGKILL", AT_ONCE, executable=tuple(sh("kill -KILL $$")),
        returncode=KILL),
    Row("before-open/hang", PlayerTimeout, "start_timeout = 0.5 s", HANG_TIMEOUT + LATE,
        args=("--fault-at-start", "hang"), deadline="start_timeout", start_timeout=HANG_TIMEOUT),
    # -- during the first message --------------------------------------------------------------------
    Row("first-message/exit", PlayerCrashed, "exit code 1", AT_ONCE + 1, args=("--fault-at-start", "exit"),
        returncode=1),
    Row("first-message/SIGABRT", PlayerCrashed, "killed by SIGABRT", AT_ONCE + 1,
        args=("--fault-at-start", "abort"), returncode=ABRT),
    Row("first-message/SIGSEGV", PlayerCrashed, "killed by SIGSEGV", AT_ONCE + 1,
        args=("--fault-at-start", "segfault"), returncode=SEGV),
    Row("first-message/partial+SIGKILL", PlayerCrashed, "middle of a message.*killed by SIGKILL", AT_ONCE,
        executable=tuple(sh(f"exec 3>{FIFO}; {PARTIAL}; kill -KILL $$")), returncode=KILL),
    Row("first-message/partial+exit", PlayerCrashed, "middle of a message.*exit code 3", AT_ONCE,
        executable=tuple(sh(f"exec 3>{FIFO}; {PARTIAL}; exit 3")), returncode=3),
    Row("first-message/hang", PlayerTimeout, "start_timeout = 0.5 s", HANG_TIMEOUT + LATE,
        args=("--fault-at-start", "hang-open"), deadline="start_timeout", start_timeout=HANG_TIMEOUT),
    Row("first-message/partial+hang", PlayerTimeout, r"8 byte\(s\) of an incomplete message received",
        HANG_TIMEOUT + LATE,
        executable=tuple(sh(f"exec 3>{FIFO}; {PARTIAL}; exec sleep 60")), deadline="start_timeout",
        start_timeout=HANG_TIMEOUT),
    Row("first-message/garbage", ProtocolError, "unknown field type 42", AT_ONCE + 1,
        args=("--fault-at-start", "garbage")),
    Row("first-message/oversize", ProtocolError, "over the limit", AT_ONCE,
        executable=tuple(sh(rf"exec 3>{FIFO}; printf '\004\377\377\377\377' >&3; exec sleep 60"))),
    # -- mid-step ------------------------------------------------------------------------------------
    Row("mid-step/SIGABRT", PlayerCrashed, "killed by SIGABRT", AT_ONCE, fault=step(fault("abort")),
        returncode=ABRT),
    Row("mid-step/SIGSEGV", PlayerCrashed, "killed by SIGSEGV", AT_ONCE, fault=step(fault("segfault")),
        returncode=SEGV),
    Row("mid-step/exit", PlayerCrashed, "exit code 3", AT_ONCE, fault=step(fault("exit", code=3)), returncode=3),
    Row("mid-step/SIGKILL", PlayerCrashed, "killed by SIGKILL", AT_ONCE, fault=signal_mid_step(signal.SIGKILL),
        returncode=KILL),
    Row("mid-step/hang", PlayerTimeout, "step_timeout = 0.5 s", HANG_TIMEOUT + LATE, fault=step(fault("hang")),
        deadline="step_timeout", step_timeout=HANG_TIMEOUT),
    Row("mid-step/garbage", ProtocolError, "unknown field type 42", AT_ONCE, fault=step(fault("garbage"))),
    Row("mid-step/oversize", ProtocolError, "over the limit", AT_ONCE, fault=step(fault("oversize"))),
    Row("mid-step/truncated+exit", PlayerCrashed, "middle of a message.*exit code 9", AT_ONCE,
        fault=step(fault("truncate", code=9)), returncode=9),
    Row("mid-step/unterminated+alive", PlayerCrashed, "middle of a message.*still running", EOF_ALIVE,
        fault=step(fault("close"))),
    # -- between steps -------------------------------------------------------------------------------
    Row("between-steps/SIGABRT", PlayerCrashed, "killed by SIGABRT", AT_ONCE, fault=after("abort"),
        returncode=ABRT),
    Row("between-steps/SIGSEGV", PlayerCrashed, "killed by SIGSEGV", AT_ONCE, fault=after("segfault"),
        returncode=SEGV),
    Row("between-steps/exit", PlayerCrashed, "exit code 5", AT_ONCE, fault=after("exit", code=5), returncode=5),
    Row("between-steps/SIGKILL", PlayerCrashed, "killed by SIGKILL", AT_ONCE,
        fault=signal_between_steps(signal.SIGKILL), returncode=KILL),
    Row("between-steps/hang", PlayerTimeout, "step_timeout = 0.5 s", HANG_TIMEOUT + LATE, fault=after("hang"),
        deadline="step_timeout", step_timeout=HANG_TIMEOUT),
]


def _launch(row: Row, log_path: Path) -> Session:
    executable = list(row.executable) if row.executable else ["renderd-player", "--static-frame", *SMALL]
    return renderd.launch(
        executable,
        platform="headless",
        args=row.args,
        start_timeout=row.start_timeout,
        step_timeout=row.step_timeout,
        log_path=log_path,
    )


def _check_error(row: Row, err: BaseException, elapsed: float) -> None:
    assert isinstance(err, row.expect), f"{row}: expected {row.expect.__name__}, got {type(err).__name__}: {err}"
    assert elapsed < row.within, f"{row}: raised after {elapsed:.2f} s, bound {row.within} s"
    assert re.search(row.match, str(err), re.DOTALL), f"{row}: {err}"
    if row.deadline is not None:
        assert err.deadline == row.deadline, err.deadline
        timeout = row.start_timeout if row.deadline == "start_timeout" else row.step_timeout
        assert elapsed >= timeout, f"{row}: timed out after {elapsed:.2f} s, before its {timeout} s deadline"
    if isinstance(err, PlayerCrashed):
        assert err.returncode == row.returncode, f"{row}: returncode {err.returncode}"
    if "middle of a message" in row.match:
        assert isinstance(err.__cause__, ProtocolError), err.__cause__


@pytest.mark.parametrize("row", ROWS, ids=str)
def test_player_fault(row: Row, tmp_path: Path, nothing_left, monkeypatch) -> None:
    if "still running" in row.match:  # (no exit ever comes: the wait for one is only waited out, 0.2 s as well as 1 s)
        monkeypatch.setattr(fifo, "EOF_CLASSIFY_TIMEOUT", 0.2)
    log_path = tmp_path / "player.log"
    if row.fault is None:
        with Timer() as t, pytest.raises(RenderdError) as info:
            _launch(row, log_path)
        _check_error(row, info.value, t.elapsed)
        return
    with _launch(row, log_path) as session:
        assert session.step("Pass").sequence_id == 1
        trigger = row.fault(Ctx(session, log_path))
        with Timer() as t, pytest.raises(RenderdError) as info:
            trigger()
        _check_error(row, info.value, t.elapsed)
        assert session.state is SessionState.BROKEN
        with pytest.raises(CallOrderError, match="broken session"):
            session.step("Pass")
    # nothing_left: the player (and a hanging one's whole process group), the pipes, the descriptors.


# -- arguments: every wait has a finite deadline -----------------------------------------------------------
@pytest.mark.parametrize("transport", ["fifo", "http"])
@pytest.mark.parametrize("kwargs", [{"start_timeout": math.inf}, {"step_timeout": math.inf},
                                    {"step_timeout": math.nan}, {"start_timeout": 1e12}])
def test_launch_refuses_infinite_timeouts(kwargs: dict[str, float], transport: str, nothing_left) -> None:
    (key,) = kwargs
    with Timer() as t, pytest.raises(ConfigError, match=f"^{key}: must be") as info:
        renderd.launch(["renderd-player", "--static-frame"], width=8, height=8, platform="headless",
                       transport=transport, **kwargs)
    assert info.value.key == key and isinstance(info.value, ValueError)
    assert t.elapsed < AT_ONCE  # refused before anything was started


@pytest.mark.parametrize("kwargs", [{"timeout": math.inf}, {"timeout": -1}, {"step_timeout": math.inf},
                                    {"step_timeout": 0}])
def test_connect_refuses_bad_timeouts(kwargs: dict[str, float], tmp_path: Path, nothing_left) -> None:
    (key,) = kwargs
    with pytest.raises(ValueError, match=f"^{key}: must be"):  # before it even looks for a daemon
        renderd.connect("demo", socket=str(tmp_path / "no-daemon.sock"), **kwargs)


def test_a_timeout_counts_the_bytes_of_the_incomplete_message(tmp_path: Path, nothing_left) -> None:
    """After a whole message, 5 bytes of the next one: the timeout says 5 bytes, starting after the first."""
    first = b"".join(bytes(b) for b in encode_message([(FieldType.METADATA, encode_metadata({"sequenceId": 0}))]))
    with FifoPair.create(tmp_path) as pair, FifoChannel(pair.server_path, pair.client_path) as channel:
        wfd = os.open(pair.server_path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(wfd, first + b"\x01\x00\x00\x00\x10")
            assert channel.recv(time.monotonic() + STEP).offset == 0
            with pytest.raises(PlayerTimeout, match=rf"5 byte\(s\) of an incomplete message received \(it starts "
                                                    rf"at byte offset {len(first)} "):
                channel.recv(time.monotonic() + 0.2)
        finally:
            os.close(wfd)
