"""The player process: its command line, its environment, and its life from spawn to reap.

:func:`player_argv` and :func:`player_env` build what a Unity player (or ``renderd-player``) is started
with, the way AI2-THOR starts its builds. :class:`PlayerProcess` spawns one player in its own process
group with stdout and stderr appended to a per-player log, watches it through a pidfd (so a transport can
``poll`` for its exit together with its pipes), stops it by escalating SIGTERM -> grace -> SIGKILL ->
reap, and classifies every exit (exit code, or signal by name). :class:`LeasedPlayer` watches a player
this process did not spawn (one leased from the daemon).

Dying with the owner: by default the player is started with ``PR_SET_PDEATHSIG = SIGKILL`` so that if the
owning process is SIGKILLed the player dies too. Linux delivers that signal when the *thread* that forked
the player exits, so spawn long-lived players from a long-lived thread (the main thread, or the daemon's
supervisor loop). The flag is set by a ``preexec_fn`` that only calls ``prctl``, ``signal`` (SIGCHLD back
to its default, see :func:`die_with_parent`) and ``getppid``; Python documents ``preexec_fn`` as unsafe in
the presence of threads because arbitrary code could need a lock another thread held at fork time. This
one takes no lock, but pass ``die_with_parent=False`` if that matters more to you than orphan protection:
there is then no ``preexec_fn`` at all, and the player also keeps this process's SIGCHLD disposition (an
ignored SIGCHLD stays ignored in it) and is not made the subreaper of its descendants (so a helper it
daemonises, re-parented to init, is not found by :meth:`PlayerProcess.stop`).
"""

from __future__ import annotations

import ctypes
import errno
import logging
import numbers
import os
import select
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import psutil

from renderd.errors import ConfigError, PlayerCrashed, RenderdError, describe_exit, os_error_message
from renderd.protocol import MAX_RESOLUTION

__all__ = [
    "QUALITY_SETTINGS",
    "DEFAULT_QUALITY",
    "DEFAULT_STOP_GRACE",
    "ENDPOINT_VARIABLES",
    "endpoint_variable_error",
    "NOT_INHERITED",
    "SERVICE_MANAGER_VARIABLES",
    "resolve_executable",
    "check_frame_size",
    "check_size",
    "player_argv",
    "player_env",
    "PlayerWatch",
    "PlayerProcess",
    "process_start_ticks",
    "LeasedPlayer",
    "PlayerOnDisplay",
]

#: Unity quality levels by the names AI2-THOR uses (``-screen-quality`` takes the number).
QUALITY_SETTINGS: dict[str, int] = {
    "DONOTUSE": 0,
    "Very Low": 1,
    "Low": 2,
    "Medium": 3,
    "MediumCloseFitShadows": 4,
    "High": 5,
    "Very High": 6,
    "Ultra": 7,
    "High WebGL": 8,
}
DEFAULT_QUALITY = "Ultra"

#: Seconds between SIGTERM and SIGKILL when stopping a player.
DEFAULT_STOP_GRACE = 5.0
#: How long :meth:`PlayerProcess.stop` waits for the kernel to reap a SIGKILLed player.
KILL_REAP_TIMEOUT = 5.0
#: How much of the end of a log file is read to find its last lines.
LOG_TAIL_BYTES = 64 * 1024
#: Default number of log lines quoted in a :class:`PlayerCrashed`.
LOG_TAIL_LINES = 20
#: How often a watch without a pidfd polls for the player's exit.
PID_POLL_INTERVAL = 0.05
#: At most how often :meth:`PlayerProcess.poll` (or, for an owner that notes them itself,
#: :meth:`PlayerProcess.note_if_due`) notes the running player's helpers outside its process group
#: (:meth:`PlayerProcess.note_descendants`), so that :meth:`PlayerProcess.stop` still finds them once the
#: player has exited.
DESCENDANT_NOTE_INTERVAL = 1.0
#: The most helpers outside its process group noted for one player (each holds a pidfd until the stop).
MAX_NOTED_DESCENDANTS = 64
#: How soon after its start a player's helpers are noted the first time (then every
#: :data:`DESCENDANT_NOTE_INTERVAL`): a helper a player daemonises as it starts is noted even when the player
#: exits soon after (right after its first frame).
DESCENDANT_FIRST_NOTE = 0.2
#: At interpreter exit, how long (seconds) a lock a daemon thread may hold is waited for: the exit freezes daemon
#: threads where they stand, and a lock one held then is never released (the noter thread's in the middle of a note,
#: the log reader's of a thread quoting a player's log, a logging handler's of a thread writing a record); a session
#: closed by its ``__del__`` at exit waited for it for ever.
FINALIZING_LOCK_WAIT = 0.1


class _FrozenHandlerFilter(logging.Filter):
    """A filter of one of renderd's loggers: once the interpreter is exiting (``sys.is_finalizing()``), a record is not
    handed to its handlers when the lock of one of those that would write it is held, and stays held for
    :data:`FINALIZING_LOCK_WAIT` seconds. The exit freezes daemon threads where they stand: one frozen while a handler
    wrote its record (renderd's noter thread, or any thread of the application logging through the same handler) holds
    that handler's lock for good, and the player's stop, logging as a session's ``__del__`` closes it at exit, waited
    for it for ever. Such a record is dropped (that handler writes nothing again). No other thread runs once the
    interpreter is exiting, so a lock found free stays free for the handler. Costs nothing before the exit but the
    check, and only for a record that is logged."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self._logger = logger
        # (bound now: at the very end of the exit, module globals may be gone)
        self._is_finalizing = sys.is_finalizing
        self._logging = logging
        self._wait = FINALIZING_LOCK_WAIT

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._is_finalizing():
            return True
        try:
            return not self._blocked(record)
        except Exception:  # noqa: BLE001 - (logging torn down at the very end of the exit): as logging would
            return True

    def _blocked(self, record: logging.LogRecord) -> bool:
        """Whether a handler that would write ``record`` (as ``Logger.callHandlers`` finds them) has its lock held."""
        found = 0
        logger: Any = self._logger
        while logger is not None:
            for handler in logger.handlers:
                found += 1
                if record.levelno >= handler.level and not self._free(handler.lock):
                    return True
            if not logger.propagate:
                break
            logger = logger.parent
        last = self._logging.lastResort
        return found == 0 and last is not None and record.levelno >= last.level and not self._free(last.lock)

    def _free(self, lock: Any) -> bool:
        if lock is None:
            return True
        if not lock.acquire(timeout=self._wait):
            return False
        lock.release()
        return True


def exit_safe_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)``, filtered so that a record logged at interpreter exit never waits for ever for a
    handler's lock that a frozen daemon thread holds (see :class:`_FrozenHandlerFilter`): for renderd's modules whose
    code runs at exit (a session's ``__del__``)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, _FrozenHandlerFilter) for f in logger.filters):
        logger.addFilter(_FrozenHandlerFilter(logger))
    return logger


log = exit_safe_logger(__name__)


#: Variables that tell a player where its endpoints are; stale ones inherited from our own environment
#: are dropped so a player never talks to somebody else's pipes.
ENDPOINT_VARIABLES = (
    "AI2THOR_SERVER_TYPE",
    "AI2THOR_FIFO_SERVER_PIPE_PATH",
    "AI2THOR_FIFO_CLIENT_PIPE_PATH",
    "AI2THOR_HOST",
    "AI2THOR_PORT",
    "AI2THOR_CLIENT_TOKEN",
)


def endpoint_variable_error(name: str) -> str | None:
    """Why ``name`` may not be given in a player's explicit ``env``: the :data:`ENDPOINT_VARIABLES` are set by
    renderd for each player, and one set otherwise would point the player at pipes or a server renderd does
    not read (a build would then wait for its peer until the start timeout). None for any other name."""
    if name in ENDPOINT_VARIABLES:
        return (f"{name} is the player's endpoint, which renderd sets for each player; remove it from env "
                f"(a player told another endpoint would never reach renderd)")
    return None


#: Variables a service manager gives the process it runs (systemd's notification socket and watchdog, socket
#: activation): they are about renderd's own process, not the player's. A player that inherited NOTIFY_SOCKET
#: could tell systemd that the daemon is ready or stopping wherever the unit's NotifyAccess lets it.
SERVICE_MANAGER_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID",
                             "LISTEN_FDNAMES")
#: What a player never inherits from the environment it is started from (an explicit ``env`` may still set it).
NOT_INHERITED = ENDPOINT_VARIABLES + SERVICE_MANAGER_VARIABLES

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _load_prctl() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):  # not Linux, or no prctl in this libc
        return None
    prctl.restype = ctypes.c_int
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return prctl


def _load_signal() -> Any:
    # libc's signal(), called in a child between fork and exec: no Python signal state is involved.
    try:
        set_disposition = ctypes.CDLL(None, use_errno=True).signal
    except (OSError, AttributeError):
        return None
    set_disposition.restype = ctypes.c_void_p
    set_disposition.argtypes = [ctypes.c_int, ctypes.c_void_p]
    return set_disposition


_prctl = _load_prctl()
_libc_signal = _load_signal()


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL, *, subreaper: bool = False) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child get ``sig`` (default SIGKILL) when the thread that forked it
    exits (``PR_SET_PDEATHSIG``), for every child renderd starts: players, probes, GPU tools, Xvfb.

    Prepared in the parent so the child only makes system calls: no allocation, no lock. A child whose
    parent died before the flag took effect (nobody would ever send the signal) exits at once, with
    ``os._exit``: until exec it still runs the parent's Python signal handlers, which a signal sent to
    itself would run instead of ending it.

    It also gives the child SIGCHLD's default disposition: an ignored signal stays ignored across exec, so
    a player started by a process that ignores SIGCHLD (to have its children reaped for it) would find
    its own children's exit statuses gone (``waitpid`` fails with ECHILD).

    With ``subreaper`` (players), the child is also made a child subreaper (``PR_SET_CHILD_SUBREAPER``,
    kept across exec): a process its descendants orphan (a daemonising helper's double fork) is re-parented
    to it rather than to init, so it stays in the child's subtree, where :meth:`PlayerProcess.stop` finds it.
    """
    prctl = _prctl
    set_disposition = _libc_signal
    signum = int(sig)
    sigchld = int(signal.SIGCHLD)

    def preexec() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
            if subreaper:
                prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        if set_disposition is not None:
            set_disposition(sigchld, 0)  # SIG_DFL
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


