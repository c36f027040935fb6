"""Named pipes between a client and a player: the pair of FIFOs, and the client's end of them.

::

    client                                    player
    ------                                    ------
    FifoPair.create()  -> <private dir 0700>/server.pipe, client.pipe (0600)
    FifoChannel(...)   opens server.pipe O_RDONLY|O_NONBLOCK   (never blocks, even with no writer yet)
    spawn the player, channel.attach(player)
                                              opens server.pipe for writing, sends its first message
    recv(deadline)     poll([server.pipe, pidfd]) -> readv into the decoder's buffers
                                              opens client.pipe for reading (blocks until we open it)
    send(deadline)     opens client.pipe O_WRONLY|O_NONBLOCK (ENXIO until the player has it open:
                       retried while watching the pidfd), then one writev per action

No call blocks without a deadline. Every wait polls the pipe together with the player's pidfd, so a player
that exits (before opening its pipe, or mid-message) is reported at once as
:class:`~renderd.errors.PlayerCrashed` with its exit status, never as a timeout. End of file on
``server.pipe`` is a crash too, and so is a player that closes ``client.pipe`` while its answer is awaited
(after :data:`EOF_CLASSIFY_TIMEOUT` for an answer already on its way). Reads go straight into the buffers
the decoder offers (:meth:`renderd.protocol.Decoder.get_buffers`), so an image body lands in the numpy
array that the event will hold. A note on Linux FIFOs: a reader opened with O_NONBLOCK before any writer sees ``read() == 0``
but *no* POLLHUP until a writer has come and gone, which is why every read here follows a poll.
"""

from __future__ import annotations

import errno
import fcntl
import math
import os
import select
import shutil
import signal
import stat
import tempfile
import time
from typing import Any, Sequence

from renderd.errors import PlayerCrashed, PlayerTimeout, ProtocolError, RenderdError, os_error_message
from renderd.process import PID_POLL_INTERVAL, PlayerWatch, _descendants, exit_safe_logger
from renderd.protocol import (
    DEFAULT_MAX_BODY_SIZE,
    NEED_DATA,
    Decoder,
    Message,
    byte_views,
    drop_written,
    message_nbytes,
)

__all__ = [
    "SERVER_PIPE_NAME",
    "CLIENT_PIPE_NAME",
    "DEFAULT_PIPE_SIZE",
    "EOF_CLASSIFY_TIMEOUT",
    "FifoPair",
    "FifoChannel",
    "pipe_max_size",
]

log = exit_safe_logger(__name__)  # (its code runs at interpreter exit too: a session's __del__)

SERVER_PIPE_NAME = "server.pipe"
CLIENT_PIPE_NAME = "client.pipe"

#: Pipe buffer requested for ``server.pipe``. A 1 MiB pipe moves frames 2-3x faster than the 64 KiB
#: default on Linux; the kernel caps it at ``/proc/sys/fs/pipe-max-size`` for unprivileged users, and
#: refuses (EPERM: warned about once, the pipe kept as it is) once a user's pipes exceed
#: ``pipe-user-pages-soft``, after 64 such pipes by default; the kernel then gives new pipes 8 KiB.
DEFAULT_PIPE_SIZE = 1 << 20
PIPE_MAX_SIZE_PATH = "/proc/sys/fs/pipe-max-size"
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)

#: After end of file on ``server.pipe``, how long to wait for the player to exit so the error can give
#: its exit code or signal (a player that closed its pipe but keeps running is reported as such).
EOF_CLASSIFY_TIMEOUT = 1.0
#: First and longest pause between attempts to open ``client.pipe`` while the player has not opened it.
OPEN_RETRY_FIRST = 0.001
OPEN_RETRY_MAX = 0.05

_POLLIN = select.POLLIN
_POLLOUT = select.POLLOUT
_READ_EVENTS = select.POLLIN | select.POLLHUP | select.POLLERR
_WRITE_EVENTS = select.POLLOUT | select.POLLERR | select.POLLHUP


def pipe_max_size() -> int:
    """The largest pipe buffer an unprivileged process may ask for (``/proc/sys/fs/pipe-max-size``)."""
    try:
        with open(PIPE_MAX_SIZE_PATH) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return DEFAULT_PIPE_SIZE


