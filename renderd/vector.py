"""Many players at once: :class:`VectorSession`, :func:`launch_many` and :func:`connect_many`.

A vector session steps N players (its *slots*) together::

    with renderd.launch_many(4, width=128, height=128, replace_on_crash=True) as vs:
        observations, rewards, dones, infos = vs.step(["MoveAhead", "RotateLeft", "Pass", "LookUp"])

``step(actions)`` is ``send(actions)`` (every action is written before any answer is read, so the players
work in parallel) then ``recv()`` (one ``poll`` over every slot's pipe and player pidfd; answers are read
in the order they arrive, results come back in slot order). Calls are ordered like a
:class:`renderd.Session`'s: a second ``send`` before ``recv`` raises
:class:`~renderd.errors.AlreadyPendingCallError`, a ``recv`` with nothing pending
:class:`~renderd.errors.NoPendingCallError`, anything on a closed or broken vector session
:class:`~renderd.errors.CallOrderError`.

Each slot is in one of four states (:class:`SlotState`)::

    RUNNING ──reset_async()──> RESETTING ──last reset answer──> RUNNING
       │                           │
       └── crash / timeout / protocol error ──> REPLACING ──new player ready──> RESETTING (or RUNNING)
                                                (replace_on_crash=True; else FAILED and the error is raised)

While a slot is RESETTING or REPLACING (the "masks" of a vectorized environment), the caller's actions
for it are dropped (``info["dropped_action"]``), its observation is ``None`` (``info["resetting"]``)
and it never holds up a ``recv`` unless ``wait_resets=True``; its reset actions (``Reset``, an optional
``ChangeResolution``, ``Initialize``) are sent one after another as its player answers, interleaved with
the other slots' steps. The step in which its reset finishes returns the reset's last event as the
observation (``info["reset_complete"]``). Rewards and done flags pass through for every slot in every
step. docs/vector.md gives the exact semantics.

Players are launched (or leased) concurrently from a small thread pool that lives as long as the vector
session: a player started with ``PR_SET_PDEATHSIG`` dies when the *thread* that forked it exits, so those
threads are kept until :meth:`VectorSession.close`.
"""

from __future__ import annotations

import enum
import errno
import functools
import math
import numbers
import os
import secrets
import select
import signal
import sys
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, NamedTuple

import psutil

from renderd.client import _IO_CODES as _SESSION_IO_CODES
from renderd.client import CLOSE_WAITER_TIMEOUT, Session, check_sequence_id
from renderd.config import ArgumentError, check_seconds
from renderd.errors import (
    AlreadyPendingCallError,
    CallOrderError,
    ConfigError,
    NoPendingCallError,
    PlayerCrashed,
    PlayerTimeout,
    ProtocolError,
    RenderdError,
)
from renderd.event import Event
from renderd.process import check_size, exit_safe_logger
from renderd.protocol import encode_action
from renderd.transport import fifo as _fifo

__all__ = [
    "REPLACE_ATTEMPTS",
    "SlotState",
    "VectorSession",
    "VectorStep",
    "connect_many",
    "failure_error",
    "launch_many",
]

log = exit_safe_logger(__name__)  # (its code runs at interpreter exit too: a session's __del__)

#: How many players (or leases) are tried, one after another, to replace one crashed slot before the
#: failure is raised instead.
REPLACE_ATTEMPTS = 3
#: Largest number of slots one vector session accepts (each slot is a player process and a few fds).
MAX_SLOTS = 1024
#: The environment variable that marks the players :func:`launch_many` starts (its value is the vector
#: session's random tag), so that :meth:`VectorSession.close` can find a replacement still booting in a
#: launch thread and stop it instead of waiting out its ``start_timeout``.
TAG_VARIABLE = "RENDERD_VECTOR_TAG"
#: How often :meth:`VectorSession.close` looks for a booting replacement to stop while it waits for one.
CANCEL_POLL = 0.05
#: While ``recv`` works, a slot's action whose player has not opened ``client.pipe`` yet (a replacement
#: that sent its first frame) waits for it without holding up the other slots: whether the player has
#: opened it is checked again after this long, doubling up to :data:`OPEN_POLL_MAX`.
OPEN_POLL_FIRST = 0.001
OPEN_POLL_MAX = 0.05
#: Most sessions closed at the same time (one thread each): players that ignore SIGTERM cost one stop grace
#: per this many slots, not one per slot.
CLOSE_THREADS = 64

_READ_EVENTS = select.POLLIN | select.POLLHUP | select.POLLERR
#: What interrupts a close() from a signal handler (Ctrl-C, a SIGTERM handler's sys.exit()): raised once
#: everything is closed, not half-way.
_INTERRUPTS = (KeyboardInterrupt, SystemExit)


class SlotState(enum.Enum):
    RUNNING = "running"  # takes the caller's actions
    RESETTING = "resetting"  # working through its reset actions; the caller's actions are dropped
    REPLACING = "replacing"  # its player failed; a new player (or lease) is on its way
    FAILED = "failed"  # its player failed and is not replaced: the vector session is broken


#: One letter per slot state in ``repr(VectorSession)``: ``slots=[r,s,p,f]``.
_STATE_LETTERS = {SlotState.RUNNING: "r", SlotState.RESETTING: "s", SlotState.REPLACING: "p", SlotState.FAILED: "f"}


class _VectorState(enum.Enum):
    READY = "ready"
    PENDING = "pending"
    BROKEN = "broken"
    CLOSED = "closed"


#: Vector sessions of this process, for :func:`_after_fork_in_child`.
_vectors: weakref.WeakSet[VectorSession] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a forked child: its copies of the parent's vector sessions may not step the parent's players (their
    sessions are broken too, see :mod:`renderd.client`), nor replace them with players of the child's own.
    Each copy is broken with an error that says so; its close() only marks it closed."""
    for vs in list(_vectors):
        if vs._owner_pid != os.getpid():
            # (A parent thread may have held it at fork: in this process nothing would release it. The parent's calls
            # are not this copy's.)
            vs._call_lock = threading.RLock()
            vs._calls, vs._leftover = 0, False
        if vs._state is not _VectorState.CLOSED and vs._owner_pid != os.getpid():
            vs._close_claim = {}  # (a close() a parent thread had just begun is the parent's: this copy's is its own)
            vs._state = _VectorState.BROKEN
            vs._round = None
            vs._error = CallOrderError(
                f"this VectorSession was inherited over fork from process {vs._owner_pid}, which owns its "
                "players; in this process, launch or connect a vector session of its own"
            )


os.register_at_fork(after_in_child=_after_fork_in_child)


class VectorStep(NamedTuple):
    """What :meth:`VectorSession.step`, :meth:`~VectorSession.recv` and :meth:`~VectorSession.reset`
    return, one entry per slot in slot order.

    ``observations[i]``: the slot's :class:`~renderd.Event`, or ``None`` while it resets.
    ``rewards[i]``: ``reward_fn(event)`` for an answered action, else ``0.0``.
    ``dones[i]``: ``done_fn(event)`` for an answered action; ``True`` in the step that reports a failure.
    ``infos[i]``: a new dict every step (keys in docs/vector.md).
    """

    observations: list[Event | None]
    rewards: list[float]
    dones: list[bool]
    infos: list[dict[str, Any]]


class _Slot:
    """One player's place in the vector: its session and where it is in its reset."""

    __slots__ = (
        "closed_input",
        "deadline",
        "fds",
        "failed_in_turn",
        "future",
        "in_flight",
        "index",
        "init_params",
        "open_pause",
        "open_retry",
        "reset_errors",
        "reset_queue",
        "reset_requested",
        "resolution",
        "scene",
        "sent_action",
        "sent_at",
        "session",
        "state",
        "superseded",
        "unopened",
    )

    def __init__(self, index: int, session: Any) -> None:
        self.index = index
        self.session = session
        self.state = SlotState.RUNNING
        self.in_flight: str | None = None  # "action" | "reset" | None
        self.deadline = math.inf
        self.sent_at = 0.0  # time.monotonic() when the action in flight was sent
        self.sent_action = ""  # its name
        self.fds: tuple[int, ...] = ()  # registered with the poller while something is in flight
        # The player closed client.pipe under the action in flight, or server.pipe (see _await_exit): the PlayerCrashed
        # to report (its context; None: the channel's recv reports the end of file) once its exit (or, when
        # ``answer``, its answer) has had its time; else None.
        self.closed_input: tuple[str | None, bool] | None = None
        # The action in flight, not written yet: its player has not opened client.pipe (see _defer_open),
        # which is checked again at open_retry (time.monotonic()), then open_pause later.
        self.unopened: str | dict[str, Any] | None = None
        self.open_retry = 0.0
        self.open_pause = OPEN_POLL_FIRST
        self.reset_queue: deque[dict[str, Any]] = deque()
        self.scene: str | None = None  # the scene of the last reset asked for (a replacement loads it too)
        self.init_params: dict[str, Any] = {}  # Initialize parameters, accumulated across resets
        self.resolution: tuple[int | None, int | None] | None = None  # asked for by a reset
        self.reset_requested = False
        self.reset_errors: list[str] = []
        self.superseded = False  # the reset action in flight belongs to a reset that was started over
        self.future: Future | None = None  # the replacement on its way
        # Replacement players in a row that failed before the slot answered or finished a reset with them.
        self.failed_in_turn = 0


class _Round:
    """What one ``recv`` (or ``reset``) collects, slot by slot."""

    __slots__ = ("answered", "completed", "dropped", "events", "reset_errors")

    def __init__(self, n: int) -> None:
        self.events: list[Event | None] = [None] * n
        self.answered = [False] * n  # the slot answered the caller's action
        self.completed = [False] * n  # the slot's reset (or replacement) finished in this round
        self.dropped = [False] * n  # the caller's action for the slot was dropped
        self.reset_errors: list[list[str] | None] = [None] * n


def _check_action(action: Any, slot: int) -> str | dict[str, Any]:
    """Validate one slot's action before anything is sent, so a bad one cannot leave a half-sent step."""
    if isinstance(action, str):
        if not action:
            raise ValueError(f"slot {slot}: the action name is empty")
        return action
    if isinstance(action, Mapping):
        message = dict(action)
        name = message.get("action")
        if not isinstance(name, str) or not name:
            raise ValueError(f"slot {slot}: an action needs a non-empty 'action' name, got {name!r}")
        try:
            if message.get("sequenceId") is not None:
                check_sequence_id(message["sequenceId"])
            encode_action(message)
        except ValueError as exc:
            raise ValueError(f"slot {slot}: {exc}") from exc
        return message
    raise TypeError(f"slot {slot}: an action must be a name or a dict, not {type(action).__name__}")


def _answer_ready(session: Any) -> bool:
    """Whether ``session.recv()`` would return or raise at once: asked of channels that can say (a FIFO
    channel reads what its pipe holds); any other channel polls readable only with a whole frame."""
    ready = getattr(getattr(session, "channel", None), "ready", None)
    return True if ready is None else bool(ready())


def _incomplete(session: Any) -> bool:
    """Whether part of an answer has arrived from ``session``'s player (read by its channel, not whole)."""
    decoder = getattr(getattr(session, "channel", None), "decoder", None)
    return bool(getattr(decoder, "in_message", False))


def _check_timeout(timeout: float | None) -> None:
    """``timeout`` is None or a finite number of seconds (0 included): ArgumentError (a ValueError) if not."""
    if timeout is not None:
        check_seconds(timeout, "timeout", zero_ok=True)


def _check_size(value: Any, name: str) -> int | None:
    """``width``/``height`` of a reset: None, or an integer 1..MAX_RESOLUTION (ArgumentError if not)."""
    if value is None:
        return None
    try:
        return check_size(value, name)
    except ConfigError as exc:
        raise ArgumentError(exc.reason, key=name) from None


def _channel_fds(session: Any) -> tuple[int, ...] | None:
    """The fds that wake a poll for ``session``: its pipe and its player's pidfd; None if not pollable."""
    channel = getattr(session, "channel", None)
    fileno = getattr(channel, "fileno", None)
    if fileno is None:
        return None
    try:
        fd = fileno()
    except (ValueError, OSError):
        return None
    if not isinstance(fd, int):
        return None
    player = getattr(channel, "player", None)
    pidfd = player.fileno() if player is not None and hasattr(player, "fileno") else None
    return (fd,) if pidfd is None else (fd, pidfd)


def _unsent(session: Any) -> int:
    """Bytes of the action in flight that ``session``'s channel has not written yet (a FIFO channel in
    ``partial_sends`` mode keeps what client.pipe did not take; see :meth:`VectorSession._send`)."""
    return getattr(getattr(session, "channel", None), "unsent", 0) or 0


def _writer_fd(session: Any) -> int | None:
    """The write end of ``session``'s client.pipe, when its channel has one open (a FIFO channel)."""
    writer_fileno = getattr(getattr(session, "channel", None), "writer_fileno", None)
    fd = writer_fileno() if writer_fileno is not None else None
    return fd if isinstance(fd, int) else None


#: What :func:`_hold_client_pipe` returns when the player has not opened ``client.pipe`` yet.
_UNOPENED = -1


def _hold_client_pipe(session: Any) -> int | None:
    """For a FIFO session whose channel has not opened ``client.pipe`` yet: a write end of it, if the player
    has opened its read end (held while the channel opens its own, so the player never sees the last writer
    go), or :data:`_UNOPENED` if it has not. None when there is nothing to wait for (the channel's write end
    is open, it is no FIFO channel, or the pipe cannot be opened: the channel's own send reports why)."""
    channel = getattr(session, "channel", None)
    path = getattr(channel, "client_path", None)
    if (
        not isinstance(path, str)
        or getattr(channel, "writer_fileno", None) is None
        or _writer_fd(session) is not None
        or getattr(channel, "closed", True)
    ):
        return None
    try:
        return os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return _UNOPENED if exc.errno == errno.ENXIO else None


def _reader_gone(session: Any) -> bool:
    """Whether the player closed its end of ``session``'s client.pipe (its write end polls POLLERR: no reader left),
    so it will read no other action."""
    wfd = _writer_fd(session)
    if wfd is None:
        return False
    poller = select.poll()
    poller.register(wfd, 0)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _watched(session: Any) -> bool:
    """Whether ``session``'s player has a pidfd (its exit wakes a poll) and says how it failed (``crashed``): what
    :meth:`VectorSession._await_exit` needs."""
    player = getattr(getattr(session, "channel", None), "player", None)
    fileno = getattr(player, "fileno", None)
    return fileno is not None and hasattr(player, "crashed") and isinstance(fileno(), int)


