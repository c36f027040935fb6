"""The client: a :class:`Session` with one player, and :func:`launch` / :func:`connect` to get one.

``renderd.launch()`` spawns and owns one player with no daemon: a private FIFO pair, the player process in
its own process group, and a session that waits for the player's first frame. ``renderd.connect()`` leases
a ready player from the daemon (:mod:`renderd.daemon.client`). Both return the same :class:`Session`.

A session is built from any :class:`renderd.transport.Channel`, so the FIFO transport, the HTTP bridge and
the daemon's lease client all make sessions the same way::

    Session(channel, process=..., on_close=..., step_timeout=...)   # no I/O
    session.wait_ready(start_timeout)                                # the player's first message

Every wait has a deadline: ``start_timeout`` for the first frame, ``step_timeout`` for each step. A session
that saw a crash, a timeout or malformed bytes is *broken*: its stream may be half-read, so every later
call raises :class:`~renderd.errors.CallOrderError` naming the original error (chained).
"""

from __future__ import annotations

import enum
import importlib
import numbers
import os
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from renderd.config import REFERENCE_PLAYER, ArgumentError, check_seconds
from renderd.errors import (
    AlreadyPendingCallError,
    CallOrderError,
    ConfigError,
    LeaseError,
    NoPendingCallError,
    PlatformError,
    PlayerTimeout,
    ProtocolError,
)
from renderd.event import Event, FrameAssembler
from renderd.process import (
    DEFAULT_QUALITY,
    DEFAULT_STOP_GRACE,
    NOT_INHERITED,
    LeasedPlayer,
    PlayerOnDisplay,
    PlayerProcess,
    check_frame_size,
    endpoint_variable_error,
    exit_safe_logger,
    player_argv,
    player_env,
    resolve_executable,
)
from renderd.protocol import encode_action
from renderd.transport import Channel

__all__ = [
    "DEFAULT_START_TIMEOUT",
    "DEFAULT_STEP_TIMEOUT",
    "Session",
    "SessionState",
    "launch",
    "launch_player",
    "connect",
]

log = exit_safe_logger(__name__)  # (its code runs at interpreter exit too: a session's __del__)

#: Seconds a new player has to send its first frame (a Unity build may load for minutes on a cold disk).
DEFAULT_START_TIMEOUT = 300.0
#: Seconds a player has to answer one step.
DEFAULT_STEP_TIMEOUT = 100.0
#: Name of the player's log file in the private FIFO directory when no ``log_path`` is given.
DEFAULT_LOG_NAME = "player.log"
#: Seconds :meth:`Session.close`, called from a thread of its own, waits (after stopping the player) for a step
#: that waited on the pipes in another thread to leave them before it closes them.
CLOSE_WAITER_TIMEOUT = 5.0

TRANSPORTS = ("fifo", "http")


class SessionState(enum.Enum):
    READY = "ready"  # may send
    PENDING = "pending"  # an action was sent; its answer has not been received
    BROKEN = "broken"  # a crash, timeout or protocol error: the stream cannot be trusted
    CLOSED = "closed"


#: What a session waits for in :meth:`Session.wait_ready`, as it names it in its errors.
_FIRST_FRAME = "(first frame)"