def _set_pipe_size(fd: int, wanted: int) -> int:
    """Grow the pipe behind ``fd`` to ``wanted`` bytes if allowed; returns the size it has."""
    size = min(wanted, pipe_max_size())
    try:
        current = fcntl.fcntl(fd, F_GETPIPE_SZ)
    except OSError:
        return 0
    if size > current:
        try:
            return fcntl.fcntl(fd, F_SETPIPE_SZ, size)
        except PermissionError:  # over this user's pipe budget
            _warn_pipe_budget(size, current)
        except OSError as exc:  # EBUSY: cannot shrink. Keep it.
            log.debug("could not grow pipe to %d bytes (%s); keeping %d", size, exc, current)
    return current


PIPE_USER_PAGES_SOFT_PATH = "/proc/sys/fs/pipe-user-pages-soft"
_pipe_budget_warned = False


def _warn_pipe_budget(size: int, current: int) -> None:
    """Say (once per process) that pipes are no longer grown: this user's pipe buffers are over
    ``fs.pipe-user-pages-soft``, and the kernel gives each new pipe of the user 2 pages only."""
    global _pipe_budget_warned
    if _pipe_budget_warned:
        log.debug("could not grow pipe to %d bytes (over the pipe budget); keeping %d", size, current)
        return
    _pipe_budget_warned = True
    try:
        with open(PIPE_USER_PAGES_SOFT_PATH) as f:
            pages = f"{int(f.read().strip())} pages"
    except (OSError, ValueError):
        pages = "its limit"
    log.warning(
        "cannot grow a player's pipe to %d bytes: this user's pipe buffers are over the kernel's budget for an "
        "unprivileged user, %s (%s), so the pipe keeps %d bytes, as every new pipe of the user does: frames "
        "move slower. Raise the budget (sysctl fs.pipe-user-pages-soft=N), run fewer players as this user, or "
        "ask for less with pipe_size (said once; further pipes are not grown either)",
        size, pages, PIPE_USER_PAGES_SOFT_PATH, current,
    )


#: The longest single poll, in milliseconds (a C int). Callers check their timeouts
#: (:data:`renderd.config.MAX_SECONDS`); this only keeps a huge one from overflowing ``poll``.
MAX_POLL_MS = 2**31 - 1


def _ms(seconds: float) -> int:
    if not seconds > 0:  # also NaN
        return 0
    if seconds >= MAX_POLL_MS / 1000:
        return MAX_POLL_MS
    return math.ceil(seconds * 1000)


_SIGPIPE = signal.SIGPIPE
# signal.getsignal turns the disposition into an enum member (0.25 us a call); its C function returns 0 for
# SIG_DFL at once (0.014 us), which matters on a path taken at every step.
try:
    from _signal import getsignal as _disposition
except ImportError:  # pragma: no cover - (an interpreter without CPython's _signal)
    _disposition = signal.getsignal
_SIG_DFL = int(signal.SIG_DFL)