def _eof_pending(session: Any) -> float | None:
    """When ``session``'s channel read end of file on server.pipe (its ``eof_seen``), if its player, watched (see
    :func:`_watched`), has not exited yet: its recv would wait for that exit (EOF_CLASSIFY_TIMEOUT at most) before it
    reports the crash. Else None."""
    seen = getattr(getattr(session, "channel", None), "eof_seen", None)
    if not isinstance(seen, float) or not _watched(session) or _player_exited(session):
        return None
    return seen


def _within(deadline: str) -> str:
    """How a PlayerTimeout names the deadline that passed, before its length: "step_timeout =", or "the recv
    timeout of"."""
    return "the recv timeout of" if deadline == "recv timeout" else f"{deadline} ="


def _frames(frame: Any) -> Iterator[Any]:
    """``frame`` and the frames it was called from."""
    while frame is not None:
        yield frame
        frame = frame.f_back


def _player_exited(session: Any) -> bool:
    player = getattr(getattr(session, "channel", None), "player", None)
    exited = getattr(player, "exited", None)
    return bool(exited()) if exited is not None else False


def _close_sessions(
    sessions: Sequence[Any], *, together: bool = True, here: Sequence[int] = ()
) -> tuple[list[BaseException | None], BaseException | None]:
    """Close ``sessions`` at the same time (up to :data:`CLOSE_THREADS` threads), so that players which must
    be stopped (SIGTERM, grace, SIGKILL) take one grace between them, not one each; one after another when
    not ``together`` (from ``__del__``, which may run wherever the garbage collector does). Returns each
    session's close error (None when it closed cleanly), in order, and a Ctrl-C that came while waiting
    (every session is closed by then). The sessions at the indices ``here`` are closed in this thread: a signal
    handler's close() interrupted their send or receive, which resumes after it (see :meth:`Session.close`).

    A Ctrl-C (or a signal handler's SystemExit) hurries every stop, as it does a single session's: the players not
    stopped yet are SIGKILLed at once (see :func:`_kill_player`) rather than given the rest of their grace, and each
    close still reaps its own before this returns."""
    errors: list[BaseException | None] = [None] * len(sessions)
    done = [False] * len(sessions)
    hurried = threading.Event()
    # At interpreter exit a new thread never runs (start() would wait for it forever): one after another.
    workers = 1 if not together or sys.is_finalizing() else min(len(sessions), CLOSE_THREADS)

    def hurry() -> None:
        # Interrupted: the closes under way in other threads would wait out their players' grace (the signal
        # reaches this thread only); end those players now. Their closes then find them gone and reap them.
        hurried.set()
        for k, session in enumerate(sessions):
            if not done[k]:
                _kill_player(session)

    def close_one(k: int) -> None:
        try:
            if hurried.is_set():
                _kill_player(sessions[k])
            sessions[k].close()
        except BaseException as exc:
            errors[k] = exc
            if isinstance(exc, _INTERRUPTS):
                hurry()
        finally:
            done[k] = True

    def close_every(first: int, finished: threading.Event | None = None) -> None:
        try:
            for k in range(first, len(sessions), workers):
                if k not in here and not done[k]:
                    close_one(k)
        finally:
            if finished is not None:
                finished.set()

    if not sessions:
        return errors, None
    interrupt: BaseException | None = None
    # Each thread's end, told by an event it sets: not by join() or is_alive(), which a join interrupted by a Ctrl-C
    # leaves saying the thread has ended while it still runs (CPython 3.11).
    started: list[threading.Event] = []
    mine = [*here, *(k for k in range(0, len(sessions), workers) if k not in here)]
    w = 1
    while True:
        # (A Ctrl-C landing between two closes, or as a thread starts, is kept too: the work goes on, hurried.)
        try:
            while w < workers:
                finished = threading.Event()
                thread = threading.Thread(
                    target=close_every, args=(w, finished), name="renderd-vector-close", daemon=True
                )
                w += 1
                try:
                    thread.start()
                except RuntimeError:  # no thread can be started: close those here
                    mine.extend(k for k in range(w - 1, len(sessions), workers) if k not in here)
                    continue
                started.append(finished)
            for k in mine:
                if not done[k]:
                    close_one(k)  # (a Ctrl-C here is kept as that session's error; the others are still closed)
            for finished in started:
                finished.wait()
            break
        except _INTERRUPTS as exc:  # finish closing first
            interrupt = interrupt or exc
            hurry()
    for k, exc in enumerate(errors):
        if isinstance(exc, _INTERRUPTS):
            interrupt, errors[k] = interrupt or exc, None
    return errors, interrupt


def _kill_player(session: Any) -> None:
    """SIGKILL the process group of ``session``'s own player (a slot's session, or a :class:`_PlayerStopper`'s), as
    :meth:`PlayerProcess.stop` does when a Ctrl-C interrupts its grace: for :func:`_close_sessions`, whose closes in
    other threads the Ctrl-C does not reach. The close of the session (under way, or to come) then finds the player
    gone and reaps it. Nothing for a leased player (its lease is released, the daemon stops it), nor for one stopped
    already, nor in a process forked from the one that started it."""
    if isinstance(session, _PlayerStopper):
        session = session.session
    process = getattr(session, "process", None)
    kill_now = getattr(process, "kill_now", None)  # (none for a leased player)
    if kill_now is None:
        return
    try:
        kill_now()
    except Exception as exc:  # (its close reports what is wrong with the player)
        log.debug("could not kill player pid %s on an interrupt: %s", getattr(process, "pid", None), exc)


class _PlayerStopper:
    """``close()`` stops a slot's player (SIGTERM, grace, SIGKILL, reap), or releases its lease uncleanly (the daemon
    stops it), without closing the session's pipes: for :func:`_close_sessions`, when close() leaves the pipes to a
    call that still runs in another thread (see :meth:`VectorSession._hand_off`). The session's own close() (which
    that call makes as it returns) then finds the player gone and the lease released."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def close(self) -> None:
        session = self.session
        if isinstance(session, Session):
            session._stop_player(
                CallOrderError("the VectorSession was closed while a call of it still ran in another thread")
            )
        elif getattr(session, "process", None) is not None:
            session.process.stop(session.stop_grace)


def _indent(text: str) -> str:
    return text.replace("\n", "\n      ")


def failure_error(
    failures: Sequence[tuple[int, BaseException]],
    n: int,
    *,
    replace_on_crash: bool = False,
    answers_received: bool = True,
) -> RenderdError:
    """One error naming every failed slot and why: a :class:`PlayerCrashed` if every failure is a
    crash, a :class:`PlayerTimeout` if every one is a timeout, a :class:`ProtocolError` if every one is
    malformed bytes, else a :class:`RenderdError`. ``failures`` (slot -> error) and ``slots`` are
    attributes of the result. With ``replace_on_crash`` (the failures are replacements that could not be
    started) the message does not suggest it; without ``answers_received`` (the failures happened while
    resets were being sent, no answer was awaited) it does not say the other slots' answers were received."""
    failures = sorted(failures, key=lambda f: f[0])
    lines = [
        f"slot {i}: {type(exc).__name__}: {_indent(chr(10).join([str(exc), *getattr(exc, '__notes__', ())]))}"
        for i, exc in failures
    ]
    slots = ", ".join(str(i) for i, _ in failures)
    head = (
        f"slot {slots} of {n} failed" if len(failures) == 1 else f"{len(failures)} of {n} slots failed (slots {slots})"
    )
    hint = "" if replace_on_crash else " (or pass replace_on_crash=True to have failed players replaced)"
    received = "the other slots' answers were received, but " if answers_received else ""
    message = f"{head}; {received}this VectorSession is broken now: close it{hint}:\n  " + "\n  ".join(lines)
    errors = [exc for _, exc in failures]
    first = errors[0]
    err: RenderdError
    if all(isinstance(e, PlayerCrashed) for e in errors):
        err = PlayerCrashed(message, pid=getattr(first, "pid", None))
        err.returncode = getattr(first, "returncode", None)
        err.log_tail = getattr(first, "log_tail", "")
        err.log_path = getattr(first, "log_path", None)
    elif all(isinstance(e, PlayerTimeout) for e in errors):
        err = PlayerTimeout(message, deadline=getattr(first, "deadline", None), seconds=getattr(first, "seconds", None))
    elif all(isinstance(e, ProtocolError) for e in errors):
        err = ProtocolError(message)
    else:
        err = RenderdError(message)
    err.failures = dict(failures)  # type: ignore[attr-defined]
    err.slots = [i for i, _ in failures]  # type: ignore[attr-defined]
    return err


class _Callback:
    """A settable callback attribute of :class:`VectorSession`: None or a callable, checked when it is set (not when
    a step calls it, which a TypeError would break)."""

    def __init__(self, shape: str) -> None:
        self.shape = shape

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.attr = name, "_callback_" + name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        return self if obj is None else getattr(obj, self.attr)

    def __set__(self, obj: Any, value: Any) -> None:
        if value is not None and not callable(value):
            raise TypeError(
                f"VectorSession {self.name} must be None or a callable {self.shape}, not {type(value).__name__}"
            )
        setattr(obj, self.attr, value)


