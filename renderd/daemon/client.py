"""Talking to a running daemon: the control client (HTTP over its unix socket) and :func:`connect`.

:class:`ControlClient` sends one JSON request per connection and turns error answers back into renderd
errors (by allow-list, :func:`renderd.errors.error_from_dict`). :func:`connect` leases a ready player and
wraps it in the same :class:`renderd.client.Session` that :func:`renderd.launch` returns::

    POST /v1/environments/demo/leases {"client_pid": <this pid>, "timeout": T, "deadline": D}
      -> {"lease", "server_pipe", "client_pipe", "pid", "width", "height", "step_timeout", ...}
    open server.pipe for reading and client.pipe for writing (renderd.transport.fifo.FifoChannel),
    watching the player's pid through a pidfd (renderd.process.LeasedPlayer)
    ... steps, always with explicit sequenceIds (1, 2, ...) ...
    Session.close() -> DELETE /v1/leases/{id} {"clean": true}   (false if the stream may be half-read)

The player of a lease has already sent its first frame (to the daemon), so the session starts with
``last_event = None``; the first ``step()`` (or ``reset()``) gives the first event. If this process dies
holding the lease, the daemon notices and recycles the player.
"""

from __future__ import annotations

import functools
import http.client
import json
import logging
import numbers
import os
import random
import socket as _socket
import stat
import time
import urllib.parse
import weakref
from typing import Any, Callable

from renderd.config import MAX_SOCKET_PATH, SOCKET_ENV_VAR, default_socket_path
from renderd.errors import LeaseBusyError, LeaseError, RenderdError, error_from_dict, os_error_message

__all__ = ["ControlClient", "connect", "socket_path", "DEFAULT_LEASE_TIMEOUT", "SOCKET_ENV_VAR"]

log = logging.getLogger(__name__)

#: Seconds :func:`connect` waits for a ready player by default.
DEFAULT_LEASE_TIMEOUT = 30.0
#: Seconds a control request may take beyond the time it asks the daemon to wait.
REQUEST_SLACK = 10.0
#: Seconds before this client gives up on a lease request (``timeout + REQUEST_SLACK`` after sending it)
#: from which the daemon must not grant it any more: the lease request's ``deadline`` leaves the answer
#: this long to come back. A lease granted after its client gave up would keep its player LEASED to a
#: lease nobody knows for as long as this process lives.
LEASE_ANSWER_MARGIN = 5.0
#: Pause before a lease request refused with LeaseBusyError (the daemon holds as many waiting requests as it
#: can) is sent again, within the request's own timeout: on average; each pause is 0.5-1.5 times it, at random
#: (:func:`busy_pause`), so that clients refused together do not all ask again at the same moment.
LEASE_BUSY_RETRY = 0.5


def busy_pause() -> float:
    """Seconds to wait before asking again after a LeaseBusyError: :data:`LEASE_BUSY_RETRY`, jittered."""
    return LEASE_BUSY_RETRY * (0.5 + random.random())
#: Seconds for requests that do not wait for anything (status, release).
DEFAULT_REQUEST_TIMEOUT = 10.0
#: Seconds a client whose leased player died waits for the daemon to have reaped it, to learn its exit
#: status (the daemon notices through a pidfd at once; this covers a busy machine).
EXIT_STATUS_TIMEOUT = 2.0
#: Pause between two questions about the exit status.
EXIT_STATUS_POLL = 0.02


def socket_path(socket: str | os.PathLike[str] | None = None) -> str:
    """The daemon's socket: ``socket``, else ``$RENDERD_SOCKET`` (a leading ``~`` is the home directory, as
    ``renderd start`` reads it: a unit file's ``Environment=`` or a quoted export leaves it unexpanded), else the
    default path."""
    if socket is not None:
        return os.fspath(socket)
    value = os.environ.get(SOCKET_ENV_VAR)
    return os.path.expanduser(value) if value else default_socket_path()


class _NotOurDirectory(OSError):
    """The socket is in the per-user directory under /tmp, but another user made that directory."""


