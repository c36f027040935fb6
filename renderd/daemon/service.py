"""The daemon process: runtime directories, the lock, the control socket, signals, systemd, cleanup.

:class:`Daemon` puts the pieces together for ``renderd start``::

    runtime_dir (0700) + renderd.lock (flock: one daemon per runtime_dir)
    control socket: refuse if another daemon answers on it, remove it if stale; directory 0700, socket 0600
    (with socket_group: directories 0750, socket 0660, pipes 0660 and player logs 0640, all that group)
    waitress serves the control API (renderd.daemon.api) on the socket, in a thread
    optional HTTP listener for transport = "http" players (renderd.transport.http), in a thread, which
    also serves the control API behind a bearer token (control_token_file, else runtime_dir/control.token)
    signals -> wake-up pipe: SIGTERM/SIGINT stop, SIGHUP reload, SIGCHLD wake
    Supervisor.run() on the main thread until stopped
    cleanup: players, managed Xvfb, pipes, socket, lock and every directory it created

Every file and directory the daemon creates is removed when it stops gracefully.
"""

from __future__ import annotations

import errno
import fcntl
import grp
import hashlib
import hmac
import json
import logging
import os
import secrets
import select
import shutil
import signal
import socket
import stat
import struct
import sys
import termios
import threading
import time
from collections.abc import Callable
from typing import Any

from renderd.config import (
    REFERENCE_PLAYER,
    RESTART_KEYS,
    Config,
    DaemonConfig,
    EnvironmentConfig,
    error_text,
    load,
    parse_http_address,
    settings,
)
from renderd.daemon.notify import Notifier, watchdog_interval
from renderd.daemon.supervisor import Player, Supervisor
from renderd.errors import ConfigError, LeaseBusyError, RenderdError, os_error_message
from renderd.process import poll_readable

__all__ = ["Daemon", "DaemonError", "LOCK_NAME"]

log = logging.getLogger(__name__)

#: The lock file in ``runtime_dir`` that one daemon holds (``flock``) for its whole life.
LOCK_NAME = "renderd.lock"
#: Seconds to wait for an existing socket to answer before calling it stale.
SOCKET_PROBE_TIMEOUT = 2.0
#: Attempts at locking the lock file when the file locked is no longer the one at its path (a daemon stopping
#: meanwhile removed it).
LOCK_ATTEMPTS = 10
#: Longest a starting daemon waits for another one, starting at the same moment, to bind its socket in the
#: same directory (the directory is locked from the check for a live socket until the socket is bound).
SOCKET_DIR_LOCK_TIMEOUT = 30.0
#: Seconds the control API's threads get to finish their requests at stop.
API_STOP_TIMEOUT = 5.0
#: Seconds between two looks, at stop, at whether the control API's requests under way are answered.
API_STOP_POLL = 0.01
#: Worker threads of the HTTP player listener at least (one per player waiting for an action).
HTTP_MIN_THREADS = 8
#: Seconds a control connection has to send a whole request: from when it is accepted, or its previous answer was
#: handed over, until the request's last byte (bytes trickling in do not extend it). One that is not being served
#: then (idle, half a request, an answer it does not read) is closed, so that idle or slow clients never hold the
#: socket's connections (waitress's ``connection_limit``) for long: a client sends its request at once. Well under
#: the control client's own timeout (``renderd.daemon.client.DEFAULT_REQUEST_TIMEOUT``), so that a socket whose
#: every connection is held answers ``renderd status`` still. A request being served (a lease request waiting for
#: a player) is never cut. A request begun and not whole by then is answered 408 first, saying how much of it came.
API_READ_TIMEOUT = 5
#: The read deadline, in seconds, while every connection of the control socket is taken (new ones wait to be
#: accepted): clients that trickle their requests in, more of them than the socket takes, would otherwise keep
#: the others out for API_READ_TIMEOUT per batch. A client sends its request at once; one being served (a lease
#: request waiting for a player) is never cut.
API_BUSY_READ_TIMEOUT = 1
#: The control socket's connection (waitress channel) in a request's environ: it learns the lease its answer grants.
CHANNEL_KEY = "renderd.channel"
#: Set (True) in a request's environ when its answer is to close the connection (``Connection: close``): a lease
#: request refused with LeaseBusyError, since the socket's connections are what is short then.
CLOSE_KEY = "renderd.close_connection"
#: Seconds between two checks of the control connections' read deadlines.
API_CLEANUP_INTERVAL = 1
#: Connections of the control socket that lease requests waiting for a player never take: however many clients
#: wait, releases (which serve them) and status requests can connect. A lease request that would wait when
#: only these are left is refused at once (503).
API_CONNECTION_HEADROOM = 8
#: How a reload's log line marks a ``[daemon]`` key that takes effect only when renderd restarts.
RESTART_LATER = " (when renderd restarts)"
#: Largest request head (request line and headers) of the control API; a request's head is a few hundred bytes.
API_MAX_HEADER_SIZE = 64 * 1024
#: The control token generated in ``runtime_dir`` when the HTTP listener is on and no
#: ``control_token_file`` is configured (mode 0600; removed when the daemon stops).
CONTROL_TOKEN_NAME = "control.token"
#: Random bytes of a generated control token (hex-encoded: twice as many characters).
CONTROL_TOKEN_BYTES = 32
#: Shortest control token accepted from ``control_token_file``.
MIN_CONTROL_TOKEN_LENGTH = 16
#: Paths of the HTTP listener that belong to HTTP players (their own token is in the form); every other
#: path is the control API, behind the control token.
PLAYER_PATHS = frozenset({"/ping", "/train"})
#: At most one log line per this many seconds about refused control requests on the HTTP listener.
REFUSAL_LOG_INTERVAL = 10.0
#: Characters of a refused request's path put in that log line (the peer chose them: escaped, and cut).
REFUSAL_LOG_PATH_CHARS = 200
#: Largest ``control_token_file`` read (a token is a few dozen characters).
MAX_CONTROL_TOKEN_FILE_SIZE = 4096


class DaemonError(RenderdError):
    """The daemon cannot start (another one runs, a directory cannot be made, the socket is taken)."""


class _NoPlatform:
    """What the reference player runs under when no platform is valid (it renders with numpy anyway)."""

    name = "none"
    env: dict[str, str] = {}
    args: list[str] = []
    executable = None

    def for_instance(self, index: int) -> tuple[dict[str, str], list[str]]:
        return {}, []

    def release(self) -> None:
        pass


class _Platforms:
    """Turns an environment's configuration into a platform selection (renderd.platforms).

    The reference player (``renderd-player``) renders with numpy on any machine, so when ``auto`` finds
    no valid platform for it, it runs without one (3-byte RGB), with a warning saying why; that is how
    the built-in ``demo`` environment serves on a bare machine. Any other player gets the PlatformError.
    """

    def select(self, config: EnvironmentConfig) -> Any:
        from renderd.errors import PlatformError

        try:
            return self._select(config)
        except PlatformError as exc:
            reference = os.path.basename(config.argv[0]) == REFERENCE_PLAYER
            if not (reference and config.platform == "auto"):
                raise
            log.warning(
                "environment %s: no platform auto considered is valid here, so the reference player runs without one "
                "(it renders with numpy anyway). %s", config.name, exc,
            )
            return _NoPlatform()

    def _select(self, config: EnvironmentConfig) -> Any:
        from renderd.platforms import PlatformRequest, select

        request = PlatformRequest(
            platform=config.platform,
            width=config.width,
            height=config.height,
            x_display=config.x_display,
            headless=config.platform == "headless",
            gpus=tuple(config.gpus),
            executable=config.argv[0],
            env=dict(config.env),
        )
        return select(request)

    def shutdown(self) -> None:
        """Stop every managed display (Xvfb) this process started."""
        import sys

        xvfb = sys.modules.get("renderd.platforms.xvfb")
        if xvfb is not None:
            xvfb.DisplayManager.shutdown_default()


def _json_error(start_response: Any, status: str, message: str, headers: list[tuple[str, str]] = ()) -> list[bytes]:
    body = json.dumps({"error": {"type": "RenderdError", "message": message}}).encode("utf-8") + b"\n"
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                            ("Cache-Control", "no-store"), *headers])
    return [body]