class VectorSession:
    """N player sessions stepped together; see the module docstring and docs/vector.md.

    Build one with :func:`launch_many` or :func:`connect_many`. The constructor takes ready
    :class:`renderd.Session` objects (open, each in one slot only: ``TypeError`` or ``ValueError`` otherwise, and
    the sessions stay the caller's) and does no I/O; ``factory(slot)`` makes a new ready session for a
    slot (required with ``replace_on_crash``). ``reward_fn(event) -> float`` and
    ``done_fn(event) -> bool`` compute ``rewards`` and ``dones`` of answered actions (defaults: ``0.0``
    and ``False``). ``on_event(slot, event)``, if set (also as an attribute), is called the moment an
    observation for ``slot`` is received, before :meth:`recv` returns, so frames can be processed while
    other players are still working; an exception from it propagates and breaks the vector session.
    The vector session owns its sessions: :meth:`close` closes them all.

    Not thread-safe: one caller at a time, but :meth:`close` may be called from another thread (a watchdog) while
    a call waits: that call raises :class:`CallOrderError` (see :meth:`close` for a call busy in ``on_event``).
    """

    reward_fn = _Callback("reward_fn(event) -> float")
    done_fn = _Callback("done_fn(event) -> bool")
    on_event = _Callback("on_event(slot, event)")

    def __init__(
        self,
        sessions: Sequence[Any],
        *,
        factory: Callable[[int], Any] | None = None,
        replace_on_crash: bool = False,
        reward_fn: Callable[[Event], float] | None = None,
        done_fn: Callable[[Event], bool] | None = None,
        on_event: Callable[[int, Event], None] | None = None,
        executor: ThreadPoolExecutor | None = None,
    ) -> None:
        try:
            if isinstance(sessions, (Session, str, bytes, Mapping)):
                raise TypeError
            sessions = list(sessions)
        except TypeError:
            raise TypeError(
                f"sessions must be a list of sessions (one per slot), not {type(sessions).__name__}"
            ) from None
        if not sessions:
            raise ValueError("a VectorSession needs at least one session")
        seen: dict[int, int] = {}
        for i, session in enumerate(sessions):
            # (Checked before anything is taken over: the sessions stay the caller's if this raises.)
            if session is None:
                raise TypeError(f"sessions[{i}] is None: each slot needs an open session")
            if id(session) in seen:
                raise ValueError(
                    f"sessions[{i}] is sessions[{seen[id(session)]}]: a session can be one slot's only (its player "
                    "answers one action at a time)"
                )
            seen[id(session)] = i
            if getattr(session, "closed", False) is True:
                raise ValueError(f"sessions[{i}] is closed: each slot needs an open session")
        if replace_on_crash and factory is None:
            raise ValueError("replace_on_crash=True needs a factory that makes a new session for a slot")
        if factory is not None and not callable(factory):
            raise TypeError(f"factory must be a callable factory(slot) -> a new session, not {type(factory).__name__}")
        self._slots = [_Slot(i, s) for i, s in enumerate(sessions)]
        self._factory = factory
        self.replace_on_crash = bool(replace_on_crash)
        self.reward_fn = reward_fn
        self.done_fn = done_fn
        self.on_event = on_event
        self._executor = executor
        self._state = _VectorState.READY
        self._error: BaseException | None = None
        self._broken_during: str | None = None  # the call that broke it
        self._round: _Round | None = None
        self._failures: list[tuple[int, BaseException, bool]] = []  # (slot, error, replaced), not yet reported
        self._poller = select.poll()
        self._fd_slots: dict[int, _Slot] = {}
        self._writer_fds: dict[int, _Slot] = {}  # (those of _fd_slots that are client.pipe write ends)
        # While a call sends: when it started (each slot's action must be written by then + its step_timeout,
        # one deadline for all of them, not one step_timeout per slot) and the caller's own deadline
        # (deadline, name, seconds), if any. See _send.
        self._send_start: float | None = None
        self._send_limit: tuple[float, str, float] | None = None
        self._wake_fd: int | None = None
        self._wake_lock = threading.Lock()
        # Set by close(): a replacement on its way starts no new attempt (and a booting player is stopped).
        self._cancel = threading.Event()
        # Failed players being stopped (SIGTERM, grace, SIGKILL) while their replacements start: each one's thread
        # and pid. close() waits for them, and does not take them for booting replacements.
        self._stoppers: list[tuple[threading.Thread, int | None]] = []
        # Set once close() has finished; the thread running it (a close() in another thread waits for it).
        self._closed = threading.Event()
        self._closer: int | None = None
        # Claimed by the first close(), with its thread, in one step (dict.setdefault: no other thread, nor a signal
        # handler, runs in between): two close() calls at once cannot both find it open and both close everything.
        self._close_claim: dict[str, tuple[int, object]] = {}
        # The call under way (step(), send(), recv(), reset(), reset_async()): whether there is one (another call
        # meanwhile, from another thread or from on_event or a signal handler in its own, is refused), in which
        # thread, its name; and whether a close() from another thread left the pipes to it (it still ran after
        # CLOSE_WAITER_TIMEOUT, in on_event...): it closes them as it returns. Guarded by _call_lock (reentrant: a
        # signal handler's close() may come while its thread holds it).
        self._call_lock = threading.RLock()
        self._calls = 0
        self._call_thread: int | None = None
        self._what = "call"
        self._leftover = False
        # Receive slot by slot (each session's own deadline) instead of one poll over all of them; only
        # for benchmarks/vector.py, which measures both.
        self._sequential_recv = False
        self._owner_pid = os.getpid()  # a copy inherited over fork (another pid) leaves the players alone
        # Every poll of a call waits on it too: a replacement that is ready, and a close() from another thread,
        # wake the call.
        try:
            self._ensure_wake_fd()
        except BaseException:
            # (Out of descriptors: EMFILE.) As for a bad argument, the sessions (and the executor) stay the caller's:
            # this half-made vector session does not close them as it is collected.
            self._state = _VectorState.CLOSED
            raise
        for slot in self._slots:
            self._adopt(slot.session)
        _vectors.add(self)

    # -- properties -------------------------------------------------------------------------------------
    @property
    def num_envs(self) -> int:
        """The number of slots."""
        return len(self._slots)

    n = num_envs

    def __len__(self) -> int:
        return len(self._slots)

    @property
    def pids(self) -> list[int | None]:
        """Each slot's player pid (``None`` while a replacement is on its way)."""
        return [s.session.pid if s.session is not None else None for s in self._slots]

    @property
    def sessions(self) -> tuple[Any, ...]:
        """Each slot's current :class:`renderd.Session` (``None`` while replacing). Do not step them
        directly: the vector session keeps track of what is in flight."""
        return tuple(s.session for s in self._slots)

    @property
    def slot_states(self) -> list[SlotState]:
        return [s.state for s in self._slots]

    @property
    def closed(self) -> bool:
        return self._state is _VectorState.CLOSED

    @property
    def pending(self) -> bool:
        """True between :meth:`send` and :meth:`recv`."""
        return self._state is _VectorState.PENDING

    @property
    def error(self) -> BaseException | None:
        """The error that broke the vector session, if any."""
        return self._error

    # -- call order -------------------------------------------------------------------------------------
    def _check_open(self, what: str) -> None:
        if self._state is _VectorState.CLOSED:
            raise CallOrderError(f"{what} on a closed VectorSession (launch or connect a new one)")
        if self._state is _VectorState.BROKEN:
            error = self._error
            if isinstance(error, Exception):
                why = f"an earlier call failed with {type(error).__name__}: {error}"
                hint = "" if self.replace_on_crash else " (or use replace_on_crash=True)"
            else:  # (Ctrl-C, or another interruption, while it used the pipes: streams may be half-read)
                during = self._broken_during or "call"
                why = (f"an earlier {during} was interrupted ({type(error).__name__}) while it used the players' "
                       "pipes, so their streams may be half-read or half-written")
                hint = ""
            raise CallOrderError(
                f"{what} on a broken VectorSession: {why}. Close it and start a new one{hint}."
            ) from error

    def _break(self, exc: BaseException, during: str | None = None) -> None:
        """Break the vector session with ``exc``, raised by the call named ``during`` ("recv()"...)."""
        if self._state is not _VectorState.CLOSED:
            self._state = _VectorState.BROKEN
            self._keep_closed()
            self._error = exc
            self._broken_during = during
            self._round = None

    def _check_closed_meanwhile(self, what: str, doing: str) -> None:
        """:class:`CallOrderError` if :meth:`close` was called while the call named ``what`` ran (from a signal
        handler that interrupted it, such as a SIGTERM handler, or from a callback it runs): the call ends
        there, and the vector session stays closed."""
        if self._closer is not None:  # (not the state: a call may have set it since the close began)
            self._state = _VectorState.CLOSED
            raise self._closed_meanwhile(what, doing)

    def _enter_call(self, what: str) -> None:
        """At the start of a call that uses the players' pipes (``what``: ``step()``...): a close() from another
        thread waits for it to return, and leaves the pipes to it if it does not in time (see :meth:`_hand_off`).
        :class:`CallOrderError` while another call is under way: the two would poll, read and write the same pipes
        (and take each other's answers)."""
        with self._call_lock:
            if self._calls:
                raise self._busy(what)
            self._call_thread = threading.get_ident()
            self._what = what
            self._calls += 1

    def _busy(self, what: str) -> CallOrderError:
        """The error of a call (``what`` names it) made while another call of this vector session is under way."""
        if self._state is _VectorState.CLOSED:
            return CallOrderError(f"{what} on a closed VectorSession (launch or connect a new one)")
        if self._call_thread == threading.get_ident():
            return CallOrderError(
                f"{what} from on_event (or reward_fn, done_fn, a signal handler) while this thread is inside "
                f"{self._what} of this VectorSession: the two calls would use the same pipes and take each other's "
                "answers. Only close() may be called there; make the call once that one has returned. Nothing was "
                "sent or received"
            )
        other = next((t.name for t in threading.enumerate() if t.ident == self._call_thread), None)
        who = f"thread {other!r}" if other is not None else "another thread"
        return CallOrderError(
            f"{what} in thread {threading.current_thread().name!r} while {who} is inside {self._what} of this "
            "VectorSession: a vector session is used by one thread at a time, or the two calls would use the same "
            "pipes and take each other's answers. Hold a lock around the calls (close() is the one call another "
            "thread may make). Nothing was sent or received"
        )

    def _leave_call(self) -> None:
        """As a call returns or raises: if a close() from another thread left the pipes to it, close them now; and
        the descriptors of slots' sessions closed from outside during the call (see :meth:`_hold_fds`), taken out of
        the poll first."""
        with self._call_lock:
            self._calls -= 1
            if self._calls:
                return
            held = [s for s in self._slots if getattr(s.session, "_fds_held", False)]
            for slot in held:
                self._unpoll(slot)
            leftover, self._leftover = self._leftover, False
        for slot in held:
            self._let_go(slot.session, keep=True)
        if not leftover:
            return
        first, interrupt = self._close_rest(together=True)
        if first is not None:
            log.warning("closing the VectorSession's sessions (left to the call close() ended): %s", first)
        if interrupt is not None:
            raise interrupt

    # -- the slots' sessions' descriptors --------------------------------------------------------------------
    def _adopt(self, session: Any) -> None:
        """Make this vector session the holder of a slot's ``session``: a close() of it from outside (another thread,
        a signal handler, on_event) asks :meth:`_hold_fds` what to do with its descriptors."""
        if isinstance(session, Session):
            session._set_holder(self)

    def _hold_fds(self, session: Session) -> bool:
        """Called by ``session.close()`` (a slot's session closed from outside), once it is marked closed. With a call of
        this vector session under way, in any thread (it may be between its check that the session is open and its
        next poll, read or write of its pipes, or inside its send or receive): the pipes, and the player's watch, stay
        open under their numbers, so that no file opened meanwhile takes one; the call is woken, fails the slot (see
        :meth:`_closed_outside`) and closes them as it lets go of them, or as it returns. True then. With none under
        way, False: its descriptors are taken out of the poll now, and the session closes them itself (the next call
        fails the slot before it touches them)."""
        slot = next((s for s in self._slots if s.session is session), None)
        if slot is None:
            return False
        if not self._call_lock.acquire(timeout=CANCEL_POLL):
            # (Held by a thread that a signal handler interrupted, and whose close() of this vector session waits for
            # this one: a call begins or ends there.) Left to this vector session all the same: the next call, its
            # close() or its collection closes them.
            session._hand_over()
            self._wake(None)
            return True
        try:
            if self._calls:
                session._hand_over()
                self._wake(None)
                return True
            self._unpoll(slot)
            return False
        finally:
            self._call_lock.release()

    def _unpoll(self, slot: _Slot) -> None:
        """Take the slot's descriptors out of the poll, except numbers that are another slot's now (its session was
        closed from outside, see _closed_outside, and the number was given to another slot's pipe). For a slot whose
        session was closed from outside, what it has in flight is left as it is: the next look at the slot fails it
        (:meth:`_closed_outside`)."""
        for fd in slot.fds:
            if self._fd_slots.get(fd, slot) is not slot:
                continue
            try:
                self._poller.unregister(fd)
            except KeyError:  # (not polled)
                pass
            self._fd_slots.pop(fd, None)
            self._writer_fds.pop(fd, None)

    @staticmethod
    def _let_go(session: Any, *, keep: bool = False) -> None:
        """This vector session uses ``session``'s descriptors no more: if its close() left them to it (see
        :meth:`_hold_fds`), close them now. Unless ``keep``, the session is no longer one of its slots' either."""
        if not isinstance(session, Session):
            return
        if not keep:
            session._set_holder(None)
        if session._fds_held:
            session._finish_close(holder=True)

    def _on_event(self, slot: _Slot, event: Event) -> None:
        """Call ``on_event`` for ``slot``'s observation; an exception from it says (as a note) where it came from."""
        try:
            self.on_event(slot.index, event)
        except Exception as exc:
            self._note_callback(exc, "on_event(slot, event)", slot)
            raise
        self._check_after_callback("on_event")

    def _note_callback(self, exc: BaseException, callback: str, slot: _Slot) -> None:
        """Add to ``exc``, raised by the caller's ``callback``, which call ran it and for which slot and player."""
        pid = getattr(slot.session, "pid", None)
        player = "" if pid is None else f" (player pid {pid})"
        exc.add_note(f"raised by the VectorSession's {callback} for slot {slot.index}{player}, in {self._what}")

    def _check_after_callback(self, callback: str) -> None:
        """After ``callback`` (``on_event``) returned: :class:`CallOrderError` if :meth:`close` was called while it
        ran (by it, a signal handler, or another thread), before the call touches a pipe again."""
        if self._closer is not None:
            self._state = _VectorState.CLOSED
            raise self._closed_meanwhile(self._what, f"ran {callback}")

    def _keep_closed(self) -> None:
        """After a call set the state: closed again if :meth:`close` was called (from a signal handler that landed
        just before the state was set, and found it not set yet)."""
        if self._closer is not None:
            self._state = _VectorState.CLOSED
            self._round = None

    @staticmethod
    def _closed_meanwhile(what: str, doing: str) -> CallOrderError:
        return CallOrderError(
            f"{what}: the VectorSession was closed (by a signal handler, a callback, or another thread) while it "
            f"{doing}; its players are stopped"
        )

    def _raise_if_closed(self, exc: BaseException, what: str, doing: str) -> None:
        """In a call that fails with ``exc``: if :meth:`close` was called meanwhile (from a signal handler that
        interrupted it, or a callback), that close caused the error (a channel closed under the call): raise the
        :class:`CallOrderError` saying it was closed instead, with ``exc`` chained."""
        if self._closer is not None and isinstance(exc, Exception) and not isinstance(exc, CallOrderError):
            raise self._closed_meanwhile(what, doing) from exc

    def _slot_indices(self, slots: int | Sequence[int] | None) -> list[int]:
        n = len(self._slots)
        if slots is None:
            return list(range(n))
        if isinstance(slots, numbers.Integral) and not isinstance(slots, bool):
            slots = [int(slots)]
        elif not isinstance(slots, (str, set, frozenset)):
            # (A str's characters are refused one by one below, naming the first; a set of slots is taken as it is.)
            slots = _in_slot_order(slots, f"slots is a slot index or a list of them (0..{n - 1}), or None")
        out: list[int] = []
        for s in slots:
            if isinstance(s, bool) or not isinstance(s, numbers.Integral) or not 0 <= s < n:
                raise ValueError(f"slot {s!r} is not a slot index (0..{n - 1})")
            if s in out:
                raise ValueError(f"slot {s} is listed twice")
            out.append(int(s))
        return out

    # -- stepping ---------------------------------------------------------------------------------------
    def step(
        self, actions: Sequence[str | Mapping[str, Any]], *, timeout: float | None = None, wait_resets: bool = False
    ) -> VectorStep:
        """Send one action per slot, then receive every answer: :meth:`send` then :meth:`recv`.

        ``timeout`` counts from this call and bounds the sends too: a player that does not take its action
        (it has not opened its pipe, or its pipe is full) by then fails like one whose answer is late.
        Raises what those raise; a bad ``timeout`` before anything is sent.
        """
        _check_timeout(timeout)
        self._enter_call("step()")
        try:
            if timeout is None:
                self._send_actions(actions, None, "step()")
                return self._recv(None, None, wait_resets, "step()")
            overall = time.monotonic() + timeout
            self._send_actions(actions, (overall, "recv timeout", timeout), "step()")
            return self._recv(timeout, overall, wait_resets, "step()")
        finally:
            self._leave_call()

    def send(self, actions: Sequence[str | Mapping[str, Any]]) -> None:
        """Send ``actions[i]`` (a name or a dict, as :meth:`renderd.Session.send` takes) to every running
        slot ``i`` without waiting for the answers; actions for resetting slots are dropped.

        Every action is checked before any is sent: ``TypeError``/``ValueError`` for a bad one (nothing is
        sent then). Raises :class:`AlreadyPendingCallError` when a ``recv`` is due, :class:`CallOrderError`
        on a closed or broken vector session. A player that fails here is reported by :meth:`recv`.

        Each slot's pipe must be open within its session's ``step_timeout``, counted for every slot from this
        call: players that have not opened their pipe yet hold ``send`` up for one ``step_timeout`` between
        them, not one each. Writing waits for no player: what a pipe has no room for (an action larger than
        its buffer) is written by :meth:`recv` as the player reads it, within the answer's deadline.
        """
        self._enter_call("send()")
        try:
            self._send_actions(actions, None, "send()")
        finally:
            self._leave_call()

    def _send_actions(
        self, actions: Sequence[str | Mapping[str, Any]], limit: tuple[float, str, float] | None, what: str
    ) -> None:
        """:meth:`send`, for the call named ``what`` (``send()`` or ``step()``) in its errors."""
        self._check_open(what)
        if self._state is _VectorState.PENDING:
            raise AlreadyPendingCallError(
                f"{what} while the answers to an earlier send() are pending; call recv() first"
            )
        if isinstance(actions, (str, bytes, bytearray, Mapping)):
            raise TypeError(f"{what} takes one action per slot (a list), not a single action")
        actions = _in_slot_order(actions, f"{what} takes one action per slot (a list of {len(self._slots)})")
        if len(actions) != len(self._slots):
            raise ValueError(f"{what} needs {len(self._slots)} actions (one per slot), got {len(actions)}")
        messages = [_check_action(a, i) for i, a in enumerate(actions)]
        rnd = _Round(len(self._slots))
        self._round = rnd
        self._state = _VectorState.PENDING
        self._keep_closed()
        self._send_start, self._send_limit = time.monotonic(), limit
        try:
            self._check_closed_meanwhile(what, "began to send the actions")
            # A replacement ready now returns its first frame in this step (reset_complete): the caller's
            # action for it is dropped like a resetting slot's.
            self._install_replacements(rnd)
            for slot, message in zip(self._slots, messages):
                if slot.state is SlotState.RUNNING and not rnd.completed[slot.index]:
                    self._send(slot, message, "action")
                else:
                    rnd.dropped[slot.index] = True
                    if slot.state is SlotState.RESETTING and slot.in_flight is None:
                        self._send_next_reset(slot)
            self._check_closed_meanwhile(what, "sent the actions")
        except BaseException as exc:
            self._break(exc, what)
            self._raise_if_closed(exc, what, "sent the actions")
            raise
        finally:
            self._send_start = self._send_limit = None

    def recv(self, timeout: float | None = None, *, wait_resets: bool = False) -> VectorStep:
        """Receive the answers to :meth:`send`, one poll over every slot; results in slot order.

        Each answer has its session's ``step_timeout`` (counted from ``send``); ``timeout`` (seconds from
        now) shortens that for every slot: a player whose answer is not whole by then (none of it, or only
        part, which the error says) fails with :class:`PlayerTimeout`. Resetting slots never hold up ``recv`` unless ``wait_resets`` is true
        (then it returns when every reset and replacement has finished); when every slot is resetting,
        ``recv`` waits until one of them makes progress (an answer, or a replacement ready), so a loop
        over :meth:`step` does not spin.

        A slot whose player crashes, times out or sends malformed bytes is replaced when
        ``replace_on_crash`` is set (its ``info`` carries the error, its ``done`` is ``True``). Otherwise,
        once every other slot's answer is in, this raises one error naming every failed slot
        (:func:`failure_error`: :class:`PlayerCrashed` if all failures are crashes) and the vector session
        is broken. Raises :class:`NoPendingCallError` with nothing pending, :class:`CallOrderError` on a
        closed or broken vector session.
        """
        self._check_open("recv()")
        if self._state is not _VectorState.PENDING or self._round is None:
            raise NoPendingCallError("recv() with nothing pending; call send() first")
        _check_timeout(timeout)
        self._enter_call("recv()")
        try:
            return self._recv(timeout, None if timeout is None else time.monotonic() + timeout, wait_resets, "recv()")
        finally:
            self._leave_call()

    def _recv(self, timeout: float | None, overall: float | None, wait_resets: bool, what: str) -> VectorStep:
        """:meth:`recv` once its arguments are checked; ``overall``: the ``time.monotonic()`` when ``timeout``
        (counted from the caller's call) ends; ``what``: the call (``recv()``, ``step()``), for its errors."""
        rnd = self._round
        assert rnd is not None
        try:
            self._collect(rnd, timeout, wait_resets, overall, what)
            result = self._finish(rnd)
        except BaseException as exc:
            self._break(exc, what)
            self._raise_if_closed(exc, what, "waited for the answers")
            raise
        self._round = None
        if self._state is not _VectorState.CLOSED:  # (closed by a callback of _finish: the answers are given)
            self._state = _VectorState.READY
            self._keep_closed()
        return result

    # -- resets -----------------------------------------------------------------------------------------
    def reset_async(
        self, slots: int | Sequence[int] | None = None, scene: str | Sequence[str | None] | None = None, **init_params: Any
    ) -> None:
        """Start resetting ``slots`` (all when None) without waiting: each gets ``Reset`` (``scene``, or
        its current scene when None), ``ChangeResolution`` when ``width``/``height`` change, then
        ``Initialize`` with every initialization parameter given so far (they accumulate, as
        :meth:`renderd.Session.reset`'s do). ``scene`` may be one name for all or one per listed slot.

        The first reset action goes out at once (once its player has opened client.pipe: until then a later
        :meth:`recv` looks for that); the rest follow as the player answers, during later :meth:`recv`
        calls. Until the reset finishes the slot's actions are dropped and its observation is ``None``. A reset asked for a slot that is already resetting starts over after the action in
        flight. Raises :class:`AlreadyPendingCallError` between :meth:`send` and :meth:`recv`,
        :class:`CallOrderError` on a closed or broken vector session, ``ValueError`` for a bad slot list
        or parameter (:class:`~renderd.config.ArgumentError` for a ``width``/``height`` that is not an
        integer 1..``MAX_RESOLUTION``; nothing is sent then), and (without ``replace_on_crash``) the error of a player that fails on the first reset action (one that closed client.pipe but still runs is given its second to exit
        in the next :meth:`recv`, which reports it).
        """
        self._enter_call("reset_async()")
        try:
            self._reset_async(slots, scene, None, init_params, "reset_async()")
        finally:
            self._leave_call()

    def _reset_async(
        self,
        slots: int | Sequence[int] | None,
        scene: str | Sequence[str | None] | None,
        limit: tuple[float, str, float] | None,
        init_params: dict[str, Any],
        what: str,
    ) -> None:
        """:meth:`reset_async`, for the call named ``what`` (``reset_async()`` or ``reset()``) in its errors."""
        self._check_open(what)
        if self._state is _VectorState.PENDING:
            raise AlreadyPendingCallError(f"{what} between send() and recv(); call recv() first")
        indices = self._slot_indices(slots)
        if scene is None or isinstance(scene, str):
            scenes: list[str | None] = [scene] * len(indices)
        else:
            # (A dict, such as a procedural house, is no list of names: its keys would be taken as scenes; the bytes
            # of a name, as numbers.)
            if isinstance(scene, (Mapping, bytes, bytearray)):
                scenes = [scene]  # type: ignore[list-item]
            else:
                scenes = _in_slot_order(scene, f"{what}: scene is a name, a list of them (one per slot), or None")
            for name in scenes:
                if name is not None and not isinstance(name, str):
                    raise TypeError(
                        f"{what}: a scene is a name or None, not {type(name).__name__} (a procedural "
                        "house is loaded with the CreateHouse action after a reset); nothing was sent"
                    )
            if len(scenes) != len(indices):
                raise ValueError(f"{what} got {len(scenes)} scenes for {len(indices)} slots")
        params = dict(init_params)
        width = _check_size(params.pop("width", None), "width")
        height = _check_size(params.pop("height", None), "height")
        try:
            encode_action({"action": "Initialize", **params})
        except ValueError as exc:
            raise ValueError(f"reset parameters: {exc}") from exc
        self._send_start, self._send_limit = time.monotonic(), limit
        try:
            for i, name in zip(indices, scenes):
                slot = self._slots[i]
                if name is not None:
                    slot.scene = name
                if width is not None or height is not None:
                    w, h = slot.resolution or (None, None)
                    slot.resolution = (width if width is not None else w, height if height is not None else h)
                slot.init_params.update(params)
                slot.reset_requested = True
                if slot.state is SlotState.REPLACING:
                    continue  # the new player gets this reset once it is ready
                self._start_reset(slot, name)
            self._check_closed_meanwhile(what, "sent the resets")
        except BaseException as exc:
            self._break(exc, what)
            self._raise_if_closed(exc, what, "sent the resets")
            raise
        finally:
            self._send_start = self._send_limit = None
        self._raise_unreplaced(answers_received=False)  # (none was awaited: the resets were only sent)

    def reset(
        self,
        slots: int | Sequence[int] | None = None,
        scene: str | Sequence[str | None] | None = None,
        *,
        timeout: float | None = None,
        **init_params: Any,
    ) -> VectorStep:
        """Reset ``slots`` (all when None) concurrently and wait until every resetting slot is done.

        Arguments as :meth:`reset_async`. The result has the reset's last event for every slot that
        finished a reset, and each other slot's ``last_event`` (nothing is sent to those). Raises what
        :meth:`reset_async` and :meth:`recv` raise.
        """
        _check_timeout(timeout)
        overall = None if timeout is None else time.monotonic() + timeout
        limit = None if overall is None else (overall, "recv timeout", timeout)
        self._enter_call("reset()")
        try:
            self._reset_async(slots, scene, limit, init_params, "reset()")
            rnd = _Round(len(self._slots))
            try:
                self._collect(rnd, timeout, True, overall, "reset()")
                result = self._finish(rnd)
            except BaseException as exc:
                self._break(exc, "reset()")
                self._raise_if_closed(exc, "reset()", "waited for the answers")
                raise
        finally:
            self._leave_call()
        for i, slot in enumerate(self._slots):
            if result.observations[i] is None and slot.session is not None:
                result.observations[i] = slot.session.last_event
        return result

    def _size(self, slot: _Slot) -> tuple[int, int]:
        s = slot.session
        return (int(s.width or 0), int(s.height or 0)) if s is not None else (0, 0)

    def _reset_actions(self, slot: _Slot, scene: str | None) -> deque[dict[str, Any]]:
        reset: dict[str, Any] = {"action": "Reset", "sequenceId": 0}
        if scene is not None:
            reset["sceneName"] = scene
        queue: deque[dict[str, Any]] = deque([reset])
        if slot.resolution is not None:
            size = self._size(slot)
            w, h = slot.resolution[0] or size[0], slot.resolution[1] or size[1]
            if (w, h) != size:
                queue.append({"action": "ChangeResolution", "x": w, "y": h})
        queue.append({"action": "Initialize", **slot.init_params})
        return queue

    def _start_reset(self, slot: _Slot, scene: str | None) -> None:
        slot.reset_queue = self._reset_actions(slot, scene)
        slot.reset_errors = []
        slot.state = SlotState.RESETTING
        if slot.unopened is not None:
            self._done_waiting(slot)  # (never written: this reset's first action goes instead)
        if slot.in_flight is None:
            self._send_next_reset(slot)
        else:  # its answer is taken first, and is not this reset's
            slot.superseded = True

    def _send_next_reset(self, slot: _Slot) -> None:
        self._send(slot, slot.reset_queue.popleft(), "reset")

    # -- I/O ---------------------------------------------------------------------------------------------
    def _send(self, slot: _Slot, message: str | dict[str, Any], kind: str) -> None:
        held: int | None = None
        if (self._send_start is None or kind == "reset") and isinstance(slot.session, Session):
            # A reset action (a replacement's, or any sent while recv works): a player that has not opened
            # client.pipe holds no other slot up while it is waited for (see _defer_open). (The caller's
            # actions of a send share one deadline for that instead.)
            held = _hold_client_pipe(slot.session)
            if held == _UNOPENED:
                self._defer_open(slot, message, kind)
                return
        self._send_holding(slot, message, kind, held)

    def _send_holding(self, slot: _Slot, message: str | dict[str, Any], kind: str, held: int | None) -> None:
        """Send, holding ``held`` (a write end of client.pipe, or None) until the channel has opened its own:
        a player whose open just returned must not see the last writer go (end of file: it would exit)."""
        try:
            self._send_now(slot, message, kind)
        finally:
            if held is not None:
                os.close(held)

    def _send_now(self, slot: _Slot, message: str | dict[str, Any], kind: str) -> None:
        session = slot.session
        if self._closed_outside(slot, "it was to be sent an action"):
            return
        limit = self._send_limit
        if self._send_start is not None:  # one call sending to many slots: one step_timeout for all of them
            own = self._send_start + session.step_timeout
            if limit is None or own < limit[0]:
                limit = (own, "step_timeout", session.step_timeout)
        if _reader_gone(session) and _watched(session) and not _player_exited(session):
            # The player closed client.pipe since its last answer: the write would fail (EPIPE), and the channel
            # would then wait for the player's exit (EOF_CLASSIFY_TIMEOUT) before going on to the next slot. That
            # wait is made here alongside the other slots' (see _await_exit).
            slot.in_flight = kind
            slot.sent_at = time.monotonic()
            slot.sent_action = message if isinstance(message, str) else str(message.get("action"))
            slot.deadline = slot.sent_at + session.step_timeout
            self._await_exit(slot, "the player closed client.pipe while renderd sent it an action", False)
            return
        # The session's own lock is held while it sends (Session._send is its send() without that lock, plus the
        # deadline this call shares between its slots), as its send() holds it: a call of the slot's session made
        # meanwhile (vs.sessions[i] stepped from another thread, or from a signal handler in this one) is refused
        # with CallOrderError rather than writing its action into the middle of this one on client.pipe; and this
        # send, if such a call is inside the session already, writes nothing (the slot fails: that call's action
        # and answer are on its pipes). Receiving takes the lock in session.recv(); in between the session is
        # PENDING, so such a call's send, step or reset is refused by the session itself (its recv() would take this
        # call's answer: the slot then fails at its deadline, "no action pending"; a slot's session is not to be
        # stepped, docs/vector.md). close() takes no lock: a session closed from outside is noticed before its pipes
        # are touched, or as they fail (see _closed_outside).
        lock = getattr(session, "_io_lock", None) if isinstance(session, Session) else None
        if lock is not None and not lock.acquire(False):
            self._fail(slot, self._in_use_error(slot, message))
            return
        error: RenderdError | None = None
        try:
            # A FIFO channel writes what client.pipe takes at once and keeps the rest, which recv's poll writes
            # as the player reads: a player that does not read costs no other slot its write (the shared
            # deadline is for opening client.pipe), and the rest has the answer's deadline.
            channel = getattr(session, "channel", None)
            partial = getattr(channel, "partial_sends", None) is False
            if partial:
                channel.partial_sends = True
            try:
                if isinstance(session, Session):
                    session._send(message, {}, limit)
                else:
                    session.send(message)
            except PlayerTimeout as exc:
                error = exc
                if limit is not None and exc.deadline == limit[1]:
                    error = self._send_timeout_error(slot, message, limit)
                    error.__cause__ = exc
            except RenderdError as exc:
                error = exc
            finally:
                if partial:
                    channel.partial_sends = False
        finally:
            if lock is not None:
                lock.release()
        if error is not None:
            self._fail(slot, error)
            return
        slot.in_flight = kind
        slot.sent_at = time.monotonic()
        slot.sent_action = message if isinstance(message, str) else str(message.get("action"))
        slot.deadline = slot.sent_at + session.step_timeout
        fds = _channel_fds(session)
        # (Checked after the descriptors are read, as in _await_exit: a close() of the session from outside since its
        # send may have stopped the player and closed the pidfd its watch gave; from now on it keeps them open.)
        if self._closed_outside(slot, "it was sent an action"):
            return
        if fds:
            slot.fds = fds
            for fd in fds:
                self._poller.register(fd, _READ_EVENTS)
                self._fd_slots[fd] = slot
            wfd = _writer_fd(session)
            if wfd is not None:
                # No events asked: POLLERR once the player closed client.pipe, so that its answer (which
                # may never come) is taken up at once, not at its step deadline.
                slot.fds += (wfd,)
                # (POLLOUT while part of the action is still to be written: see _sweep.)
                self._poller.register(wfd, select.POLLOUT if partial and _unsent(session) else 0)
                self._fd_slots[wfd] = slot
                self._writer_fds[wfd] = slot

    def _in_use_error(self, slot: _Slot, message: str | dict[str, Any]) -> CallOrderError:
        """The error of a slot whose session a call of its own is inside (``vs.sessions[i]`` stepped directly, in
        another thread, or in this one, interrupted by a signal handler that runs this call) when this call was to
        send it ``message``: nothing was written; that call's action and answer are on the slot's pipes."""
        session = slot.session
        action = message if isinstance(message, str) else str(message.get("action"))
        here = any(
            f.f_code in _SESSION_IO_CODES and f.f_locals.get("self") is session for f in _frames(sys._getframe(1))
        )
        where = "in another thread"
        if here:
            where = "in this thread (this call runs in a signal handler that interrupted it)"
        return CallOrderError(
            f"{action}: slot {slot.index}'s session (player pid {getattr(session, 'pid', None)}) is inside a call of "
            f"its own {where}: vs.sessions[{slot.index}] was stepped directly, which a VectorSession's slots must "
            "not be (read from them only). Nothing was sent to it; its session was closed"
        )

    def _closed_outside(self, slot: _Slot, doing: str) -> bool:
        """Fail ``slot`` (and return True) if its session was closed from outside this vector session (a close() of
        ``vs.sessions[i]``, from another thread or a signal handler) while the slot was in use (``doing`` says how):
        its pipes, registered in this call's poll, are closed and their descriptor numbers may be another file's
        now, so they are not touched again. A close() of this vector session is not one (see
        _check_closed_meanwhile)."""
        session = slot.session
        if self._closer is not None or getattr(session, "closed", False) is not True:
            return False
        self._fail(slot, CallOrderError(
            f"slot {slot.index}: its session (player pid {getattr(session, 'pid', None)}) was closed from outside the "
            f"VectorSession (a close() of vs.sessions[{slot.index}], from another thread or a signal handler) while "
            f"{doing}; its player is stopped"
        ))
        return True

    def _defer_open(self, slot: _Slot, message: str | dict[str, Any], kind: str) -> None:
        """Keep ``message`` as the slot's action in flight, unwritten: its player has not opened client.pipe.
        recv checks again now and then (:meth:`_retry_open`; its player's exit wakes the poll) and writes it
        once the player has; the slot fails if that takes longer than the action's deadline."""
        session = slot.session
        slot.unopened = message
        slot.in_flight = kind
        slot.sent_at = time.monotonic()
        slot.sent_action = message if isinstance(message, str) else str(message.get("action"))
        slot.deadline = slot.sent_at + session.step_timeout
        slot.open_pause = OPEN_POLL_FIRST
        slot.open_retry = slot.sent_at + slot.open_pause
        fds = _channel_fds(session) or ()
        slot.fds = fds[1:]  # (the player's pidfd: its exit is noticed at once)
        for fd in slot.fds:
            self._poller.register(fd, _READ_EVENTS)
            self._fd_slots[fd] = slot

    def _retry_open(self, slot: _Slot) -> bool:
        """Write the slot's unwritten action if its player has opened client.pipe by now (or report its
        crash if it exited); True once the action is no longer waiting for that."""
        message, kind = slot.unopened, slot.in_flight
        assert message is not None and kind is not None
        held = _hold_client_pipe(slot.session)
        exited = held == _UNOPENED and _player_exited(slot.session)
        if held == _UNOPENED and not exited:
            slot.open_pause = min(slot.open_pause * 2, OPEN_POLL_MAX)
            slot.open_retry = time.monotonic() + slot.open_pause
            return False
        superseded = slot.superseded
        self._done_waiting(slot)
        slot.superseded = superseded
        # The action is sent from now, with its step_timeout counted from now; a player that exited fails
        # at once (the channel's open sees its exit).
        self._send_holding(slot, message, kind, None if exited else held)
        return True

    def _done_waiting(self, slot: _Slot) -> None:
        slot.superseded = False  # (the answer in flight, if any, is taken or given up)
        slot.unopened = None
        self._unpoll(slot)
        slot.fds = ()
        slot.in_flight = None
        slot.closed_input = None

    def _await_exit(self, slot: _Slot, context: str | None, answer: bool) -> None:
        """The slot's player closed client.pipe (it will read no other action) and has not exited: give it
        EOF_CLASSIFY_TIMEOUT (1 s) to exit (or, when ``answer``, to answer the action it read) while the poll goes on
        for the other slots, then fail the slot as a crash (``context``, with its exit status: see
        :meth:`_exit_awaited`). The channel's own wait (in the send or receive that finds it) would hold up every
        other slot meanwhile: many such players would take a second each, one after another.

        ``context`` None: the player closed server.pipe instead (its channel read end of file, see
        :func:`_eof_pending`): the wait is for its exit, up to EOF_CLASSIFY_TIMEOUT after that end of file, and the
        channel's recv then reports the crash at once."""
        channel = slot.session.channel
        pidfd = channel.player.fileno()
        # Checked after the watch is read: a close() of the slot's session from outside from now on keeps the number
        # read open for this call (see _hold_fds); one before it has stopped the player and closed that pidfd.
        if self._closed_outside(slot, "it waited for its player to exit"):
            return
        keep = (channel.fileno(), pidfd) if answer else (pidfd,)  # (the pipe, for an answer on its way)
        for fd in slot.fds:
            if fd not in keep:
                self._poller.unregister(fd)
                self._fd_slots.pop(fd, None)
                self._writer_fds.pop(fd, None)
        for fd in keep:
            if fd not in slot.fds:
                self._poller.register(fd, _READ_EVENTS)
                self._fd_slots[fd] = slot
        slot.fds = keep
        slot.closed_input = (context, answer)
        if context is None:  # (as long as the channel's recv would wait, even past the step's deadline)
            slot.deadline = channel.eof_seen + _fifo.EOF_CLASSIFY_TIMEOUT
        else:
            slot.deadline = min(slot.deadline, time.monotonic() + _fifo.EOF_CLASSIFY_TIMEOUT)

    def _exit_awaited(self, slot: _Slot, rnd: _Round) -> None:
        """The slot's player closed client.pipe and then exited, answered, or let EOF_CLASSIFY_TIMEOUT pass (see
        :meth:`_await_exit`): take its answer, or fail the slot with a PlayerCrashed saying whether it is still
        running or how it exited."""
        assert slot.closed_input is not None
        context, answer = slot.closed_input
        if context is None:
            self._receive(slot, rnd)  # (the channel reports the end of file, its wait for the exit over)
            return
        if answer and _answer_ready(slot.session):
            self._take(slot, rnd)  # (an answer, or the player's exit or end of file: the channel reports it)
            return
        self._fail(slot, slot.session.channel.player.crashed(context))

    def _take(self, slot: _Slot, rnd: _Round) -> None:
        """Receive from a slot whose channel is ready (see :func:`_answer_ready`); but when that is an end of file on
        server.pipe from a player still running, wait for its exit in the poll first (see :meth:`_await_exit`)."""
        if _eof_pending(slot.session) is not None:
            self._await_exit(slot, None, False)
        else:
            self._receive(slot, rnd)

    def _receive(self, slot: _Slot, rnd: _Round, timeout: float | None = None, *, late: bool = False) -> None:
        """Take the answer of the slot's action in flight (its data is there, or its deadline passed: with
        ``late``, a PlayerTimeout is reported as :meth:`_timeout_error` words it)."""
        if self._closed_outside(slot, "it waited for its answer"):
            return
        kind, superseded = slot.in_flight, slot.superseded
        try:
            event = slot.session.recv(timeout)
        except PlayerTimeout as exc:
            if late:
                err = self._timeout_error(slot, "step_timeout", slot.session.step_timeout)
                err.__cause__ = exc
                exc = err
            self._fail(slot, exc)
            return
        except RenderdError as exc:
            self._fail(slot, exc)
            return
        self._done_waiting(slot)
        i = slot.index
        if kind == "action":
            slot.failed_in_turn = 0
            rnd.events[i] = event
            rnd.answered[i] = True
            if self.on_event is not None:
                self._on_event(slot, event)
            return
        if not event and not superseded:  # (a reset started over reports only its own actions' failures)
            # From the event's summary: a full decode here could raise for a part nothing needs. Players
            # usually name the action themselves ("Reset: no scene named ...").
            name, why = event.last_action or "reset", event.error_message or "failed"
            slot.reset_errors.append(why if why.startswith(f"{name}:") else f"{name}: {why}")
        if slot.reset_queue:
            self._send_next_reset(slot)
            return
        slot.state = SlotState.RUNNING
        slot.failed_in_turn = 0
        rnd.events[i] = event
        rnd.completed[i] = True
        if self.on_event is not None:
            self._on_event(slot, event)
        if slot.reset_errors:
            rnd.reset_errors[i] = slot.reset_errors
            slot.reset_errors = []

    def _collect(
        self, rnd: _Round, timeout: float | None, wait_resets: bool, overall: float | None, what: str
    ) -> None:
        """Receive until every slot with a caller's action in flight has answered or failed (and, with
        ``wait_resets``, until no slot is resetting or replacing). Resetting slots progress meanwhile; the
        client.pipe of a reset action sent meanwhile must be open by ``overall`` too (when ``timeout`` ends);
        its bytes are written as the player reads them, within its answer's deadline. ``what``: the call
        (``recv()``, ``step()``, ``reset()``), for its errors."""
        self._send_limit = None if overall is None else (overall, "recv timeout", timeout)  # type: ignore[assignment]
        try:
            self._collect_until(rnd, timeout, wait_resets, overall, what)
        finally:
            self._send_limit = None
        self._check_closed_meanwhile(what, "waited for the answers")

    def _collect_until(
        self, rnd: _Round, timeout: float | None, wait_resets: bool, overall: float | None, what: str
    ) -> None:
        slots = self._slots
        # Every action was dropped (all slots are resetting): wait for some progress once, so a loop over
        # step() does not spin while players reset or replacements start.
        idle = not wait_resets and not any(s.in_flight == "action" for s in slots)
        while True:
            # (close() from a signal handler, or a callback, ends the wait: nothing is in flight any more)
            self._check_closed_meanwhile(what, "waited for the answers")
            self._install_replacements(rnd)
            self._retry_opens()
            now = time.monotonic()
            must_wait = False
            expired = False
            replacing = False
            limit = math.inf
            for slot in slots:
                if slot.state is SlotState.REPLACING:
                    replacing = True
                    continue
                if slot.in_flight is None:
                    continue
                if self._closed_outside(slot, "it waited for its answer"):
                    expired = True  # (states changed: look again)
                    continue
                blocking = wait_resets or slot.in_flight == "action"
                by_overall = blocking and overall is not None and overall < slot.deadline
                expiry = overall if by_overall else slot.deadline
                if now >= expiry:  # type: ignore[operator]
                    try:
                        self._expire(slot, rnd, timeout if by_overall else None)
                    except (ValueError, OSError):  # (closed from another thread since the check: see _sweep)
                        if slot.in_flight is None or not self._closed_outside(slot, "it waited for its answer"):
                            raise
                    expired = True
                    continue
                must_wait = must_wait or blocking
                limit = min(limit, expiry)  # type: ignore[type-var]
                if slot.unopened is not None:
                    limit = min(limit, slot.open_retry)
            if expired:
                continue  # states changed: look again
            if wait_resets and replacing:
                if overall is not None:
                    if now >= overall:
                        self._expire_replacements(timeout)
                        continue
                    limit = min(limit, overall)
                must_wait = True
            if not must_wait:
                if idle and (replacing or self._fd_slots or any(s.unopened is not None for s in slots)):
                    idle = False
                    if overall is not None:
                        limit = min(limit, overall)
                    self._sweep(rnd, max(limit - now, 0.001), overall)
                    continue
                if self._fd_slots:
                    self._sweep(rnd, 0.0)  # take what resetting slots have sent; never wait for them
                return
            self._sweep(rnd, limit - now, overall)

    def _sweep(self, rnd: _Round, wait: float, overall: float | None = None) -> None:
        """One poll over every slot with something in flight (and the replacement wake-up), up to
        ``wait`` seconds; receive from every slot that is ready, in slot order."""
        if wait > 0:
            # Channels that cannot be polled (and the sequential strategy): receive in slot order, each
            # with its own deadline, or what is left of ``timeout``.
            serial = [
                s
                for s in self._slots
                if s.in_flight is not None
                and s.unopened is None
                and s.closed_input is None  # (waited for in the poll: see _await_exit)
                and (not s.fds or (self._sequential_recv and s.in_flight == "action" and not _unsent(s.session)))
            ]
            if serial:
                for slot in serial:
                    remaining = None if overall is None else max(overall - time.monotonic(), 0.0)
                    self._receive(slot, rnd, remaining)
                return
        if not self._fd_slots and (wait <= 0 or math.isinf(wait)) and all(s.future is None for s in self._slots):
            return  # (a finite wait with nothing to poll waits for an unopened client.pipe's next check)
        ms = 0 if wait <= 0 else (-1 if math.isinf(wait) else max(1, math.ceil(wait * 1000)))
        ready = self._poller.poll(ms)
        if not ready:
            return
        hit: set[_Slot] = set()
        input_closed: set[_Slot] = set()
        writable: list[tuple[int, _Slot]] = []
        for fd, events in ready:
            if fd == self._wake_fd:
                self._drain_wake()
                continue
            slot = self._fd_slots.get(fd)
            if slot is not None:
                if fd not in self._writer_fds:
                    hit.add(slot)
                    continue
                if events & select.POLLOUT:
                    writable.append((fd, slot))
                if events & ~select.POLLOUT:
                    hit.add(slot)
                    input_closed.add(slot)
        for _, slot in writable:
            if slot.in_flight is None or self._closed_outside(slot, "it was sent an action"):
                continue
            try:
                self._write_more(slot)  # room in client.pipe for more of the action in flight
            except (ValueError, OSError):  # (closed from another thread since the check: see below)
                if slot.in_flight is None or not self._closed_outside(slot, "it was sent an action"):
                    raise
        for slot in sorted(hit, key=lambda s: s.index):
            # A readable pipe may hold only part of an answer: receive once it is whole (or the player
            # is gone), so a player stuck in the middle of a message holds up no other slot. A player that
            # closed client.pipe is received from at once: the channel gives it a second at most to
            # answer or exit, then reports it as a crash.
            if slot.in_flight is None or self._closed_outside(slot, "it waited for its answer"):
                continue
            try:
                if slot.unopened is not None:  # its player exited (or opened client.pipe meanwhile)
                    self._retry_open(slot)
                    continue
                if slot.closed_input is not None:  # it closed client.pipe before: its exit or its answer came
                    if _player_exited(slot.session) or (slot.closed_input[1] and _answer_ready(slot.session)):
                        self._exit_awaited(slot, rnd)
                    continue
                if slot in input_closed:
                    # The player closed client.pipe. With part of the action still to write, it never gets the
                    # action (a write reports the crash); else its answer may still come (one on its way is taken).
                    unsent = bool(_unsent(slot.session))
                    if not unsent and _answer_ready(slot.session):
                        self._take(slot, rnd)
                    elif _watched(slot.session) and not _player_exited(slot.session):
                        context = (
                            "the player closed client.pipe while renderd sent it an action"
                            if unsent
                            else "the player closed client.pipe and sent no answer while renderd waited for it"
                        )
                        self._await_exit(slot, context, not unsent)
                    elif unsent:
                        self._write_more(slot)  # this reports its crash
                    else:
                        self._receive(slot, rnd)
                    continue
                if _answer_ready(slot.session):
                    self._take(slot, rnd)
            except (ValueError, OSError):
                # (Its session closed from another thread since the check above, as its channel was used: "I/O on a
                # closed FifoChannel". Not an error of on_event's: the slot has nothing in flight while that runs.)
                if slot.in_flight is None or not self._closed_outside(slot, "it waited for its answer"):
                    raise

    def _write_more(self, slot: _Slot) -> bool:
        """Write what client.pipe takes now of the slot's action in flight; True once it is all written.
        A player that exited or closed client.pipe fails the slot."""
        session = slot.session
        try:
            done = bool(session.channel.flush())
        except RenderdError as exc:
            self._fail(slot, exc)
            return False
        if done:
            wfd = _writer_fd(session)
            if wfd is not None and wfd in self._writer_fds:
                self._poller.modify(wfd, 0)  # (POLLERR only again: see _send)
        return done

    def _retry_opens(self) -> None:
        now = time.monotonic()
        for slot in self._slots:
            if slot.unopened is not None and now >= slot.open_retry:
                self._retry_open(slot)

    def _expire(self, slot: _Slot, rnd: _Round, timeout: float | None) -> None:
        if slot.closed_input is not None:  # (its player closed client.pipe: a crash, whatever the deadline)
            self._exit_awaited(slot, rnd)
            return
        if slot.unopened is not None:
            # (Opened at the last moment: the action is sent now, its deadline counted anew.)
            if not self._retry_open(slot):
                if timeout is None:
                    self._fail(slot, self._unopened_error(slot, "step_timeout", slot.session.step_timeout))
                else:
                    self._fail(slot, self._unopened_error(slot, "recv timeout", timeout))
            return
        if _unsent(slot.session) and not self._write_more(slot):
            if slot.in_flight is not None:  # (a crash found by the write failed the slot already)
                seconds = slot.session.step_timeout if timeout is None else timeout
                self._fail(slot, self._unsent_error(slot, "step_timeout" if timeout is None else "recv timeout", seconds))
            return
        if timeout is None:
            # The session's own step deadline has passed: its recv returns an answer that arrived at the
            # last moment, or raises PlayerTimeout. That error counts only recv's own (instant) wait, so it
            # is reported with the time since the action was sent instead.
            self._receive(slot, rnd, late=True)
            return
        if _answer_ready(slot.session):  # the answer came in since the last poll: it is not late
            self._receive(slot, rnd)
            return
        # Not whole by recv's timeout, whether or not part of it arrived: a player stopped in the middle of
        # a message must not hold up the caller past the timeout it asked for.
        self._fail(slot, self._timeout_error(slot, "recv timeout", timeout))

    @staticmethod
    def _timeout_error(slot: _Slot, deadline: str, seconds: float) -> PlayerTimeout:
        """The PlayerTimeout of a slot whose answer did not come by ``deadline`` (``seconds`` long): how
        long since its action was sent, and whether part of the answer had arrived."""
        session = slot.session
        waited = time.monotonic() - slot.sent_at
        if _incomplete(session):
            got = "only part of an answer (an incomplete message)"
            why = "stopped in the middle of it, or writing slowly"
        else:
            got, why = "no answer", "hung, or busy for longer than that allows"
        within = _within(deadline)
        return PlayerTimeout(
            f"{slot.sent_action}: {got} from the player (pid {session.pid}) within {within} {seconds:g} s "
            f"({waited:.3g} s after the action was sent; it is still running: {why}); its session was closed",
            deadline=deadline,
            seconds=seconds,
        )

    @staticmethod
    def _unsent_error(slot: _Slot, deadline: str, seconds: float) -> PlayerTimeout:
        """The PlayerTimeout of a slot whose player had not read all of its action by ``deadline``."""
        session = slot.session
        within = _within(deadline)
        return PlayerTimeout(
            f"{slot.sent_action}: the player (pid {session.pid}) did not take its action within {within} "
            f"{seconds:g} s ({time.monotonic() - slot.sent_at:.3g} s after it was sent, {_unsent(session)} of its "
            "bytes were still unwritten: client.pipe stayed full). It does not read client.pipe (hung, or "
            "stopped); its session was closed",
            deadline=deadline,
            seconds=seconds,
        )

    @staticmethod
    def _unopened_error(slot: _Slot, deadline: str, seconds: float) -> PlayerTimeout:
        """The PlayerTimeout of a slot whose player had not opened client.pipe by ``deadline``."""
        session = slot.session
        within = _within(deadline)
        return PlayerTimeout(
            f"{slot.sent_action}: the player (pid {session.pid}) did not open client.pipe within {within} "
            f"{seconds:g} s ({time.monotonic() - slot.sent_at:.3g} s after its action was due; nothing was "
            "written to it). It is running but reads no action (hung, or stopped); its session was closed",
            deadline=deadline,
            seconds=seconds,
        )

    @staticmethod
    def _send_timeout_error(
        slot: _Slot, message: str | dict[str, Any], limit: tuple[float, str, float]
    ) -> PlayerTimeout:
        """The PlayerTimeout of a slot whose player did not take its action by the deadline ``limit`` that
        the call shares between its slots (it had not opened its pipe, or its pipe stayed full)."""
        deadline, name, seconds = limit
        action = message if isinstance(message, str) else str(message.get("action"))
        waited = time.monotonic() - (deadline - seconds)
        within = "the recv timeout of" if name == "recv timeout" else f"{name} ="
        return PlayerTimeout(
            f"{action}: the player (pid {slot.session.pid}) did not take its action within {within} {seconds:g} s "
            f"({waited:.3g} s after the call began; one deadline for every slot it sends to). It has not opened "
            "client.pipe, or does not read it (hung, or stopped); its session was closed",
            deadline=name,
            seconds=seconds,
        )

    def _expire_replacements(self, timeout: float | None) -> None:
        for slot in self._slots:
            if slot.state is SlotState.REPLACING and slot.future is not None and not slot.future.done():
                raise PlayerTimeout(
                    f"slot {slot.index}: its replacement player was not ready within the recv timeout of "
                    f"{timeout:g} s; the VectorSession is broken now",
                    deadline="recv timeout",
                    seconds=timeout,
                )

    # -- failures and replacement ----------------------------------------------------------------------
    def _fail(self, slot: _Slot, exc: BaseException) -> None:
        """The slot's player crashed, timed out or sent malformed bytes: replace it or record it."""
        self._done_waiting(slot)
        self._let_go(slot.session)  # (its descriptors are polled no more; a failed session is closed, not used)
        slot.reset_queue.clear()
        if self._closer is not None:
            # close() was called meanwhile (from another thread, which closed the session this call sent to or
            # read from; or from a signal handler): that is why it failed, not its player. Nothing is replaced.
            self._state = _VectorState.CLOSED
            raise self._closed_meanwhile(self._what, "used the players' pipes") from exc
        old = slot.session
        log.warning("slot %d (player pid %s) failed: %s: %s", slot.index, getattr(old, "pid", None),
                    type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        if self.replace_on_crash and slot.failed_in_turn >= REPLACE_ATTEMPTS:
            # Replacements keep failing on the slot's reset (a scene the build crashes on...): another one
            # would fail too, and a recv with wait_resets would replace the slot forever.
            err = RenderdError(
                f"slot {slot.index} could not be replaced: {REPLACE_ATTEMPTS} replacement players in a row failed "
                f"before the slot answered or finished a reset with them; the last one: {type(exc).__name__}: {exc}"
            )
            err.__cause__ = exc
            exc = err
        elif self.replace_on_crash and self._closer is None and not self._cancel.is_set():
            # (Not once closed, by a signal handler or a callback during this call: nothing would close it. close()
            # sets _cancel first: a replacement submitted after that starts no player.)
            self._failures.append((slot.index, exc, True))
            slot.state = SlotState.REPLACING
            # The failed player is stopped while its replacement starts, not before: one that ignores SIGTERM would
            # hold the replacement up for its whole stop grace. (Begun while the slot still holds the session: a
            # close() landing meanwhile, from a signal handler, closes it too, and waits for this stop.)
            if old is not None:
                self._retire(slot.index, old)
            slot.session = None
            executor = self._ensure_executor()
            self._ensure_wake_fd()
            slot.future = executor.submit(_replace, self._factory, slot.index, self._cancel)
            slot.future.add_done_callback(self._wake)
            if self._closer is not None and (self._closer == threading.get_ident() or self._closed.is_set()):
                # (A close() under way in another thread, such as the factory's in this very launch, waits for this
                # call to leave before it takes up the replacements: it closes this one then. Waiting for it here
                # would wait for that close.)
                self._undo_replacement(slot)
            return
        slot.state = SlotState.FAILED
        self._failures.append((slot.index, exc, False))

    def _retire(self, index: int, old: Any) -> None:
        """Close the failed session ``old`` of slot ``index`` (its player stopped: SIGTERM, grace, SIGKILL; or its
        lease released) in a thread of its own, while the slot's replacement starts; close() waits for it."""

        def stop() -> None:
            try:
                old.close()
            except Exception as exc:
                log.warning("slot %d: closing the failed session: %s", index, exc)

        self._stoppers = [(t, pid) for t, pid in self._stoppers if t.is_alive()]
        thread = threading.Thread(target=stop, name=f"renderd-vector-stop-{index}", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # (no thread can be started: at interpreter exit)
            stop()
            return
        self._stoppers.append((thread, getattr(old, "pid", None)))

    def _join_stoppers(self) -> None:
        """Wait until the failed players being stopped are (each within its stop grace)."""
        while self._stoppers:
            entry = self._stoppers[0]
            if entry[0] is not threading.current_thread():
                entry[0].join()
            if entry in self._stoppers:  # (the list may have been pruned meanwhile: see _retire)
                self._stoppers.remove(entry)

    def _undo_replacement(self, slot: _Slot) -> None:
        """close() came (a signal handler's, between the lines of :meth:`_fail`) after the failed slot lost its
        session and before its replacement was submitted, so it closed neither the replacement nor what it needs
        (a launch pool, the wake-up descriptor), made after it. (The failed session is being closed already, see
        :meth:`_retire`; close() waits for that.) The replacement, cancelled, starts no player; wait for it, then
        close what was made after the close."""
        future, slot.future = slot.future, None
        if future is not None:
            # (Cancelled: no player started; unless the close came from another
            # thread after the launch was under way: a player still booting is stopped then.)
            session = self._await_replacement(future)
            if session is not None:
                session.close()
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        with self._wake_lock:
            wake, self._wake_fd = self._wake_fd, None
        if wake is not None:
            try:
                self._poller.unregister(wake)
            except KeyError:
                pass
            os.close(wake)

    def _install_replacements(self, rnd: _Round) -> None:
        for slot in self._slots:
            if slot.state is not SlotState.REPLACING or slot.future is None or not slot.future.done():
                continue
            future, slot.future = slot.future, None
            try:
                session = future.result()
            except BaseException as exc:  # every attempt failed
                slot.state = SlotState.FAILED
                self._failures.append((slot.index, exc, False))
                continue
            slot.session = session
            self._adopt(session)
            slot.failed_in_turn += 1  # (until it answers or finishes a reset)
            log.info("slot %d: replacement player pid %s is ready", slot.index, session.pid)
            if slot.reset_requested or session.last_event is None:
                self._start_reset(slot, slot.scene)
            else:
                slot.state = SlotState.RUNNING
                rnd.events[slot.index] = session.last_event
                rnd.completed[slot.index] = True
                if self.on_event is not None:
                    self._on_event(slot, session.last_event)

    def _ensure_executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = _make_executor(len(self._slots))
        return self._executor

    def _ensure_wake_fd(self) -> None:
        if self._wake_fd is None:
            self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self._poller.register(self._wake_fd, select.POLLIN)

    def _wake(self, _future: Future) -> None:
        # Runs in the worker thread when a replacement is done: wake a poll in recv().
        with self._wake_lock:
            if self._wake_fd is not None:
                try:
                    os.eventfd_write(self._wake_fd, 1)
                except OSError:
                    pass

    def _drain_wake(self) -> None:
        try:
            os.eventfd_read(self._wake_fd)  # type: ignore[arg-type]
        except (BlockingIOError, OSError):
            pass

    def _first_failures(self) -> dict[int, BaseException]:
        """Each failed slot's first failure of the round (the cause; a failed replacement, or a replacement
        that failed in its turn, comes after it), with the later ones added to it as notes. Takes them."""
        failures, self._failures = self._failures, []
        first: dict[int, BaseException] = {}
        for i, exc, _ in failures:
            cause = first.setdefault(i, exc)
            if cause is not exc:
                cause.add_note(f"then it failed again: {type(exc).__name__}: {exc}")
        return first

    def _raise_unreplaced(self, *, answers_received: bool = True) -> None:
        failed = {i for i, _, replaced in self._failures if not replaced}
        if not failed:
            return
        first = self._first_failures()
        unreplaced = [(i, first[i]) for i in sorted(failed)]
        self._close_failed()
        err = failure_error(
            unreplaced, len(self._slots), replace_on_crash=self.replace_on_crash, answers_received=answers_received
        )
        self._break(err)
        raise err from unreplaced[0][1]

    def _close_failed(self) -> None:
        # All at once, as close() does: hung players are stopped within one stop grace.
        failed = [s for s in self._slots if s.state is SlotState.FAILED and s.session is not None]
        errors, interrupt = _close_sessions([s.session for s in failed])
        for slot, exc in zip(failed, errors):
            if exc is not None:
                log.warning("closing slot %d's session failed: %s", slot.index, exc)
        if interrupt is not None:
            raise interrupt

    def _finish(self, rnd: _Round) -> VectorStep:
        self._raise_unreplaced()
        failures = self._first_failures()
        reward_fn, done_fn = self.reward_fn, self.done_fn
        observations = rnd.events
        rewards: list[float] = []
        dones: list[bool] = []
        infos: list[dict[str, Any]] = []
        for slot in self._slots:
            i = slot.index
            event = observations[i]
            info: dict[str, Any] = {
                "resetting": slot.state is not SlotState.RUNNING,
                "dropped_action": rnd.dropped[i],
            }
            reward, done = 0.0, False
            if rnd.answered[i] and event is not None:
                if reward_fn is not None:
                    try:
                        reward = float(reward_fn(event))
                    except Exception as exc:
                        self._note_callback(exc, "reward_fn(event)", slot)
                        raise
                if done_fn is not None:
                    try:
                        done = bool(done_fn(event))
                    except Exception as exc:
                        self._note_callback(exc, "done_fn(event)", slot)
                        raise
            if rnd.completed[i]:
                info["reset_complete"] = True
                if rnd.reset_errors[i]:
                    info["reset_error"] = "; ".join(rnd.reset_errors[i])  # type: ignore[arg-type]
            exc = failures.get(i)
            if exc is not None:
                info["error"] = exc
                info["error_type"] = type(exc).__name__
                info["replaced"] = True
                done = True
            rewards.append(reward)
            dones.append(done)
            infos.append(info)
        return VectorStep(observations, rewards, dones, infos)

    # -- closing -----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close every slot's session (players stopped or leases released), then stop the launch threads.

        A replacement on its way is cancelled: it starts no new attempt, and a player it is still booting
        is killed, so this returns within seconds, not after ``start_timeout`` (a lease request on its way
        is waited for). A replacement that is ready (not yet taken up by a step), and a failed player still being
        stopped, are stopped as the slots' players are (SIGTERM, grace, SIGKILL), not killed. Idempotent; called while another thread's close() is under way, it returns once
        that one has finished. The first error from a session's close is raised after everything else was
        closed. A ``KeyboardInterrupt`` (Ctrl-C), or the ``SystemExit`` of a signal handler's ``sys.exit()``,
        while it works does not stop it half-way: it is raised once everything is closed.

        Called from another thread while a call of this vector session is under way, it wakes the call and closes
        the pipes once the call has left them. A call still running after :data:`CLOSE_WAITER_TIMEOUT` seconds runs
        the caller's code (``on_event``): the players are stopped (leases released) and this returns, leaving the
        pipes, the wake-up descriptor and the launch threads to that call, which closes them as it returns (raising
        :class:`CallOrderError`).

        Called by the vector session's own ``factory`` (in the launch thread of a failed slot's replacement), it does
        not wait for that launch, which is what runs it: it closes everything else and returns; the session the
        factory returns after it is closed as soon as it does.
        """
        self._close(together=True)

    def _close(self, *, together: bool) -> None:
        claim = (threading.get_ident(), object())
        if self._state is _VectorState.CLOSED or self._close_claim.setdefault("close", claim) is not claim:
            first = self._close_claim.get("close")
            if (
                first is not None
                and first[0] != claim[0]
                and os.getpid() == self._owner_pid
                and not self._inside_here()
            ):
                # Another thread's close() is under way (a watchdog's, and this thread's `with` exit): return once
                # it has closed everything. (Not in the thread running it, a signal handler there: that would wait
                # for itself; nor in a call of this vector session, from on_event or a signal handler, which that
                # close waits to leave. Nor once the interpreter is exiting: a daemon thread running it never runs
                # again.)
                while not self._closed.wait(0.1) and not sys.is_finalizing():
                    pass
            return
        if os.getpid() == self._owner_pid:  # (in a forked child, the parent's replacements are not this copy's)
            # Before the close is visible: a replacement submitted from now on starts no player (see _fail).
            self._cancel.set()
        self._state = _VectorState.CLOSED
        self._closer = threading.get_ident()
        self._round = None
        try:
            self._close_all(together)
        finally:
            self._closed.set()

    def _close_all(self, together: bool) -> None:
        if os.getpid() != self._owner_pid:
            # A copy inherited over fork: the players, their pipes, the replacements on their way (in the
            # parent's threads, which the child does not have) belong to the process that made it.
            for slot in self._slots:
                if isinstance(slot.session, Session):
                    slot.session.close()  # (a session's copy only marks itself closed)
            wake, self._wake_fd = self._wake_fd, None  # (no lock: the thread that takes it is the parent's)
            if wake is not None:
                os.close(wake)  # this process's copy
            return
        interrupt: BaseException | None = None
        first: BaseException | None = None
        try:
            first = self._leave_callers()
        except _INTERRUPTS as exc:
            interrupt = exc  # finish closing first
        own = self._own_launch()
        for slot in self._slots:
            future, slot.future = slot.future, None
            if future is not None and slot.index == own:
                # close() was called by the factory, in this very launch thread: waiting for the launch would wait for
                # itself. The session it makes after all (it goes on once this returns) is closed as it returns.
                future.add_done_callback(_close_result)
                future = None
            while future is not None:
                try:
                    slot.session = self._await_replacement(future)
                    future = None
                except _INTERRUPTS as exc:
                    interrupt = interrupt or exc  # finish closing first
        if self._hand_off():
            # The call of another thread did not return within CLOSE_WAITER_TIMEOUT (it runs on_event, or another
            # callback of the caller's): its pipes are not closed under it (nor the poll's wake-up descriptor, nor
            # the launch threads); it closes them as it returns (see _leave_call). What runs outside this process
            # is stopped now: the players (or their leases released), so that close() returns.
            log.warning(
                "close(): a call of this VectorSession (%s) is still under way in another thread (in on_event, "
                "reward_fn or done_fn, or it began as close() did): its players are stopped now; that call closes "
                "their pipes as it returns",
                self._what,
            )
            sessions = [s.session for s in self._slots if s.session is not None]
            errors, stopped = _close_sessions([_PlayerStopper(s) for s in sessions])
            interrupt = interrupt or stopped
            first = first or next((e for e in errors if e is not None), None)
        else:
            more, stopped = self._close_rest(together)
            first, interrupt = first or more, interrupt or stopped
        if interrupt is not None:
            raise interrupt
        if first is not None:
            raise first

    def _hand_off(self) -> bool:
        """In close(): whether a call of this vector session is still under way in another thread, which is then
        left to close the pipes as it returns (under the lock its return takes, so exactly one of the two does)."""
        with self._call_lock:
            if self._calls and self._call_thread != threading.get_ident():
                self._leftover = True
                return True
            return False

    def _close_rest(self, together: bool) -> tuple[BaseException | None, BaseException | None]:
        """Close every slot's session (its pipes, its player) and the launch threads and the wake-up descriptor: the
        end of close(), in the thread of close() or (see :meth:`_hand_off`) of the call it ended. Returns the first
        error of a session's close, and a Ctrl-C (or a signal handler's SystemExit) that came meanwhile."""
        interrupt: BaseException | None = None
        first: BaseException | None = None
        for slot in self._slots:
            self._done_waiting(slot)
        with self._call_lock:
            calls = self._calls  # (a call of this thread, whose signal handler or on_event closes: see below)
        if not calls:  # (else that call lets go of them as it returns: see _leave_call)
            for slot in self._slots:
                self._let_go(slot.session)
        sessions = [s.session for s in self._slots if s.session is not None]
        # A signal handler that interrupted a slot's send or receive in this thread: that session is closed in this
        # thread, whose close() leaves its pipes to the call if it was using them (the call resumes after the handler
        # and closes them); in another thread, that close() would wait for this one to leave the call.
        here = self._sessions_here(sessions)
        # Close every channel first, so all players see end of file and exit together; each close()
        # below then finds its player gone (or stops it: SIGTERM, grace, SIGKILL).
        for k, session in enumerate(sessions):
            channel = getattr(session, "channel", None)
            # (Not under a call of this thread that the close interrupted, from a signal handler or on_event: it may
            # be between its check and its use of a pipe. Each session's close() leaves them to it, see _hold_fds.)
            if channel is not None and getattr(session, "process", None) is not None and k not in here and not calls:
                try:
                    channel.close()
                except _INTERRUPTS as exc:
                    interrupt = interrupt or exc
                except Exception as exc:
                    log.debug("closing a channel failed: %s", exc)
        # All at once: players that ignore SIGTERM (hung) take one stop grace between them, not one each.
        errors, stopped = _close_sessions(sessions, together=together, here=here)
        interrupt = interrupt or stopped
        for exc in errors:
            if exc is None:
                continue
            if first is None:
                first = exc
            elif not sys.is_finalizing():  # (at interpreter exit, from __del__: builtins may be gone)
                log.warning("closing a session failed too: %s", exc)
        executor, self._executor = self._executor, None
        while executor is not None:
            try:
                _shutdown(executor)
                executor = None
            except _INTERRUPTS as exc:
                interrupt = interrupt or exc
        while self._stoppers:
            try:
                self._join_stoppers()
            except _INTERRUPTS as exc:
                interrupt = interrupt or exc
        if calls:
            # The call (of this thread: a signal handler's close, or on_event's) may poll the wake-up descriptor before
            # it sees the close: it closes it, and lets go of the pipes, as it returns (see _leave_call).
            with self._call_lock:
                self._leftover = True
            return first, interrupt
        with self._wake_lock:
            wake, self._wake_fd = self._wake_fd, None
        if wake is not None:
            os.close(wake)
        return first, interrupt

    def _own_launch(self) -> int | None:
        """The slot whose replacement this thread is launching for this vector session (close() called by the
        factory), or None."""
        if getattr(_launching, "cancel", None) is self._cancel:
            return _launching.slot
        return None

    def _inside_here(self) -> bool:
        """Whether this thread is inside a call of this vector session (close() from on_event, or from a signal
        handler that interrupted the call)."""
        f: Any = sys._getframe(1)
        while f is not None:
            if f.f_code in _CALL_CODES and f.f_locals.get("self") is self:
                return True
            f = f.f_back
        return False

    @staticmethod
    def _sessions_here(sessions: Sequence[Any]) -> list[int]:
        """The indices of ``sessions`` whose send or receive this thread is inside (a signal handler interrupted
        it)."""
        mine = {id(s): k for k, s in enumerate(sessions)}
        here: list[int] = []
        f: Any = sys._getframe(1)
        while f is not None:
            if f.f_code in _SESSION_IO_CODES:
                k = mine.get(id(f.f_locals.get("self")))
                if k is not None and k not in here:
                    here.append(k)
            f = f.f_back
        return here

    def _callers(self) -> tuple[bool, list[Any]]:
        """Whether a thread other than this one is inside a call of this vector session (close() called from a
        thread of its own while a step waits), and the slots' sessions whose own send or receive such a thread is
        in. Read from the threads' stacks, at close only."""
        me = threading.get_ident()
        try:
            frames = sys._current_frames()
        except Exception:  # noqa: BLE001 - (at interpreter shutdown): close as if no call waited
            return False, []
        mine = {id(s.session): s.session for s in self._slots if s.session is not None}
        inside = False
        reading: list[Any] = []
        for ident, frame in frames.items():
            if ident == me:
                continue
            f = frame
            while f is not None:
                code = f.f_code
                if code in _CALL_CODES:
                    inside = inside or f.f_locals.get("self") is self
                elif code in _SESSION_IO_CODES:
                    session = f.f_locals.get("self")
                    if mine.get(id(session)) is session and session not in reading:
                        reading.append(session)
                f = f.f_back
        return inside, reading

    def _leave_callers(self) -> BaseException | None:
        """In close(), called from another thread while a call of this vector session is under way: wake that
        call's poll (it raises CallOrderError, saying the vector session was closed) and return once it has left
        (at most :data:`CLOSE_WAITER_TIMEOUT` seconds later), so that no pipe is closed under it. A slot's session
        whose own send or receive it waits in is closed now: its close() stops the player and closes its pipes
        once that call has left them. Returns the first error of those closes."""
        inside, reading = self._callers()
        if not inside:
            return None
        first: BaseException | None = None
        self._wake(None)
        closed: list[Any] = []
        deadline = time.monotonic() + CLOSE_WAITER_TIMEOUT
        while inside:
            for session in reading:
                if session not in closed:
                    closed.append(session)
                    try:
                        session.close()
                    except Exception as exc:
                        first = first or exc
            if time.monotonic() > deadline:
                break  # (the call runs a callback: see _hand_off)
            time.sleep(0.005)
            inside, reading = self._callers()
        return first

    def _await_replacement(self, future: Future) -> Any:
        """The session a cancelled replacement made anyway, or None (it failed); waits for its launch
        thread, killing the player it boots meanwhile (see :meth:`_stop_booting`)."""
        tag = getattr(self._factory, "tag", None)
        while not future.done():
            if tag is not None:
                self._stop_booting(tag, future)
            wait([future], timeout=CANCEL_POLL)
        if future.exception() is not None:
            return None
        return future.result()

    def _stop_booting(self, tag: str, awaited: Future) -> None:
        """SIGKILL this process's children that carry the vector session's tag and are no slot's player:
        replacements still waiting for their first frame. Their launch then fails at once (and cleans up
        after them) instead of waiting out ``start_timeout``. Not a replacement that is ready (its launch has
        returned; not taken up by a step yet: ``awaited``, or another slot's), nor a failed player being stopped:
        those are closed as every slot's player is (SIGTERM, grace, SIGKILL)."""
        known = {s.session.pid for s in self._slots if s.session is not None}
        known.update(pid for _, pid in self._stoppers)
        for future in [awaited, *(s.future for s in self._slots)]:
            if future is not None and future.done() and not future.cancelled() and future.exception() is None:
                known.add(getattr(future.result(), "pid", None))
        _kill_tagged(tag, known)

    def __enter__(self) -> VectorSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        # Dropped without close(): its players are stopped, and a ResourceWarning (as an unclosed file or
        # subprocess.Popen gives) says so, naming them; not for a copy inherited over fork (the players are the
        # parent's). No logging: this may run at interpreter shutdown.
        if getattr(self, "_state", _VectorState.CLOSED) is _VectorState.CLOSED:
            return
        try:
            if self._owner_pid == os.getpid():
                _warn(f"unclosed renderd VectorSession of {len(self._slots)} players {self._describe_players()}; "
                      "close it (or use `with`)", ResourceWarning, stacklevel=2, source=self)
        finally:
            try:
                self._close(together=False)  # (no threads started from the garbage collector)
            except Exception:
                pass

    def _describe_players(self) -> str:
        """The slots' players, for the warning of :meth:`__del__`: pids and executables."""
        players = []
        for slot in self._slots:
            session = slot.session
            process = getattr(session, "process", None)
            if session is None:
                players.append("-")
            elif process is not None:
                players.append(f"pid {session.pid} ({getattr(process, 'executable', '?')})")
            else:
                players.append(f"pid {session.pid}")
        return "(" + ", ".join(players) + ")"

    def __repr__(self) -> str:
        states = ",".join(_STATE_LETTERS[s.state] for s in self._slots)
        return f"<renderd.VectorSession n={len(self._slots)} {self._state.value} slots=[{states}]>"