def _check_shared_default_directory(path: str) -> None:
    """Refuse a socket in ``/tmp/renderd-UID`` (the default of a user without ``$XDG_RUNTIME_DIR``) unless
    that directory is this user's own: anyone can make a directory of that name first and answer there
    with a daemon of theirs (pipes and frames of their choosing). The daemon refuses such a directory too. A
    symlink there made by another user (root aside) is refused too, wherever it leads: its maker can point it
    at a directory of theirs at any moment."""
    uid = os.geteuid()
    directory = f"/tmp/renderd-{uid}"
    if uid == 0 or os.path.dirname(os.path.abspath(path)) != directory:
        return
    try:
        # (followed, as renderd start follows it: a symlink the user made to a directory of theirs is theirs;
        # one to someone else's directory is that someone's; and a symlink someone else made is theirs wherever
        # it leads now, since they can point it elsewhere between this check and the connection)
        link = os.lstat(directory)
        st = os.stat(directory)
    except OSError:
        return  # the connection fails as usual ("no such file", "permission denied")
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (uid, 0):
        raise _NotOurDirectory(
            f"{directory} is a symlink made by uid {link.st_uid}, not by this user ({uid}): whoever made it can "
            f"point it at a directory of theirs at any moment, and whatever answers on {path} may not be this "
            f"user's renderd. Remove it, or set $RENDERD_SOCKET (or --socket) to your daemon's socket"
        )
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
        what = "is not a directory" if not stat.S_ISDIR(st.st_mode) else f"belongs to uid {st.st_uid}"
        raise _NotOurDirectory(
            f"{directory} {what}, not to this user ({uid}): someone else made it, and whatever answers on "
            f"{path} is not this user's renderd. Remove it (renderd start refuses it too), or set "
            f"$RENDERD_SOCKET (or --socket) to your daemon's socket"
        )


class _DeadlineSocket(_socket.socket):
    """A socket whose every send and receive ends by ``deadline`` (``time.monotonic()``): a socket timeout
    bounds each call only, so an answer arriving a byte at a time would keep a request going for ever."""

    deadline: float | None = None

    def _arm(self) -> None:
        if self.deadline is not None:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise _socket.timeout("timed out")
            self.settimeout(remaining)

    def recv_into(self, *args: Any) -> int:  # (what http.client's reads come down to)
        self._arm()
        return super().recv_into(*args)

    def recv(self, *args: Any) -> bytes:
        self._arm()
        return super().recv(*args)

    def sendall(self, *args: Any) -> None:
        self._arm()
        return super().sendall(*args)

    def send(self, *args: Any) -> int:
        self._arm()
        return super().send(*args)


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over the unix socket at ``path``; ``timeout`` (seconds, or None) bounds the whole exchange, from the
    connection to the answer's last byte."""

    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path
        self._deadline = None if timeout is None else time.monotonic() + timeout

    def connect(self) -> None:
        _check_shared_default_directory(self._path)
        sock = _DeadlineSocket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        try:
            sock.deadline = self._deadline
            sock.settimeout(self.timeout)
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def _owner(st: os.stat_result) -> str:
    import grp
    import pwd

    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = f"uid {st.st_uid}"
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = f"gid {st.st_gid}"
    return f"owner {user}, group {group}, mode {stat.S_IMODE(st.st_mode):04o}"


def _access_hint(path: str) -> str:
    """What keeps this user from the daemon's socket at ``path``, and what to change."""
    import pwd

    try:
        me = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        me = f"uid {os.getuid()}"
    directory = os.path.dirname(os.path.abspath(path))
    parts = directory.split(os.sep)
    for i in range(1, len(parts) + 1):
        d = os.sep.join(parts[:i]) or os.sep
        if not os.access(d, os.X_OK):
            try:
                st = os.stat(d)
            except OSError:
                break
            return (f"the directory {d} ({_owner(st)}) is closed to this user ({me}): the daemon's socket must be "
                    "in a directory its clients may enter (the default runtime directory is)")
    try:
        st = os.stat(path)
    except OSError:
        return "check the owner and mode of the socket and of its directories"
    return (f"the socket ({_owner(st)}) is private to the daemon's user and this user ({me}) may not use it: run "
            "the client as that user, or set [daemon] socket_group to a group this user is in (the socket then "
            "becomes 0660; see docs/configuration.md)")