_die_with_parent_fn = die_with_parent  # for PlayerProcess.spawn, whose flag argument has the same name


# -- command line and environment ---------------------------------------------------------------------


def resolve_executable(executable: str | os.PathLike[str] | Sequence[str]) -> list[str]:
    """The argv prefix for ``executable`` (a path, a name, or an argv list) with an absolute program path.

    A bare name is looked up first next to the running Python (its virtual environment's ``bin``, where
    ``renderd-player`` lives), then on ``PATH``. Raises :class:`ConfigError` (key ``executable``) when
    the program cannot be found or is not executable.
    """
    if isinstance(executable, (bytes, bytearray)):
        raise ConfigError(f"is a path as a str (or an argv list of str), not bytes: {executable!r}", key="executable")
    if isinstance(executable, (str, os.PathLike)):
        argv = [os.fspath(executable)]
    else:
        try:
            items = list(executable)
        except TypeError:
            raise ConfigError(
                f"is a path or an argv list, not {type(executable).__name__}: {executable!r}", key="executable"
            ) from None
        argv = []
        for item in items:
            if not isinstance(item, (str, os.PathLike)) or isinstance(os.fspath(item), bytes):
                raise ConfigError(
                    f"an argv list holds strings (or paths), not {type(item).__name__}: {item!r} in {executable!r}",
                    key="executable",
                )
            argv.append(os.fspath(item))
        if not argv:
            raise ConfigError("the executable argv list is empty", key="executable")
    program = argv[0]
    split_hint = _split_hint(executable, program)
    if os.sep in program:
        try:
            path = os.path.abspath(program)
        except OSError as exc:  # a relative path, and the working directory was removed
            raise ConfigError(
                f"{program!r} is relative, and the working directory cannot be read ({exc.strerror}); "
                "give an absolute path", key="executable"
            ) from exc
        if os.path.isdir(path):
            raise ConfigError(f"{program!r} is a directory, not a program", key="executable")
        if not os.path.isfile(path):
            tilde = ""
            if program.startswith("~"):  # (as a shell would expand it: then it is a path relative to here)
                tilde = f": a leading '~' is not expanded here; give os.path.expanduser({program!r})"
            if split_hint:
                raise ConfigError(f"{program!r} does not exist (or is not a file){split_hint}", key="executable")
            raise ConfigError(f"{program!r} does not exist (or is not a file){tilde}", key="executable")
        if not os.access(path, os.X_OK):
            raise ConfigError(f"{program!r} is not executable (chmod +x?)", key="executable")
    else:
        here = os.path.dirname(os.path.abspath(sys.executable))
        found = shutil.which(program, path=here) or shutil.which(program)
        if found is None:
            raise ConfigError(
                f"{program!r} was not found next to {sys.executable} or on PATH"
                + (split_hint or "; give its full path"),
                key="executable",
            )
        path = os.path.abspath(found)
    return [path, *argv[1:]]


def _split_hint(executable: object, program: str) -> str:
    """When ``program`` (a single string) is a program and its arguments: how to give them, else "".

    Said only when the string holds white space and its first word is a program that can be found (as
    ``resolve_executable`` would find it), so that a path with a space in a name keeps its own message.
    """
    if not isinstance(executable, str) or not program.strip() or not any(c.isspace() for c in program):
        return ""
    try:
        words = shlex.split(program)
    except ValueError:  # (an unbalanced quote)
        words = program.split()
    if len(words) < 2:
        return ""
    first = words[0]
    if os.sep in first:
        if not (os.path.isfile(first) and os.access(first, os.X_OK)):
            return ""
    else:
        here = os.path.dirname(os.path.abspath(sys.executable))
        if (shutil.which(first, path=here) or shutil.which(first)) is None:
            return ""
    return (
        f": it is a program ({first!r}) and its arguments in one string; "
        f"give the program and its arguments as a list: {words!r}"
    )


def _quality_number(quality: str | int) -> int:
    if isinstance(quality, bool):
        raise ConfigError(f"unknown quality {quality!r}", key="quality")
    if isinstance(quality, numbers.Integral):  # (numpy's too)
        if quality not in QUALITY_SETTINGS.values():
            raise ConfigError(f"quality level {quality} is not one of {sorted(QUALITY_SETTINGS.values())}", key="quality")
        return int(quality)
    try:
        return QUALITY_SETTINGS[quality]
    except (KeyError, TypeError):  # (TypeError: not hashable, a list)
        raise ConfigError(
            # (DONOTUSE, level 0, is a placeholder: accepted, as AI2-THOR does, but not offered)
            f"unknown quality {quality!r}; expected one of {', '.join(n for n in QUALITY_SETTINGS if n != 'DONOTUSE')}",
            key="quality",
        ) from None