#: The calls of a vector session a thread is in while it uses the players' pipes (see VectorSession._callers).
_CALL_CODES = frozenset(
    method.__code__
    for method in (VectorSession.step, VectorSession.send, VectorSession.recv, VectorSession.reset,
                   VectorSession.reset_async)
)


# -- building vector sessions --------------------------------------------------------------------------


def _platform_helper(cmdline: Sequence[str]) -> bool:
    """Whether ``cmdline`` is one of the processes the platform layer runs with a player's environment (so with its
    tag) that are no player: a managed Xvfb (which other sessions of this process may share) or a probe (whose
    death would be taken, and cached, as the platform's failure)."""
    from renderd.platforms.xvfb import MANAGED_MARKER

    helpers = os.path.dirname(os.path.abspath(sys.modules["renderd.platforms"].__file__ or ""))
    return MANAGED_MARKER in cmdline or any(
        os.path.dirname(arg) == helpers and os.path.basename(arg).startswith("_") for arg in cmdline
    )


def _kill_tagged(tag: str, known: set[int | None]) -> None:
    """SIGKILL this process's children whose environment has :data:`TAG_VARIABLE` set to ``tag``, except
    those in ``known``: players still booting in a launch thread, whose launch then fails at once (and
    cleans up after them). Only players: a child that was told no player endpoint (``AI2THOR_SERVER_TYPE``), or
    is a managed display or a platform probe started with a player's environment, is left alone."""
    import renderd.platforms  # noqa: F401  (for _platform_helper)

    me = os.getpid()
    for child in psutil.Process(me).children():
        if child.pid in known:
            continue
        try:
            pidfd = os.pidfd_open(child.pid)
        except OSError:
            continue
        try:
            # Checked with the pidfd open, so the signal cannot reach a process that reused the pid.
            if child.ppid() != me:
                continue
            environ = child.environ()
            if (
                environ.get(TAG_VARIABLE) == tag
                and "AI2THOR_SERVER_TYPE" in environ
                and not _platform_helper(child.cmdline())
            ):
                log.debug("stopping the booting player pid %d", child.pid)
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except (psutil.Error, OSError):
            pass
        finally:
            os.close(pidfd)