class ControlClient:
    """JSON requests to the daemon's control API over its unix socket. ``timeout`` (seconds) bounds each request
    as a whole, from connecting to the answer's last byte.

    Every method raises :class:`RenderdError` when the daemon cannot be reached (saying which socket
    and what to check), and the error the daemon answered with (rebuilt by allow-list) otherwise.
    """

    def __init__(self, socket: str | os.PathLike[str] | None = None, *, timeout: float = DEFAULT_REQUEST_TIMEOUT):
        self.socket = socket_path(socket)
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None, *, timeout: float | None = None) -> tuple[int, Any]:
        """Send one request; returns ``(status, decoded body)`` for a 2xx answer, raises otherwise."""
        if not self.socket:  # (socket=os.environ.get("VAR", "") with VAR unset: connect() would say only EINVAL)
            from renderd.config import ArgumentError

            raise ArgumentError(
                f"an empty path; leave socket= out to use ${SOCKET_ENV_VAR} or the default path "
                f"({default_socket_path()})", key="socket")
        size = len(os.fsencode(self.socket))
        if size > MAX_SOCKET_PATH:  # connect() would only say "AF_UNIX path too long"
            raise RenderdError(
                f"cannot reach the renderd daemon at {self.socket}: the path is {size} bytes long; a unix socket "
                f"path holds at most {MAX_SOCKET_PATH} (pass the control socket (socket= from Python, --socket on the command line) or set $RENDERD_SOCKET)"
            )
        seconds = self.timeout if timeout is None else timeout
        shown = _shown_path(path)  # (what errors, and the logs they end up in, say of the request)
        conn = _UnixConnection(self.socket, seconds)
        try:
            headers = {"Accept": "application/json"}
            data = None
            if body is not None:
                data = json.dumps(body).encode("utf-8")
                headers["Content-Type"] = "application/json"
            try:
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                raw = response.read()
            except _NotOurDirectory as exc:
                raise RenderdError(str(exc)) from None
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                try:
                    mode = os.stat(self.socket).st_mode
                except OSError:
                    mode = None
                if mode is not None and not stat.S_ISSOCK(mode):
                    raise RenderdError(
                        f"cannot reach the renderd daemon at {self.socket}: that path is not a socket "
                        f"(a {_kind(mode)}); pass the control socket (socket= from Python, --socket on the command line) or set $RENDERD_SOCKET"
                    ) from exc
                if isinstance(exc, ConnectionRefusedError):
                    what = f"cannot reach the renderd daemon at {self.socket}: nothing listens on it [ECONNREFUSED]"
                else:
                    what = os_error_message(exc, f"cannot reach the renderd daemon at {self.socket}")
                raise RenderdError(
                    what + ". Is `renderd start` running? (for another socket: socket= from Python, --socket on the command line, or $RENDERD_SOCKET)"
                ) from exc
            except PermissionError as exc:
                raise RenderdError(
                    f"cannot reach the renderd daemon at {self.socket}: permission denied [EACCES]; "
                    f"{_access_hint(self.socket)}"
                ) from exc
            except _socket.timeout as exc:
                raise RenderdError(f"the renderd daemon at {self.socket} did not answer {method} {shown} in time "
                                   f"(within {seconds:g} s)") from exc
            except OSError as exc:
                raise RenderdError(os_error_message(exc, f"talking to the renderd daemon at {self.socket}")) from exc
            except http.client.HTTPException as exc:
                raise RenderdError(f"bad answer from the renderd daemon at {self.socket}: {exc!r}") from exc
        finally:
            conn.close()
        content_type = response.getheader("Content-Type", "")
        if content_type.startswith("application/json"):
            try:
                decoded: Any = json.loads(raw.decode("utf-8"))
            except ValueError as exc:
                raise RenderdError(f"the daemon answered {method} {shown} with malformed JSON: {exc}") from exc
        else:
            decoded = raw.decode("utf-8", "replace")
        if response.status >= 400:
            error = decoded.get("error") if isinstance(decoded, dict) else None
            if error is None:
                raise RenderdError(f"{method} {shown}: HTTP {response.status}: {str(decoded)[:200]}")
            exc = error_from_dict(error)
            exc.status = response.status  # type: ignore[attr-defined]
            raise exc
        return response.status, decoded

    def get(self, path: str) -> Any:
        return self.request("GET", path)[1]

    def health(self) -> dict[str, Any]:
        value = self.get("/v1/health")
        if not isinstance(value, dict) or not isinstance(value.get("status"), str):
            raise self._not_renderd("/v1/health", value)
        return value

    def environments(self) -> list[dict[str, Any]]:
        value = self.get("/v1/environments")
        environments = value.get("environments") if isinstance(value, dict) else None
        if not isinstance(environments, list) or not all(isinstance(e, dict) for e in environments):
            raise self._not_renderd("/v1/environments", value)
        return environments

    def _not_renderd(self, path: str, value: Any) -> RenderdError:
        return RenderdError(
            f"{self.socket} answered GET {path} with {str(value)[:120]!r}: not a renderd daemon "
            "(is --socket or RENDERD_SOCKET the right path?)"
        )

    def lease(self, environment: str, *, timeout: float = DEFAULT_LEASE_TIMEOUT) -> dict[str, Any]:
        """Ask for a lease on a ready player of ``environment``, waiting up to ``timeout`` seconds.

        The request carries a ``deadline`` on this host's CLOCK_MONOTONIC (``time.monotonic()``), shortly
        before this client gives up waiting for the answer: the daemon grants no lease after it, even if the
        request waited in its queue (every control API thread busy) for longer than ``timeout``.

        A request the daemon cannot take in now (:class:`LeaseBusyError`: as many requests wait for a player
        already as its control socket holds) is sent again every :data:`LEASE_BUSY_RETRY` seconds on average (jittered) within
        ``timeout``.

        Raises LeaseError when none can be had, RenderdError for an unknown environment, ArgumentError (a
        ValueError) for an ``environment`` that is empty or None, or a ``timeout`` that is not a number
        of seconds (0 or more; more than MAX_LEASE_TIMEOUT counts as that)."""
        from renderd.config import ArgumentError
        from renderd.daemon.leases import MAX_LEASE_TIMEOUT

        if environment is None or environment == "":
            # (an empty one asked for the route /v1/environments//leases: "no such route"; None for 'None')
            raise ArgumentError(f"must be the name of an environment (a non-empty string), got {environment!r}",
                                key="environment")
        # (numbers.Real: numpy's floats and integers too, as renderd.connect() takes them)
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout >= 0:
            # (a NaN went through every comparison below: busy answers were retried for ever)
            raise ArgumentError(f"must be a number of seconds, 0 or more, got {timeout!r}", key="timeout")
        # (the daemon waits at most MAX_LEASE_TIMEOUT for a player anyway)
        timeout = MAX_LEASE_TIMEOUT if timeout >= MAX_LEASE_TIMEOUT else float(timeout)
        slack = REQUEST_SLACK
        until = time.monotonic() + timeout
        while True:
            remaining = max(0.0, until - time.monotonic())
            deadline = time.monotonic() + remaining + max(0.0, slack - LEASE_ANSWER_MARGIN)
            body = {"client_pid": os.getpid(), "timeout": remaining, "deadline": deadline}
            try:
                return self.request(
                    "POST", f"/v1/environments/{_segment(environment)}/leases", body, timeout=remaining + slack
                )[1]
            except LeaseBusyError:
                pause = busy_pause()
                if until - time.monotonic() <= pause:
                    raise
                time.sleep(pause)

    def lease_status(self, lease_id: str, *, timeout: float | None = None) -> dict[str, Any]:
        """How a lease stands: ``ended`` (None while it runs) and ``player_exit`` (``{"returncode",
        "description"}`` once the daemon reaped a player that died under it). Raises LeaseError for an
        unknown lease."""
        return self.request("GET", f"/v1/leases/{_segment(lease_id)}", timeout=timeout)[1]

    def release(self, lease_id: str, *, clean: bool = True) -> dict[str, Any]:
        """End a lease; ``clean=False`` has the player recycled. Raises LeaseError for an unknown lease."""
        return self.request("DELETE", f"/v1/leases/{_segment(lease_id)}", {"clean": clean})[1]


