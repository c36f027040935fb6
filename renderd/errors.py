"""One error tree for everything renderd raises.

Every error says what happened, where, and (where there is something to do) what to do about it.
Errors that cross the control API travel as ``{"type": ..., "message": ...}`` and are rebuilt on the
other side from :data:`ERROR_TYPES`, an allow-list: a type name is never evaluated.
"""

from __future__ import annotations

import errno as _errno
import json as _json
import re as _re
import signal as _signal
from typing import Any

__all__ = [
    "RenderdError",
    "ProtocolError",
    "PlayerCrashed",
    "PlayerTimeout",
    "PlatformError",
    "ConfigError",
    "LeaseError",
    "LeaseBusyError",
    "CallOrderError",
    "AlreadyPendingCallError",
    "NoPendingCallError",
    "ERROR_TYPES",
    "error_to_dict",
    "error_from_dict",
    "describe_exit",
    "os_error_message",
]


class RenderdError(Exception):
    """Base class of every error renderd raises on purpose."""

    def __init__(self, message: str) -> None:
        # str(): a copy made as ``type(error)(error)`` (Gymnasium's AsyncVectorEnv re-raises a worker's error
        # that way) passes the error itself, and __str__ must still return a string.
        message = str(message)
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def _adopt(self, message: object, **given: object) -> None:
        """Built as ``type(error)(error)`` (Gymnasium's AsyncVectorEnv raises a worker's error as
        ``exctype(value)``): take what ``message``, an error of this type, carries (``pid``, ``returncode``,
        ``deadline``, ``key`` ...), except the attributes given here explicitly (``given``: keyword -> value,
        None or empty when not given)."""
        if not isinstance(message, type(self)) or message is self:
            return
        for name, value in vars(message).items():
            if name != "message" and given.get(name) in (None, ""):
                setattr(self, name, value)


class ProtocolError(RenderdError):
    """The bytes on the wire do not follow the framing: says what was expected, and at which byte offset.

    ``offset`` is the byte offset in the stream (counted from the first byte the decoder saw) of the
    field header where the problem was found, or ``None`` when the error is not about a position.
    """

    def __init__(self, message: str, *, offset: int | None = None, field_type: int | None = None) -> None:
        source = message
        if offset is not None and not _says_offset(str(message), offset):  # (said once)
            message = f"{message} (at byte offset {offset})"
        super().__init__(message)
        self.offset = offset
        self.field_type = field_type
        self._adopt(source, offset=offset, field_type=field_type)

    def inline(self) -> str:
        """The message with its position said inline (``", at byte offset N"``) rather than in parentheses
        at the end: for quoting it inside another message's parentheses."""
        suffix = f" (at byte offset {self.offset})"
        if self.offset is not None and self.message.endswith(suffix):
            return f"{self.message[: -len(suffix)]}, at byte offset {self.offset}"
        return self.message


def _says_offset(message: str, offset: int) -> bool:
    """Whether ``message`` already names byte offset ``offset`` (not another one that begins with its digits)."""
    return _re.search(rf"\bbyte offset {offset}(?!\d)", message) is not None


def describe_exit(returncode: int | None) -> str:
    """Describe a ``Popen.returncode`` the way a person reads it: ``exit code 3`` or ``signal SIGSEGV``."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            name = _signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exit code {returncode}"


def _exit_hint(returncode: int | None, quoted: bool) -> str:
    """What a signal usually means; ``quoted``: the player's log is quoted below the message."""
    if returncode == -_signal.SIGKILL:
        return " SIGKILL usually means something outside the player killed it (the out-of-memory killer?)."
    if returncode in (-_signal.SIGSEGV, -_signal.SIGABRT, -_signal.SIGBUS, -_signal.SIGILL, -_signal.SIGFPE):
        if quoted:
            return " The player crashed; its log (quoted below) usually says why."
        # (an empty log, none, or one this process cannot read: no "quoted below" over nothing)
        return " The player crashed; renderd found nothing in its log to quote."
    return ""