def _make_executor(n: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=max(1, n), thread_name_prefix="renderd-vector")


#: In a launch thread, while :func:`_replace` runs: ``cancel`` (the vector session's) and ``slot``, so that a close()
#: the factory calls can tell it runs in the launch it would otherwise wait for.
_launching = threading.local()


def _shutdown(executor: ThreadPoolExecutor) -> None:
    """Stop the launch threads and wait for them; from one of them (a factory that closed its vector session), for the
    others only: that one ends once its launch returns."""
    me = threading.current_thread()
    threads = list(getattr(executor, "_threads", ()))
    if me not in threads:
        executor.shutdown(wait=True, cancel_futures=True)
        return
    executor.shutdown(wait=False, cancel_futures=True)
    for thread in threads:
        if thread is not me:
            thread.join()


def _replace(factory: Callable[[int], Any], slot: int, cancel: threading.Event) -> Any:
    """In a launch thread: make a new session for ``slot`` (up to REPLACE_ATTEMPTS tries); no new attempt once
    ``cancel`` is set (the vector session is closing)."""
    _launching.cancel, _launching.slot = cancel, slot
    try:
        return _replace_now(factory, slot, cancel)
    finally:
        _launching.cancel = _launching.slot = None


def _replace_now(factory: Callable[[int], Any], slot: int, cancel: threading.Event) -> Any:
    errors: list[BaseException] = []
    for attempt in range(1, REPLACE_ATTEMPTS + 1):
        if cancel.is_set():
            raise RenderdError(f"slot {slot}: the replacement was cancelled: the VectorSession was closed")
        try:
            return factory(slot)
        except RenderdError as exc:
            if cancel.is_set():
                raise RenderdError(f"slot {slot}: the replacement was cancelled: the VectorSession was closed") from exc
            log.warning("slot %d: replacement attempt %d of %d failed: %s", slot, attempt, REPLACE_ATTEMPTS, exc)
            errors.append(exc)
    raise RenderdError(
        f"slot {slot} could not be replaced: {REPLACE_ATTEMPTS} attempts failed; the last one: "
        f"{type(errors[-1]).__name__}: {errors[-1]}"
    ) from errors[-1]