def check_size(value: Any, key: str) -> int:
    """``value`` as an int; :class:`ConfigError` (``key``: ``width`` or ``height``) unless it is an integer
    (numpy's too, not a bool) in 1..:data:`renderd.protocol.MAX_RESOLUTION`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 < value <= MAX_RESOLUTION:
        raise ConfigError(f"must be an integer 1..{MAX_RESOLUTION}, got {value!r}", key=key)
    return int(value)


def check_frame_size(width: Any, height: Any) -> tuple[int, int]:
    """``(width, height)`` as ints, each checked by :func:`check_size`."""
    return check_size(width, "width"), check_size(height, "height")


def player_argv(
    executable: str | os.PathLike[str] | Sequence[str],
    *,
    width: int,
    height: int,
    quality: str | int = DEFAULT_QUALITY,
    headless: bool = False,
    extra_args: Sequence[str] = (),
    log_path: str | os.PathLike[str] | None = None,
) -> list[str]:
    """The player's full command line, as AI2-THOR builds expect it.

    ``[program, *its args, -screen-fullscreen 0 -screen-quality Q -screen-width W -screen-height H,
    (-batchmode -nographics when headless), (-logFile PATH), *extra_args]``. ``quality`` is a name from
    :data:`QUALITY_SETTINGS` or its number. Raises :class:`ConfigError` for an unknown executable or
    quality and for a size outside 1..:data:`renderd.protocol.MAX_RESOLUTION` (a larger frame would exceed the
    codec's largest body, and every answer would be refused).
    """
    width, height = check_frame_size(width, height)
    argv = resolve_executable(executable)
    argv += [
        "-screen-fullscreen",
        "0",
        "-screen-quality",
        str(_quality_number(quality)),
        "-screen-width",
        str(width),
        "-screen-height",
        str(height),
    ]
    if headless:
        argv += ["-batchmode", "-nographics"]
    if log_path is not None:
        argv += ["-logFile", os.fspath(log_path)]
    argv += [str(a) for a in extra_args]
    return argv


def player_env(
    base_env: Mapping[str, str] | None,
    *,
    server_type: str = "FIFO",
    server_pipe: str | None = None,
    client_pipe: str | None = None,
    host: str | None = None,
    port: int | str | None = None,
    token: str | None = None,
    screenshot: bool = True,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The player's environment: ``base_env`` (``os.environ`` when None) with the ``AI2THOR_*`` endpoint.

    Endpoint variables and a service manager's (:data:`NOT_INHERITED`) inherited from ``base_env`` are
    dropped first; ``extra`` is applied last, so an
    explicit override always wins. Raises :class:`ConfigError` when the endpoint is incomplete (FIFO
    without both pipe paths, WSGI without host and port).
    """
    env = dict(os.environ if base_env is None else base_env)
    for name in NOT_INHERITED:
        env.pop(name, None)
    server_type = server_type.upper()
    env["AI2THOR_SERVER_TYPE"] = server_type
    if server_type == "FIFO":
        if not server_pipe or not client_pipe:
            raise ConfigError("a FIFO player needs both server_pipe and client_pipe", key="transport")
        env["AI2THOR_FIFO_SERVER_PIPE_PATH"] = os.fspath(server_pipe)
        env["AI2THOR_FIFO_CLIENT_PIPE_PATH"] = os.fspath(client_pipe)
    elif server_type == "WSGI":
        if not host or port is None:
            raise ConfigError("an HTTP (WSGI) player needs host and port", key="transport")
        env["AI2THOR_HOST"] = str(host)
        env["AI2THOR_PORT"] = str(port)
    else:
        raise ConfigError(f"unknown server type {server_type!r}; expected FIFO or WSGI", key="transport")
    if token is not None:
        env["AI2THOR_CLIENT_TOKEN"] = str(token)
    env["AI2THOR_SERVER_SIDE_SCREENSHOT"] = "True" if screenshot else "False"
    if extra:
        env.update({str(k): str(v) for k, v in extra.items()})
    return env


# -- watching and owning a player ---------------------------------------------------------------------


class PlayerWatch(Protocol):
    """What a transport needs to know about the player at the other end of its pipes.

    ``fileno()`` is a file descriptor that polls readable once the player has exited (a pidfd), or
    ``None`` when there is none (then the transport asks ``exited()`` every :data:`PID_POLL_INTERVAL`).
    ``crashed(context)`` builds the :class:`PlayerCrashed` to raise.
    """

    pid: int

    def fileno(self) -> int | None: ...

    def exited(self) -> bool: ...

    def wait_exit(self, timeout: float) -> bool: ...

    def crashed(self, context: str) -> PlayerCrashed: ...


#: Clock ticks per second of process start times in ``/proc/<pid>/stat``.
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_start_ticks(pid: int) -> int | None:
    """When process ``pid`` started: field 22 of ``/proc/<pid>/stat``, clock ticks (``SC_CLK_TCK``) since
    boot, on the clock of ``CLOCK_BOOTTIME``. With the pid it names one process for good (a pid given out
    again gets a later start time). None when there is no such process (or /proc does not tell)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return int(fields[19])  # (after the command name: state is field 3, starttime field 22)
    except (OSError, ValueError, IndexError):
        return None


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError) as exc:  # old kernel, seccomp, or already gone
        log.debug("pidfd_open(%d) failed: %s; falling back to polling", pid, exc)
        return None


#: The longest log line quoted whole; a longer one is cut, saying how much was left out.
LOG_LINE_CHARS = 500

# Control characters (C0 but tab, DEL, C1) and the Unicode line and paragraph separators, as escapes: the
# tail is printed to terminals, where raw ones would move the cursor, clear the screen or hide text.
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), *range(0x7F, 0xA0)) if c != 0x09}
_ESCAPES.update({0x2028: "\\u2028", 0x2029: "\\u2029"})


#: How many bytes before a player's first one in an appended log are kept, to tell later whether the file
#: still holds them there (else it was rewritten, and all of it is the player's).
LOG_MARK_BYTES = 64


def _log_start(fd: int) -> tuple[int, int, int, bytes] | None:
    """Where a player's output begins in the log file open (for writing) as ``fd``, a log appended to from
    run to run: ``(st_dev, st_ino, offset, the bytes just before it)``, or None for a file that is not
    regular."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    size = min(LOG_MARK_BYTES, st.st_size)
    before = b""
    try:  # (the same file, open for reading: fd is write-only)
        rfd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        pass
    else:
        try:
            before = os.pread(rfd, size, st.st_size - size)
        except OSError:
            pass
        finally:
            os.close(rfd)
    return st.st_dev, st.st_ino, st.st_size, before


def _read_log_tail(path: str | None, lines: int, since: tuple[int, int, int, bytes] | None = None) -> str:
    """The last ``lines`` lines of the log file ``path`` (from its last :data:`LOG_TAIL_BYTES`), as text to
    quote: lines are split at newlines only, control characters escaped, lines longer than
    :data:`LOG_LINE_CHARS` cut. "" when there is no such regular file: a FIFO or a device (a logger reading
    the log, ``/dev/null``) is never opened for reading, which could wait forever or take another
    reader's bytes. ``since`` (from :func:`_log_start`) leaves out what the file held before the player
    started, while it still holds it (not truncated, rewritten or replaced meanwhile)."""
    if not path or lines <= 0:
        return ""
    fd = _open_log(path)
    if fd is None:
        return ""
    try:
        return _tail_of(fd, lines, since)
    finally:
        os.close(fd)


def _open_log(path: str) -> int | None:
    """The log file ``path`` open for reading (without blocking, never as a controlling terminal), or None
    when it cannot be opened or is not a regular file (then it is not kept open)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        regular = False
    if not regular:
        os.close(fd)
        return None
    return fd


def _open_log_reader(log_fd: int, path: str) -> int | None:
    """The regular log file open for writing as ``log_fd`` open again for reading (``O_RDONLY | O_CLOEXEC``: no player
    inherits it), so that its tail can be read however the file is renamed or removed meanwhile; None without a
    descriptor to spare (EMFILE: the tail is then read from ``path``) or when it cannot be opened."""
    fd = _open_log(f"/proc/self/fd/{log_fd}")
    if fd is None:  # (no /proc): the file at the path, if it is the one open for writing
        fd = _open_log(path)
        if fd is not None:
            try:
                same = os.path.samestat(os.fstat(fd), os.fstat(log_fd))
            except OSError:
                same = False
            if not same:
                os.close(fd)
                fd = None
    return fd


def _tail_of(fd: int, lines: int, since: tuple[int, int, int, bytes] | None = None) -> str:
    """What :func:`_read_log_tail` quotes, read from the regular file open as ``fd``."""
    if lines <= 0:
        return ""
    try:
        st = os.fstat(fd)
        floor = 0
        if since is not None:
            dev, ino, offset, before = since
            if (st.st_dev, st.st_ino) == (dev, ino) and offset <= st.st_size:
                if os.pread(fd, len(before), offset - len(before)) == before:
                    floor = offset
        start = max(floor, st.st_size - LOG_TAIL_BYTES)
        data = os.pread(fd, LOG_TAIL_BYTES, start)
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    if text.endswith("\n"):
        text = text[:-1]
    tail = text.split("\n")
    if start > floor and len(tail) > 1:
        tail = tail[1:]  # (the first one was cut by where the read began)
    quoted = []
    for line in tail[-lines:]:
        line = line.removesuffix("\r").translate(_ESCAPES)
        if len(line) > LOG_LINE_CHARS:
            line = f"{line[:LOG_LINE_CHARS]} [... {len(line) - LOG_LINE_CHARS} more characters]"
        quoted.append(line)
    return "\n".join(quoted)


#: The longest single poll, in milliseconds (a C int); a longer wait polls again.
MAX_POLL_MS = 2**31 - 1


def poll_readable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` (a pidfd, a pipe...) is readable within ``timeout`` seconds (0: now). ``poll``, not
    ``select``, so any descriptor number works."""
    if not timeout > 0:  # also NaN
        ms = 0
    elif timeout >= MAX_POLL_MS / 1000:
        ms = MAX_POLL_MS
    else:
        ms = int(timeout * 1000 + 0.999)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(ms))