def _writev(fd: int, buffers: Sequence[Any]) -> int:
    """``os.writev`` that never lets the kernel kill this process with SIGPIPE: a write to ``client.pipe``
    after the player closed it (it exited between two steps) is a BrokenPipeError, which the caller reports
    as a crash. Python ignores SIGPIPE, so that is the case unless the program put it back to its default
    (``signal.signal(SIGPIPE, SIG_DFL)``, common in command-line tools); then SIGPIPE is blocked in this
    thread for the write, and the one the write raised is taken before it is unblocked."""
    if _disposition(_SIGPIPE) != _SIG_DFL:
        return os.writev(fd, buffers)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, (_SIGPIPE,))
    if _SIGPIPE in old:  # (blocked already: nothing to undo)
        return os.writev(fd, buffers)
    try:
        return os.writev(fd, buffers)
    except BrokenPipeError:
        signal.sigtimedwait((_SIGPIPE,), 0)  # (the write's SIGPIPE, pending for this thread)
        raise
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _same_file(pid: int, fd: str, st: os.stat_result) -> bool:
    """Whether descriptor ``fd`` of process ``pid`` is the file ``st`` describes, told from /proc alone (its inode
    number in /proc/PID/fdinfo, its mount's device in /proc/PID/mountinfo), never by asking the file's filesystem:
    for a descriptor opened through another path than renderd's (a bind mount in the player's own mount namespace).
    False when that cannot be told."""
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as f:
            info = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        if int(info["ino"]) != st.st_ino:
            return False
        mount = info["mnt_id"].strip()
        with open(f"/proc/{pid}/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split(" ", 3)
                if fields[0] == mount:
                    major, minor = fields[2].split(":")
                    return os.makedev(int(major), int(minor)) == st.st_dev
    except (OSError, KeyError, ValueError, IndexError):
        pass
    return False


def _awaited(deadline_name: str) -> str:
    """What a wait named ``deadline_name`` is for, in a crash's message: no action precedes a first frame."""
    return "its first frame" if deadline_name == "start_timeout" else "its answer"


def _kept(views: list[memoryview]) -> list[memoryview]:
    """``views`` to keep past a send: a copy of any buffer the caller might reuse (encode_action's are bytes)."""
    return [v if isinstance(v.obj, bytes) else memoryview(bytes(v)) for v in views]


class FifoPair:
    """``server.pipe`` and ``client.pipe`` in a private directory (0700) of their own.

    :meth:`create` makes them; :meth:`remove` unlinks both and removes the directory (idempotent,
    meant for ``finally``). Also a context manager.
    """

    def __init__(self, directory: str, *, owned: bool = True) -> None:
        self.directory = directory
        self.server_path = os.path.join(directory, SERVER_PIPE_NAME)
        self.client_path = os.path.join(directory, CLIENT_PIPE_NAME)
        self._owned = owned
        self._removed = False

    @classmethod
    def create(
        cls, directory: str | os.PathLike[str] | None = None, *, prefix: str = "renderd-", group: int | None = None
    ) -> FifoPair:
        """Make a private directory under ``directory`` (the system temp dir when None) and the two FIFOs.

        ``group``: a group id whose members may use the pipes too (the directory becomes 0750 and the
        FIFOs 0660, with that group; the daemon's ``socket_group``). Raises :class:`RenderdError`
        (OSError translated and chained) when either cannot be created; nothing is left behind then.
        """
        if directory is None:
            try:
                directory = tempfile.gettempdir()
            except FileNotFoundError as exc:  # (Python's search for a writable one found none)
                raise RenderdError(
                    f"cannot create a private directory for the player's pipes: {exc.strerror} (each is full, "
                    "read-only or not writable by this user); set TMPDIR to a directory that is writable"
                ) from exc
        try:
            path = tempfile.mkdtemp(prefix=prefix, dir=os.fspath(directory))
        except OSError as exc:
            raise RenderdError(os_error_message(exc, "cannot create a private directory for the player's pipes")) from exc
        pair = cls(path)
        try:
            os.chmod(path, 0o700)
            os.mkfifo(pair.server_path, 0o600)
            os.mkfifo(pair.client_path, 0o600)
            if group is not None:  # group first, then the modes that let it in
                for fifo in (pair.server_path, pair.client_path):
                    os.chown(fifo, -1, group)
                    os.chmod(fifo, 0o660)
                os.chown(path, -1, group)
                os.chmod(path, 0o750)
        except OSError as exc:
            pair.remove()
            raise RenderdError(os_error_message(exc, "cannot create the player's named pipes")) from exc
        except BaseException:  # (a Ctrl-C between the directory and the pipes: nothing is left behind)
            pair.remove()
            raise
        return pair

    @property
    def removed(self) -> bool:
        return self._removed

    def remove(self) -> None:
        """Unlink both pipes and remove the directory with whatever else is in it (a default log file)."""
        if self._removed:
            return
        self._removed = True
        for path in (self.server_path, self.client_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("%s", os_error_message(exc, "cannot remove a named pipe"))
        if self._owned:
            shutil.rmtree(self.directory, ignore_errors=True)
            if os.path.lexists(self.directory):
                # rmtree lists the directory through a descriptor: a process at its open-file limit (EMFILE, the
                # very error that failed a launch: server.pipe could not be opened) has none to give it. Empty
                # (the pipes are unlinked above), the directory goes without one.
                try:
                    os.rmdir(self.directory)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    log.warning("%s", os_error_message(exc, "cannot remove the player's pipe directory"))

    def __enter__(self) -> FifoPair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"<FifoPair {self.directory}{' removed' if self._removed else ''}>"


class FifoChannel:
    """The client's end of one player's pipes: a :class:`renderd.transport.Channel`.

    Constructing it opens ``server_path`` for reading without blocking; do that *before* spawning the
    player, then :meth:`attach` the player (a :class:`renderd.process.PlayerWatch`: a
    :class:`~renderd.process.PlayerProcess` or a :class:`~renderd.process.LeasedPlayer`). ``client_path``
    is opened on the first :meth:`send`. With no player attached, only end of file reveals a dead player.

    The channel owns its two file descriptors and closes each exactly once (:meth:`close`, idempotent);
    it borrows the player's pidfd and never closes it. Not thread-safe: one caller at a time.
    """

    def __init__(
        self,
        server_path: str,
        client_path: str,
        *,
        player: PlayerWatch | None = None,
        pipe_size: int = DEFAULT_PIPE_SIZE,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    ) -> None:
        self.server_path = server_path
        self.client_path = client_path
        self.decoder = Decoder(max_body_size=max_body_size)
        self._received = 0  # bytes read from server.pipe so far
        # time.monotonic() when ready() first read end of file on server.pipe (see eof_seen), else None
        self._eof_at: float | None = None
        self._message_start = 0  # stream offset where the message being received begins
        self._wfd: int | None = None
        # The rest of an action written in part (see send): written before anything else, so the stream
        # stays framed.
        self._unsent: list[memoryview] = []
        #: Set by a caller that waits on many channels at once (a VectorSession): send() then writes what
        #: client.pipe takes at once and keeps the rest for flush(), instead of waiting for the player to
        #: read it. Such a caller flushes the rest (polling writer_fileno() for POLLOUT) before it waits for
        #: the answer.
        self.partial_sends = False
        self._player: PlayerWatch | None = None
        self._pidfd: int | None = None
        try:
            self._rfd: int | None = os.open(server_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise RenderdError(os_error_message(exc, "cannot open the player's server.pipe for reading")) from exc
        try:
            if not stat.S_ISFIFO(os.fstat(self._rfd).st_mode):
                raise RenderdError(f"{server_path} is not a named pipe")
            self.pipe_size = _set_pipe_size(self._rfd, pipe_size)
        except BaseException:
            self.close()
            raise
        self._poller = select.poll()
        self._poller.register(self._rfd, _READ_EVENTS)
        if player is not None:
            self.attach(player)

    # -- the player --------------------------------------------------------------------------------------
    def attach(self, player: PlayerWatch) -> None:
        """Watch ``player``: its exit ends every wait at once with :class:`PlayerCrashed`."""
        if self._player is not None and self._pidfd is not None:
            self._poller.unregister(self._pidfd)
        self._player = player
        self._pidfd = player.fileno()
        if self._pidfd is not None:
            self._poller.register(self._pidfd, _POLLIN)

    @property
    def player(self) -> PlayerWatch | None:
        return self._player

    def fileno(self) -> int:
        """The read end of ``server.pipe`` (for callers that multiplex many channels)."""
        if self._rfd is None:
            raise ValueError("I/O on a closed FifoChannel")
        return self._rfd

    def writer_fileno(self) -> int | None:
        """The write end of ``client.pipe`` once it is open (else None). For callers that multiplex many
        channels: a poll on it with no events asked reports POLLERR once the player has closed its end (it
        reads no other action), which :meth:`recv` turns into a :class:`~renderd.errors.PlayerCrashed`."""
        return self._wfd

    @property
    def closed(self) -> bool:
        return self._rfd is None

    @property
    def eof_seen(self) -> float | None:
        """When :meth:`ready` read end of file on ``server.pipe`` (a ``time.monotonic()`` value; None while it has
        not): the player closed the pipe, and the next :meth:`recv` reports it as a crash once the player has exited
        or :data:`EOF_CLASSIFY_TIMEOUT` has passed since then, whichever comes first. For callers that wait on many
        channels: they may wait for the players' exits (their pidfds) together until then, and :meth:`recv` then
        reports each at once instead of waiting its turn."""
        return self._eof_at

    # -- receiving ---------------------------------------------------------------------------------------
    def recv(self, deadline: float, deadline_name: str = "step_timeout") -> Message:
        """The next whole message from the player.

        Raises :class:`PlayerTimeout` when ``deadline`` (a ``time.monotonic()`` value) passes,
        :class:`PlayerCrashed` when the player exits or closes its pipe (end of file; a partial message is
        chained as :class:`ProtocolError`), :class:`ProtocolError` on malformed bytes, and
        :class:`RenderdError` for other I/O errors (the OSError chained).
        """
        decoder = self.decoder
        message = decoder.next_message()
        if message is not NEED_DATA:
            self._message_start = message.offset + message.nbytes
            return message
        fd = self._rfd
        if fd is None:
            raise ValueError("I/O on a closed FifoChannel")
        poll = self._poller.poll
        readv = os.readv
        monotonic = time.monotonic
        started: float | None = None
        expired = False
        input_closed = False  # the player closed client.pipe: its answer is awaited a short while only
        while True:
            now = monotonic()
            if started is None:
                started = now
            remaining = deadline - now
            if not remaining > 0:  # (also a NaN deadline, which would never compare as passed)
                # Past the deadline: take what is already in the pipe without waiting (an answer that
                # arrived just in time is not a timeout), and give up as soon as the pipe is empty.
                expired = True
                wait = 0.0
            elif self._pidfd is not None or self._player is None:
                wait = remaining
            else:  # without a pidfd, wake up now and then to ask whether the player is still there
                wait = min(remaining, PID_POLL_INTERVAL)
            events = poll(_ms(wait))
            if not events:
                if self._player is not None and self._pidfd is None and self._player.exited():
                    raise self._crash_on_exit(deadline_name)
                if expired:
                    if input_closed:
                        raise self._crash_on_closed_input(deadline_name)
                    raise self._timeout(deadline_name, started)
                continue
            readable = False
            for efd, _ in events:
                if efd == fd:
                    readable = True
            if not readable:
                if self._wfd is not None and not input_closed and all(efd != self._pidfd for efd, _ in events):
                    # Only client.pipe fired (POLLERR: no reader left): the player closed its end and will
                    # read no other action. Its answer may still come (an answer already on its way is
                    # taken), so wait for it or its exit EOF_CLASSIFY_TIMEOUT at most, not the deadline.
                    input_closed = True
                    self._poller.unregister(self._wfd)
                    deadline = min(deadline, monotonic() + EOF_CLASSIFY_TIMEOUT)
                    continue
                # Only the pidfd fired: the player exited. Whatever it wrote before exiting is still read
                # (its pipe would also report readable then), so this is a crash with nothing pending.
                raise self._crash_on_exit(deadline_name)
            try:
                n = readv(fd, decoder.get_buffers())
            except BlockingIOError:
                continue
            except OSError as exc:
                raise RenderdError(os_error_message(exc, f"cannot read {self.server_path}")) from exc
            if n == 0:
                raise self._crash_on_eof(deadline_name)
            self._received += n
            decoder.buffers_updated(n)
            message = decoder.next_message()
            if message is not NEED_DATA:
                self._message_start = message.offset + message.nbytes
                return message

    def ready(self) -> bool:
        """Take what the pipe holds now, without waiting; True when :meth:`recv` would return or raise at
        once: a whole message is decoded, the bytes are malformed, the player closed server.pipe or exited.

        For callers that wait on many channels with one ``poll`` (on :meth:`fileno` and the player's
        pidfd): a readable pipe may hold only part of a message, and a player that stops in its middle
        must not hold up the others for its whole deadline.
        """
        fd = self._rfd
        if fd is None:
            raise ValueError("I/O on a closed FifoChannel")
        decoder = self.decoder
        while decoder.failed is None and not decoder.has_message:
            try:
                n = os.readv(fd, decoder.get_buffers())
            except BlockingIOError:
                player = self._player
                return player is not None and player.exited()
            except OSError:
                return True  # recv reports it
            if n == 0:  # end of file: recv reports the crash, its wait for the player's exit counted from now
                if self._eof_at is None:
                    self._eof_at = time.monotonic()
                return True
            self._eof_at = None  # (a writer came back)
            self._received += n
            try:
                decoder.buffers_updated(n)
            except ProtocolError:
                return True  # the decoder keeps the error; recv raises it
        return True

    def _timeout(self, deadline_name: str, started: float) -> PlayerTimeout:
        waited = time.monotonic() - started
        where = f" (pid {self._player.pid})" if self._player is not None else ""
        partial = ""
        pending = self._received - self._message_start
        if pending > 0 or self.decoder.in_message:
            partial = (
                f"; {pending} byte(s) of an incomplete message received (it starts at byte offset "
                f"{self._message_start} of the stream)"
            )
        elif deadline_name == "start_timeout" and self._received == 0:
            partial = self.silence()
        return PlayerTimeout(
            f"the player{where} sent no complete message within {deadline_name} "
            f"(waited {waited:.3g} s){partial}",
            deadline=deadline_name,
            seconds=waited,
        )

    def silence(self) -> str:
        """For a player that sent nothing before its first frame was due: what it did with the pipes, as
        ``"; it ..."``, or "" when that cannot be told (a player this process may not inspect)."""
        try:
            if self._wfd is None:  # (a reader of client.pipe, even one still waiting in open(), lets this open)
                fd = os.open(self.client_path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                os.close(fd)
                return ("; it opened client.pipe to read an action before sending its first message on server.pipe "
                        "(the wrong order: a player sends its first message first, see docs/protocol.md)")
        except OSError:  # (ENXIO: no reader)
            pass
        if self._player is None:
            return ""
        # Where each descriptor's /proc link points, compared with server.pipe's path: the link's text, never the
        # file it names (a stat through the link would ask that file's filesystem, and one on a network mount that
        # hangs would hold the caller as long as the mount does; lstat would describe the link itself).
        try:
            server = os.path.realpath(self.server_path, strict=True)
            server_st = os.stat(server)  # (the pipe itself, in renderd's directory)
        except OSError:
            return ""
        name = "/" + os.path.basename(server)
        opened = False
        for pid in [self._player.pid, *_descendants(self._player.pid)]:
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:  # gone, or not ours to look at
                if pid == self._player.pid:
                    return ""
                continue
            for fd in fds:
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target == server or (target.endswith(name) and _same_file(pid, fd, server_st)):
                    opened = True
                    break
            if opened:
                break
        if opened:
            return "; it opened server.pipe but has sent nothing on it (still loading? raise start_timeout)"
        return ("; it has not opened server.pipe (still loading, or a build that does not speak AI2-THOR's FIFO "
                "protocol: AI2THOR_SERVER_TYPE=FIFO and AI2THOR_FIFO_SERVER_PIPE_PATH tell it where to write)")

    def _crash_on_exit(self, deadline_name: str) -> PlayerCrashed:
        assert self._player is not None
        self._player.wait_exit(EOF_CLASSIFY_TIMEOUT)
        return self._player.crashed(
            f"the player exited while renderd waited for {_awaited(deadline_name)}"
        )

    def _crash_on_closed_input(self, deadline_name: str) -> PlayerCrashed:
        context = "the player closed client.pipe and sent no answer while renderd waited for it"
        if self._player is None:
            return PlayerCrashed(context)
        return self._player.crashed(context)

    def _crash_on_eof(self, deadline_name: str) -> PlayerCrashed:
        partial: ProtocolError | None = None
        try:
            self.decoder.end_of_input()
        except ProtocolError as exc:
            partial = exc
        what = "closed server.pipe"
        if partial is not None:
            what += f" in the middle of a message ({partial.inline()})"
        context = f"the player {what} while renderd waited for {_awaited(deadline_name)}"
        if self._player is None:
            err = PlayerCrashed(context)
        else:
            seen = self._eof_at
            self._player.wait_exit(
                EOF_CLASSIFY_TIMEOUT if seen is None else max(seen + EOF_CLASSIFY_TIMEOUT - time.monotonic(), 0.0)
            )
            err = self._player.crashed(context)
        err.__cause__ = partial
        return err

    # -- sending -----------------------------------------------------------------------------------------
    @property
    def unsent(self) -> int:
        """Bytes of an action not written yet: 0, unless ``partial_sends`` left a rest for :meth:`flush`, or
        a send's deadline passed half-way (the rest is then written first by the next send)."""
        return sum(v.nbytes for v in self._unsent)

    def send(self, buffers: Sequence[Any], deadline: float, deadline_name: str = "step_timeout") -> None:
        """Write one encoded message (``renderd.protocol.encode_action``) completely, in one ``writev``
        when the pipe has room.

        Raises :class:`PlayerTimeout` if the player neither opens ``client.pipe`` nor drains it before
        ``deadline``, :class:`PlayerCrashed` if it exits or closes the pipe (EPIPE), and
        :class:`RenderdError` for other I/O errors. What the deadline left unwritten is kept and written
        before the next message (a half-written action is never followed by another one's bytes).

        With ``partial_sends``, it waits only to open ``client.pipe``: it writes what the pipe takes now
        and keeps the rest (:attr:`unsent`) for :meth:`flush`; a message sent meanwhile queues behind it.
        Either way the caller may reuse its buffers once this returns: what is kept of them is a copy.
        """
        if self._rfd is None:
            raise ValueError("I/O on a closed FifoChannel")
        if self._wfd is None:
            self._open_writer(deadline, deadline_name)
        unsent = self._unsent
        if unsent:
            # The rest of an earlier action first, so that the player reads whole actions.
            if self.partial_sends:
                unsent.extend(_kept(byte_views(buffers)))
                self._write_some()
                return
            self._write_rest(deadline, deadline_name)
        wfd = self._wfd
        try:
            n = _writev(wfd, buffers)
        except BlockingIOError:
            n = 0
        except BrokenPipeError as exc:
            raise self._crash_on_epipe(deadline_name) from exc
        except OSError as exc:
            raise RenderdError(os_error_message(exc, f"cannot write {self.client_path}")) from exc
        if n < message_nbytes(buffers):
            rest = byte_views(buffers)
            drop_written(rest, n)
            unsent.extend(_kept(rest))
            if not self.partial_sends:
                self._write_rest(deadline, deadline_name)

    def flush(self, deadline: float | None = None, deadline_name: str = "step_timeout") -> bool:
        """Write what is left of the actions sent (:attr:`unsent`); True once nothing is left.

        Without ``deadline``, writes what ``client.pipe`` takes now and returns at once; with one, waits
        for the player to read until then (:class:`PlayerTimeout` if it does not). Raises
        :class:`PlayerCrashed` if the player exits or closed the pipe, :class:`RenderdError` for other I/O
        errors."""
        if not self._unsent:
            return True
        if self._wfd is None:
            raise ValueError("I/O on a closed FifoChannel")
        if deadline is None:
            self._write_some()
        else:
            self._write_rest(deadline, deadline_name)
        return not self._unsent

    def _write_some(self, deadline_name: str = "step_timeout") -> None:
        """Write what the pipe takes now of the unsent rest, without waiting."""
        while self._unsent and self._write_pending(deadline_name):
            pass

    def _write_pending(self, deadline_name: str) -> bool:
        """One ``writev`` of the unsent rest; False when the pipe is full."""
        pending = self._unsent
        try:
            n = _writev(self._wfd, pending[:1024])  # (IOV_MAX)
        except BlockingIOError:
            return False
        except BrokenPipeError as exc:
            raise self._crash_on_epipe(deadline_name) from exc
        except OSError as exc:
            raise RenderdError(os_error_message(exc, f"cannot write {self.client_path}")) from exc
        drop_written(pending, n)
        return True

    def _write_rest(self, deadline: float, deadline_name: str) -> None:
        # Wait for room and write the unsent rest; on any error what is left stays unsent.
        pending = self._unsent
        poller = select.poll()
        poller.register(self._wfd, _WRITE_EVENTS)
        if self._pidfd is not None:
            poller.register(self._pidfd, _POLLIN)
        started = time.monotonic()
        while pending:
            remaining = deadline - time.monotonic()
            if not remaining > 0:  # (a NaN deadline too)
                raise PlayerTimeout(
                    f"the player did not read its action within {deadline_name} "
                    f"(client.pipe stayed full for {time.monotonic() - started:.3g} s)",
                    deadline=deadline_name,
                    seconds=time.monotonic() - started,
                )
            events = poller.poll(_ms(min(remaining, PID_POLL_INTERVAL)))
            if self._player is not None and (
                any(fd == self._pidfd for fd, _ in events) or (self._pidfd is None and self._player.exited())
            ):
                raise self._crash_on_exit(deadline_name)
            if not events:
                continue
            self._write_pending(deadline_name)

    def _crash_on_epipe(self, deadline_name: str) -> PlayerCrashed:
        context = "the player closed client.pipe while renderd sent it an action"
        if self._player is None:
            return PlayerCrashed(context)
        self._player.wait_exit(EOF_CLASSIFY_TIMEOUT)
        return self._player.crashed(context)

    def _open_writer(self, deadline: float, deadline_name: str) -> None:
        """Open ``client.pipe`` for writing without blocking: ENXIO means the player has not opened its
        end yet, so retry (watching its pidfd) until ``deadline``."""
        pause = OPEN_RETRY_FIRST
        started = time.monotonic()
        while True:
            try:
                fd = os.open(self.client_path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as exc:
                if exc.errno == errno.ENOENT and self._player is not None and (
                    self._player.wait_exit(EOF_CLASSIFY_TIMEOUT)
                ):
                    # The pipes are gone because the player is: whoever made them removed them as it
                    # stopped it (a leased player, its environment removed or the daemon stopping).
                    raise self._player.crashed(
                        "the player exited, and its client.pipe was removed, before the action was sent"
                    ) from exc
                if exc.errno != errno.ENXIO:
                    raise RenderdError(os_error_message(exc, "cannot open the player's client.pipe for writing")) from exc
            else:
                try:
                    is_fifo = stat.S_ISFIFO(os.fstat(fd).st_mode)
                except OSError:
                    is_fifo = False
                if not is_fifo:  # (checked before anything is written: opening a file for writing changes nothing)
                    os.close(fd)
                    raise RenderdError(f"{self.client_path} is not a named pipe: no action is written to it")
                self._wfd = fd
                # With no events asked: poll reports POLLERR on it once the player's end is closed, which
                # ends a wait for an answer that cannot come (recv).
                self._poller.register(fd, 0)
                return
            remaining = deadline - time.monotonic()
            if not remaining > 0:  # (a NaN deadline too)
                raise PlayerTimeout(
                    f"the player did not open client.pipe within {deadline_name} "
                    f"(waited {time.monotonic() - started:.3g} s)",
                    deadline=deadline_name,
                    seconds=time.monotonic() - started,
                )
            wait = min(pause, remaining)
            if self._player is not None:
                if self._player.wait_exit(wait):
                    raise self._player.crashed(
                        f"the player exited before opening client.pipe ({deadline_name})"
                    )
            else:
                time.sleep(wait)
            pause = min(pause * 2, OPEN_RETRY_MAX)

    # -- closing -----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close both ends (the write end first, so the player sees end of file). Idempotent."""
        wfd, self._wfd = self._wfd, None
        rfd, self._rfd = self._rfd, None
        self._unsent = []
        self.decoder.release_pool()
        for fd in (wfd, rfd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError as exc:  # pragma: no cover - close of a fd we own cannot fail but EIO
                    log.warning("%s", os_error_message(exc, "closing a pipe failed"))
        self._pidfd = None

    def __enter__(self) -> FifoChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._rfd is None else f"fd {self._rfd}"
        return f"<FifoChannel {self.server_path} {state}>"