def _open_all(n: int, factory: Callable[[int], Any], executor: ThreadPoolExecutor, what: str) -> list[Any]:
    """Make n sessions concurrently; on any failure close the others and raise one error naming every
    slot that failed (of the failures' type when they all have the same one)."""
    futures = [executor.submit(factory, i) for i in range(n)]
    sessions: list[Any] = []
    failures: list[tuple[int, BaseException]] = []
    for i, future in enumerate(futures):
        try:
            sessions.append(future.result())
        except Exception as exc:
            failures.append((i, exc))
        except BaseException as exc:
            if future.done() and not future.cancelled() and future.exception() is exc:
                failures.append((i, exc))  # (raised by the launch itself)
                continue
            # Ctrl-C (KeyboardInterrupt), or a signal handler's SystemExit (a batch job's SIGTERM), while waiting:
            # the launches still on their way are closed as they finish (in their launch thread), and those
            # that finished already now; nothing is kept for the traceback.
            for pending in futures[i:]:
                pending.add_done_callback(_close_result)
            for session in sessions:
                try:
                    session.close()
                except Exception as exc:
                    log.warning("closing a session after an interrupted start: %s", exc)
            tag = getattr(factory, "tag", None)
            # Players still booting (a build loading for minutes, or hung) are stopped, so the interrupt is
            # raised now, not once each launch has waited out its start_timeout. (Another Ctrl-C ends this
            # wait; the launches on their way are still closed as they finish.)
            while tag is not None and not all(f.done() for f in futures[i:]):
                _kill_tagged(tag, set())
                wait(futures[i:], timeout=CANCEL_POLL)
            raise
    if not failures:
        return sessions
    for session in sessions:
        try:
            session.close()
        except Exception as exc:
            log.warning("closing a session after a failed start: %s", exc)
    first = failures[0][1]
    if not all(isinstance(e, RenderdError) for _, e in failures):
        raise first
    texts = {str(e) for _, e in failures}
    if len(failures) == n and len(texts) == 1:
        message = f"none of the {n} players could be {what}: {first}"
    else:
        lines = [f"slot {i}: {type(e).__name__}: {_indent(str(e))}" for i, e in failures]
        message = f"{len(failures)} of {n} players could not be {what}:\n  " + "\n  ".join(lines)
    cls = type(first) if len({type(e) for _, e in failures}) == 1 else RenderdError
    err = cls.__new__(cls)
    RenderdError.__init__(err, message)
    if cls is type(first):
        for attr, value in vars(first).items():  # pid, returncode, deadline, key...
            if attr not in ("message", "args"):
                setattr(err, attr, value)
    err.failures = dict(failures)  # type: ignore[attr-defined]
    err.slots = [i for i, _ in failures]  # type: ignore[attr-defined]
    raise err from first