def _pid_namespace() -> str | None:
    """This process's pid namespace (``pid:[INODE]``; None when /proc does not tell)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


@functools.cache
def _player_in_another_pid_namespace() -> type:
    """The :class:`~renderd.process.LeasedPlayer` of a player whose pid is the daemon's pid namespace's, not
    this process's (a client in a container of its own): here that pid names no process, or another one, so
    it is not watched. The player's end shows on its pipes instead (end of file on ``server.pipe``, EPIPE on
    ``client.pipe``: the daemon holds neither a writer of the one nor a reader of the other), and how it
    ended is asked of the daemon. (A class made on first use: renderd.process is imported only by sessions.)"""
    from renderd.process import LeasedPlayer

    class PlayerInAnotherPidNamespace(LeasedPlayer):
        def __init__(self, pid: int, *, log_path: str | None,
                     exit_status: Callable[[float], tuple[int | None, str | None]]) -> None:
            super().__init__(pid, log_path=log_path, exit_status=exit_status)
            self.close()  # (a pidfd of whatever process has that pid here, if any)
            self._ask = exit_status
            self._ended = False

        def _check_identity(self, start_time: int | None, leased_at: float) -> None:
            """Nothing to check: here the pid names no process or an unrelated one, which is never watched."""

        def exited(self) -> bool:
            """Whether the daemon has said the player ended (asked by :meth:`wait_exit` once its pipes ended)."""
            return self._ended

        def wait_exit(self, timeout: float) -> bool:
            if not self._ended:
                returncode, stopped_because = self._ask(max(0.0, timeout))
                self._ended = returncode is not None or stopped_because is not None
            return self._ended

    return PlayerInAnotherPidNamespace


def connect(
    environment: str = "demo",
    *,
    socket: str | os.PathLike[str] | None = None,
    timeout: float = DEFAULT_LEASE_TIMEOUT,
    step_timeout: float | None = None,
) -> Any:
    """Lease a ready player of ``environment`` from the daemon and return a :class:`renderd.client.Session`.

    ``socket``: the daemon's socket (else ``$RENDERD_SOCKET``, else the default path). ``timeout``:
    seconds to wait for a ready player. ``step_timeout``: per step (default: the environment's).
    The session's ``last_event`` is ``None`` until the first step. Closing the session releases the
    lease: cleanly when its last step completed, else the daemon recycles the player. A session whose
    screen size was changed (``reset(width=..., height=...)``) has its player recycled as well, so the
    next client gets the environment's size.

    Both are finite numbers of seconds, at most :data:`renderd.config.MAX_SECONDS` (``timeout`` may be 0:
    only a player that is ready now; the daemon waits at most an hour for one).

    Raises :class:`renderd.config.ArgumentError` (a ConfigError and a ValueError naming the argument) for
    a bad ``timeout`` or ``step_timeout`` (or an empty ``environment`` or ``socket``), :class:`LeaseError` when no player is ready in time,
    :class:`RenderdError` when the daemon cannot be reached or the environment does not exist.
    """
    from renderd.client import Session
    from renderd.config import check_seconds
    from renderd.process import LeasedPlayer
    from renderd.transport.fifo import FifoChannel

    timeout = check_seconds(timeout, "timeout", zero_ok=True)
    if step_timeout is not None:
        step_timeout = check_seconds(step_timeout, "step_timeout")
    control = ControlClient(socket)
    answer = control.lease(environment, timeout=timeout)
    lease_id = answer["lease"]
    watch = None
    channel = None
    try:
        # The player's pid is the daemon's pid namespace's (``pid_namespace``, from a daemon that says): in
        # another one it names no process here, or another process, which must not be taken for the player.
        elsewhere = answer.get("pid_namespace") not in (None, _pid_namespace())
        exit_status = lambda timeout: _exit_status(control, lease_id, timeout)  # noqa: E731
        if elsewhere:
            watch = _player_in_another_pid_namespace()(int(answer["pid"]), log_path=answer.get("log"),
                                                       exit_status=exit_status)
        else:
            # ``pid_start`` (from a daemon that says) is when the player started: the pidfd opened by its pid is
            # checked to pin that process, not one the pid was given to after the player exited and was reaped.
            start = answer.get("pid_start")
            watch = LeasedPlayer(int(answer["pid"]), log_path=answer.get("log"), exit_status=exit_status,
                                 start_time=start if isinstance(start, int) and not isinstance(start, bool) else None)
        channel = FifoChannel(answer["server_pipe"], answer["client_pipe"], player=watch)
    except BaseException as exc:
        if watch is not None:
            watch.close()
        _release(control, lease_id, clean=False)
        if isinstance(exc, RenderdError):
            raise LeaseError(f"lease of {environment!r} granted, but its pipes could not be opened: {exc}") from exc
        raise

    leased_size = (answer.get("width"), answer.get("height"))
    sessions: list[weakref.ReferenceType[Session]] = []  # weak: a forgotten session is still freed at once

    def on_close(error: BaseException | None) -> None:
        # A player whose screen the client changed (reset(width=..., height=...)) would keep that size and
        # hand the next client frames of another size than its lease says: it is recycled instead.
        session = sessions[0]() if sessions else None
        resized = session is not None and (session.width, session.height) != leased_size
        try:
            _release(control, lease_id, clean=error is None and not resized)
        finally:
            watch.close()

    session = Session(
        channel,
        on_close=on_close,
        width=answer.get("width"),
        height=answer.get("height"),
        step_timeout=float(step_timeout if step_timeout is not None else answer.get("step_timeout", 100.0)),
        sequence_id=0,
        pid=int(answer["pid"]),
        first_frame_received=True,  # (by the daemon)
    )
    sessions.append(weakref.ref(session))
    return session


def _segment(name: str) -> str:
    """``name`` as one segment of a request's path, percent-encoded (UTF-8): a "?", "#", space or non-ASCII
    character in it reaches the daemon as part of the name."""
    return urllib.parse.quote(str(name), safe="")


def _shown_path(path: str) -> str:
    """``path`` with a lease id in it written ``ID``: the id is its holder's secret (whoever has it can end the
    lease), and an error message is logged (``could not release the lease: ...``)."""
    if path.startswith("/v1/leases/"):
        _, slash, rest = path[len("/v1/leases/"):].partition("/")
        return "/v1/leases/ID" + slash + rest
    return path


def _kind(mode: int) -> str:
    """What a non-socket path is, for an error message."""
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "named pipe"
    if stat.S_ISREG(mode):
        return "regular file"
    return "special file"


def _exit_status(control: ControlClient, lease_id: str, timeout: float) -> tuple[int | None, str | None]:
    """How the leased player ended, from the daemon: its exit status once the daemon has reaped it, or why
    the daemon stopped it itself (the lease ended ``stopped``: its environment removed or changed, the
    daemon stopping), or that the daemon is no longer running (its socket is gone or refuses connections).
    ``(None, None)`` if the daemon tells neither within ``timeout`` seconds (or cannot be asked otherwise)."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        try:
            status = control.lease_status(lease_id, timeout=max(remaining, EXIT_STATUS_POLL))
        except RenderdError as exc:
            log.debug("cannot ask the daemon how the leased player exited: %s", exc)
            if isinstance(exc.__cause__, (FileNotFoundError, ConnectionRefusedError)):
                # Its socket is gone or nothing listens on it: the daemon stopped (ending the lease) or died,
                # and a player ends with its daemon (its players are started to die with it).
                return None, f"the renderd daemon at {control.socket} is no longer running, and its players end with it"
            return None, None
        player_exit = status.get("player_exit")
        if isinstance(player_exit, dict) and isinstance(player_exit.get("returncode"), int):
            return player_exit["returncode"], None
        if status.get("ended") in ("released", "unclean"):
            # This client released the lease (a close() from another thread while a step waited): the daemon
            # stops the player itself and records no exit status for it, so there is nothing to wait for.
            return None, f"this client released the lease ({status['ended']}) while the player worked"
        if status.get("ended") == "stopped":
            reason = status.get("ended_reason")
            if isinstance(reason, str) and reason:
                return None, f"the daemon stopped it: {reason}"
            if "ended_reason" not in status:  # a daemon that does not tell why
                return None, "the daemon ended the lease"
            # (None: the daemon tells why once it has reaped the player; a player that died of something
            # else first gets its exit status instead)
        if remaining <= 0:
            return None, None
        time.sleep(min(EXIT_STATUS_POLL, remaining))


def _release(control: ControlClient, lease_id: str, *, clean: bool) -> None:
    try:
        control.release(lease_id, clean=clean)
    except LeaseError as exc:  # the lease ended already (its player exited, or the daemon stopped)
        log.debug("releasing lease: %s", exc)
    except RenderdError as exc:
        if isinstance(exc.__cause__, (FileNotFoundError, ConnectionRefusedError)):
            # Its socket is gone or nothing listens on it: the daemon stopped or died, and the lease with it
            # (a step has said so already, if one ran since).
            log.info("the lease ended with the renderd daemon at %s, which is no longer running", control.socket)
        else:
            log.warning("could not release the lease: %s", exc)