def _descendants(pid: int) -> list[int]:
    """The pids of ``pid``'s descendants, from the kernel's per-thread ``children`` lists: only the player's own
    subtree is read (psutil reads every process's status to find children), so stopping a player starts
    with no delay worth noting. Empty when the kernel has no such lists."""
    found: list[int] = []
    todo = [pid]
    while todo and len(found) < 10_000:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:  # gone meanwhile
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children", "rb") as f:
                    children = [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
            found += children
            todo += children
    return found


#: Players of this process (:func:`_after_fork_in_child`).
_player_processes: weakref.WeakSet[PlayerProcess] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a forked child: each inherited :class:`PlayerProcess` gets a new ``_noted_lock``. A thread of the parent
    noting the player's helpers at the fork held it, and does not exist here to release it: the copy's ``stop()``
    (which takes the noted pidfds, to close them) would wait for it for good."""
    for proc in list(_player_processes):
        proc._noted_lock = threading.Lock()
        proc._log_lock = threading.Lock()
        proc._log_readers = set()  # (the parent's threads)
    _BACKGROUND_NOTER.forget()  # (its thread is the parent's; the copies here never note)


def _acquire_unless_frozen(lock: Any) -> bool:
    """Acquire ``lock`` (a Lock or Condition a daemon thread may also take: the noter thread, a thread quoting a
    player's log) and return True; at interpreter exit give up after :data:`FINALIZING_LOCK_WAIT` and return False:
    a daemon thread frozen by the exit may hold it for good, and it will never touch what the lock guards again."""
    if sys.is_finalizing():
        return lock.acquire(timeout=FINALIZING_LOCK_WAIT)
    lock.acquire()
    return True


class _BackgroundNoter:
    """One thread (``renderd-player-noter``) that notes the helpers of this process's running players whose
    :attr:`PlayerProcess.notes_on_poll` is set, each when its note is due (:meth:`PlayerProcess.note_if_due`):
    nothing else would note those of a player nobody polls, such as a :class:`renderd.Session`'s, which watches
    its player through the pidfd alone. The thread is started with the first such player and ends as soon as
    none is left (stopped, seen to exit, or handed to an owner that notes itself), so it outlives no session.
    It holds the players weakly, and never while it waits."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._players: weakref.WeakSet[PlayerProcess] = weakref.WeakSet()
        self._thread: threading.Thread | None = None

    def add(self, proc: PlayerProcess) -> None:
        with self._cond:
            self._players.add(proc)
            if self._thread is None:
                thread = threading.Thread(target=self._loop, name="renderd-player-noter", daemon=True)
                thread.start()  # (before it is recorded: a thread that cannot start leaves none recorded)
                self._thread = thread
            self._cond.notify()

    def discard(self, proc: PlayerProcess) -> None:
        cond = self._cond
        if not _acquire_unless_frozen(cond):
            return  # (at exit, held by the frozen noter thread: it never runs again)
        try:
            self._players.discard(proc)
            cond.notify()
        finally:
            cond.release()

    def forget(self) -> None:
        """In a forked child: no thread, no player (a new lock: the parent's may have been held at the fork)."""
        self._cond = threading.Condition(threading.Lock())
        self._players = weakref.WeakSet()
        self._thread = None

    def _loop(self) -> None:
        cond = self._cond
        while True:
            with cond:
                if cond is not self._cond:  # (a forked child's copy of this thread does not exist; never here)
                    return
                due: list[PlayerProcess] = []
                wait: float | None = None
                for proc in list(self._players):
                    if not proc._notes_in_background():
                        self._players.discard(proc)
                        continue
                    left = proc._note_wait()
                    if left <= 0:
                        due.append(proc)
                    else:
                        wait = left if wait is None else min(wait, left)
                if not due:
                    if wait is None:
                        self._thread = None
                        return
                    cond.wait(wait)
                    continue
            for proc in due:
                try:
                    proc.note_if_due()
                except Exception as exc:  # noqa: BLE001 - noting is best effort; the stop still runs
                    log.debug("noting the helpers of player pid %d failed: %s", proc.pid, exc)
            del due


_BACKGROUND_NOTER = _BackgroundNoter()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _dup_open(fd: int | None) -> tuple[int | None, list[int]]:
    """For a watch's ``keep_open()``: a duplicate of descriptor ``fd`` for the watch to go on with, and the original,
    to be closed by the caller of ``keep_open()`` (as a list: empty when there is none). Without a descriptor to
    spare (EMFILE) the watch goes on without one (None) and the original is still kept; one that is closed already
    (by a stop() or close() of another thread) is neither."""
    if fd is None:
        return None, []
    try:
        return os.dup(fd), [fd]
    except OSError as exc:
        if exc.errno == errno.EBADF:
            return None, []
        return None, [fd]


def _closing(handles: list[Any]) -> Callable[[], None]:
    """A function that closes ``handles`` (descriptor numbers, or objects with ``close()``) the first time it is called
    (all of them, then raises the first error); later calls do nothing."""

    def release() -> None:
        error: OSError | None = None
        while handles:
            handle = handles.pop()
            try:
                if isinstance(handle, int):
                    os.close(handle)
                else:
                    handle.close()
            except OSError as exc:  # pragma: no cover - (EIO) the others are closed all the same
                error = error or exc
        if error is not None:
            raise error

    return release


def _handle_exited(handle: int | psutil.Process) -> bool:
    """Whether the process behind a pidfd or a ``psutil.Process`` has exited (a zombie has)."""
    if isinstance(handle, int):
        return poll_readable(handle, 0)
    try:
        return not handle.is_running() or handle.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class PlayerProcess:
    """One player this process spawned and owns: its own process group, a pidfd, a log file.

    Create it with :meth:`spawn`. ``stop()`` ends it (idempotent); until then the pidfd stays open and
    the exit status is kept, so errors can always say how the player ended.
    """

    def __init__(
        self,
        popen: subprocess.Popen,
        *,
        log_path: str | None,
        show_log_path: bool = True,
        log_start: tuple[int, int, int, bytes] | None = None,
        log_fd: int | None = None,
    ) -> None:
        self._popen = popen
        self.pid: int = popen.pid
        self.pgid: int = popen.pid  # the player leads its own group
        #: The program the player runs (its argv[0], as spawned).
        args = popen.args
        self.executable: str = os.fsdecode(args[0] if isinstance(args, (list, tuple)) and args else args)
        self.log_path = log_path
        self._log_start = log_start  # where its output begins in an appended log (see _log_start)
        # The log file open for reading since the spawn (see _open_log_reader), so that its tail is still quoted once
        # the file has been removed (a tmp cleaner) or replaced; closed by stop(). Guarded by _log_lock: a stop() of
        # another thread does not close it under a read (whose number could by then be another file's).
        self._log_fd = log_fd
        self._log_lock = threading.Lock()  # (a new one in a forked child: _after_fork_in_child)
        # The threads inside log_tail(), and a close of the log that one of them owes: a stop() from a signal handler
        # that interrupted a read in its own thread (which holds _log_lock, or is about to take it) leaves the file to
        # that read, which closes it as it ends, instead of waiting for it for good (see _close_log).
        self._log_readers: set[int] = set()
        self._log_close_due = False
        self.show_log_path = show_log_path
        self.pidfd: int | None = _open_pidfd(popen.pid)
        self.started_at = time.monotonic()
        self._returncode: int | None = None
        self._stopped = False
        self._reaping = False  # stop() is reaping it through the Popen (poll() in another thread waits for that)
        #: Set by :meth:`stop`: whether it sent SIGTERM to a running player, and whether it had to
        #: escalate to SIGKILL. Together with the exit status they tell whether the stop ended the player.
        self.term_sent = False
        self.escalated = False
        self._owner_pid = os.getpid()  # the parent; a copy inherited over fork (another pid) never signals
        #: Whether the player's exit status was taken by someone else before it could be read (this process
        #: ignores SIGCHLD, or a SIGCHLD handler reaps every child): ``returncode`` is then 0 (Popen's
        #: convention), and :meth:`crashed` says the status is unknown.
        self.status_unknown = False
        #: Whether the signal that killed the player made it dump core (known once :meth:`poll` saw the exit).
        self.core_dumped = False
        #: The thread that spawned the player with PR_SET_PDEATHSIG (set by :meth:`spawn`): its exit kills it.
        self.spawned_by: threading.Thread | None = None
        # Helpers the running player started outside its process group, by pid (see note_descendants): a pidfd
        # (or a psutil.Process without pidfds) each, kept until stop() takes them.
        self._noted: dict[int, int | psutil.Process] = {}
        self._noted_lock = threading.Lock()  # (a new one in a forked child: _after_fork_in_child)
        self._noting_closed = False  # set (under _noted_lock) by stop() before it reaps the player
        self._last_note = self.started_at
        self._noted_once = False
        self._notes_on_poll = True
        _player_processes.add(self)
        _BACKGROUND_NOTER.add(self)

    @property
    def notes_on_poll(self) -> bool:
        """Whether the player's helpers are noted for it: by :meth:`poll`, and by a thread of renderd's
        (``renderd-player-noter``, running while such a player runs), each time a note is due (see
        :meth:`note_if_due`), so that a player nobody polls (a :class:`renderd.Session`'s) has them noted too. A
        note walks /proc over the player's descendants (milliseconds for a player with hundreds of threads or
        many processes): an owner that polls while holding a lock other threads wait for (the daemon's
        supervisor) sets it False and calls :meth:`note_if_due` itself, without that lock."""
        return self._notes_on_poll

    @notes_on_poll.setter
    def notes_on_poll(self, value: bool) -> None:
        self._notes_on_poll = bool(value)
        if self._notes_on_poll:
            _BACKGROUND_NOTER.add(self)
        else:
            _BACKGROUND_NOTER.discard(self)

    def _note_wait(self) -> float:
        """Seconds until a note of the helpers is due (<= 0: due): :data:`DESCENDANT_FIRST_NOTE` after the start
        for the first one, then :data:`DESCENDANT_NOTE_INTERVAL` after the last."""
        interval = DESCENDANT_NOTE_INTERVAL
        if not self._noted_once:
            interval = min(interval, DESCENDANT_FIRST_NOTE)
        return self._last_note + interval - time.monotonic()

    def _notes_in_background(self) -> bool:
        """Whether the background noter notes this player's helpers (it runs, as far as anyone has seen, and is
        this process's own)."""
        if not (self._notes_on_poll and self._returncode is None and not self._stopped and not self._noting_closed
                and os.getpid() == self._owner_pid):
            return False
        pidfd = self.pidfd  # (read once: a stop() in another thread may close it; then this says exited)
        return pidfd is None or not poll_readable(pidfd, 0)  # (an exited player has no helpers left to find)

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        env: Mapping[str, str] | None,
        log_path: str | os.PathLike[str] | None,
        *,
        cwd: str | os.PathLike[str] | None = None,
        die_with_parent: bool = True,
        show_log_path: bool = True,
        log_group: int | None = None,
        keep_log_open: bool = False,
    ) -> PlayerProcess:
        """Start ``argv`` in a new process group with stdout and stderr appended to ``log_path``.

        The log file is created with mode 0600 if missing (``None`` discards the output); with
        ``log_group`` (a group id) it gets that group and mode 0640. stdin is ``/dev/null``; no other file
        descriptor is inherited. With ``keep_log_open`` a regular log file is also kept open for reading (one
        descriptor, ``O_CLOEXEC``: the player does not inherit it) until :meth:`stop`, so that :meth:`log_tail` quotes
        the player's own file even after it was removed (a tmp cleaner) or replaced at its path. Raises :class:`RenderdError` when the log cannot be opened or the program
        cannot be started (the OSError is chained).
        """
        log_fd: int | None = None
        log_start = None
        if log_path is not None:
            log_path = os.fspath(log_path)
            try:
                # Without blocking: a FIFO with nobody reading it would otherwise block the open forever
                # (it fails with ENXIO instead); then blocking again, for the player.
                log_fd = os.open(
                    log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK, 0o600
                )
                os.set_blocking(log_fd, True)
                if log_group is not None:
                    os.fchown(log_fd, -1, log_group)
                    os.fchmod(log_fd, 0o640)
                log_start = _log_start(log_fd)
            except OSError as exc:
                if log_fd is not None:
                    os.close(log_fd)
                raise RenderdError(os_error_message(exc, "cannot open the player's log file")) from exc
        read_fd = None
        if keep_log_open and log_fd is not None and log_start is not None:  # (log_start: a regular file)
            read_fd = _open_log_reader(log_fd, log_path)
        out = log_fd if log_fd is not None else subprocess.DEVNULL
        try:
            popen = subprocess.Popen(
                list(argv),
                env=dict(env) if env is not None else None,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                close_fds=True,
                process_group=0,
                preexec_fn=_die_with_parent_fn(os.getpid(), subreaper=True) if die_with_parent else None,
            )
        except BaseException as exc:
            if read_fd is not None:
                os.close(read_fd)
            if not isinstance(exc, OSError):
                raise
            what = "cannot start the player" if exc.filename else f"cannot start the player {argv[0]}"
            raise RenderdError(os_error_message(exc, what)) from exc
        finally:
            if log_fd is not None:
                os.close(log_fd)
        if log.isEnabledFor(logging.DEBUG):
            from renderd.config import redact_argv  # (config imports this module)

            log.debug("spawned player pid %d: %s", popen.pid, " ".join(redact_argv(list(argv))))
        proc = cls(popen, log_path=log_path, show_log_path=show_log_path, log_start=log_start, log_fd=read_fd)
        if die_with_parent:
            proc.spawned_by = threading.current_thread()
        return proc

    # -- state -----------------------------------------------------------------------------------------
    def fileno(self) -> int | None:
        """The pidfd (readable once the player has exited), or None when pidfds are unavailable."""
        return self.pidfd

    def keep_open(self) -> Callable[[], None]:
        """Keep the descriptor :meth:`fileno` gave (the pidfd, which a poll of another thread, or one that a signal
        handler interrupted, may still wait on) open under its number until the returned function is called, however
        the watch is closed meanwhile: from now on the watch uses a duplicate, which :meth:`stop` closes. For a caller
        that stops the player while such a poll may go on (``Session.close()``); call the function once that poll is
        over. Without a descriptor to spare for the duplicate, the watch goes on without a pidfd (it polls)."""
        self.pidfd, kept = _dup_open(self.pidfd)
        return _closing(kept)

    def poll(self) -> int | None:
        """The return code if the player has exited, else None.

        The player is *not* reaped here (``waitid`` with ``WNOWAIT``): until :meth:`stop` reaps it, its
        zombie keeps its pid and process group id reserved, so stopping the group can never signal an
        unrelated process that was given a recycled id.
        """
        if self._returncode is not None:
            return self._returncode
        if self._popen.returncode is not None:  # reaped (by stop, or by someone holding the Popen)
            self._returncode = self._popen.returncode
            return self._returncode
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            if self._popen.returncode is not None:  # reaped meanwhile by stop() in another thread
                self._returncode = self._popen.returncode
                return self._returncode
            if self._reaping:  # stop() in another thread is reaping it: its status is known once it has
                return None
            # Not ours to wait for: reaped behind our back (SIGCHLD ignored, or a SIGCHLD handler that reaps
            # every child), or this is a copy inherited over fork. The pidfd still tells whether it exited.
            if self.pidfd is not None and not poll_readable(self.pidfd, 0):
                return None
            # Exited, but how is lost: Popen reports such an exit as 0 (crashed() says it is unknown).
            self.status_unknown = True
            self._returncode = self._popen.poll()
            return self._returncode
        if info is None or info.si_pid == 0:
            if self._notes_on_poll and self._note_wait() <= 0:
                self.note_descendants(wait=False)
            return None
        if info.si_code == os.CLD_EXITED:
            self._returncode = info.si_status
        else:  # CLD_KILLED, CLD_DUMPED
            self.core_dumped = info.si_code == os.CLD_DUMPED
            self._returncode = -info.si_status
        return self._returncode

    @property
    def returncode(self) -> int | None:
        """The exit status once exited: >= 0 an exit code, < 0 the number of the signal that killed it."""
        return self.poll()

    def exited(self) -> bool:
        return self.poll() is not None

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` seconds (forever if None) for the exit; the return code, or None if
        still running. Does not reap (see :meth:`poll`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            code = self.poll()
            if code is not None:
                return code
            remaining = PID_POLL_INTERVAL if deadline is None else deadline - time.monotonic()
            if not remaining > 0:  # (a NaN timeout too)
                return None
            pidfd = self.pidfd  # (read once: a stop() in another thread may set it to None, or to a duplicate)
            if pidfd is not None:
                poll_readable(pidfd, remaining)
            else:
                time.sleep(min(remaining, PID_POLL_INTERVAL))

    def wait_exit(self, timeout: float) -> bool:
        """True if the player exits within ``timeout`` seconds."""
        return self.wait(timeout) is not None

    def exit_description(self) -> str:
        """``exit code N``, ``killed by SIGNAME`` (``(core dumped)`` added when it did), ``still running``, or
        ``exited (exit status unknown)``."""
        code = self.poll()
        if code is not None and self.status_unknown:
            return "exited (exit status unknown)"
        return describe_exit(code) + (" (core dumped)" if self.core_dumped else "")

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the player's log ("" when there is none), of what it wrote there: not
        what an appended log held before it started. Spawned with ``keep_log_open``, until :meth:`stop`: read from
        the file the player was started with, open since the spawn, so its lines are quoted even once the file was
        removed (a tmp cleaner) or another put at its path; else from the file now at ``log_path``."""
        me = threading.get_ident()
        if me in self._log_readers:  # (a signal handler interrupting this thread's read of it: the file at the path)
            return _read_log_tail(self.log_path, lines, self._log_start)
        self._log_readers.add(me)
        try:
            with self._log_lock:
                if self._log_fd is not None:
                    return _tail_of(self._log_fd, lines, self._log_start)
        finally:
            self._log_readers.discard(me)
            if self._log_close_due:  # (a stop from a signal handler in this thread came during the read)
                self._close_log()
        return _read_log_tail(self.log_path, lines, self._log_start)

    def _close_log(self) -> None:
        """Close the log file kept open for :meth:`log_tail` (idempotent); waits for a read of it under way in another
        thread. Called from a signal handler that interrupted a read in its own thread, it leaves the file to that
        read, which closes it as it ends (waiting for it there would wait for good). At interpreter exit it waits for
        a read of another thread :data:`FINALIZING_LOCK_WAIT` seconds only: that thread, a daemon thread the exit froze
        in the middle of its read, never reads the file again."""
        if threading.get_ident() in self._log_readers:
            self._log_close_due = True
            return
        held = _acquire_unless_frozen(self._log_lock)
        try:
            self._log_close_due = False
            fd, self._log_fd = self._log_fd, None
            if fd is not None:
                os.close(fd)
        finally:
            if held:
                self._log_lock.release()

    def crashed(self, context: str) -> PlayerCrashed:
        """A :class:`PlayerCrashed` for ``context``, with the exit status and the tail of the log."""
        code = self.poll()
        message = f"{context} (player pid {self.pid})"
        if code is None:
            message += "; the player process is still running"
        elif code == -signal.SIGKILL and self.spawned_by is not None and not self.spawned_by.is_alive():
            message += (
                f"; most likely killed because the thread that started it ({self.spawned_by.name!r}) has exited: "
                "a player is set to die with the thread that started it (PR_SET_PDEATHSIG), so start long-lived "
                "players from a long-lived thread"
            )
        elif self.core_dumped:
            message += "; it dumped core"
        elif self.status_unknown:
            code = None
            message += (
                "; it has exited, but its exit status is unknown: this process reaped it before renderd could "
                "read it (SIGCHLD is ignored, or a SIGCHLD handler reaps every child)"
            )
        return PlayerCrashed(
            message,
            pid=self.pid,
            returncode=code,
            log_tail=self.log_tail(),
            log_path=self.log_path if self.show_log_path else None,
        )

    def stats(self) -> dict[str, Any]:
        """What the player uses now: ``rss`` (bytes), ``cpu_user``/``cpu_system`` (seconds), ``children``.

        Inspection only (psutil). Returns ``{"pid": pid, "running": False}`` once the player is gone.
        """
        try:
            proc = psutil.Process(self.pid)
            with proc.oneshot():
                if proc.status() == psutil.STATUS_ZOMBIE:
                    return {"pid": self.pid, "running": False}
                mem = proc.memory_info()
                cpu = proc.cpu_times()
                children = [c.pid for c in proc.children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return {"pid": self.pid, "running": False}
        return {
            "pid": self.pid,
            "running": True,
            "rss": mem.rss,
            "cpu_user": cpu.user,
            "cpu_system": cpu.system,
            "children": children,
            "uptime": time.monotonic() - self.started_at,
        }

    def note_descendants(self, *, wait: bool = True) -> None:
        """Note the running player's descendants outside its process group (helpers started with ``setsid``
        or ``start_new_session``, and what they started), so that :meth:`stop` still finds them after the
        player has exited: they are then no longer its descendants (orphans go to init or the nearest
        subreaper), and signals to its group miss them.

        While the player runs this is done :data:`DESCENDANT_FIRST_NOTE` seconds after its start, then every
        :data:`DESCENDANT_NOTE_INTERVAL` seconds, by :meth:`poll` and by renderd's noter thread (see
        :attr:`notes_on_poll`; when it is False, the daemon's loop calls :meth:`note_if_due` for every player on
        each pass instead, without its lock); a helper started and orphaned since the last note is not found. Each one noted holds a pidfd (so a signal through it can reach no other
        process), at most :data:`MAX_NOTED_DESCENDANTS` per player; those that have exited are let go at the
        next note. With ``wait=False`` it does nothing while another thread is noting. Never raises for a
        process that is gone."""
        if not self._noted_lock.acquire(blocking=wait):
            return
        try:
            self._last_note = time.monotonic()
            self._noted_once = True
            if self._noting_closed or os.getpid() != self._owner_pid:
                return
            for pid, handle in list(self._noted.items()):
                if _handle_exited(handle):
                    del self._noted[pid]
                    self._close_all([handle])
            if not self._leader_unreaped():
                return  # (its pid may name another process once reaped; an exited player has no descendants)
            found = self._outside_descendants([self.pid], set(self._noted))
            if not self._leader_unreaped():  # reaped behind our back meanwhile: what was read may be another's
                self._close_all(list(found.values()))
                return
            for pid, handle in found.items():
                if len(self._noted) >= MAX_NOTED_DESCENDANTS:
                    log.debug("player pid %d: not noting helper pid %d, %d are noted already", self.pid, pid,
                              MAX_NOTED_DESCENDANTS)
                    self._close_all([handle])
                    continue
                self._noted[pid] = handle
        finally:
            self._noted_lock.release()

    def note_if_due(self) -> bool:
        """:meth:`note_descendants` (without waiting for a note under way in another thread) if
        :data:`DESCENDANT_NOTE_INTERVAL` seconds have passed since the last note (:data:`DESCENDANT_FIRST_NOTE`
        since the start, for the first) and the player has not been
        seen to exit or been stopped; returns whether it noted. For an owner that sets :attr:`notes_on_poll` to
        False; it does not reap, and never raises for a process that is gone."""
        if self._returncode is not None or self._stopped or self._noting_closed:
            return False
        if self._note_wait() > 0:
            return False
        self.note_descendants(wait=False)
        return True

    def noted_descendants(self) -> list[int]:
        """The pids of the helpers outside its process group noted for the player (see
        :meth:`note_descendants`) and not let go yet."""
        with self._noted_lock:
            return sorted(self._noted)

    def _leader_unreaped(self) -> bool:
        """Whether the player has not been reaped (it runs, or its zombie holds its pid)."""
        if self._popen.returncode is not None:
            return False
        try:
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return False
        return True

    def _take_noted(self) -> dict[int, int | psutil.Process]:
        """The noted helpers, handed over to stop() (no more are noted after this)."""
        held = _acquire_unless_frozen(self._noted_lock)
        try:  # (not held: at exit, by the noter thread the exit froze mid-note; it never touches them again)
            self._noting_closed = True
            noted, self._noted = self._noted, {}
        finally:
            if held:
                self._noted_lock.release()
        _BACKGROUND_NOTER.discard(self)
        return noted

    # -- stopping --------------------------------------------------------------------------------------
    def _group_id_recycled(self) -> bool:
        """Whether the player's process group id may now name someone else's group. Never while the leader
        is unreaped: its zombie holds the id. Once something else reaped it (this process ignores SIGCHLD, a
        handler reaps every child), a group that still has members keeps the id from being given out, so a
        process that has it as its pid means the group is gone and the id taken by another."""
        return self._popen.returncode is not None and os.path.exists(f"/proc/{self.pgid}")

    def _signal_group(self, sig: signal.Signals) -> None:
        if self._group_id_recycled():
            log.debug("not sending %s to process group %d: the id was given to another process", sig.name, self.pgid)
            return
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            pass
        except PermissionError as exc:  # the group id was taken over by someone else: leave it alone
            log.warning("cannot send %s to process group %d: %s", sig.name, self.pgid, exc)
        self._signal_leader_outside(sig)

    def _signal_leader_outside(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the player itself when it has left its process group (``setpgid`` into another group of
        its session, its parent's say): signals to the group miss it, and it would outlive every stop. Through the
        pidfd (or, without one, to the pid while it is this process's unreaped child), so no other process is hit;
        never to an exited player."""
        if self._popen.returncode is not None:
            return
        try:
            if os.getpgid(self.pid) == self.pgid:
                return
        except OSError:  # gone
            return
        pidfd = self.pidfd
        try:
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, sig)
            elif self._leader_unreaped():
                os.kill(self.pid, sig)
        except ProcessLookupError:
            pass
        except OSError as exc:
            log.warning("cannot send %s to player pid %d: %s", sig.name, self.pid, exc)

    def _group_running(self) -> bool:
        """Whether a process of the player's group other than an exited leader still runs (a wrapper
        script's child, say). Only asked while stopping."""
        if self._group_id_recycled():
            return False
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            # No process has the group id, not even a zombie: the usual case once a player has exited, told by
            # one system call where the scan of /proc below reads every process's stat (about a millisecond per
            # hundred processes, on every stop).
            return False
        except OSError:
            pass  # (a member that is not ours to signal: the scan tells)
        # Some process has it: a running one, or only zombies (an unreaped leader, orphans init has not reaped).
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rpartition(b")")[2].split()
            except OSError:  # gone meanwhile, or not ours to read
                continue
            # After the command name: state, ppid, pgrp.
            if len(fields) > 2 and int(fields[2]) == self.pgid and fields[0] not in (b"Z", b"X"):
                return True
        return False

    def _outside_descendants(self, roots: list[int], known: set[int]) -> dict[int, int | psutil.Process]:
        """The descendants of ``roots`` (the running player, noted helpers still running) that are outside
        the player's process group (a helper started with ``setsid`` or ``start_new_session``, a wrapper
        script's player in a session of its own) and not in ``known``: signals to the group miss them. Each
        is a pidfd checked to be the process found (not a recycled pid) after it was opened, so signalling
        through it can hit no other; or, where pidfds are unavailable (seccomp, an old kernel, no descriptor
        left), a ``psutil.Process``, which checks its start time before each signal."""
        found: dict[int, int | psutil.Process] = {}
        for pid in [d for root in roots for d in _descendants(root)]:
            if pid in known or pid in found:
                continue
            try:
                if os.getpgid(pid) == self.pgid:
                    continue
                proc = psutil.Process(pid)  # (notes its start time)
            except (OSError, psutil.Error):  # gone meanwhile
                continue
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            except (AttributeError, OSError):
                found[pid] = proc
                continue
            try:
                same = proc.is_running()  # (compares the start time: the pid was not recycled)
            except psutil.Error:
                same = False
            if same:
                found[pid] = fd
            else:
                os.close(fd)
        return found

    def _outside_to_stop(self, leader_running: bool) -> list[int | psutil.Process]:
        """What :meth:`stop` signals besides the group: the noted helpers still running, and the descendants
        outside the group of the running player and of those helpers."""
        noted = self._take_noted()
        alive: dict[int, int | psutil.Process] = {}
        for pid, handle in noted.items():
            if _handle_exited(handle):
                self._close_all([handle])
            else:
                alive[pid] = handle
        roots = [self.pid] if leader_running else []
        outside = dict(alive)
        try:
            for pid, handle in alive.items():  # (what a noted helper started since the last note)
                found = self._outside_descendants([pid], set(outside))
                if _handle_exited(handle):  # its pid may be another's now: nothing read from it counts
                    self._close_all(list(found.values()))
                else:
                    outside.update(found)
            if roots:
                outside.update(self._outside_descendants(roots, set(outside)))
        except BaseException:
            self._close_all(list(outside.values()))
            raise
        return list(outside.values())

    @staticmethod
    def _signal_outside(handles: list[int | psutil.Process], sig: signal.Signals) -> None:
        for handle in handles:
            try:
                if isinstance(handle, int):
                    signal.pidfd_send_signal(handle, sig)
                else:
                    handle.send_signal(sig)  # (raises NoSuchProcess for a pid given to another process)
            except (ProcessLookupError, psutil.NoSuchProcess):  # exited already
                pass
            except (OSError, psutil.Error) as exc:
                log.warning("cannot send %s to a process the player started: %s", sig.name, exc)

    @staticmethod
    def _wait_outside(handles: list[int | psutil.Process], deadline: float) -> bool:
        """Wait until every process behind ``handles`` has exited, or ``deadline`` (monotonic) passes."""
        for handle in handles:
            while not _handle_exited(handle):
                remaining = deadline - time.monotonic()
                if not remaining > 0:  # (a NaN deadline too)
                    return False
                if isinstance(handle, int):
                    poll_readable(handle, remaining)
                else:
                    time.sleep(min(remaining, PID_POLL_INTERVAL))
        return True

    def _wait_group(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the leader to exit and the rest of its group to end."""
        deadline = time.monotonic() + timeout
        if self.wait(timeout) is None:
            return False
        while self._group_running():
            remaining = deadline - time.monotonic()
            if not remaining > 0:  # (a NaN timeout too)
                return False
            time.sleep(min(remaining, PID_POLL_INTERVAL))
        return True

    def kill_now(self) -> None:
        """SIGKILL the player's process group at once, as :meth:`stop` does when a Ctrl-C interrupts its grace: for
        an owner whose stop runs in another thread, which the Ctrl-C does not reach. Does not reap (the stop, under
        way or to come, does). Nothing once stopped, nor in a process forked from the one that spawned the player."""
        if self._stopped or os.getpid() != self._owner_pid:
            return
        self._signal_group(signal.SIGKILL)  # (the group's members too; not an id given to another process meanwhile)

    def stop(self, grace: float = DEFAULT_STOP_GRACE) -> int | None:
        """Stop the player and its process group: SIGTERM (and SIGCONT, so that a stopped process acts on it),
        up to ``grace`` seconds, SIGKILL, reap.

        The grace is for the whole group: a player started by a wrapper script (the script leads the group,
        the player is its child) gets it too, however soon the script exits. Leftover members of the group
        are killed (the unreaped leader keeps the group id reserved until then). Processes the running player
        started outside its group (``setsid``, ``start_new_session``) get the same SIGTERM, grace and SIGKILL,
        daemonised ones too (the player is their subreaper, see :func:`die_with_parent`). Once the player has
        exited, those are no longer its descendants: they are found only when they were noted while it ran
        (:meth:`note_descendants`, which :meth:`poll`, or its owner through :meth:`note_if_due`, does every
        :data:`DESCENDANT_NOTE_INTERVAL` seconds), and so are the processes outside the group that they started
        since. Idempotent; logs a
        warning when it has to escalate to SIGKILL. Returns the player's return code. Never raises for a
        player that is already gone. Interrupted while it waits (Ctrl-C), it kills and reaps the group
        before the interruption goes on, so nothing is left running. In a process forked from the one that
        spawned the player, it signals nothing (the player is the parent's) and only closes the pidfd and the noted
        helpers' pidfds, without waiting for anything (a thread of the parent noting helpers at the fork does not exist
        there).
        """
        if self._stopped:
            return self._returncode
        if os.getpid() != self._owner_pid:
            # A copy inherited over fork: the player is the parent's child, to stop (and reap) there.
            self._stopped = True
            self._close_pidfd()
            self._close_log()
            self._close_all(list(self._take_noted().values()))
            return self._returncode
        outside: list[int | psutil.Process] = []
        try:
            leader_running = self.poll() is None
            outside = self._outside_to_stop(leader_running)
            if leader_running or outside or self._group_running():
                deadline = time.monotonic() + grace
                self._signal_group(signal.SIGTERM)
                self._signal_outside(outside, signal.SIGTERM)
                # A stopped process (SIGSTOP, a debugger) only acts on its pending SIGTERM once continued.
                self._signal_group(signal.SIGCONT)
                self._signal_outside(outside, signal.SIGCONT)
                self.term_sent = leader_running
                if not self._wait_group(grace):
                    log.warning(
                        "player pid %d %s within %.3g s of SIGTERM; sending SIGKILL", self.pid,
                        "did not exit" if self.poll() is None else "exited, but other processes of its group did not",
                        grace,
                    )
                    self.escalated = True
                elif not self._wait_outside(outside, deadline):
                    log.warning(
                        "player pid %d exited, but processes it started outside its process group did not within "
                        "%.3g s of SIGTERM; sending SIGKILL", self.pid, grace,
                    )
        except BaseException:
            self._signal_outside(outside, signal.SIGKILL)
            self._kill_and_reap()  # interrupted during the grace: end it the hard way, then go on
            self._stopped = True
            self._close_pidfd()
            self._close_log()
            self._close_all(outside)
            raise
        try:
            self._signal_outside(outside, signal.SIGKILL)
            return self._kill_and_reap()
        finally:
            self._stopped = True
            self._close_pidfd()
            self._close_log()
            self._close_all(outside)

    @staticmethod
    def _close_all(handles: list[int | psutil.Process]) -> None:
        for handle in handles:
            if isinstance(handle, int):
                os.close(handle)
        handles.clear()

    def _kill_and_reap(self) -> int | None:
        # The leader has exited (its zombie still holds the group id) or ignored SIGTERM: kill whatever is
        # left of the group, then reap.
        self._signal_group(signal.SIGKILL)
        self._reaping = True
        try:
            self._popen.wait(KILL_REAP_TIMEOUT)
        except subprocess.TimeoutExpired:
            log.error("player pid %d survived SIGKILL for %.3g s (stuck in the kernel?)", self.pid, KILL_REAP_TIMEOUT)
            return None
        finally:
            self._reaping = False
        if self._returncode is None:
            self._returncode = self._popen.returncode
        log.debug("player pid %d stopped: %s", self.pid, describe_exit(self._returncode))
        return self._returncode

    def ended_by_stop(self) -> bool:
        """Whether the player's exit is what :meth:`stop` asked for: it was running when SIGTERM was sent and
        then exited normally (any exit code: players exit as they like on SIGTERM), of SIGTERM, or of the
        escalation's SIGKILL. False for a player that had exited on its own before, or that died of another
        signal (SIGSEGV, SIGABRT...) or of a SIGKILL renderd did not send: those exits are crashes."""
        code = self.poll()
        if code is None or not self.term_sent:
            return False
        if code >= 0 or code == -signal.SIGTERM:
            return True
        return code == -signal.SIGKILL and self.escalated

    def _close_pidfd(self) -> None:
        fd, self.pidfd = self.pidfd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        # (a process object dropped without stop(): its log reader is not left open)
        fd, self._log_fd = getattr(self, "_log_fd", None), None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def __repr__(self) -> str:
        return f"<PlayerProcess pid={self.pid} {describe_exit(self._returncode)}>"


#: Seconds :meth:`LeasedPlayer.crashed` gives ``exit_status`` to learn how the player exited.
LEASED_EXIT_STATUS_TIMEOUT = 2.0


class LeasedPlayer:
    """A player this process did not spawn (leased from the daemon): watched, never stopped.

    Its exit is noticed through a pidfd when the kernel allows one, else by polling. The exit status is
    not ours to read (the daemon reaps it): ``exit_status(timeout)``, when given, asks whoever knows (the
    daemon) and returns ``(return code or None, how it ended when no code is known, or None)``, the latter a phrase
    for the crash's message ("the daemon stopped it: environment removed"). Errors then say how
    the player ended, as for a player of our own, and quote its log when ``log_path`` is known: the file
    is opened at once and kept open, so the quote is this player's even after its owner has renamed the
    log to start another player with that path (the daemon restarting a crashed player). ``close()``
    releases the pidfd and the log.

    The pid is the player's as its owner answered; by the time the pidfd is opened, the player may have
    exited and been reaped, and the pid been given to another process. So once the pidfd pins the process,
    its start time (:func:`process_start_ticks`) is checked: equal to ``start_time`` when the owner gave it
    (the player's, as the owner read it), else no later than ``leased_at`` (``CLOCK_BOOTTIME`` seconds when
    the lease was answered, or earlier; default: when this watch is made, which is after). A process that
    started later is not the player: :class:`PlayerCrashed` says so (the pidfd is closed). Without
    ``start_time``, a pid given out again between the owner's answer and ``leased_at`` is not told apart
    (nor within a clock tick, 10 ms, of ``leased_at``). A process that has exited is not checked (its pid
    may already name another): the watch reports the exit.
    """

    def __init__(
        self,
        pid: int,
        *,
        log_path: str | None = None,
        exit_status: Callable[[float], tuple[int | None, str | None]] | None = None,
        start_time: int | None = None,
        leased_at: float | None = None,
    ) -> None:
        if leased_at is None:
            leased_at = time.clock_gettime(time.CLOCK_BOOTTIME)
        self.pid = pid
        self.log_path = log_path
        self._exit_status = exit_status
        self._returncode: int | None = None
        self._stopped_because: str | None = None
        self._log_fd: int | None = None
        self.pidfd: int | None = _open_pidfd(pid)
        try:
            try:
                self._proc: psutil.Process | None = psutil.Process(pid)
            except psutil.NoSuchProcess:
                self._proc = None
            self._check_identity(start_time, leased_at)
        except BaseException:
            self.close()
            raise
        self._log_fd = _open_log(log_path) if log_path else None

    def _check_identity(self, start_time: int | None, leased_at: float) -> None:
        """Raise :class:`PlayerCrashed` when the process the pidfd pins (or, without one, the process with
        the pid now) started after the player did (see the class)."""
        started = process_start_ticks(self.pid)
        if started is None or self.exited():  # (checked after reading: what was read is the pinned process's)
            return
        if start_time is not None:
            if started == start_time:
                return
            why = f"it started {started} clock ticks after boot, the leased player {start_time}"
        else:
            limit = int(leased_at * _CLOCK_TICKS)
            if started <= limit:
                return
            why = f"it started {(started - limit) / _CLOCK_TICKS:.2f} s after the lease was answered"
        raise PlayerCrashed(
            f"leased player pid {self.pid} is gone: that pid now names another process ({why}), so the player "
            "exited, and was reaped, before renderd could watch it; lease a player again (the daemon starts a "
            "new one)",
            pid=self.pid,
        )

    def fileno(self) -> int | None:
        return self.pidfd

    def keep_open(self) -> Callable[[], None]:
        """As :meth:`PlayerProcess.keep_open`: the pidfd, and the log file a crash's report reads, stay open under
        their numbers until the returned function is called; the watch goes on with duplicates, which :meth:`close`
        closes."""
        self.pidfd, kept = _dup_open(self.pidfd)
        self._log_fd, kept_log = _dup_open(self._log_fd)
        return _closing(kept + kept_log)

    def exited(self) -> bool:
        if self.pidfd is not None:
            return poll_readable(self.pidfd, 0)
        if self._proc is None:
            return True
        try:
            return not self._proc.is_running() or self._proc.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    def wait_exit(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.exited():
            remaining = deadline - time.monotonic()
            if not remaining > 0:  # (a NaN timeout too)
                return False
            pidfd = self.pidfd  # (read once: a stop() in another thread may set it to None, or to a duplicate)
            if pidfd is not None:
                poll_readable(pidfd, remaining)
            else:
                time.sleep(min(remaining, PID_POLL_INTERVAL))
        return True

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the player's log: of the file opened when it was leased, while this
        watch is open; else of the file now at ``log_path``."""
        if self._log_fd is not None:
            return _tail_of(self._log_fd, lines)
        return _read_log_tail(self.log_path, lines)

    @property
    def returncode(self) -> int | None:
        """The exit status once the daemon told it (see :meth:`crashed`), else None."""
        return self._returncode

    def crashed(self, context: str) -> PlayerCrashed:
        """A :class:`PlayerCrashed` for ``context``: the exit code or signal when the daemon can tell it
        within :data:`LEASED_EXIT_STATUS_TIMEOUT`, and the tail of the log."""
        code: int | None = None
        if not self.exited():
            message = f"{context} (leased player pid {self.pid}; it is still running)"
        else:
            if self._returncode is None and self._stopped_because is None and self._exit_status is not None:
                try:
                    self._returncode, self._stopped_because = self._exit_status(LEASED_EXIT_STATUS_TIMEOUT)
                except Exception as exc:  # noqa: BLE001 - never lose the crash over the question
                    log.debug("asking how leased player pid %d exited failed: %s", self.pid, exc)
            code = self._returncode
            message = f"{context} (leased player pid {self.pid}"
            if code is not None:
                message += ")"
            elif self._stopped_because is not None:
                message += f"; {self._stopped_because})"
            else:
                message += (
                    "; it has exited; its exit status is unknown to the client: see `renderd status` or the "
                    "daemon's log)"
                )
        return PlayerCrashed(message, pid=self.pid, returncode=code, log_tail=self.log_tail(),
                             log_path=self.log_path)

    def close(self) -> None:
        """Release the pidfd and the log file (idempotent)."""
        pidfd, self.pidfd = self.pidfd, None
        log_fd, self._log_fd = self._log_fd, None
        for fd in (pidfd, log_fd):
            if fd is not None:
                os.close(fd)

    def __repr__(self) -> str:
        return f"<LeasedPlayer pid={self.pid}>"


#: After the managed X display died, how long a player gets to exit of it on its own (a player exits at
#: its next frame or X event), so the error can give its exit status and log.
DISPLAY_LOSS_GRACE = 1.0


class PlayerOnDisplay:
    """A :class:`PlayerWatch` for a player together with the managed X display (an Xvfb renderd started)
    it renders on: the display's death ends every wait as the player's own exit does, and the crash says
    that the display died, how, and how the player ended.

    ``display`` is a :class:`renderd.platforms.xvfb.ManagedDisplay` (``pid``, ``name``, ``returncode``,
    ``alive()``). :meth:`fileno` is an epoll descriptor over both pidfds (readable once either process
    has exited), or None without pidfds (then :meth:`exited` is polled). Other attributes (``log_path``,
    ``poll``...) are the player's. :meth:`close` releases the descriptors; it never stops anything.
    """

    def __init__(self, process: PlayerProcess, display: Any) -> None:
        self.process = process
        self.display = display
        self.pid = process.pid
        self._display_pidfd = _open_pidfd(display.pid)
        self._epoll: Any = None
        player_fd = process.fileno()
        if player_fd is not None and self._display_pidfd is not None:
            try:
                self._epoll = select.epoll(2, select.EPOLL_CLOEXEC)
                self._epoll.register(player_fd, select.EPOLLIN)
                self._epoll.register(self._display_pidfd, select.EPOLLIN)
            except BaseException:  # (out of descriptors): nothing of it is left open
                self.close()
                raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.process, name)

    def fileno(self) -> int | None:
        return self._epoll.fileno() if self._epoll is not None else None

    def keep_open(self) -> Callable[[], None]:
        """As :meth:`PlayerProcess.keep_open`, for the epoll :meth:`fileno` gave: it stays open under its number until
        the returned function is called; the watch goes on with a duplicate (the same epoll, so both see the same
        exits), which :meth:`close` closes. (The player's pidfd is its :class:`PlayerProcess`'s to keep.)"""
        epoll = self._epoll
        if epoll is None or epoll.closed:
            return _closing([])
        fd, kept = _dup_open(epoll.fileno())
        self._epoll = select.epoll.fromfd(fd) if fd is not None else None
        return _closing([epoll] if kept else [])

    def display_died(self) -> bool:
        """Whether the managed display's Xvfb has exited."""
        if self._display_pidfd is not None:
            return poll_readable(self._display_pidfd, 0)
        return not self.display.alive()

    def exited(self) -> bool:
        return self.process.exited() or self.display_died()

    def wait_exit(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.exited():
            remaining = deadline - time.monotonic()
            if not remaining > 0:  # (a NaN timeout too)
                return False
            epoll = self._epoll  # (read once: a close() in another thread may set it to None, or close it)
            try:
                if epoll is not None:
                    epoll.poll(min(remaining, MAX_POLL_MS / 1000))
                else:
                    time.sleep(min(remaining, PID_POLL_INTERVAL))
            except ValueError:  # closed meanwhile: the next round looks again
                time.sleep(min(remaining, PID_POLL_INTERVAL))
        return True

    def crashed(self, context: str) -> PlayerCrashed:
        """The player's :class:`PlayerCrashed`, saying first that its X display died when it did (after
        giving the player :data:`DISPLAY_LOSS_GRACE` seconds to exit of it)."""
        if not self.display_died():
            return self.process.crashed(context)
        display = (
            f"the managed X display {self.display.name} (Xvfb pid {self.display.pid}) the player renders on "
            f"died ({describe_exit(self.display.returncode)})"
        )
        if self.process.wait_exit(DISPLAY_LOSS_GRACE):
            return self.process.crashed(f"{context}; {display} before")
        return PlayerCrashed(
            f"{display} while renderd waited for the player; the player (pid {self.pid}) is still running "
            "without it (closing the session stops it)",
            pid=self.pid,
            log_tail=self.process.log_tail(),
            log_path=self.process.log_path if self.process.show_log_path else None,
        )

    def close(self) -> None:
        """Release the epoll and the display's pidfd (idempotent)."""
        epoll, self._epoll = self._epoll, None
        if epoll is not None:
            epoll.close()
        fd, self._display_pidfd = self._display_pidfd, None
        if fd is not None:
            os.close(fd)

    def __repr__(self) -> str:
        return f"<PlayerOnDisplay pid={self.pid} display={self.display.name}>"