class _RemoteControl:
    """The control API on the HTTP listener, behind a bearer token (``Authorization: Bearer TOKEN``).

    The token is compared in constant time (SHA-256 digests of both, then ``hmac.compare_digest``, so not
    even its length leaks); a request without the right one is answered 401 and never reaches the API.
    Refusals are logged (rate-limited), never the token. ``app`` is set once the supervisor exists
    (503 until then).
    """

    def __init__(self, token: str) -> None:
        self._digest = hashlib.sha256(token.encode("utf-8")).digest()
        self.app: Any = None
        self._lock = threading.Lock()
        self._refused = 0
        self._last_log = -REFUSAL_LOG_INTERVAL

    def set_token(self, token: str) -> bool:
        """Use ``token`` from now on (a reload re-read the token file); True when it differs from the last."""
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        changed = not hmac.compare_digest(digest, self._digest)
        self._digest = digest
        return changed

    def authorized(self, environ: dict[str, Any]) -> bool:
        scheme, _, given = environ.get("HTTP_AUTHORIZATION", "").strip().partition(" ")
        digest = hashlib.sha256(given.strip().encode("utf-8", "surrogateescape")).digest()
        return hmac.compare_digest(digest, self._digest) and scheme.lower() == "bearer"

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if not self.authorized(environ):
            self._log_refusal(environ)
            return _json_error(
                start_response, "401 Unauthorized",
                "the control API on the HTTP listener needs `Authorization: Bearer TOKEN` with the daemon's "
                "control token ([daemon] control_token_file, else RUNTIME_DIR/control.token)",
                [("WWW-Authenticate", 'Bearer realm="renderd"')],
            )
        app = self.app
        if app is None:
            return _json_error(start_response, "503 Service Unavailable", "the daemon is starting",
                               [("Retry-After", "1")])
        from renderd.daemon.api import REMOTE_KEY

        environ[REMOTE_KEY] = True  # (a TCP peer: no lease for it, see api.create_lease)
        return app(environ, start_response)

    def _log_refusal(self, environ: dict[str, Any]) -> None:
        now = time.monotonic()
        with self._lock:
            self._refused += 1
            if now - self._last_log < REFUSAL_LOG_INTERVAL:
                return
            count, self._refused, self._last_log = self._refused, 0, now
        log.warning(
            "refused %s %s on the HTTP listener from %s: %s control token (401)%s",
            _loggable(environ.get("REQUEST_METHOD", "")), _loggable(environ.get("PATH_INFO", "")),
            environ.get("REMOTE_ADDR"),
            "wrong" if environ.get("HTTP_AUTHORIZATION") else "no",
            f"; {count - 1} more refused since the last report" if count > 1 else "",
        )


def _loggable(text: str) -> str:
    """``text`` from an unauthenticated peer, fit for a log line: at most REFUSAL_LOG_PATH_CHARS characters,
    with anything but printable ASCII escaped (a CR or LF in it would start a log line of the peer's choosing,
    an ESC drive a terminal showing the log)."""
    shown = text[:REFUSAL_LOG_PATH_CHARS]
    if not (shown.isascii() and shown.isprintable()):
        shown = ascii(shown)[1:-1]
    return shown + ("..." if len(text) > REFUSAL_LOG_PATH_CHARS else "")


def _listener_body_limit(method: str, path: str) -> int:
    """The largest body the HTTP listener reads for a request, decided from its head: a player's frame may be
    large, a control API request is small (the API refuses a larger one anyway). Checked before the body
    is read, so a peer without the control token cannot make the daemon read and hold 256 MiB per
    connection just to be told 401."""
    from renderd.daemon.api import MAX_BODY_SIZE

    return sys.maxsize if path in PLAYER_PATHS else MAX_BODY_SIZE


def _listener_app(player_app: Any, control: _RemoteControl) -> Any:
    """The HTTP listener's application: the players' routes, and the control API for everything else."""

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") in PLAYER_PATHS:
            return player_app(environ, start_response)
        return control(environ, start_response)

    return app


class _HttpPlayers:
    """The daemon's HTTP listener for ``transport = "http"`` players (renderd.transport.http).

    For each player: a bridge registered under a fresh token (given to the player as
    ``AI2THOR_CLIENT_TOKEN``) and a :class:`~renderd.transport.http.FifoPump` that puts the bridge's stream
    onto the player's FIFO pair, so the daemon's readiness check reads the first frame from
    ``server.pipe`` as usual and a leased client opens the pipes exactly as for a FIFO player. The daemon
    holds a writer of ``client.pipe`` for the player's whole life, so the pump never sees a client leave.
    A pump that ends with an error (the player posted a bad frame, hung up...) fails the player.
    """

    def __init__(self, address: str, players: int, control_token: str) -> None:
        from renderd.transport.http import PlayerBridgeRegistry, PlayerHttpServer, make_player_app

        host, port = parse_http_address(address)
        self.registry = PlayerBridgeRegistry()
        self.control = _RemoteControl(control_token)
        app = _listener_app(make_player_app(self.registry), self.control)
        self.server = PlayerHttpServer(self.registry, host=host, port=port, players=players, app=app,
                                       body_limit=_listener_body_limit)
        self.supervisor: Supervisor | None = None
        self._pumps: dict[int, Any] = {}
        #: Pumps told to stop by :meth:`unregister` whose thread may still be ending: joined by :meth:`stop`.
        self._ending: list[Any] = []

    def start(self) -> None:
        self.server.start()

    @property
    def address(self) -> tuple[str, int]:
        return self.server.host, self.server.port

    def register(self, player: Player) -> dict[str, Any]:
        """Register ``player`` (its FIFO pair exists, its process not yet): returns host, port and token
        for its environment. Called by the supervisor with its lock held."""
        from renderd.transport.http import FifoPump

        assert player.pair is not None
        name = f"{player.environment.name}[{player.index}]"
        bridge = self.registry.register(name=name, alive=lambda: _alive(player))

        def on_done(error: BaseException | None) -> None:
            if error is not None and self.supervisor is not None:
                self.supervisor.player_failed(player, bridge, f"its HTTP stream failed: {error}")

        pump = FifoPump(bridge, player.pair.server_path, player.pair.client_path, on_done=on_done)
        pump.start()
        player.http_token = bridge.token
        player.http_bridge = bridge
        self._pumps[id(player)] = pump
        host, port = self.address
        return {"host": host, "port": port, "token": bridge.token}

    def expect_end(self, player: Player) -> None:
        """``player`` is being stopped on purpose: its pump logs the end of its stream as information."""
        pump = self._pumps.get(id(player))
        if pump is not None:
            pump.expect_end()

    def unregister(self, player: Player) -> None:
        """Close the player's bridge and tell its pump to stop (its thread then closes its pipe ends, within
        PUMP_POLL_INTERVAL). Called by the supervisor with its lock held: it never waits for the pump's thread
        (up to its STOP_TIMEOUT); :meth:`stop` joins every pump's."""
        pump = self._pumps.pop(id(player), None)
        bridge, player.http_bridge = player.http_bridge, None
        if bridge is not None:
            self.registry.unregister(bridge)
        if pump is not None:
            pump.stop(0)
            self._ending = [p for p in self._ending if p.running]
            self._ending.append(pump)

    def stop(self) -> None:
        """Stop every pump and join its thread (within one STOP_TIMEOUT in all), then the listener."""
        from renderd.transport.http import STOP_TIMEOUT

        pumps = [*self._pumps.values(), *self._ending]
        self._pumps.clear()
        self._ending = []
        for pump in pumps:
            pump.stop(0)
        until = time.monotonic() + STOP_TIMEOUT
        for pump in pumps:
            pump.stop(max(0.0, until - time.monotonic()))
        for pump in pumps:
            if pump.running:
                log.warning("%s: the FIFO pump did not stop within %.1f s", pump.bridge.name, STOP_TIMEOUT)
        self.server.stop()


def _alive(player: Player) -> bool:
    """Whether ``player``'s process is still running, without reaping it (that is the loop's job)."""
    proc = player.proc
    if proc is None:
        return True  # registered just before the spawn
    if proc.returncode is not None:
        return False
    fd = proc.fileno()
    if fd is None:
        return True
    return not poll_readable(fd, 0)  # poll, not select: a daemon with many descriptors has pidfds over 1023


def _peer_pid(sock: socket.socket | None) -> int:
    """The pid of the process that connected ``sock`` (a unix socket), as this daemon's pid namespace numbers it
    (``SO_PEERCRED``, which the kernel translates): 0 when that process is in a pid namespace the daemon cannot
    see, or the socket has no peer credentials."""
    if sock is None:
        return 0
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return 0
    return struct.unpack("3i", creds)[0]