#: Sessions of this process, for :func:`_after_fork_in_child`.
_sessions: weakref.WeakSet[Session] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a forked child: its copies of the parent's sessions may not talk to the parent's players (an
    action written from here would share the parent's pipes with it, and one of the two would read the
    other's answer). Each copy is broken with an error that says so; its close() only marks it closed."""
    for session in list(_sessions):
        if session._state is not SessionState.CLOSED and session._owner_pid != os.getpid():
            session._state = SessionState.BROKEN
            session._pending = None
            session._io_lock = threading.Lock()  # (a thread of the parent may have held it at fork)
            session._error = CallOrderError(
                f"this session was inherited over fork from process {session._owner_pid}, which owns its "
                "player and pipes; in this process, launch or connect a session of its own"
            )


os.register_at_fork(after_in_child=_after_fork_in_child)


def check_sequence_id(seq: Any) -> int:
    """An action's own ``sequenceId`` as an int: an integer (numpy's too; not a bool) of at most 64 bits, as
    a player echoes it in its msgpack metadata; ``ValueError`` otherwise."""
    if isinstance(seq, bool) or not isinstance(seq, numbers.Integral):
        raise ValueError(f"sequenceId must be an integer, got {seq!r}")
    seq = int(seq)
    if not -(2**63) <= seq < 2**64:
        raise ValueError(f"sequenceId must fit in 64 bits, got {seq}")
    return seq


def _action_dict(action: str | Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(action, Mapping):
        result = dict(action)
        result.update(kwargs)
    elif action is None:
        result = dict(kwargs)
    elif isinstance(action, str):
        result = {"action": action}
        result.update(kwargs)
    else:
        raise TypeError(f"action must be a name, a dict or None, not {type(action).__name__}")
    name = result.get("action")
    if not isinstance(name, str) or not name:
        raise ValueError(f"an action needs a non-empty 'action' name, got {name!r}")
    # As AI2-THOR's controller rewrites every action before sending it, so that an agent written against it
    # sends a build the same action through renderd: a number as `rotation` is the yaw (a build's rotation
    # arguments are {x, y, z}; it refuses a number), and the two image switches' old names set the new ones too.
    rotation = result.get("rotation")
    if isinstance(rotation, numbers.Real) and not isinstance(rotation, bool):
        result["rotation"] = {"y": rotation}
    for old, new in _RENAMED_SWITCHES:
        if old in result:
            result[new] = result[old]
    return result


#: Image switches a build reads under a newer name: (old, new). An action with the old one carries both.
_RENAMED_SWITCHES = (
    ("renderClassImage", "renderSemanticSegmentation"),
    ("renderObjectImage", "renderInstanceSegmentation"),
)


class Session:
    """One player's stream of actions and events.

    Build it from a :class:`renderd.transport.Channel` (no I/O happens in the constructor); ``process``
    is a :class:`renderd.process.PlayerProcess` the session owns and stops at :meth:`close`;
    ``on_close(error)`` runs last at close, with the error that broke the session or ``None`` when the
    stream is clean (a daemon lease uses it to hand the player on, or to have it recycled).
    ``sequence_id`` is the id of the last message the player sent (0 for a fresh player).
    ``first_frame_received``: the player's first frame was read by someone else (the daemon, for a lease), so
    :meth:`wait_ready` has nothing to wait for.

    Use :func:`renderd.launch` or :func:`renderd.connect` rather than building one yourself.
    """

    def __init__(
        self,
        channel: Channel,
        *,
        process: PlayerProcess | None = None,
        on_close: Callable[[BaseException | None], None] | None = None,
        width: int | None = None,
        height: int | None = None,
        step_timeout: float = DEFAULT_STEP_TIMEOUT,
        sequence_id: int = 0,
        pid: int | None = None,
        stop_grace: float = DEFAULT_STOP_GRACE,
        last_event: Event | None = None,
        first_frame_received: bool = False,
    ) -> None:
        self.channel = channel
        self.process = process
        self._step_timeout = check_seconds(step_timeout, "step_timeout")
        self.stop_grace = stop_grace
        self.last_event: Event | None = last_event
        self._on_close = on_close
        self._width = width
        self._height = height
        self._pid = pid if pid is not None else (process.pid if process is not None else None)
        self._sequence_id = int(sequence_id)
        self._assembler = FrameAssembler()
        self._state = SessionState.READY
        self._error: BaseException | None = None
        self._pending: tuple[int, str, float] | None = None  # (sequence id, action name, deadline)
        self._init_params: dict[str, Any] = {}
        # Whether the player's first frame was taken by someone else (the daemon, for a leased player).
        self._first_frame_elsewhere = first_frame_received and last_event is None
        self._owner_pid = os.getpid()  # a copy inherited over fork (another pid) leaves the player alone
        self._closing = False  # set by close(): a send or receive that fails meanwhile says it was closed
        self._broken_during: str | None = None  # the action whose step broke the session
        self._closer: int | None = None  # the thread running close()
        # Claimed by the first close(), with its thread, in one step (dict.setdefault: no other thread, nor a signal
        # handler, runs in between): two close() calls at once (threads) cannot both see the session open and both
        # stop the player and run on_close, and the second knows at once which thread's close() to wait for.
        self._close_claim: dict[str, tuple[int, object]] = {}
        self._closed = threading.Event()  # set once close() has released everything
        # Guards the hand-over of on_close (see _run_on_close): close() and a VectorSession's stop of a slot's player
        # in another thread run it once between them.
        self._on_close_lock = threading.Lock()
        # close() left the pipes to a step still using them: one it interrupted in its own thread (a signal
        # handler), or one another thread had not ended within CLOSE_WAITER_TIMEOUT. Cleared by whoever closes them.
        self._channel_left_open = False
        self._left_lock = threading.RLock()
        # A VectorSession whose calls poll, read and write this session's descriptors outside its send and receive
        # (a weak reference to it, set while the session is one of its slots), and whether close() left them to it
        # (see _hold_fds): it closes them as it lets go of them (_finish_close(holder=True)).
        self._holder: Callable[[], Any] | None = None
        self._fds_held = False
        # The player watch's descriptors as the pipes' users poll them (the pidfd; a managed display's epoll), kept
        # open under their numbers while close() leaves the pipes to a step or to the holder: the player's stop and
        # on_close close duplicates instead (see _keep_watch_fds). Each function closes some; called with the pipes.
        self._kept: list[Callable[[], None]] = []
        # Held by the thread inside step, send, recv, wait_ready or reset (reset's steps do not take it again): another
        # thread's call meanwhile is refused, not interleaved, and so is one from a signal handler (or a callback)
        # in the thread inside.
        self._io_lock = threading.Lock()
        _sessions.add(self)

    # -- properties -------------------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """The player's process id (None if the transport does not know it)."""
        return self._pid

    @property
    def step_timeout(self) -> float:
        """Seconds each step has (to write the action and to answer); may be changed between steps. Setting
        it to anything but a finite number of seconds greater than 0, at most
        :data:`renderd.config.MAX_SECONDS`, raises :class:`~renderd.config.ArgumentError` (a ValueError) and
        keeps the deadline it had."""
        return self._step_timeout

    @step_timeout.setter
    def step_timeout(self, seconds: float) -> None:
        self._step_timeout = check_seconds(seconds, "step_timeout")

    @property
    def width(self) -> int | None:
        """The player's screen width: from the last event, else as requested."""
        ev = self.last_event
        return ev.screen_width if ev is not None and ev.screen_width else self._width

    @property
    def height(self) -> int | None:
        ev = self.last_event
        return ev.screen_height if ev is not None and ev.screen_height else self._height

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def closed(self) -> bool:
        return self._state is SessionState.CLOSED

    @property
    def error(self) -> BaseException | None:
        """The error that broke the session, if any."""
        return self._error

    @property
    def sequence_id(self) -> int:
        """The sequenceId of the last action sent (or of the player's first message)."""
        return self._sequence_id

    # -- call order -------------------------------------------------------------------------------------
    def _check_open(self, what: str) -> None:
        if self._state is SessionState.CLOSED:
            raise CallOrderError(f"{what} on a closed session (launch or connect a new one)")
        if self._state is SessionState.BROKEN:
            error = self._error
            if isinstance(error, Exception):
                why = f"an earlier call failed with {type(error).__name__}: {error}"
            else:  # (Ctrl-C, or another interruption, while it used the pipes: the stream may be half-read)
                during = f" for {self._broken_during}" if self._broken_during else ""
                why = (f"an earlier call{during} was interrupted ({type(error).__name__}) while it used the pipes, "
                       "so the stream may be half-read or half-written")
            raise CallOrderError(
                f"{what} on a broken session: {why}. Close this session and launch or connect a new one."
            ) from error

    def _busy(self, what: str) -> CallOrderError:
        """The error of a call (``what`` names it) made while a thread is inside one of this session's: another
        one, or this one (the call comes from a signal handler, or a callback, run inside that call)."""
        if self._state is SessionState.CLOSED:  # (closed by that thread's close(), or by this one's)
            return CallOrderError(f"{what} on a closed session (launch or connect a new one)")
        f = sys._getframe(2)  # (above the call refused)
        while f is not None:
            if f.f_code in _IO_CODES and f.f_locals.get("self") is self:
                return CallOrderError(
                    f"{what} from a signal handler (or a callback) while this thread is inside {f.f_code.co_name}() "
                    "of this session: its action and answer would interleave with that call's on the pipes. Only "
                    "close() may be called there (the call under way then ends with CallOrderError); set a flag and "
                    "make the call once that one has returned. Nothing was sent or received"
                )
            f = f.f_back
        ident = self._thread_inside()
        other = next((t.name for t in threading.enumerate() if t.ident == ident), None) if ident is not None else None
        who = f"thread {other!r}" if other is not None else "another thread"
        return CallOrderError(
            f"{what} in thread {threading.current_thread().name!r} while {who} is inside a call of this session "
            "(step, send, recv, wait_ready or reset): a session is used by one thread at a time, or their actions "
            "and answers would interleave on the pipes. Give each thread its own session, or hold a lock around "
            "the calls (close() is the one call another thread may make). Nothing was sent or received"
        )

    def _check_ready(self, what: str) -> None:
        """For a call that sends (``what`` names it): :class:`CallOrderError` on a closed or broken session,
        :class:`AlreadyPendingCallError` with an answer pending."""
        self._check_open(what)
        if self._state is SessionState.PENDING:
            raise AlreadyPendingCallError(f"{what} while an earlier action's answer is pending; call recv() first")

    def _break(self, exc: BaseException, during: str | None = None) -> None:
        """Break the session with ``exc``, raised by the step of the action named ``during``."""
        if self._state is not SessionState.CLOSED:
            self._state = SessionState.BROKEN
            self._error = exc
            self._broken_during = during
            self._pending = None
            log.debug("session with player pid %s broken: %s", self._pid, exc)

    # -- I/O ---------------------------------------------------------------------------------------------
    def wait_ready(self, timeout: float = DEFAULT_START_TIMEOUT, deadline_name: str = "start_timeout") -> Event:
        """Receive the player's first message (its readiness signal, ``sequenceId`` 0) as ``last_event``.

        Raises :class:`PlayerTimeout` (naming ``deadline_name``) when it does not come within
        ``timeout`` seconds, :class:`PlayerCrashed` if the player exits first, :class:`ProtocolError` if the
        message is malformed, :class:`CallOrderError` if the session is not idle (another thread inside a call
        of it included), or once the first frame
        or any later answer has been received (:func:`launch` waits for the first frame itself). Any of the
        first three breaks the session.
        """
        if not self._io_lock.acquire(False):
            raise self._busy("wait_ready()")
        try:
            return self._wait_ready(timeout, deadline_name)
        finally:
            self._io_lock.release()

    def _wait_ready(self, timeout: float, deadline_name: str) -> Event:
        self._check_open("wait_ready()")
        timeout = check_seconds(timeout, "timeout")
        if self._state is SessionState.PENDING:
            raise AlreadyPendingCallError("wait_ready() while an action is pending; call recv() first")
        if self.last_event is not None:  # (set by every answer received, the first frame's too)
            raise CallOrderError(
                "wait_ready() after the player's first frame was received (launch() waits for it; it is "
                "last_event): the player sends no other first frame"
            )
        if self._first_frame_elsewhere:
            raise CallOrderError(
                "wait_ready() on a leased player: the daemon received its first frame before leasing it, and the "
                "player sends no other; it is ready, step it"
            )
        self._pending = (self._sequence_id, _FIRST_FRAME, time.monotonic() + timeout)
        self._state = SessionState.PENDING
        return self._receive(deadline_name, timeout)

    def send(self, action: str | Mapping[str, Any] | None = None, **kwargs: Any) -> int:
        """Send one action without waiting for its answer; returns the action's ``sequenceId``.

        The action is a name with keyword arguments, or a dict. ``sequenceId`` is the previous one plus 1
        unless the action carries its own. Raises :class:`AlreadyPendingCallError` when an answer is
        still pending, :class:`CallOrderError` on a closed or broken session (or while another thread is inside
        a call of this session: nothing is sent), ``ValueError``/``TypeError``
        for an action that cannot be encoded (the session stays usable), and :class:`PlayerCrashed` or
        :class:`PlayerTimeout` (``step_timeout``) if the player cannot take it (the session breaks).
        """
        if not self._io_lock.acquire(False):
            raise self._busy("send()")
        try:
            return self._send(action, kwargs, None)
        finally:
            self._io_lock.release()

    def _send(
        self, action: str | Mapping[str, Any] | None, kwargs: Mapping[str, Any], limit: tuple[float, str, float] | None
    ) -> int:
        """:meth:`send`; ``limit`` is ``(deadline, name, seconds)``: a ``time.monotonic()`` by which the action
        must be written when that is earlier than ``step_timeout`` from now (a :class:`VectorSession` shares
        one deadline between the slots of one send), reported as ``name`` (``seconds`` long) if it passes.
        The answer's deadline stays ``step_timeout`` from now."""
        if self._state is not SessionState.READY:
            self._check_ready("send()")
        message = _action_dict(action, kwargs)
        seq = message.get("sequenceId")
        if seq is None:
            seq = self._sequence_id + 1
            message["sequenceId"] = seq
        else:
            seq = message["sequenceId"] = check_sequence_id(seq)
        buffers = encode_action(message)
        step_timeout = self._step_timeout
        deadline = time.monotonic() + step_timeout
        write_by, name, seconds = deadline, "step_timeout", step_timeout
        if limit is not None and limit[0] < deadline:
            write_by, name, seconds = limit
        try:
            self.channel.send(buffers, write_by, name)
        except BaseException as exc:
            error = exc
            if isinstance(exc, PlayerTimeout) and not self._closing:  # (the error raised is the one kept)
                error = self._timeout_error(message["action"], exc, name, seconds, sending=True)
                error.__cause__ = exc
            self._break(error, message["action"])
            if self._closing:
                self._finish_close()
                if isinstance(exc, Exception):
                    raise self._closed_meanwhile(message["action"], "sent it") from exc
            if error is not exc:
                raise error from exc
            raise
        if self._closing:  # (closed while it wrote: by another thread, or a signal handler in this one)
            self._finish_close()
            raise self._closed_meanwhile(message["action"], "sent it")
        self._sequence_id = seq
        self._pending = (seq, message["action"], deadline)
        self._state = SessionState.PENDING
        return seq

    def recv(self, timeout: float | None = None) -> Event:
        """The answer to the pending action, as an :class:`~renderd.Event` (also kept as ``last_event``).

        Waits until the deadline set by :meth:`send` (``step_timeout`` after it), or ``timeout`` seconds
        from now when given. Raises :class:`NoPendingCallError` with nothing pending,
        :class:`CallOrderError` on a closed or broken session (or while another thread is inside a call of
        this session), :class:`~renderd.config.ArgumentError` (a
        ValueError; the session is unchanged) for a ``timeout`` that is not a finite number of seconds, 0
        or more, and breaks the session with :class:`PlayerTimeout`, :class:`PlayerCrashed` or
        :class:`ProtocolError` (also for an answer carrying another ``sequenceId``).
        """
        if not self._io_lock.acquire(False):
            raise self._busy("recv()")
        try:
            self._check_open("recv()")
            if self._state is not SessionState.PENDING or self._pending is None:
                raise NoPendingCallError("recv() with no action pending; call send() first")
            if timeout is not None:
                timeout = check_seconds(timeout, "timeout", zero_ok=True)
                seq, name, _ = self._pending
                self._pending = (seq, name, time.monotonic() + timeout)
                return self._receive("recv timeout", timeout)
            return self._receive("step_timeout", self._step_timeout)
        finally:
            self._io_lock.release()

    def step(self, action: str | Mapping[str, Any] | None = None, **kwargs: Any) -> Event:
        """Send one action and return the player's answer: ``send()`` then ``recv()``.

        ``step("MoveAhead")``, ``step(action="RotateLeft", degrees=30)`` and
        ``step({"action": "Teleport", "x": 1.0})`` are the same kind of call. Raises what
        :meth:`send` and :meth:`recv` raise, and :class:`CallOrderError` while another thread (or a signal
        handler, in this one) is inside a call of this session (nothing is sent then).
        """
        if not self._io_lock.acquire(False):
            raise self._busy("step()")
        try:
            if self._state is not SessionState.READY:
                self._check_ready("step()")
            self._send(action, kwargs, None)
            return self._receive("step_timeout", self._step_timeout)
        finally:
            self._io_lock.release()

    def _step_held(self, action: str | Mapping[str, Any], kwargs: Mapping[str, Any]) -> Event:
        """:meth:`step` for a call that holds the session already (reset's steps)."""
        if self._state is not SessionState.READY:
            self._check_ready("step()")
        self._send(action, kwargs, None)
        return self._receive("step_timeout", self._step_timeout)

    def _receive(self, deadline_name: str, seconds: float) -> Event:
        pending = self._pending
        if pending is None:  # (closed since it was sent: by another thread, or a signal handler)
            self._check_open("recv()")
            raise NoPendingCallError("recv() with no action pending; call send() first")
        seq, name, deadline = pending
        try:
            try:
                message = self.channel.recv(deadline, deadline_name)
                event = self._assembler.event(message, seq)
            except ProtocolError as exc:
                if name is _FIRST_FRAME:  # (launch says so of a first frame, with the player's log)
                    raise
                raise self._malformed_error(name, exc) from exc
            if event.sequence_id != seq:
                if name is _FIRST_FRAME:  # (no action was sent: a player's first message has sequenceId 0)
                    what, why = "the player's first frame", "a player's first message has sequenceId 0"
                else:
                    what, why = f"the answer to {name}", "the stream is out of step"
                raise ProtocolError(
                    f"{what} carries sequenceId {event.sequence_id!r}, expected {seq} ({why})",
                    offset=message.offset,
                )
        except PlayerTimeout as exc:
            if self._closing:
                self._break(exc, name)
                self._finish_close()
                raise self._closed_meanwhile(name, "waited for its answer") from exc
            error = self._timeout_error(name, exc, deadline_name, seconds)  # (the error raised is the one kept)
            error.__cause__ = exc
            self._break(error, name)
            raise error from exc
        except BaseException as exc:
            self._break(exc, name)
            if self._closing:
                self._finish_close()
                if isinstance(exc, Exception):
                    raise self._closed_meanwhile(name, "waited for its answer") from exc
            raise
        self._pending = None
        if self._closing:  # (closed while it waited: the answer is still given, the session stays closed)
            self._finish_close()
        else:
            self._state = SessionState.READY
        self.last_event = event
        return event

    def _closed_meanwhile(self, name: str, doing: str) -> CallOrderError:
        """The error of a send or receive that ended because :meth:`close` was called meanwhile (from another
        thread, or a signal handler); what it saw then is chained."""
        return CallOrderError(
            f"{name}: the session was closed (by another thread, or a signal handler) while it {doing}"
        )

    def _finish_close(self, holder: bool = False) -> None:
        """As a send or receive that :meth:`close` left the pipes to ends (one it interrupted in this very thread,
        from a signal handler, or one of another thread that it did not wait for any longer): close them now,
        unless a call of this session in another thread still uses them, or the vector session holding this one
        does (``holder``: it is that vector session, which has let go of them)."""
        if not self._channel_left_open:
            return
        with self._left_lock:
            if holder:
                self._fds_held = False
            if not self._channel_left_open or self._fds_held or self._other_thread_inside():
                return
            self._channel_left_open = False
        self._close_channel()

    def _close_channel(self) -> None:
        """Close the pipes, then the player watch's descriptors kept open with them (see :meth:`_keep_watch_fds`)."""
        try:
            self.channel.close()
        finally:
            kept, self._kept = self._kept, []
            for release in kept:
                try:
                    release()
                except OSError as exc:  # pragma: no cover - (EIO)
                    log.warning("player pid %s: closing a descriptor of its watch failed: %s", self._pid, exc)

    def _keep_watch_fds(self) -> None:
        """Before close() stops the player while the pipes stay open for a step (or the holding vector session) that
        may still poll them together with the player's watch: keep the watch's descriptors open under the numbers
        that step polls (its ``keep_open()``: the pidfd; a lease's log too; a managed display's epoll). The player's
        stop and ``on_close`` close duplicates instead; these are closed with the pipes (:meth:`_close_channel`)."""
        if self._kept:
            return
        seen: set[int] = set()
        for watch in (self.process, getattr(self.channel, "player", None)):
            if watch is None or id(watch) in seen:
                continue
            seen.add(id(watch))
            keep_open = getattr(type(watch), "keep_open", None)  # (a watch of another kind: nothing to keep)
            if keep_open is not None:
                self._kept.append(keep_open(watch))

    def _close_when_left(self) -> None:
        """In a thread of its own, once :meth:`close` has left the pipes to a step of another thread: close them
        when that step has left them, in case it ends without passing through :meth:`_finish_close` (it was
        past its last check). Polls the threads' stacks; ends as soon as the pipes are closed."""
        while self._channel_left_open and not sys.is_finalizing():
            if not self._other_thread_inside():
                self._finish_close()
                return
            time.sleep(0.05)

    def _channel_call_here(self) -> bool:
        """Whether this thread is inside a call of the channel made by this session's send or receive (so
        :meth:`close` runs in a signal handler that interrupted it, and the call resumes after it with the
        pipes' descriptors in hand)."""
        frames = []
        f = sys._getframe(1)
        while f is not None:
            if f.f_code in _CHANNEL_CALLERS and f.f_locals.get("self") is self:
                # (locals are read only of the frames above a send or receive of this session)
                return any(inner.f_locals.get("self") is self.channel for inner in frames)
            frames.append(f)
            f = f.f_back
        return False

    def _thread_inside(self) -> int | None:
        """The id of a thread other than this one inside this session's send or receive (a step that waits while
        :meth:`close` is called from a thread of its own, or while another thread's call is refused), else None.
        Read from the threads' stacks: at close, and for that error, only."""
        me = threading.get_ident()
        try:
            frames = sys._current_frames()
        except Exception:  # noqa: BLE001 - (at interpreter shutdown): close as if no step waited
            return None
        for ident, frame in frames.items():
            if ident == me:
                continue
            f = frame
            while f is not None:
                if f.f_code in _IO_CODES and f.f_locals.get("self") is self:
                    return ident
                f = f.f_back
        return None

    def _other_thread_inside(self) -> bool:
        """Whether a thread other than this one is inside this session's send or receive."""
        return self._thread_inside() is not None

    def _malformed_error(self, name: str, exc: ProtocolError) -> ProtocolError:
        """The error of an answer to ``name`` that could not be decoded: whose, and what now; ``offset`` and
        ``field_type`` as ``exc``'s (the decoder's, chained)."""
        # (a vector session holding this one says what to do with the whole)
        advice = "" if self._holder is not None else " The session is broken: close it and start a new one."
        return ProtocolError(
            f"{name}: the answer from the player (pid {self._pid}) is malformed: {exc.inline()}.{advice}",
            offset=exc.offset,
            field_type=exc.field_type,
        )

    def _timeout_error(
        self,
        name: str,
        exc: PlayerTimeout,
        deadline_name: str = "step_timeout",
        seconds: float | None = None,
        *,
        sending: bool = False,
    ) -> PlayerTimeout:
        if seconds is None:
            seconds = self._step_timeout
        alive = ""
        if self.process is not None:
            alive = " The player is still running (hung, or busy for longer than the deadline allows)."
        what = f"the player (pid {self._pid}) did not take the action" if sending else (
            f"no answer from the player (pid {self._pid})"
        )
        if deadline_name == "recv timeout":  # (recv()'s own timeout argument)
            within, advice = f"the recv timeout of {seconds:g} s", "give recv() a longer timeout"
        else:
            within, advice = f"{deadline_name} = {seconds:g} s", f"raise {deadline_name}"
        return PlayerTimeout(
            f"{name}: {what} within {within} "
            f"({exc}).{alive} The session is broken: close it and start a new one, or {advice}.",
            deadline=deadline_name,
            seconds=seconds,
        )

    def reset(self, scene: str | None = None, **init_params: Any) -> Event:
        """Load ``scene`` (the current one when None) and initialize the agent, as AI2-THOR's ``reset`` does.

        Sends ``{"action": "Reset", "sceneName": scene, "sequenceId": 0}`` (a player restarts its sequence
        at a reset; ``sceneName`` only when ``scene`` is given, else the player keeps its scene), then ``ChangeResolution`` if ``width``/``height`` are given and differ from the
        current screen, then ``Initialize`` with every initialization parameter given so far (they
        accumulate across resets, like AI2-THOR's). Returns the last event. Raises what :meth:`step`
        raises, and ``ValueError`` for a ``width``/``height`` outside 1..MAX_RESOLUTION (before anything is
        sent) or one the player refuses (its ``errorMessage`` quoted; the scene is reset, the size and the
        parameters are unchanged and Initialize is not sent; the session stays usable), ``ValueError`` when
        the player refuses the Reset itself (a scene it does not have: its ``errorMessage`` quoted; Initialize
        is not sent, the parameters are unchanged, the session stays usable), ``TypeError`` for a
        ``scene`` that is not a name (a procedural house, a dict: nothing is sent), and :class:`CallOrderError`
        while another thread is inside a call of this session (its steps hold the session until the last).
        """
        if not self._io_lock.acquire(False):
            raise self._busy("reset()")
        try:
            return self._reset(scene, init_params)
        finally:
            self._io_lock.release()

    def _reset(self, scene: str | None, init_params: dict[str, Any]) -> Event:
        if self._state is not SessionState.READY:
            self._check_ready("reset()")
        if scene is not None and not isinstance(scene, str):
            raise TypeError(
                f"reset: scene is a scene name or None, not {type(scene).__name__} (a procedural house is loaded "
                "with the CreateHouse action after a reset); nothing was sent"
            )
        params = dict(init_params)
        width = params.pop("width", None)
        height = params.pop("height", None)
        size: tuple[int, int] | None = None
        if width is not None or height is not None:
            w = width if width is not None else self.width or 0
            h = height if height is not None else self.height or 0
            try:
                size = check_frame_size(w, h)
            except ConfigError as exc:
                raise ArgumentError(f"reset: {exc.reason}; nothing was sent", key=exc.key) from None
        reset: dict[str, Any] = {"action": "Reset", "sequenceId": 0}
        if scene is not None:
            reset["sceneName"] = scene
        event = self._step_held(reset, {})
        if not event:
            raise ValueError(
                f"reset: the player refused the Reset{f' to scene {scene!r}' if scene is not None else ''}: "
                f"{event.error_message} (the session stays usable; Initialize was not sent and the parameters are "
                "unchanged)"
            )
        if size is not None and size != (self.width, self.height):
            event = self._step_held("ChangeResolution", {"x": size[0], "y": size[1]})
            if not event:
                raise ValueError(
                    f"reset: the player refused ChangeResolution to {size[0]} x {size[1]}: {event.error_message} "
                    f"(the screen stays {self.width} x {self.height})"
                )
            self._width, self._height = size
        self._init_params.update(params)
        return self._step_held("Initialize", self._init_params)

    # -- closing -----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the channel, stop an owned player (SIGTERM, grace, SIGKILL, reap), then run ``on_close``.

        Idempotent; never raises for a player that already died. Errors from ``on_close`` propagate. In a
        process forked from the one that made the session, it only marks this copy closed: the player, its
        pipes and its lease stay the parent's. Called from another thread while a step waits, it stops an
        owned player first (runs ``on_close`` first for one it does not own: a lease released uncleanly has the
        daemon stop it) and closes the pipes once that step has left them; the step raises
        :class:`CallOrderError`. A step still inside after :data:`CLOSE_WAITER_TIMEOUT` seconds keeps the pipes:
        close() logs a warning and returns, and they are closed as that step ends. Called from a
        signal handler that interrupted a step of this session in its thread, it stops the player and leaves
        the pipes to that step, which closes them as it ends. Called while another thread's close() is under
        way, it returns once that one has finished. For a slot's session of a :class:`~renderd.VectorSession` with a
        call under way (in any thread), it stops the player and leaves the pipes, and the player's pidfd, to that
        call, which closes them as it lets go of them (see ``VectorSession._hold_fds``).
        """
        if os.getpid() != self._owner_pid:
            # A copy of the session inherited over fork: the player, its pipes and its lease belong to the
            # process that made it, which still uses them. Only this copy is closed.
            self._state = SessionState.CLOSED
            self._pending = None
            return
        claim = (threading.get_ident(), object())
        if self._state is SessionState.CLOSED or self._close_claim.setdefault("close", claim) is not claim:
            # Another close() was first (its claim is this check and its mark in one step, with its thread: two
            # threads' calls at once cannot both go on). One of another thread under way (a watchdog's, and this
            # thread's `with` exit), however far it has got: return once it has stopped the player and released the
            # pipes, as a close() does. (Not in the thread running it, a signal handler there: that would wait for
            # itself; nor once the interpreter is exiting: a daemon thread running it then never runs again.)
            first = self._close_claim.get("close")
            if first is not None and first[0] != claim[0]:
                while not self._closed.wait(0.1) and not sys.is_finalizing():
                    pass
            return
        self._closer = claim[0]
        self._closing = True
        error = self._error
        if error is None and self._state is SessionState.PENDING:
            error = CallOrderError("the session was closed with an answer pending (the stream is half-read)")
        # Closed before it looks for a step of another thread: a step beginning from now on is refused by its own
        # check, and one that passed it already is inside step() (or send(), reset()...), where the look finds it.
        # Marked closed after the look, a step beginning between the two went on into the channel under pipes that
        # close() then closed, having seen no step: it wrote into whatever file had taken client.pipe's number.
        self._state = SessionState.CLOSED
        inside = self._other_thread_inside()
        waiter = (self.process is not None or self._on_close is not None) and inside
        here = self._channel_call_here()
        # The pipes are left to a step of another thread: one that did not end in time, or (nothing here stops the
        # player: no process, no on_close) one whose wait ends only at its deadline.
        left = inside and not waiter
        if error is None and (inside or here):  # (a send may have written part of its action)
            error = CallOrderError("the session was closed while a step used its pipes")
        self._pending = None
        holder = self._holder() if self._holder is not None else None
        if inside or here or holder is not None:
            # Something may poll the player's watch with the pipes after the player's stop (a step of another thread,
            # the one a signal handler interrupted, or the vector session holding this one): the watch's descriptors
            # (a pidfd the player's stop closes, a lease's or a managed display's that on_close closes) stay open
            # under their numbers until the pipes are closed.
            self._keep_watch_fds()
        # A vector session with a call under way (in any thread) may poll, read or write the pipes between its check
        # that this session is open and its next use of them: it takes them over, and closes them once it has let go
        # of them (this returns without waiting for it). With none under way, it has stopped polling them now.
        held = holder is not None and holder._hold_fds(self)
        try:
            if waiter and not held:
                # Another thread's step waits on the pipes (close() called from a thread of its own). Closing
                # them under it would have it poll, read and write descriptors that may by then belong to
                # other files (the socket that releases a lease takes the number server.pipe freed). The
                # player's exit ends its wait: stop the player first (an owned one here; a leased one is
                # stopped by the daemon once on_close has released its lease uncleanly), then close the pipes
                # once that thread has left (it raises CallOrderError, saying the session was closed).
                try:
                    if self.process is not None:
                        self.process.stop(self.stop_grace)
                    else:
                        self._run_on_close(error)
                finally:
                    deadline = time.monotonic() + CLOSE_WAITER_TIMEOUT
                    while self._other_thread_inside():
                        if time.monotonic() > deadline:
                            # Closing the pipes now would leave that step polling, reading or writing descriptor
                            # numbers the next file opened in this process takes. They are left to it.
                            log.warning(
                                "player pid %s: a step of another thread still uses the session's pipes %.3g s "
                                "after close() stopped the player; they are closed as that step ends",
                                self._pid, CLOSE_WAITER_TIMEOUT,
                            )
                            left = True
                            break
                        time.sleep(0.005)
        finally:
            try:
                if held:
                    pass  # (the holding vector session closes them: _finish_close(holder=True))
                elif here or left:
                    # A signal handler in this thread, which was inside a send or receive: that call resumes
                    # after the handler with the pipes' descriptors in hand. Or a step of another thread that
                    # has not left them. They are closed as it leaves (_finish_close); the player, stopped
                    # here, ends its wait.
                    self._channel_left_open = True
                    if left:
                        self._finish_close()  # (that step may have left them meanwhile)
                        if self._channel_left_open:
                            threading.Thread(target=self._close_when_left, name="renderd-close-pipes",
                                             daemon=True).start()
                else:
                    self._close_channel()
            finally:
                try:
                    if self.process is not None:
                        self.process.stop(self.stop_grace)
                finally:
                    self._state = SessionState.CLOSED  # (a step that waited meanwhile may have taken its answer)
                    self._pending = None
                    try:
                        self._run_on_close(error)
                    finally:
                        self._closed.set()

    def _run_on_close(self, error: BaseException | None) -> None:
        """Run ``on_close(error)`` unless it has run already (it runs once, whoever calls this first)."""
        with self._on_close_lock:
            on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close(error)

    def _stop_player(self, error: BaseException) -> None:
        """For the holding vector session, closing while one of its calls still runs in another thread: stop the owned
        player (SIGTERM, grace, SIGKILL, reap), or run ``on_close(error)`` (a lease released uncleanly: the daemon
        stops it), without closing the pipes. This session's own close() later finds the player stopped, and runs
        ``on_close`` only if it has not run."""
        if self.process is not None:
            self.process.stop(self.stop_grace)
        else:
            self._run_on_close(error)

    def _set_holder(self, holder: Any) -> None:
        """Make ``holder`` (a :class:`~renderd.VectorSession`, held weakly) the one whose calls poll, read and write this
        session's descriptors (see :meth:`close`), or with None no longer."""
        self._holder = weakref.ref(holder) if holder is not None else None

    def _hand_over(self) -> bool:
        """For the holding vector session's :meth:`_hold_fds`, under its lock: leave the pipes (and the kept
        descriptors) open, for it to close as it lets go of them."""
        with self._left_lock:
            self._channel_left_open = True
            self._fds_held = True
        return True

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        # A session dropped without close(): do not leave a player running, and say so (a ResourceWarning, as an
        # unclosed file or subprocess.Popen gives), unless a vector session holds it (it warns for its slots) or it is
        # a copy inherited over fork (its player is the parent's). No logging: this may run at interpreter shutdown.
        if getattr(self, "_state", SessionState.CLOSED) is SessionState.CLOSED:
            return
        try:
            if self._holder is None and self._owner_pid == os.getpid():
                _warn(f"unclosed renderd session {self._describe_player()}; close it (or use `with`)",
                      ResourceWarning, stacklevel=2, source=self)
        finally:
            try:
                self.close()
            except Exception:
                pass

    def _describe_player(self) -> str:
        """Which player this session stands for, for the warning of :meth:`__del__`: pid and executable."""
        process = self.process
        if process is not None:
            return f"(player pid {self._pid}, {getattr(process, 'executable', '?')})"
        if isinstance(getattr(self.channel, "player", None), LeasedPlayer):
            return f"(leased player pid {self._pid})"
        if self._pid is None:
            return f"(channel {type(self.channel).__name__})"
        return f"(player pid {self._pid})"

    def __repr__(self) -> str:
        return f"<renderd.Session pid={self._pid} {self._state.value} seq={self._sequence_id}>"

    def __reduce_ex__(self, protocol: Any) -> Any:
        # (what copy.copy, copy.deepcopy and pickle ask for) A copy would share this session's pipes and player,
        # and the garbage collection of a shallow copy would close them under this session.
        raise TypeError(
            f"a renderd Session (player pid {self._pid}) cannot be copied or pickled: it stands for one player's "
            "pipes and process, which only this object may use. Pass what launch() or connect() was given "
            "instead, and make a session where it is needed"
        )


#: The methods that call the channel, and close it if :meth:`Session.close` interrupted them in their thread.
_CHANNEL_CALLERS = frozenset((Session._send.__code__, Session._receive.__code__))
#: The code of the methods a step waits in: a thread inside one of them is using the session's pipes.
_IO_CODES = frozenset(
    method.__code__
    for method in (Session.step, Session.send, Session._send, Session.recv, Session._receive, Session.wait_ready,
                   Session.reset)
)


# -- platforms ------------------------------------------------------------------------------------------


@dataclass
class _PlatformChoice:
    """What the platform layer decided for one player: extra environment, extra arguments, cleanup."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    headless: bool = False
    executable: str | None = None
    release: Callable[[], None] | None = None
    display: Any = None  # the managed X display (Xvfb) the platform started, if any


def _resolve_platform(
    platform: str,
    *,
    x_display: str | None,
    width: int,
    height: int,
    executable: str,
    env: Mapping[str, str] | None,
) -> _PlatformChoice:
    """Ask :func:`renderd.platforms.select` for a platform; the one place launch() talks to it.

    The selection's environment (``RENDERD_PLATFORM``, ``DISPLAY`` ...) and arguments (``-batchmode
    -nographics`` when headless, a GPU index) are those of instance 0. Without :mod:`renderd.platforms`,
    ``auto`` runs the player as it is (no display set up) and any other platform is a
    :class:`PlatformError`.
    """
    if x_display is not None and x_display != "auto" and platform not in ("auto", "Linux64"):
        # (as the daemon's configuration refuses it: the display would be ignored without a word)
        raise ConfigError(
            f"x_display {x_display!r} is an X display for Linux64, and platform {platform!r} uses none (it would "
            "be ignored): pass platform='Linux64' (or 'auto'), or leave x_display out",
            key="x_display",
        )
    try:
        platforms = importlib.import_module("renderd.platforms")
        select = platforms.select
        request_type = platforms.PlatformRequest
    except (ImportError, AttributeError):
        if platform == "auto":
            return _PlatformChoice(name="auto")
        raise PlatformError(
            f"platform {platform!r} needs renderd.platforms, which is not available in this installation; "
            "use platform='auto'"
        ) from None
    request = request_type(
        platform=platform,
        width=width,
        height=height,
        x_display=x_display,
        executable=executable,
        env=dict(env or {}),
    )
    try:
        selection = select(request)
    except PlatformError as exc:
        # The reference player renders with numpy on any machine: as the daemon does for it, ``auto`` with no
        # valid platform runs it without one (3-byte RGB frames), saying why. Any other player needs a platform.
        if platform != "auto" or os.path.basename(executable) != REFERENCE_PLAYER:
            raise
        log.warning("no platform auto considered is valid here, so the reference player runs without one (it renders "
                    "with numpy anyway). %s", exc)
        return _PlatformChoice(name="none")
    try:
        sel_env, sel_args = selection.for_instance(0)
        return _PlatformChoice(
            name=str(selection.name),
            env={str(k): str(v) for k, v in sel_env.items()},
            args=[str(a) for a in sel_args],
            headless=bool(selection.headless),
            executable=selection.executable,
            release=selection.release,
            display=getattr(selection, "display", None),
        )
    except BaseException:
        selection.release()
        raise


# -- launch ----------------------------------------------------------------------------------------------


def _run_all(callbacks: Sequence[Callable[[], None]]) -> None:
    """Run every cleanup even if one fails; re-raise the first failure."""
    first: BaseException | None = None
    for cb in callbacks:
        try:
            cb()
        except BaseException as exc:  # noqa: BLE001 - cleanup must go on
            if first is None:
                first = exc
            else:
                log.warning("cleanup step failed too: %s", exc)
    if first is not None:
        raise first


def _has_no_bytes(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (from JSON's ``"\\ud800"``, or text decoded with
    ``surrogatepass``): it has no bytes, so no command line, environment or file name can hold it.
    (Surrogate-escaped undecodable bytes, as ``os.fsdecode`` makes them, do have their bytes.)"""
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        return True
    return False


def _checked_args_env(
    args: Sequence[Any] | None, env: Mapping[Any, Any] | None
) -> tuple[list[str], dict[str, str] | None]:
    """``args`` and ``env`` as the strings a process gets; :class:`ConfigError` (``key`` ``args`` or ``env``)
    for what no process can get (a NUL byte, ``=`` in a variable's name, a lone surrogate) or what is surely
    a mistake (a variable set to None, bytes, a bool or a container). Numbers (numpy's too) and paths are
    written out."""
    if args is None:  # (as env=None: nothing added)
        args = ()
    if isinstance(args, (str, bytes, bytearray, os.PathLike)):  # (iterating it would pass each character)
        raise ConfigError(f"is a sequence of arguments, not one {type(args).__name__}: args=[{args!r}]", key="args")
    checked_args = []
    for a in args:
        if isinstance(a, os.PathLike):
            a = os.fspath(a)
        if isinstance(a, bool) or not isinstance(a, (str, numbers.Real)):  # (numpy's bool is no Real)
            raise ConfigError(f"argument {a!r} is not a string (or a number, or a path)", key="args")
        text = str(a)
        if "\0" in text:
            raise ConfigError(f"argument {text!r} holds a NUL byte, which no command line can", key="args")
        if _has_no_bytes(text):
            raise ConfigError(f"argument {text!r} holds a lone surrogate, which has no bytes to pass", key="args")
        checked_args.append(text)
    if env is None:
        return checked_args, None
    if not isinstance(env, Mapping):
        raise ConfigError(
            f"is a mapping of variable names to values (a dict), not a {type(env).__name__}: {env!r}", key="env"
        )
    checked_env: dict[str, str] = {}
    for name, value in env.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise ConfigError(f"environment variable name {name!r} is not a non-empty string without '=' or NUL",
                              key="env")
        reason = endpoint_variable_error(name)
        if reason is not None:
            raise ConfigError(reason, key="env")
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if isinstance(value, bool) or not isinstance(value, (str, numbers.Real)):  # (numpy's bool is no Real)
            raise ConfigError(f"environment variable {name} is set to {value!r}; give it a string", key="env")
        text = str(value)
        if "\0" in text:
            raise ConfigError(f"environment variable {name} holds a NUL byte, which no environment can", key="env")
        if _has_no_bytes(name) or _has_no_bytes(text):
            raise ConfigError(
                f"environment variable {name!r} = {text!r} holds a lone surrogate, which has no bytes to pass",
                key="env",
            )
        checked_env[name] = text
    return checked_args, checked_env


def launch_player(
    channel: Channel,
    endpoint_env: Mapping[str, str],
    *,
    executable: str | os.PathLike[str] | Sequence[str] = "renderd-player",
    width: int = 300,
    height: int = 300,
    platform: str = "auto",
    x_display: str | None = None,
    args: Sequence[str] | None = (),
    env: Mapping[str, str] | None = None,
    start_timeout: float = DEFAULT_START_TIMEOUT,
    step_timeout: float = DEFAULT_STEP_TIMEOUT,
    log_path: str | os.PathLike[str] | None = None,
    keep_log: bool = True,
    quality: str | int = DEFAULT_QUALITY,
    cleanup: Sequence[Callable[[], None]] = (),
) -> Session:
    """Spawn a player that talks over ``channel`` and wait for its first frame; the transport-neutral
    half of :func:`launch`, for transports that have made their channel already.

    ``endpoint_env`` holds the variables that tell the player its endpoint (``AI2THOR_SERVER_TYPE`` and
    the pipe paths, or host, port and token). If the channel has an ``attach(player)`` method it is given
    the player process as soon as it exists. ``cleanup`` callables run after the player has stopped, when
    the session closes (or at once if the launch fails). Raises what :func:`launch` raises.
    """
    choice: _PlatformChoice | None = None
    process: PlayerProcess | None = None
    display_watch: PlayerOnDisplay | None = None
    session: Session | None = None
    try:
        width, height = check_frame_size(width, height)  # before the platform, which may start an Xvfb that size
        args, env = _checked_args_env(args, env)
        if env is not None and env.get("DISPLAY") and x_display not in (None, "auto"):
            # Either names the display (as in a configuration file): two would leave one of them unused. (An
            # empty DISPLAY names none: it only hides this process's display from the player.)
            raise ConfigError(
                f"DISPLAY={env['DISPLAY']!r} and x_display={x_display!r} both name the display; give one", key="env"
            )
        if log_path is not None:  # absolute: the crash report still finds it after a chdir
            if not os.fspath(log_path):  # (made absolute, it would name the working directory)
                raise ConfigError(
                    "is empty: give the path of a file, or None for a log in the private pipe directory", key="log_path"
                )
            try:
                log_path = os.path.abspath(os.fspath(log_path))
            except OSError as exc:  # a relative path, and the working directory was removed
                raise ConfigError(
                    f"{os.fspath(log_path)!r} is relative, and the working directory cannot be read "
                    f"({exc.strerror}); give an absolute path", key="log_path"
                ) from exc
            if _has_no_bytes(log_path):
                raise ConfigError(f"{log_path!r} holds a lone surrogate, which no file name can", key="log_path")
        program = resolve_executable(executable)  # before the platform: it may start an Xvfb
        choice = _resolve_platform(
            platform, x_display=x_display, width=width, height=height, executable=program[0], env=env
        )
        if choice.executable is not None:  # the platform resolved the program (a macOS .app bundle)
            program = [choice.executable, *program[1:]]
        # The platform's arguments include -batchmode -nographics when it is headless.
        argv = player_argv(
            program,
            width=width,
            height=height,
            quality=quality,
            extra_args=[*choice.args, *args],
            log_path=log_path,
        )
        full_env = dict(os.environ)
        for name in NOT_INHERITED:
            full_env.pop(name, None)
        full_env.update(choice.env)
        full_env["AI2THOR_SERVER_SIDE_SCREENSHOT"] = "False" if choice.headless else "True"
        full_env.update(endpoint_env)
        if env:
            full_env.update(env)
            # The screen the platform chose wins over a DISPLAY in ``env``: the selection was made with it
            # (a DISPLAY named there is the display probed), so DISPLAY=:N.s is this player's. Every other
            # variable of ``env`` overrides the platform's (RENDERD_PLATFORM included).
            if "DISPLAY" in choice.env:
                full_env["DISPLAY"] = choice.env["DISPLAY"]
        # (the log kept open for reading: a crash quotes it even once a tmp cleaner removed it while the player ran)
        process = PlayerProcess.spawn(argv, full_env, log_path, show_log_path=keep_log, keep_log_open=True)
        watch: PlayerProcess | PlayerOnDisplay = process
        if choice.display is not None:  # a managed Xvfb: its death is the player's end too
            watch = display_watch = PlayerOnDisplay(process, choice.display)
        attach = getattr(channel, "attach", None)
        if attach is not None:
            attach(watch)
        release = choice.release
        callbacks = list(cleanup) + ([display_watch.close] if display_watch is not None else [])
        callbacks += [release] if release is not None else []
        session = Session(
            channel,
            process=process,
            on_close=lambda _error: _run_all(callbacks),
            width=width,
            height=height,
            step_timeout=step_timeout,
        )
        try:
            session.wait_ready(start_timeout, "start_timeout")
        except PlayerTimeout as exc:
            raise _launch_timeout(exc, process, start_timeout) from None
        except ProtocolError as exc:
            raise _launch_malformed(exc, process) from exc
        return session
    except BaseException:
        if session is not None:
            try:
                session.close()
            except Exception as exc:
                log.warning("cleanup after a failed launch failed: %s", exc)
        else:
            steps: list[Callable[[], None]] = [channel.close]
            if process is not None:
                steps.append(process.stop)
            if display_watch is not None:
                steps.append(display_watch.close)
            steps += list(cleanup)
            if choice is not None and choice.release is not None:
                steps.append(choice.release)
            try:
                _run_all(steps)
            except Exception as exc:
                log.warning("cleanup after a failed launch failed: %s", exc)
        raise


def _launch_timeout(exc: PlayerTimeout, process: PlayerProcess | None, start_timeout: float) -> PlayerTimeout:
    """The error of a launch whose player sent no first frame in time. The session's own error tells a
    caller holding a session to close it; launch returns none and stops the player itself, and the log (a
    build still loading, or stuck) says more than the pipes do, so it is quoted as a crash's is."""
    inner = exc.__cause__ if isinstance(exc.__cause__, PlayerTimeout) else exc
    pid = f" (pid {process.pid})" if process is not None else ""
    log = _launch_log(process)
    return PlayerTimeout(
        f"launch: no first frame from the player{pid} within start_timeout = {start_timeout:g} s ({inner}). The "
        f"player was stopped. Raise start_timeout if it needs longer to load{log}",
        deadline="start_timeout",
        seconds=start_timeout,
    )


def _launch_log(process: PlayerProcess | None) -> str:
    """The end of a failed launch's player log, quoted, as ``"; its log ends: ..."`` (or that it wrote none)."""
    tail = process.log_tail() if process is not None else ""
    if tail.strip():
        return "; its log ends:\n" + "\n".join("  | " + line for line in tail.rstrip("\n").splitlines())
    return "; it wrote nothing to its log"


def _launch_malformed(exc: ProtocolError, process: PlayerProcess | None) -> ProtocolError:
    """The error of a launch whose player's first message could not be decoded: which player, that it was
    its first message, that it was stopped, and its log (which a build that speaks another protocol, or
    writes to the pipe what belongs in its log, shows); ``offset`` and ``field_type`` as ``exc``'s."""
    pid = f" (pid {process.pid})" if process is not None else ""
    return ProtocolError(
        f"launch: the first message from the player{pid} is malformed: {exc.inline()}. The player was stopped. "
        "A build that sends anything but AI2-THOR's messages (another protocol version, or its own output where "
        f"they go) does this: check the build{_launch_log(process)}",
        offset=exc.offset,
        field_type=exc.field_type,
    )


def launch(
    executable: str | os.PathLike[str] | Sequence[str] = "renderd-player",
    *,
    width: int = 300,
    height: int = 300,
    platform: str = "auto",
    x_display: str | None = None,
    transport: str = "fifo",
    args: Sequence[str] | None = (),
    env: Mapping[str, str] | None = None,
    start_timeout: float = DEFAULT_START_TIMEOUT,
    step_timeout: float = DEFAULT_STEP_TIMEOUT,
    log_path: str | os.PathLike[str] | None = None,
    quality: str | int = DEFAULT_QUALITY,
    pipe_size: int | None = None,
) -> Session:
    """Spawn and own one player; return a :class:`Session` once its first frame has arrived.

    ``executable``: a path, a name (looked up next to this Python, then on ``PATH``) or an argv list.
    ``platform``/``x_display``: see :mod:`renderd.platforms`. ``args``: extra player arguments after the
    Unity flags (None: none). ``env``: variables added to this process's environment for the player (they override
    everything, including the ``AI2THOR_*`` endpoint). ``log_path``: where the player's log (its
    ``-logFile`` and its stdout/stderr) goes and stays; by default a file in the private pipe directory,
    removed at close (a :class:`PlayerCrashed` quotes its last lines). ``pipe_size``: buffer of the
    player -> client pipe, bytes greater than 0 (default 1 MiB, capped by the kernel); the FIFO transport's
    only (with ``transport="http"`` it is a :class:`ConfigError`).

    ``start_timeout`` and ``step_timeout`` are finite numbers of seconds, greater than 0 and at most
    :data:`renderd.config.MAX_SECONDS` (7 days).

    Raises :class:`ConfigError` (unknown executable, transport, quality, bad size; a bad timeout raises
    :class:`renderd.config.ArgumentError`, which is a ConfigError naming the argument and a ValueError),
    :class:`PlatformError` (no platform can run it), :class:`PlayerCrashed` (the player exited before its
    first frame: exit code or signal, and its log), :class:`PlayerTimeout` (no first frame within
    ``start_timeout``), :class:`ProtocolError` (a malformed first frame: the message names the player and
    quotes its log). Nothing is left behind when it
    raises.
    """
    start_timeout = check_seconds(start_timeout, "start_timeout")
    step_timeout = check_seconds(step_timeout, "step_timeout")
    if pipe_size is not None and (isinstance(pipe_size, bool) or not isinstance(pipe_size, numbers.Integral)
                                  or pipe_size <= 0):
        raise ConfigError(f"must be a number of bytes greater than 0 (or None: 1 MiB), got {pipe_size!r}", key="pipe_size")
    # The player's size, platform, arguments, deadlines and quality: the same whichever transport carries it.
    player: dict[str, Any] = {
        "width": width, "height": height, "platform": platform, "x_display": x_display, "args": args, "env": env,
        "start_timeout": start_timeout, "step_timeout": step_timeout, "quality": quality,
    }
    if transport == "http":
        if pipe_size is not None:  # (it would be ignored)
            raise ConfigError(
                f"{pipe_size} is the buffer of the player's named pipe, and transport='http' uses none (its player "
                "posts its frames over HTTP): leave pipe_size out, or use transport='fifo'",
                key="pipe_size",
            )
        try:
            http = importlib.import_module("renderd.transport.http")
        except ImportError as exc:
            raise ConfigError(
                "transport='http' needs renderd.transport.http, which this installation does not have",
                key="transport",
            ) from exc
        return http.launch(executable, log_path=log_path, **player)
    if transport != "fifo":
        raise ConfigError(f"unknown transport {transport!r}; expected one of {', '.join(TRANSPORTS)}", key="transport")

    # Imported here so that `import renderd.client` stays cheap for HTTP-only users.
    from renderd.transport.fifo import DEFAULT_PIPE_SIZE, FifoChannel, FifoPair

    pair = FifoPair.create()
    channel: FifoChannel | None = None
    try:  # (until launch_player owns them: an interruption here, Ctrl-C, leaves no pipe behind)
        channel = FifoChannel(
            pair.server_path, pair.client_path, pipe_size=int(pipe_size) if pipe_size is not None else DEFAULT_PIPE_SIZE
        )
        keep_log = log_path is not None
        if log_path is None:
            log_path = os.path.join(pair.directory, DEFAULT_LOG_NAME)
        endpoint = player_env(
            {}, server_type="FIFO", server_pipe=pair.server_path, client_pipe=pair.client_path, screenshot=True
        )
        endpoint.pop("AI2THOR_SERVER_SIDE_SCREENSHOT")  # decided by the platform in launch_player
    except BaseException:
        try:
            if channel is not None:
                channel.close()
        finally:
            pair.remove()
        raise
    return launch_player(
        channel, endpoint, executable=executable, log_path=log_path, keep_log=keep_log, cleanup=[pair.remove], **player
    )


def connect(
    environment: str = "demo",
    *,
    socket: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
    step_timeout: float | None = None,
) -> Session:
    """Lease a ready player of ``environment`` from the renderd daemon; see :mod:`renderd.daemon.client`.

    The socket is ``socket``, else ``$RENDERD_SOCKET``, else the default path. ``timeout``: seconds to wait
    for a ready player (default 30 s); ``step_timeout``: per step (default: the
    environment's). Raises
    :class:`LeaseError` when no lease can be had (or the daemon client is not installed),
    :class:`RenderdError` when the daemon cannot be reached or has no such environment, and what a
    :class:`Session` raises afterwards.
    """
    try:
        daemon_client = importlib.import_module("renderd.daemon.client")
    except ImportError as exc:
        raise LeaseError("the daemon client (renderd.daemon.client) is not installed") from exc
    kwargs: dict[str, Any] = {"step_timeout": step_timeout}
    if timeout is not None:
        kwargs["timeout"] = timeout
    return daemon_client.connect(environment, socket=socket, **kwargs)