class PlayerCrashed(RenderdError):
    """The player process exited (or closed its pipe) while renderd was waiting for it."""

    def __init__(
        self,
        message: str,
        *,
        pid: int | None = None,
        returncode: int | None = None,
        log_tail: str = "",
        log_path: str | None = None,
    ) -> None:
        source = message
        text = message = str(message)
        quoted = bool(log_tail and log_tail.strip())
        if returncode is not None:
            text = f"{message}: {describe_exit(returncode)}.{_exit_hint(returncode, quoted)}"
        if log_path:
            text += f"\nPlayer log: {log_path}"
        if quoted:
            lines = "\n".join("  | " + line for line in log_tail.rstrip("\n").splitlines())
            text += f"\nLast lines of the player's log:\n{lines}"
        super().__init__(text)
        self.pid = pid
        self.returncode = returncode
        self.log_tail = log_tail
        self.log_path = log_path
        self._adopt(source, pid=pid, returncode=returncode, log_tail=log_tail, log_path=log_path)

    @property
    def signal_name(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return _signal.Signals(-self.returncode).name
            except ValueError:
                return None
        return None


class PlayerTimeout(RenderdError):
    """No answer within a deadline. ``deadline`` names which one (``start_timeout``, ``step_timeout``...)."""

    def __init__(self, message: str, *, deadline: str | None = None, seconds: float | None = None) -> None:
        super().__init__(message)
        self.deadline = deadline
        self.seconds = seconds
        self._adopt(message, deadline=deadline, seconds=seconds)


class PlatformError(RenderdError):
    """No platform can serve the request. ``reports`` holds every platform's reasons and instructions."""

    def __init__(self, message: str, *, reports: list[Any] | None = None) -> None:
        super().__init__(message)
        self.reports = list(reports or [])
        self._adopt(message, reports=reports)


class ConfigError(RenderdError):
    """A configuration is wrong: which file, which key, and why."""

    def __init__(self, message: str, *, path: str | None = None, key: str | None = None) -> None:
        source = message
        message = str(message)  # (a copy made as ``type(error)(error)``, see RenderdError)
        prefix = ""
        if path and key:
            prefix = f"{path}: {key}: "
        elif path:
            prefix = f"{path}: "
        elif key:
            prefix = f"{key}: "
        super().__init__(prefix + message)
        self.path = path
        self.key = key
        self.reason = message
        self._adopt(source, path=path, key=key)


class LeaseError(RenderdError):
    """A lease could not be granted, or was used after it ended."""


class LeaseBusyError(LeaseError):
    """The daemon could not take a lease request in now (as many requests wait for a player already as its
    control socket can hold): a request sent again shortly may wait. ``ControlClient.lease`` and
    ``renderd.connect`` do that until their own deadline."""


class CallOrderError(RenderdError):
    """A method was called in a state that does not allow it (for example ``step`` after ``close``)."""


class AlreadyPendingCallError(CallOrderError):
    """``send`` was called while the answers to an earlier ``send`` are still pending."""


class NoPendingCallError(CallOrderError):
    """``recv`` was called with nothing pending."""


#: Errors that may cross the control API, by the name they travel under. Anything else arrives as
#: :class:`RenderdError`.
ERROR_TYPES: dict[str, type[RenderdError]] = {
    cls.__name__: cls
    for cls in (
        RenderdError,
        ProtocolError,
        PlayerCrashed,
        PlayerTimeout,
        PlatformError,
        ConfigError,
        LeaseError,
        LeaseBusyError,
        CallOrderError,
        AlreadyPendingCallError,
        NoPendingCallError,
    )
}


def error_to_dict(exc: BaseException) -> dict[str, str]:
    """The ``{"type", "message"}`` form an error takes on the control API."""
    name = type(exc).__name__ if isinstance(exc, RenderdError) else "RenderdError"
    if name not in ERROR_TYPES:
        # A subclass not on the allow-list travels as its nearest listed ancestor.
        for base in type(exc).__mro__:
            if base.__name__ in ERROR_TYPES:
                name = base.__name__
                break
    return {"type": name, "message": str(exc)}


def error_from_dict(data: Any) -> RenderdError:
    """Rebuild an error from its ``{"type", "message"}`` form, by allow-list only."""
    if not isinstance(data, dict):
        return RenderdError(f"malformed error from the daemon: {data!r}")
    cls = ERROR_TYPES.get(str(data.get("type")), RenderdError)
    message = str(data.get("message", "unknown error"))
    err = cls.__new__(cls)
    RenderdError.__init__(err, message)
    # Give the optional attributes their defaults so callers can read them safely.
    for attr in ("offset", "field_type", "pid", "returncode", "log_path", "deadline", "seconds", "path", "key"):
        if not hasattr(err, attr):
            setattr(err, attr, None)
    if not hasattr(err, "log_tail"):
        err.log_tail = ""
    if not hasattr(err, "reports"):
        err.reports = []
    if not hasattr(err, "reason"):
        err.reason = message
    return err


def json_kind(value: Any) -> str:
    """What a decoded JSON value is, in JSON's words (its sender wrote JSON, not Python: ``null``, not NoneType)."""
    if value is None or isinstance(value, bool):
        return _json.dumps(value)
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, str):
        return "a string"
    return "a number"


def os_error_message(exc: OSError, what: str) -> str:
    """Translate an OSError by errno into a sentence that says what failed and what to do."""
    code = exc.errno
    hints = {
        _errno.EACCES: "permission denied: check the owner and mode of the path",
        _errno.EPERM: "operation not permitted",
        _errno.ENOENT: "no such file or directory",
        _errno.EEXIST: "already exists",
        _errno.ENOSPC: "no space left on the device",
        _errno.EMFILE: "too many open files in this process (raise `ulimit -n`)",
        _errno.ENFILE: "too many open files on the system",
        _errno.EPIPE: "the other end closed the pipe",
        _errno.ENXIO: "no process has the other end of the pipe open",
        _errno.ECONNREFUSED: "connection refused: is the daemon running?",
        _errno.EADDRINUSE: (
            "address already in use: another program listens there (`ss -ltnp` names it); choose another port or "
            "stop that program"
        ),
        _errno.EADDRNOTAVAIL: "cannot assign requested address: it is not an address of this machine",
        _errno.ENOEXEC: (
            "not a program this machine can run (a script needs a '#!' first line naming its interpreter; a "
            "binary may be built for another architecture or system)"
        ),
    }
    reason = hints.get(code, exc.strerror or str(exc))
    name = _errno.errorcode.get(code, "") if code else ""
    filename = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
    return f"{what}{filename}: {reason}" + (f" [{name}]" if name else "")