def _control_channel(on_lost_lease: Callable[[str, str], None] | None = None) -> type:
    """A waitress channel class for the control socket: its own error answers (malformed HTTP, an oversize body:
    answered before the application runs) carry the API's JSON error form instead of waitress's text/plain
    page, it remembers since when it waits for a request (``waiting_since``, for the read deadline), and its
    requests carry the connecting process's pid (``SO_PEERCRED``: ``renderd.peer_pid``), which a lease request's
    ``client_pid`` is checked against. A lease granted in an answer its client never read whole (it hung up as the
    lease was granted: the answer could not be written, or the client closed its end with the answer unread) is
    handed to ``on_lost_lease(lease_id, why)``: nobody knows that lease, whose client process may live on."""
    from waitress.channel import HTTPChannel
    from waitress.task import ErrorTask, WSGITask
    from waitress.utilities import BadRequest, Error

    from renderd.daemon.api import PEER_PID_KEY

    class RequestTimeout(Error):
        code = 408
        reason = "Request Timeout"

    class JsonErrorTask(ErrorTask):
        def execute(self) -> None:
            error = self.request.error
            message = f"{error.reason}: {error.body}" if error.body else error.reason
            if error.code == 413:  # waitress names its own limit, one over the API's (see _ControlServer)
                from renderd.daemon.api import MAX_BODY_SIZE

                message = f"{error.reason}: a control API request's body is at most {MAX_BODY_SIZE} bytes"
            body = json.dumps({"error": {"type": "RenderdError", "message": message}}).encode("utf-8") + b"\n"
            self.status = f"{error.code} {error.reason}"
            self.response_headers.extend([("Content-Type", "application/json"), ("Cache-Control", "no-store")])
            self.set_close_on_finish()
            self.content_length = len(body)
            self.write(body)

    class PeerTask(WSGITask):
        def get_environment(self) -> dict[str, Any]:
            environ = super().get_environment()
            environ[PEER_PID_KEY] = self.channel.peer_pid
            environ[CHANNEL_KEY] = self.channel
            return environ

        def build_response_header(self) -> bytes:
            if self.environ is not None and self.environ.get(CLOSE_KEY):
                self.set_close_on_finish()  # (``Connection: close``; the channel closes once the answer is written)
            return super().build_response_header()

    class ControlChannel(HTTPChannel):
        error_task_class = JsonErrorTask
        task_class = PeerTask

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.waiting_since = time.monotonic()
            self.serving = False  # a worker runs one of its requests (which it takes off ``requests`` on the way)
            self.read_closed = False  # the client shut its sending side and reads on
            # Leases granted in answers not yet known read, oldest first: [lease id, its answer's body is in the output
            # buffers (or written out of them)]. Several with lease requests sent one after another, unread.
            self.lease_answers: list[list[Any]] = []
            self.reset = False  # a read found the client closed its end with something we sent unread
            self.closing_self = False  # handle_write runs: a close now is the server's own (not the client's)
            self.lingering = False  # it shut its sending side after a lease's answer: waits for the client's close
            super().__init__(*args, **kwargs)
            self.peer_pid = _peer_pid(self.socket)

        def note_lease_answer(self, lease_id: str) -> None:
            """The application granted ``lease_id`` in the answer about to be written (a worker thread)."""
            with self.outbuf_lock:  # (handle_close clears `connected` under it: it sees this lease, or we see it closed)
                if self.connected:
                    self.lease_answers.append([lease_id, False])
                    return
            self._lost(lease_id, "hung up before the answer could be written")

        def write_soon(self, data: bytes) -> int:
            with self.outbuf_lock:  # (reentrant: waitress's write_soon takes it too) queued, and marked so, at once
                written = super().write_soon(data)
                for answer in self.lease_answers:
                    if not answer[1] and answer[0].encode() in data:
                        answer[1] = True
                return written

        def received(self, data: bytes) -> bool:
            if data and self.lease_answers:
                self._note_answers_read()
            return super().received(data)

        def _note_answers_read(self) -> None:
            """The client sends on: the answers queued are read if it has consumed every byte written to it (the
            socket's output queue, SIOCOUTQ, is empty: a lease request sent after another without reading its
            answer leaves that answer unread). Where that cannot be asked, sending on counts as having read them
            (renderd's clients read an answer before they send again)."""
            with self.outbuf_lock:
                if self.total_outbufs_len or self._unread_by_client() not in (0, None):
                    return
                self.lease_answers = [answer for answer in self.lease_answers if not answer[1]]

        def _unread_by_client(self) -> int | None:
            """Bytes written to the socket that its client has not read yet (SIOCOUTQ: on a unix socket, what the
            client's receive queue holds of them); None when that cannot be asked."""
            try:
                return struct.unpack("i", fcntl.ioctl(self.socket.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
            except (OSError, AttributeError, ValueError):
                return None

        def handle_write(self) -> None:
            self.closing_self = True
            try:
                super().handle_write()
            finally:
                self.closing_self = False

        def handle_close(self) -> None:
            lost = []
            with self.outbuf_lock:  # (a reentrant lock: waitress's handle_close takes it too)
                if self.lease_answers and self.connected:
                    # (the answers still here were unread when the client last sent; which of them a client that left
                    # bytes unread has read since cannot be told, so every one of them ends)
                    unread = self.total_outbufs_len or self.reset or self._socket_error() in (
                        errno.ECONNRESET, errno.EPIPE)
                    if (self.closing_self and not unread and not self.lingering and not self.read_closed
                            and all(queued for _, queued in self.lease_answers)
                            and self._unread_by_client() != 0 and self._linger()):
                        return  # (lingering, see _linger; a client that read every byte leaves nothing to wait for)
                    for lease_id, queued in self.lease_answers:
                        if not queued:
                            lost.append((lease_id, "hung up before the answer could be written"))
                        elif self.total_outbufs_len:
                            lost.append((lease_id, "hung up before the answer was written whole"))
                        elif unread:
                            lost.append((lease_id, "closed its connection without reading the answer"))
                self.lease_answers = []
                super().handle_close()
            for lease_id, why in lost:
                self._lost(lease_id, why)

        def _linger(self) -> bool:
            """The server closes a connection whose last answer granted a lease (``Connection: close``, HTTP/1.0, the
            read deadline): closing first, it would never learn whether the client read that answer. It shuts its
            sending side instead (the client sees the end of the answer) and waits, within the read deadline, for
            the client's close, which tells (ECONNRESET: closed with the answer unread). Returns False when the
            socket cannot be shut (then it closes)."""
            try:
                self.socket.shutdown(socket.SHUT_WR)
            except OSError:
                return False
            self.lingering = True
            self.will_close = self.close_when_flushed = False
            self.waiting_since = time.monotonic()
            return True

        def _socket_error(self) -> int:
            try:
                return self.socket.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) if self.socket is not None else 0
            except OSError:
                return 0

        def _lost(self, lease_id: str, why: str) -> None:
            if on_lost_lease is not None:
                on_lost_lease(lease_id, f"its client (pid {self.peer_pid}) {why}")

        def service(self) -> None:
            self.serving = True
            try:
                super().service()
            finally:
                self.waiting_since = time.monotonic()  # the next request's deadline runs from its answer
                self.serving = False
                if self.read_closed:
                    self._close_when_answered()

        def readable(self) -> bool:
            return not self.read_closed and super().readable()

        def handle_read(self) -> None:
            # waitress takes end of file for a client gone and closes the connection at once; a client that
            # only shut its sending side (`socat`, `nc -N`, a script done writing) reads on, and gets its answers.
            try:
                data = self.socket.recv(self.adj.recv_bytes)
            except OSError as exc:
                # (on a unix socket, ECONNRESET: the client closed its end with bytes we sent it unread)
                self.reset = exc.errno == errno.ECONNRESET
                self.handle_close()
                return
            if self.lingering:  # no more answers: its close (end of file) is all that is waited for
                if data:
                    self._note_answers_read()
                if not data or not self.lease_answers:
                    self.handle_close()
                return
            if data:
                self.last_activity = time.time()
                self.received(data)
            elif self._peer_gone():
                self.handle_close()
            else:
                self.read_closed = True
                self._close_when_answered()

        def _close_when_answered(self) -> None:
            """No more requests can come: close once those under way are answered, and a half-sent one with a 400
            saying so (the client reads on)."""
            with self.requests_lock:
                if not (self.requests or self.serving):
                    if not self._refuse_incomplete(BadRequest, "cut short: the client shut its sending side"):
                        self.close_when_flushed = True
            self.server.pull_trigger()

        def refuse_overdue(self, why: str) -> bool:
            """The read deadline passed (server loop thread): answer a request that has begun to arrive and is not
            whole with a 408 saying how much of it came (``why``: which deadline), then close. Returns False when
            none has begun."""
            with self.requests_lock:
                if self.requests or self.serving or self.lingering:
                    return False
                return self._refuse_incomplete(RequestTimeout, why)

        def _refuse_incomplete(self, error: type, why: str) -> bool:
            """Queue the answer ``error`` to the request begun and not whole (``requests_lock`` held), as waitress
            queues its own refusals: the error task answers, and the connection closes once that is written.
            Returns False when no request has begun."""
            request = self.request
            if request is None or request.completed or not (request.header_plus.strip() or request.headers_finished):
                return False
            if request.headers_finished:
                if request.chunked:
                    came = f"{request.body_bytes_received} byte(s) of its chunked body came (no last chunk)"
                else:
                    came = f"{request.body_bytes_received} of its {request.content_length} body byte(s) came"
                what = f"{request.command} {request.path} request"
            else:
                came = f"{len(request.header_plus)} byte(s) of its head came (no blank line ending it)"
                what = "request"
                request.parse_header(b"GET / HTTP/1.0\r\n")  # (what waitress does with a head it refuses)
            request.error = error(f"the {what} was {why}; {came}")
            request.completed = True
            self.request = None
            self.requests.append(request)
            self.server.add_task(self)
            return True

        def _peer_gone(self) -> bool:
            """Whether the client closed its end altogether (POLLHUP on a unix socket), not just its sending side."""
            fd = self.socket.fileno() if self.socket is not None else -1
            if fd < 0:
                return True
            poller = select.poll()
            poller.register(fd, 0)  # (POLLHUP and POLLERR are always reported)
            return any(flags & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, flags in poller.poll(0))

        def check_client_disconnected(self) -> bool:  # waitress.client_disconnected: a waiting lease request's
            # The socket itself, not only what the server's loop has made of it yet: a client that closed its end
            # just before a player became ready is seen at once, before the lease is granted (the loop notices
            # the hang-up a moment later, and the lease would go to a connection nobody reads, its player
            # LEASED for as long as the client process lives). A half-close is no POLLHUP (see _peer_gone).
            return not self.connected or self._peer_gone()

    return ControlChannel


def _close_overdue_channels(server: Any) -> None:
    """Replace ``server``'s maintenance (waitress closes a channel silent for ``channel_timeout``, however slowly
    its request trickles in) with the read deadline: a channel that serves no request and has not sent a whole
    one within API_READ_TIMEOUT of waiting for it (API_BUSY_READ_TIMEOUT while every connection the socket takes is
    taken) is closed; one whose answer is still being written keeps going while the client reads it."""

    def maintenance(now: float) -> None:
        monotonic = time.monotonic()
        full = server.in_connection_overflow  # (waitress: it accepts no connection until one closes)
        timeout = API_BUSY_READ_TIMEOUT if full else API_READ_TIMEOUT
        if full:
            why = (f"not whole within {timeout:g} s while every connection of the control socket was taken "
                   "(renderd.daemon.service.API_BUSY_READ_TIMEOUT)")
        else:
            why = f"not whole within {timeout:g} s (renderd.daemon.service.API_READ_TIMEOUT)"
        for channel in list(server.active_channels.values()):
            if channel.serving or channel.requests or monotonic - channel.waiting_since < timeout:
                continue
            if channel.total_outbufs_len:
                if now - channel.last_activity < timeout:
                    continue  # an answer the client is reading
            elif channel.refuse_overdue(why):
                continue  # answered 408, closed once that is written (or its reader too slow: above)
            channel.will_close = True

    server.maintenance = maintenance


class _ControlServer:
    """waitress serving the control API on the unix socket, on a thread of its own.

    ``threads`` serve the requests; a lease request that waits for a player has one more thread for as
    long as it waits (``renderd.lease_waiting`` in its environ, for :meth:`Supervisor.acquire`), so that
    however many clients wait, releases (which serve them) and status requests are never queued behind
    them. Waiting requests leave API_CONNECTION_HEADROOM of the socket's connections (waitress's
    ``connection_limit``) free for the same reason: one more is refused (LeaseBusyError, which clients retry until
    their deadline) instead of waiting, and its connection closed once the refusal is written (``Connection: close``).
    """

    def __init__(self, app: Any, path: str, threads: int,
                 on_lost_lease: Callable[[str, str], None] | None = None) -> None:
        import waitress

        from renderd.daemon.api import LEASE_GRANTED_KEY, MAX_BODY_SIZE

        self.path = path
        self.threads = threads
        self._waiting = 0  # lease requests waiting for a player now
        self._closed = False
        self._count_lock = threading.Lock()

        def with_lease_waiting(environ: dict[str, Any], start_response: Any) -> Any:
            def lease_waiting() -> Any:
                try:
                    return self._lease_waiting()
                except LeaseBusyError:
                    # Shedding load: the connections are what is short, so the refusal closes its own (a client
                    # that keeps it open would hold it until the read deadline). Clients ask again on a new one.
                    environ[CLOSE_KEY] = True
                    raise

            environ["renderd.lease_waiting"] = lease_waiting
            body = app(environ, start_response)
            lease_id = environ.get(LEASE_GRANTED_KEY)
            channel = environ.get(CHANNEL_KEY)
            if lease_id is not None and channel is not None:  # (before the answer is written: see handle_close)
                channel.note_lease_answer(lease_id)
            return body

        self.server = waitress.create_server(
            with_lease_waiting,
            unix_socket=path,
            unix_socket_perms="600",
            threads=threads,
            ident="renderd",
            cleanup_interval=API_CLEANUP_INTERVAL,  # (the read deadlines: see _close_overdue_channels)
            # Refuse an oversize body from its Content-Length (413) before reading any of it; waitress
            # refuses lengths >= its limit, the API those > MAX_BODY_SIZE.
            max_request_body_size=MAX_BODY_SIZE + 1,
            max_request_header_size=API_MAX_HEADER_SIZE,
            expose_tracebacks=False,
            clear_untrusted_proxy_headers=True,
            asyncore_use_poll=True,
            # Keep reading a connection while its request runs, so that a lease request whose client hung
            # up is seen as such (waitress.client_disconnected) and granted nothing.
            channel_request_lookahead=1,
        )
        self.server.channel_class = _control_channel(on_lost_lease)
        _close_overdue_channels(self.server)
        self.thread = threading.Thread(target=self._run, name="renderd-api", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _set_threads(self, waiting: int) -> None:
        with self._count_lock:
            if waiting > 0:
                # (waitress counts its listening socket and its wake-up trigger among its connections)
                limit = max(1, self.server.adj.connection_limit - 2 - API_CONNECTION_HEADROOM)
                if self._waiting >= limit:
                    raise LeaseBusyError(
                        f"{self._waiting} lease requests wait for a player already, as many as the control socket "
                        f"{self.path} takes while keeping connections free for releases; retry shortly"
                    )
            self._waiting += waiting
            if not self._closed:
                self.server.task_dispatcher.set_thread_count(self.threads + self._waiting)

    def _lease_waiting(self) -> Any:
        """A lease request begins to wait: a thread more until the function returned is called. Raises
        LeaseBusyError when as many requests wait already as the socket's connections allow."""
        self._set_threads(1)
        done = threading.Event()  # (once, whatever calls it)

        def stopped_waiting() -> None:
            if not done.is_set():
                done.set()
                self._set_threads(-1)

        return stopped_waiting

    def _run(self) -> None:
        try:
            self.server.run()
        except Exception:
            log.exception("the control API server stopped on an error")

    def _finish_requests(self) -> None:
        """Take no new connection, and give the requests under way (lease requests that wait are answered "the
        daemon is stopping") up to API_STOP_TIMEOUT to be answered and their answers to be handed over: closing
        the connections at once would cut those answers, and their clients would see a broken connection."""
        server = self.server
        server.accepting = False  # (read by the loop: the listening socket is no longer polled)
        server.pull_trigger()
        deadline = time.monotonic() + API_STOP_TIMEOUT
        while time.monotonic() < deadline and self.thread.is_alive():
            if not any(c.serving or c.requests or c.total_outbufs_len for c in list(server.active_channels.values())):
                return
            time.sleep(API_STOP_POLL)

    def stop(self) -> None:
        import waitress.wasyncore

        server = self.server
        done = threading.Event()

        def close_all() -> None:  # on the server's own loop thread: asyncore maps are not thread-safe
            try:
                waitress.wasyncore.close_all(server._map, ignore_all=True)
            finally:
                done.set()

        if not self.thread.is_alive() and self.thread.ident is None:
            close_all()  # never started (a start-up that failed after the bind): no loop to hand it to
        else:
            self._finish_requests()
            try:
                server.trigger.pull_trigger(close_all)
            except OSError:
                done.set()
            done.wait(API_STOP_TIMEOUT)
            self.thread.join(API_STOP_TIMEOUT)
        with self._count_lock:
            self._closed = True  # a request that stops waiting now starts no thread
        server.task_dispatcher.shutdown(timeout=API_STOP_TIMEOUT)


def _open_directory_warning(path: str, st: os.stat_result, group: int | None, key: str) -> str:
    """What a directory of renderd's whose mode lets others in (``st``) exposes, and what to do about it."""
    mode = stat.S_IMODE(st.st_mode)
    private = "700" if group is None else "750"
    writable = mode & (0o022 if group is None else 0o002)
    if writable and not mode & stat.S_ISVTX:
        return (f"{path} has mode {mode:04o}: other users can remove or replace what renderd keeps in it (such as "
                f"its socket) though they cannot open it; chmod go-w {path} (or chmod +t), or choose a directory of "
                "your own")
    if st.st_uid != os.geteuid() or writable:  # a shared directory (/tmp): not renderd's to change
        return (f"{path} has mode {mode:04o}: other users can see the names of what renderd keeps in it, nothing "
                "more (renderd's own files there are private); nothing needs doing")
    systemd = f" (with systemd: RuntimeDirectoryMode=0{private})" if key.startswith("runtime_dir") else ""
    return (f"{path} has mode {mode:04o}: other users can see the names of what renderd keeps in it, nothing more "
            f"(renderd's own files and directories there are private); nothing needs doing, unless those names "
            f"should be hidden too: then chmod {private} {path}{systemd}")


class Daemon:
    """One run of ``renderd start``. :meth:`run` returns the process exit status.

    ``config`` is already loaded (command-line overrides applied); ``config_path`` is re-read on SIGHUP
    (with the same ``overrides``). Raises DaemonError from :meth:`run` when it cannot start.
    """

    def __init__(self, config: Config, *, config_path: str | None = None, overrides: dict[str, Any] | None = None):
        self.config = config
        self.config_path = config_path
        self.overrides = dict(overrides or {})
        self.notifier = Notifier()
        self._created: list[str] = []  # directories this daemon created, innermost last
        self._warned_open: set[str] = set()  # directories whose open mode was warned about (once each, by real path)
        self._warned_group: set[str] = set()  # directories that keep socket_group out, warned about once each
        self._lock_fd: int | None = None
        self._lock_path: str | None = None
        self._socket_stat: os.stat_result | None = None  # the socket this daemon bound
        self._token_path: str | None = None
        self._remote: _RemoteControl | None = None  # the control API on the HTTP listener, behind the token
        self._owned: list[str] = []  # players and logs directories renderd made or took over (removed at stop)
        self._took_over = False  # the runtime directory held a killed daemon's lock (and its directories)
        self._serving = False  # start-up completed
        self._held_signals: list[int] = []  # stop/reload signals taken during start-up, for the loop
        self._previous_handlers: dict[int, Any] = {}
        self._watchdog = watchdog_interval()
        self._next_watchdog = 0.0
        #: The supervisor's last status line, and why the last reload failed (None once one succeeds): the
        #: status line shows both, so that a failed reload stays in sight until a reload succeeds.
        self._supervisor_status = ""
        self._reload_failure: str | None = None
        #: The environments the configuration file named when it was last loaded (at start, or by a reload).
        self._file_environments: set[str] = set(config.environments) if config_path is not None else set()
        self.supervisor: Supervisor | None = None

    # -- directories and the lock ------------------------------------------------------------------------
    def _make_private_dir(
        self, path: str, *, must_own: bool = True, group: int | None = None, key: str = ""
    ) -> None:
        """Create ``path`` (and missing parents) with mode 0700, remembering what was created; with
        ``group`` (a group id: ``socket_group``), mode 0750 and that group instead.

        An existing directory is never changed: it must belong to this user when ``must_own``, and a mode
        that lets others in is reported (what renderd puts inside is private in any case), as is one that
        keeps ``group`` out.
        """
        missing = []
        p = os.path.abspath(path)
        while not os.path.exists(p):
            missing.append(p)
            p = os.path.dirname(p)
        for d in reversed(missing):
            try:
                os.mkdir(d, 0o700)
            except FileExistsError:
                continue
            except OSError as exc:
                for_what = f" for {key}" if key else ""
                raise DaemonError(os_error_message(exc, f"cannot create the directory{for_what}")) from exc
            self._created.append(d)
            try:
                if group is not None:
                    os.chown(d, -1, group)  # the group first, then the mode that lets it in
                os.chmod(d, 0o700 if group is None else 0o750)  # whatever the umask
            except OSError as exc:
                raise DaemonError(os_error_message(exc, "cannot set the directory's group and mode")) from exc
        try:
            link = os.lstat(path)
            st = os.stat(path)
        except OSError as exc:
            raise DaemonError(os_error_message(exc, "cannot use the directory")) from exc
        if stat.S_ISLNK(link.st_mode) and link.st_uid not in (os.geteuid(), 0):
            # (followed, a link to a directory of ours would pass the checks below; but whoever made the link can
            # point it at a directory of theirs at any moment, between these checks and every later use)
            raise DaemonError(
                f"{path} is a symlink made by uid {link.st_uid}, not by this user ({os.geteuid()}): whoever made it "
                "can point it at a directory of theirs at any moment; renderd keeps its pipes and logs only in "
                "directories of its own. Remove it"
            )
        if not stat.S_ISDIR(st.st_mode):
            if key:
                raise DaemonError(f"cannot use {path} as the directory for {key}: it exists and is not a directory")
            raise DaemonError(f"{path} exists and is not a directory")
        if must_own and st.st_uid != os.geteuid():
            raise DaemonError(
                f"{path} belongs to uid {st.st_uid}, not to this user ({os.geteuid()}); renderd keeps its pipes "
                "and logs only in directories of its own"
            )
        mode = stat.S_IMODE(st.st_mode)
        if path not in self._created and mode & (0o077 if group is None else 0o027):
            real = os.path.realpath(path)  # (the socket's directory may be the runtime directory: one warning)
            if real not in self._warned_open:
                self._warned_open.add(real)
                log.warning("%s", _open_directory_warning(path, st, group, key))
        if group is not None and not (mode & 0o001 or (st.st_gid == group and mode & 0o010)):
            real = os.path.realpath(path)
            if real in self._warned_group:
                return
            self._warned_group.add(real)
            log.warning(
                "%s (mode %04o, group %d) keeps the members of socket_group (gid %d) out; give it that group and "
                "mode 0750 (with systemd: Group= and RuntimeDirectoryMode=0750)", path, mode, st.st_gid, group,
            )

    def _own_dir(self, path: str, group: int | None, *, clear: bool, left_by_renderd: bool) -> None:
        """Make ``path`` (``players``, or the default ``logs``, in the runtime directory) renderd's own: it
        is removed at stop.

        One that exists is taken over only when a daemon that was killed left it (``left_by_renderd``: its
        ``renderd.lock`` was still there, which only a graceful stop removes, after these directories);
        with ``clear`` its contents go first. Anything else there is someone else's, and start-up stops
        rather than delete or mix with it."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            raise DaemonError(os_error_message(exc, f"cannot use {path}")) from exc
        if st is not None:
            if not stat.S_ISDIR(st.st_mode) or not left_by_renderd:
                raise DaemonError(
                    f"{path} exists and was not made by renderd (no {LOCK_NAME} of a daemon that was killed "
                    "is beside it): renderd keeps its pipes and logs there and removes them when it stops, so it "
                    "uses no directory of someone else's; move it away, or choose another runtime_dir"
                )
            if clear:
                try:
                    shutil.rmtree(path)
                except OSError as exc:
                    why = f"cannot empty {path}, left by a daemon that was killed"
                    raise DaemonError(os_error_message(exc, why)) from exc
        self._make_private_dir(path, group=group)
        self._owned.append(path)

    def _lock(self, runtime_dir: str, group: int | None) -> None:
        path = os.path.join(runtime_dir, LOCK_NAME)
        for attempt in range(LOCK_ATTEMPTS):
            if attempt:  # the daemon that was stopping may have removed the directory as well
                self._make_private_dir(runtime_dir, group=group)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise DaemonError(os_error_message(exc, f"cannot open the lock file {path}")) from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    os.close(fd)
                    raise DaemonError(os_error_message(exc, f"cannot lock {path}")) from exc
                try:
                    other = os.pread(fd, 32, 0).decode().strip() or "unknown"
                except OSError:
                    other = "unknown"
                os.close(fd)
                raise DaemonError(
                    f"another renderd (pid {other}) is already running with runtime_dir {runtime_dir} "
                    f"(it holds {path}); stop it first, or give this one another --runtime-dir and --socket"
                ) from None
            # A daemon that was stopping may have unlinked the file between our open and our lock: the lock
            # would then be on a file nobody else can find. Only the file still at the path counts.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        else:
            raise DaemonError(f"cannot lock {path}: it was replaced {LOCK_ATTEMPTS} times while renderd locked it")
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:
            os.close(fd)
            raise DaemonError(os_error_message(exc, f"cannot write the lock file {path}")) from exc
        self._lock_fd = fd
        self._lock_path = path

    def _lock_socket_dir(self, directory: str) -> int:
        """Lock ``directory`` (the socket's) until the socket is bound: two daemons started at the same moment
        on one socket path must not both find it free. Returns the descriptor to close once bound."""
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise DaemonError(os_error_message(exc, f"cannot open the socket directory {directory}")) from exc
        deadline = time.monotonic() + SOCKET_DIR_LOCK_TIMEOUT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) or time.monotonic() > deadline:
                    os.close(fd)
                    why = "it stayed locked" if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN) else exc.strerror
                    raise DaemonError(
                        f"cannot lock the socket directory {directory} ({why}; another renderd starting there "
                        f"holds it while it binds its socket, for at most {SOCKET_DIR_LOCK_TIMEOUT:g} s)"
                    ) from None
            time.sleep(0.02)  # another daemon is between its socket check and its bind: a few ms

    def _control_token(self, token_file: str, runtime_dir: str) -> str:
        """The control token of the HTTP listener: read from ``token_file``, else generated into
        ``runtime_dir/control.token`` (0600, removed at stop). Raises DaemonError for a file that cannot
        be read or holds too short a token."""
        if token_file:
            return _read_control_token_file(token_file)
        token = secrets.token_hex(CONTROL_TOKEN_BYTES)
        path = os.path.join(runtime_dir, CONTROL_TOKEN_NAME)
        try:
            try:
                os.unlink(path)  # one left by a daemon that was killed
            except FileNotFoundError:
                pass
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.fchmod(fd, 0o600)  # whatever the umask
                os.write(fd, (token + "\n").encode())
            finally:
                os.close(fd)
        except OSError as exc:
            raise DaemonError(os_error_message(exc, f"cannot write the control token {path}")) from exc
        self._token_path = path
        log.info("control token for the HTTP listener written to %s", path)
        return token

    def _check_socket(self, path: str) -> None:
        """Refuse to start if a daemon answers on ``path``; remove it if it is a stale socket."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise DaemonError(f"{path} exists and is not a socket; remove it or choose another --socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        probe.settimeout(SOCKET_PROBE_TIMEOUT)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            log.info("removing the stale socket %s (nothing answers on it)", path)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise DaemonError(os_error_message(exc, f"cannot remove the stale socket {path}")) from exc
            return
        except OSError as exc:
            raise DaemonError(os_error_message(exc, f"cannot check the existing socket {path}")) from exc
        finally:
            probe.close()
        raise DaemonError(
            f"a process already listens on {path} (another renderd?); stop it first (`systemctl stop renderd`, "
            f"or SIGTERM to its pid from `renderd status --socket {path}`), or choose another --socket"
        )

    # -- signals, systemd --------------------------------------------------------------------------------
    # From the first step of start-up to the end of the clean-up, SIGTERM, SIGINT and SIGHUP never kill the
    # daemon half set up or half cleaned up (its socket, lock and directories would be left behind): during
    # start-up they are held and handed to the loop once it runs; during the clean-up (bounded: every wait in
    # it has a deadline) they are ignored; the handlers found at start are restored only after it.
    _HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def _hold_signals(self) -> None:
        def hold(signum: int, frame: Any) -> None:
            self._held_signals.append(signum)

        for sig in self._HANDLED_SIGNALS:
            self._previous_handlers[sig] = signal.signal(sig, hold)

    def _install_signals(self, wakeup_fd: int) -> dict[int, Any]:
        def queue_only(signum: int, frame: Any) -> None:  # the C handler already wrote signum to the pipe
            pass

        signal.set_wakeup_fd(wakeup_fd, warn_on_full_buffer=False)
        for sig in (*self._HANDLED_SIGNALS, signal.SIGCHLD):
            signal.signal(sig, queue_only)
        held, self._held_signals = self._held_signals, []
        if held:  # arrived during start-up: the loop acts on them first thing
            log.info("%s received during start-up", ", ".join(signal.Signals(s).name for s in held))
            os.write(wakeup_fd, bytes(held))
        return {
            signal.SIGTERM: self._on_stop_signal,
            signal.SIGINT: self._on_stop_signal,
            signal.SIGHUP: self._reload,
        }

    def _ignore_signals(self) -> None:
        """For the clean-up: stop and reload signals do nothing (the daemon is stopping already)."""
        signal.set_wakeup_fd(-1)
        for sig in self._HANDLED_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)

    def _restore_signals(self) -> None:
        for sig, handler in self._previous_handlers.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous_handlers.clear()

    def _on_stop_signal(self) -> None:
        assert self.supervisor is not None
        try:
            if not self.supervisor.stopping:
                log.info("stop requested by signal")
                self.notifier.stopping("stopping")
        finally:
            self.supervisor.request_stop()  # whatever happened to the notification

    def _reload(self) -> None:
        assert self.supervisor is not None
        if self.supervisor.stopping:
            log.info("SIGHUP ignored: the daemon is stopping")
            return
        # A driver installed or fixed, or an X server started, since the last probes: the selections after a
        # reload (FAILED players retried, changed environments) probe again instead of reusing the old verdict.
        try:
            from renderd.platforms import clear_caches

            clear_caches()
        except Exception:  # (never in the way of the reload)
            log.exception("SIGHUP: cannot forget the platform probe results")
        else:
            log.info("SIGHUP: platform probe results forgotten; the next platform selections probe again")
        if self.config_path is None:
            log.info("SIGHUP: no configuration file was given, nothing to reload")
            return
        self._reload_control_token()
        # Before the first READY=1 (players still starting), systemd is told neither RELOADING=1 nor READY=1:
        # READY=1 still means "every player has sent its first frame", and comes when that is so.
        ready = self.notifier.declared_ready
        if ready:
            self.notifier.notify(
                "RELOADING=1", f"MONOTONIC_USEC={int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6)}"
            )
        failed: str | None = None
        try:
            config = load(self.config_path, check_cross=False,
                          socket_from_env=self.overrides.get("socket") is None).with_daemon(**self.overrides)
            self._check_running_http(config)
        except ConfigError as exc:
            failed = error_text(exc)
            log.error("reload failed, keeping the running configuration: %s", failed)
        except Exception as exc:  # a bug, or an error a check missed: still a failed reload, never a stuck one
            failed = f"{self.config_path}: {type(exc).__name__}: {exc}"
            log.exception("reload failed, keeping the running configuration: %s", failed)
        if failed is not None:
            self._reload_failure = failed
            self.supervisor.note_reload(failed)
            self.notifier.notify(*(["READY=1"] if ready else []), f"STATUS={self._status_line()}")
            return
        log.info("reloading %s", self.config_path)
        try:
            changes = self._reload_changes(config)
        except Exception:  # (only a report: never in the way of the reload)
            log.exception("reload: cannot tell what changed")
        else:
            # (One line says it all, a key that waits for a restart too: at WARNING then, since it did not apply.)
            later = any(c.endswith(RESTART_LATER) for c in changes)
            log.log(logging.WARNING if later else logging.INFO, "reload: %s",
                    "; ".join(changes) if changes else "nothing changed")
        applied = False
        error: str | None = None
        try:
            applied = self.supervisor.reload(config)
            if applied:
                self._file_environments = set(config.environments)
        except Exception as exc:  # (logged with its traceback by the loop, which carries on)
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            # After RELOADING=1, READY=1 whatever happened (else systemd shows the service reloading for ever),
            # unless a stop began meanwhile (the supervisor logged it): systemd is told STOPPING then.
            # The status line again too, without a failure of an earlier reload.
            if applied or not self.supervisor.stopping:
                self._reload_failure = error
                self.supervisor.note_reload(error)
                status = self._status_line()
                assignments = (["READY=1"] if ready else []) + ([f"STATUS={status}"] if status else [])
                if assignments:
                    self.notifier.notify(*assignments)

    #: ``[daemon]`` keys that a reload leaves as they are until renderd restarts (``config.RESTART_KEYS``).
    RESTART_KEYS = RESTART_KEYS

    def _reload_changes(self, config: Config) -> list[str]:
        """What applying ``config`` changes, key by key, as the reload's log line says it: ``[daemon]`` keys,
        environments added or removed, and each changed key of an environment (secret values shown as
        ``***``), with whether its players are replaced."""
        assert self.supervisor is not None
        with self.supervisor.lock:
            old_daemon = self.supervisor.daemon_config
            old_envs = {
                name: (env.config, env.source, env.removing) for name, env in self.supervisor.environments.items()
            }
        changes = []
        for f in settings(DaemonConfig):
            before, after = getattr(old_daemon, f.name), getattr(config.daemon, f.name)
            if before != after:
                later = RESTART_LATER if f.name in self.RESTART_KEYS else ""
                changes.append(f"daemon.{f.name} {before!r} -> {after!r}{later}")
        for name, (_cfg, source, removing) in old_envs.items():
            if removing or name in config.environments:
                continue
            if source == "file":
                changes.append(f"environments.{name} removed (its players stop, its leases end)")
            elif name in self._file_environments:
                changes.append(
                    f"environments.{name} is gone from the file but kept: it was declared through the control API "
                    f"since (DELETE /v1/environments/{name} removes it)"
                )
        for name, new in config.environments.items():
            old = old_envs.get(name)
            if old is None:
                changes.append(f"environments.{name} added ({new.instances} instance(s))")
                continue
            if old[2]:
                changes.append(f"environments.{name} declared again while being removed ({new.instances} new "
                               "instance(s); the players of the removed declaration stop, their leases end)")
                continue
            before_cfg = old[0]
            raw_before, raw_after = before_cfg.to_dict(), new.to_dict()
            shown_before, shown_after = before_cfg.redacted(), new.redacted()
            keys = [k for k in raw_after if raw_before[k] != raw_after[k]]
            # (a PUT since: the file's definition replaces the API's, which the line says, changed or not)
            again = "again" if name in self._file_environments else "now"
            through_api = (f"environments.{name} is the file's {again}, replacing its declaration through the "
                           "control API" if old[1] != "file" else "")
            if not keys:
                if through_api:
                    changes.append(f"{through_api} (the same)")
                continue
            parts = []
            for k in keys:
                if shown_before[k] == shown_after[k]:
                    parts.append(f"environments.{name}.{k} changed (a secret value)")
                else:
                    parts.append(f"environments.{name}.{k} {shown_before[k]!r} -> {shown_after[k]!r}")
            more = new.instances - before_cfg.instances
            scaled = (f"{more} player(s) added" if more > 0 else
                      f"{-more} player(s) retired, idle or failed ones first, a leased one when its lease ends"
                      if more < 0 else "")
            # (what a change of restart does to exited players and restarts waited for: see
            # Supervisor._apply_restart_policy)
            exited = "exited ones restart"
            if new.restart != before_cfg.restart and new.restart == "never":
                exited = "exited ones are not restarted, and restarts waited for after an exit are cancelled"
            elif new.restart != before_cfg.restart and new.restart == "on-failure":
                exited = ("exited ones restart unless they exited with code 0, and a restart waited for after exit "
                          "code 0 is cancelled")
            if new.replaces_players(before_cfg):
                how = "players replaced one at a time, leased ones after their lease" + (f"; {scaled}" if scaled else "")
                if exited != "exited ones restart":
                    how += f"; {exited}"
            else:
                how = f"{scaled}, the others kept" if scaled else "players kept"
                how += f"; {exited}"
            changes.append((f"{through_api}: " if through_api else "") + f"{', '.join(parts)} ({how})")
        return changes

    def _check_running_http(self, config: Config) -> None:
        """A reloaded ``config``'s ``transport = "http"`` environments need the HTTP listener this daemon runs:
        ``[daemon] http`` takes effect only at a restart, so one the file sets now opens no listener, and players
        replaced with HTTP ones could never start. Raises ConfigError naming the file and the key."""
        if self.config.daemon.http:
            return
        for name, env in config.environments.items():
            if env.transport == "http":
                raise ConfigError(
                    "transport 'http' needs the HTTP listener, and this daemon runs without one: [daemon] http "
                    "(or --http) takes effect only when renderd restarts (systemctl restart renderd)",
                    path=self.config_path, key=f"environments.{name}.transport",
                )

    def _on_supervisor_status(self, text: str) -> None:
        self._supervisor_status = text
        self.notifier.status(self._status_line())

    def _status_line(self) -> str:
        """What systemd's status line says: the supervisor's, and a failed reload's reason until one succeeds."""
        if self._reload_failure is None:
            return self._supervisor_status
        failure = f"reload failed: {self._reload_failure}"
        return f"{self._supervisor_status}; {failure}" if self._supervisor_status else failure

    def _lost_lease(self, lease_id: str, why: str) -> None:
        """The answer that granted ``lease_id`` never reached its client (the control server's loop thread): end the
        lease, uncleanly (its client may have read the pipes' paths), so that its player serves the next client
        instead of staying LEASED to a lease nobody knows for as long as the client process lives."""

        def end() -> None:
            supervisor = self.supervisor
            if supervisor is None:
                return
            try:
                lease = supervisor.lease_status(lease_id)
                supervisor.release(lease_id, clean=False)
            except RenderdError:  # (NotFound: it ended already, the client's exit or the daemon's stop)
                return
            log.warning("lease of %s[%d] granted, but %s: lease ended, the player recycled",
                        lease["environment"], lease["index"], why)

        # (never the server's loop thread that calls this: the supervisor's lock may be held a moment)
        threading.Thread(target=end, name="renderd-lost-lease", daemon=True).start()

    def _reload_control_token(self) -> None:
        """SIGHUP re-reads ``control_token_file`` (the one given at start): a rotated token replaces the old
        one at once. A file that cannot be used now is logged, and the token in use is kept."""
        token_file = self.config.daemon.control_token_file
        if self._remote is None or not token_file:
            return
        try:
            token = _read_control_token_file(token_file)
        except DaemonError as exc:
            log.error("reload: %s; the HTTP listener keeps the control token it had", exc)
            return
        if self._remote.set_token(token):
            log.info("reload: control token re-read from %s; the previous one is refused from now on", token_file)

    def _tick(self, now: float) -> float | None:
        if self._watchdog is None:
            return None
        if now >= self._next_watchdog:
            self.notifier.watchdog()
            self._next_watchdog = now + self._watchdog
        return max(0.0, self._next_watchdog - now)

    # -- running -----------------------------------------------------------------------------------------
    def run(self) -> int:
        """Start, serve until SIGTERM/SIGINT, stop, clean up. Returns 0 after a graceful stop.

        Raises DaemonError when it cannot start (nothing is left behind then).
        """
        cfg = self.config.daemon
        api = http_players = None
        socket_dir_fd: int | None = None
        platforms = _Platforms()
        self._hold_signals()
        try:
            group = _group_id(cfg.socket_group)
            self._make_private_dir(cfg.runtime_dir, group=group, key="runtime_dir (--runtime-dir)")
            left_by_renderd = os.path.lexists(os.path.join(cfg.runtime_dir, LOCK_NAME))  # by one that was killed
            self._took_over = left_by_renderd
            self._lock(cfg.runtime_dir, group)
            # Right after the lock, before anything else can fail: a start that fails later then removes what
            # it took over together with the lock, never the lock alone (the leftovers would be orphaned).
            players_dir = os.path.join(cfg.runtime_dir, "players")
            self._own_dir(players_dir, group, clear=True, left_by_renderd=left_by_renderd)
            if cfg.log_dir:
                log_dir = cfg.log_dir
                created = len(self._created)
                self._make_private_dir(log_dir, group=group, key="log_dir")
                del self._created[created:]  # a configured log directory is kept after the daemon stops
            else:
                log_dir = os.path.join(cfg.runtime_dir, "logs")
                self._own_dir(log_dir, group, clear=False, left_by_renderd=left_by_renderd)
            self._make_private_dir(os.path.dirname(cfg.socket), must_own=False, group=group,
                                   key="the control socket (socket, --socket)")
            socket_dir_fd = self._lock_socket_dir(os.path.dirname(cfg.socket))
            self._check_socket(cfg.socket)
            if cfg.http:
                n = sum(e.instances for e in self.config.environments.values() if e.transport == "http")
                token = self._control_token(cfg.control_token_file, cfg.runtime_dir)
                http_players = _HttpPlayers(cfg.http, max(HTTP_MIN_THREADS, n), token)
                try:
                    http_players.start()
                except OSError as exc:
                    http_players = None
                    # (its message names the address and the reason; str(exc) would put "[Errno 98]" first)
                    raise DaemonError(
                        f"cannot start the HTTP listener ([daemon] http, --http): {exc.strerror or exc}"
                    ) from exc
                log.info("HTTP players: listening on %s:%d", *http_players.address)
            self.supervisor = Supervisor(
                self.config,
                players_dir=players_dir,
                log_dir=log_dir,
                platforms=platforms,
                http=http_players,
                on_ready=lambda: self.notifier.ready(),
                on_status=self._on_supervisor_status,
                on_tick=self._tick,
                file_group=group,
            )
            if http_players is not None:
                http_players.supervisor = self.supervisor
            from renderd.daemon.api import make_app

            app = make_app(self.supervisor, http_listener=cfg.http, control_socket=cfg.socket)
            if http_players is not None:
                http_players.control.app = app  # remote control: the same API, behind the token
                self._remote = http_players.control
            try:
                api = _ControlServer(app, cfg.socket, cfg.api_threads, on_lost_lease=self._lost_lease)
                self._socket_stat = os.stat(cfg.socket, follow_symlinks=False)
            except OSError as exc:
                raise DaemonError(os_error_message(exc, f"cannot listen on {cfg.socket}")) from exc
            finally:
                os.close(socket_dir_fd)  # bound (or failed): the next daemon may look
                socket_dir_fd = None
            if group is not None:  # 0600 until it has the group: nobody else can connect in between
                try:
                    os.chown(cfg.socket, -1, group)
                    os.chmod(cfg.socket, 0o660)
                except OSError as exc:
                    raise DaemonError(os_error_message(
                        exc, f"cannot give the control socket the group {cfg.socket_group!r} (socket_group)")) from exc
                log.info("socket_group %s (gid %d) may use %s and the players' pipes", cfg.socket_group, group,
                         cfg.socket)
            handlers = self._install_signals(self.supervisor.wakeup_fd)
            self.supervisor._signal_handlers.update(handlers)
            api.start()
            log.info(
                "renderd %s listening on %s (pid %d); environments: %s",
                _version(), cfg.socket, os.getpid(), ", ".join(self.config.environments) or "none",
            )
            self.notifier.status("starting players")
            if self.notifier.enabled:
                self.notifier.notify(f"MAINPID={os.getpid()}")
            self._serving = True
            self.supervisor.run()
            return 0
        finally:
            if self.supervisor is not None and not self.supervisor.stopping:
                # An error on the way up: nothing was started for good.
                self.notifier.stopping()
            self._ignore_signals()
            if socket_dir_fd is not None:  # start-up failed between the socket check and the bind
                os.close(socket_dir_fd)
            try:
                if api is not None:
                    api.stop()
                if http_players is not None:
                    http_players.stop()
                if self.supervisor is not None:
                    self.supervisor.close()
                platforms.shutdown()
                self._cleanup()
                self.notifier.close()
            finally:
                self._restore_signals()

    def _cleanup(self) -> None:
        cfg = self.config.daemon
        if self._socket_stat is not None:
            # Only the socket this daemon bound: one that replaced it at the path (another daemon's, after ours
            # was removed by hand) is not ours to remove.
            try:
                if os.path.samestat(os.stat(cfg.socket, follow_symlinks=False), self._socket_stat):
                    os.unlink(cfg.socket)
                else:
                    log.warning("%s is no longer the socket this daemon bound; left in place", cfg.socket)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("%s", os_error_message(exc, "cannot remove the socket"))
            self._socket_stat = None
        if self._token_path is not None:
            try:
                os.unlink(self._token_path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("%s", os_error_message(exc, "cannot remove the control token"))
            self._token_path = None
        if self._lock_fd is not None:
            if self._took_over and not self._serving:
                # A start that failed over a killed daemon's leftovers leaves them as it found them: its
                # logs (why it died) stay, and the lock beside them lets the next start take them over.
                log.info("start-up failed: the killed daemon's files in %s are left as they were", cfg.runtime_dir)
            else:
                for owned in self._owned:  # only the directories renderd made or took over
                    shutil.rmtree(owned, ignore_errors=True)
                if self._lock_path is not None:
                    try:
                        os.unlink(self._lock_path)
                    except OSError:
                        pass
            self._owned.clear()
            os.close(self._lock_fd)
            self._lock_fd = None
        for d in reversed(self._created):
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError as exc:  # not empty: something else put files there; leave it
                log.warning("%s", os_error_message(exc, "cannot remove a directory renderd created"))
        self._created.clear()


def _read_control_token_file(token_file: str) -> str:
    """The token in ``control_token_file``, surrounding whitespace removed. Raises DaemonError for a file that
    cannot be read, is not a regular file (a FIFO would block the read, a device never end it), is over
    MAX_CONTROL_TOKEN_FILE_SIZE bytes, or holds a token that is too short or not printable ASCII without
    spaces (a client sends a header's bytes in its own encoding: a non-ASCII token would match for some
    clients and never for others)."""
    try:
        # Without blocking: opening a FIFO nobody writes to would block for ever.
        fd = os.open(token_file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise DaemonError(f"control_token_file {token_file}: {os_error_message(exc, 'cannot read')}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DaemonError(f"control_token_file {token_file}: not a regular file (a file holding the token)")
        chunks = []
        size = 0
        while size <= MAX_CONTROL_TOKEN_FILE_SIZE:
            chunk = os.read(fd, MAX_CONTROL_TOKEN_FILE_SIZE + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise DaemonError(f"control_token_file {token_file}: {os_error_message(exc, 'cannot read')}") from exc
    finally:
        os.close(fd)
    if size > MAX_CONTROL_TOKEN_FILE_SIZE:
        raise DaemonError(f"control_token_file {token_file}: over {MAX_CONTROL_TOKEN_FILE_SIZE} bytes; it should "
                          "hold only the token")
    try:
        token = b"".join(chunks).decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise DaemonError(f"control_token_file {token_file}: not UTF-8 ({exc})") from None
    if len(token) < MIN_CONTROL_TOKEN_LENGTH or not (token.isascii() and token.isprintable()) or " " in token:
        raise DaemonError(
            f"control_token_file {token_file}: the token must be at least {MIN_CONTROL_TOKEN_LENGTH} "
            "characters, printable ASCII without spaces (for example: python -c 'import secrets; "
            "print(secrets.token_hex(32))')"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o007:
        log.warning("control_token_file %s has mode %04o: anyone on this machine can read the token",
                    token_file, mode)
    return token


def _group_id(name: str) -> int | None:
    """The id of ``socket_group`` (None when not set). Raises DaemonError for a group that is gone."""
    if not name:
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise DaemonError(f"socket_group {name!r}: there is no such group on this machine") from None


def _version() -> str:
    from renderd import __version__

    return __version__