def _close_result(future: Future) -> None:
    """Close the session ``future`` made, if it made one (a start nobody waits for any more)."""
    if future.cancelled() or future.exception() is not None:
        return
    try:
        future.result().close()
    except Exception as exc:
        log.warning("closing a session after an interrupted start: %s", exc)


def _in_slot_order(values: Any, expected: str) -> list[Any]:
    """``values`` (one per slot, or per listed slot) as a list; ``TypeError`` saying ``expected`` when it is not a
    sequence: not iterable (a number, None, a numpy 0-d array), or a set, whose order is no slot order."""
    if isinstance(values, (set, frozenset)):
        raise TypeError(
            f"{expected}, not a {type(values).__name__}: a set has no order to match the slots; nothing was sent"
        )
    try:
        return list(values)
    except TypeError:
        raise TypeError(f"{expected}, not {type(values).__name__}; nothing was sent") from None


def _check_n(n: int, name: str = "n") -> int:
    """``n`` as an int; ``ValueError`` naming ``name`` unless it is an integer 1..MAX_SLOTS (numpy's integers too, as a
    count computed with numpy is one; not a bool)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 1 <= n <= MAX_SLOTS:
        shown = n.item() if isinstance(n, numbers.Integral) and hasattr(n, "item") else n
        raise ValueError(f"{name} must be an integer 1..{MAX_SLOTS}, got {shown!r}")
    return int(n)


class _Launcher:
    """``factory(slot)`` of :func:`launch_many`: launches one player for a slot. Every player it starts has
    :data:`TAG_VARIABLE` set to ``tag`` in its environment, so that a replacement still booting when the
    vector session closes can be told from this process's other children and stopped."""

    def __init__(self, executable: Any, kwargs: dict[str, Any]) -> None:
        self.executable = executable
        self.kwargs = kwargs
        self.tag = secrets.token_hex(8)

    def __call__(self, slot: int) -> Any:
        from renderd.client import launch

        kw = dict(self.kwargs)
        log_path = kw.get("log_path")
        if log_path is not None:
            # Only {slot} is replaced: any other brace is part of the path. (A path given as bytes too.)
            kw["log_path"] = os.fsdecode(log_path).replace("{slot}", str(slot))
        kw["env"] = {**(kw.get("env") or {}), TAG_VARIABLE: self.tag}
        return launch(self.executable, **kw)


def _connect_slot(environment: str, kwargs: dict[str, Any], slot: int) -> Any:
    from renderd.client import connect

    return connect(environment, **kwargs)


def _build(
    n: int,
    factory: Callable[[int], Any],
    what: str,
    *,
    replace_on_crash: bool,
    reward_fn: Callable[[Event], float] | None,
    done_fn: Callable[[Event], bool] | None,
) -> VectorSession:
    executor = _make_executor(n)
    try:
        sessions = _open_all(n, factory, executor, what)
    except BaseException:
        executor.shutdown(wait=True, cancel_futures=True)
        raise
    try:
        return VectorSession(
            sessions,
            factory=factory,
            replace_on_crash=replace_on_crash,
            reward_fn=reward_fn,
            done_fn=done_fn,
            executor=executor,
        )
    except BaseException as exc:
        # (Out of descriptors for the poll's wake-up eventfd, say.) The players started (or leases granted) for it
        # are closed, all at once, and the launch threads stopped: nothing is left running. Then the error goes on.
        errors, interrupt = _close_sessions(sessions)
        for error in errors:
            if error is not None:
                log.warning("closing a session after the VectorSession could not be made: %s", error)
        try:
            _shutdown(executor)
        finally:
            if interrupt is not None:
                raise interrupt from exc
        raise


def launch_many(
    n: int,
    executable: str | os.PathLike[str] | Sequence[str] = "renderd-player",
    *,
    replace_on_crash: bool = False,
    reward_fn: Callable[[Event], float] | None = None,
    done_fn: Callable[[Event], bool] | None = None,
    **launch_kwargs: Any,
) -> VectorSession:
    """Launch ``n`` players concurrently (all spawned, then all first frames awaited) and return a
    :class:`VectorSession` over them.

    ``launch_kwargs`` are :func:`renderd.launch`'s (``width``, ``height``, ``platform``, ``args``,
    ``start_timeout``, ``step_timeout``...); a ``log_path`` may contain ``{slot}``, replaced by the slot
    number (a replacement player appends to its slot's log); any other brace is kept as it is. With ``replace_on_crash`` a slot whose
    player fails is given a new player launched the same way.

    Raises ``ValueError`` for a bad ``n`` and what :func:`renderd.launch` raises; when several players
    fail to start, one error names every failed slot. Nothing is left running when it raises.
    """
    n = _check_n(n)
    log_path = launch_kwargs.get("log_path")
    if log_path is not None:
        try:
            os.fsdecode(log_path)
        except TypeError:
            raise TypeError(
                f"log_path must be a path (str, bytes or os.PathLike; {{slot}} is replaced by the slot) or None, not "
                f"{type(log_path).__name__}"
            ) from None
    factory = _Launcher(executable, dict(launch_kwargs))
    return _build(n, factory, "started", replace_on_crash=replace_on_crash, reward_fn=reward_fn, done_fn=done_fn)


def connect_many(
    environment: str,
    n: int,
    *,
    replace_on_crash: bool = False,
    socket: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
    step_timeout: float | None = None,
    reward_fn: Callable[[Event], float] | None = None,
    done_fn: Callable[[Event], bool] | None = None,
) -> VectorSession:
    """Lease ``n`` ready players of ``environment`` from the daemon (concurrently) and return a
    :class:`VectorSession` over them.

    ``socket``, ``timeout`` (seconds to wait for each lease) and ``step_timeout`` are
    :func:`renderd.connect`'s. With ``replace_on_crash`` a slot whose player fails gets a new lease; the
    daemon recycles the failed player. Leased players have no first event yet: call :meth:`reset` (or
    step) first. Raises ``ValueError`` for a bad ``n``, and what :func:`renderd.connect` raises
    (:class:`LeaseError` when not enough players are ready in time); every lease granted is released then.
    """
    n = _check_n(n)
    kwargs: dict[str, Any] = {"socket": socket}
    if timeout is not None:
        kwargs["timeout"] = timeout
    if step_timeout is not None:
        kwargs["step_timeout"] = step_timeout
    factory = functools.partial(_connect_slot, environment, kwargs)
    return _build(n, factory, "leased", replace_on_crash=replace_on_crash, reward_fn=reward_fn, done_fn=done_fn)
