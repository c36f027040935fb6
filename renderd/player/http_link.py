"""The player side of the HTTP transport, posting exactly as an AI2-THOR Unity build does.

With ``AI2THOR_SERVER_TYPE=WSGI`` the player reads ``AI2THOR_HOST``, ``AI2THOR_PORT`` and
``AI2THOR_CLIENT_TOKEN`` and, over one persistent HTTP/1.1 connection (``http.client``):

1. ``GET /ping`` (expects ``pong``; retried for :data:`CONNECT_TIMEOUT` seconds while the server is not
   listening yet, or answers 503, every connection taken);
2. ``POST /train``: a multipart/form-data body the way Unity's ``WWWForm`` lays it out (image parts first,
   named ``image``, ``image_depth``, ...; then ``metadata`` (JSON) and ``token``), sent with only
   ``Content-Length`` and ``Content-Type`` headers, as a build writes it on a raw socket;
3. the response body is the next action (JSON); act, post the answer, and so on. The answer is sent
   first and the response read after (:meth:`HttpLink.send_answer`, :meth:`HttpLink.receive_action`), so
   a ``"when": "after"`` fault happens in between, as on the FIFO link.

Image parts are sent with ``socket.sendmsg`` straight from the image arrays. A response other than 200
ends the player: 410 (its client is gone, or renderd stopped serving it) with exit 0; 403 (wrong token)
with exit 2; anything else with exit 1, as does a body cut short of its Content-Length or headers cut short
by the server hanging up (:class:`HeadersCutShort`; never acted on).
An action that is not a JSON object exits 4, as on the FIFO link; one nested deeper than
:data:`~renderd.protocol.MAX_ACTION_DEPTH` is answered as a failed action. When the server hangs up while
the player is still sending (a 413 for a body over its limit), the log quotes the server's answer.
Every socket, including one ``http.client`` opens by itself after a ``Connection: close``, waits
without a timeout once the ping is answered (:class:`_Connection`). The player refuses an action after
which an answer could exceed :data:`MAX_ANSWER_SIZE` (renderd's request limit).

Fault actions (:mod:`renderd.player.faults`) work as on the FIFO link; the stream faults become their
HTTP equivalents: ``garbage`` posts a frame whose metadata is not JSON (renderd answers 400 and the
client's next call raises ProtocolError; the player then exits 1; ``--fault-at-start garbage`` posts such
a first frame), ``oversize`` declares a
Content-Length over any limit (413; exit 1), ``truncate`` sends half a request, hangs up and exits with
``code``, ``close`` sends half a request, hangs up and stays alive until SIGTERM.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import os
import secrets
import socket
import time
from typing import Any, Sequence

from renderd.errors import ProtocolError, os_error_message
from renderd.player import faults, signals
from renderd.player.core import Answer, Images, Player
from renderd.protocol import FORM_FIELD_NAMES, MAX_ACTION_SIZE, ActionTooDeep, byte_views, drop_written, parse_action
from renderd.transport.http import MAX_JSON_PART_SIZE, MAX_REQUEST_SIZE

__all__ = [
    "run_http",
    "HttpLink",
    "build_form",
    "EXIT_OK",
    "EXIT_IO_ERROR",
    "EXIT_BAD_TOKEN",
    "EXIT_PROTOCOL_ERROR",
    "CONNECT_TIMEOUT",
    "ENV_PING_TIMEOUT",
    "PING_TIMEOUT",
]

EXIT_OK = 0
EXIT_IO_ERROR = 1
#: 403: the server does not know AI2THOR_CLIENT_TOKEN (a bad environment, like a bad command line).
EXIT_BAD_TOKEN = 2
#: A bad environment variable (the player's exit code for a bad command line or environment).
EXIT_BAD_ENVIRONMENT = 2
EXIT_PROTOCOL_ERROR = 4
#: How long the player keeps trying to reach the server at start (seconds).
CONNECT_TIMEOUT = 30.0
#: Pause between connection attempts at start (seconds).
CONNECT_RETRY_INTERVAL = 0.05
#: Timeout of each connection attempt and of the /ping answer (seconds). Once connected, the player
#: waits for its next action without a timeout (a client may think for as long as it likes); SIGTERM
#: ends the wait.
PING_TIMEOUT = 5.0
#: Environment variable that sets the ping timeout instead (seconds, more than 0 and at most CONNECT_TIMEOUT),
#: so that a test of what follows the ping need not wait PING_TIMEOUT out.
ENV_PING_TIMEOUT = "RENDERD_PLAYER_PING_TIMEOUT"
#: Most buffers passed to one sendmsg.
MAX_IOV = 512
#: A Content-Length no server accepts (the ``oversize`` fault).
OVERSIZE_LENGTH = 2**40
#: Largest /train body renderd accepts: the player refuses an action after which an answer could be
#: larger (:meth:`~renderd.player.core.Player.limit_answer_size`).
MAX_ANSWER_SIZE = MAX_REQUEST_SIZE
#: How long to wait for the server's own answer after it hung up on a post (seconds): a server that
#: refuses a body (413) answers before it closes, and that answer says why.
ERROR_RESPONSE_TIMEOUT = 2.0

logger = logging.getLogger(__name__)


def ping_timeout(env: Any = None) -> float:
    """The ping timeout: :data:`ENV_PING_TIMEOUT` from ``env`` (``os.environ`` when None), else
    :data:`PING_TIMEOUT`. Raises _Stop (exit 2, a bad environment) for a value that is not a number of seconds
    more than 0 and at most :data:`CONNECT_TIMEOUT`."""
    raw = (os.environ if env is None else env).get(ENV_PING_TIMEOUT)
    if not raw:
        return PING_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value <= CONNECT_TIMEOUT:  # (NaN too)
        raise _Stop(f"{ENV_PING_TIMEOUT}={raw!r}: expected a number of seconds more than 0 and at most "
                    f"{CONNECT_TIMEOUT:g}", EXIT_BAD_ENVIRONMENT)
    return value


class _Stop(Exception):
    """End the link with an exit code."""

    def __init__(self, message: str, code: int, level: int = logging.ERROR) -> None:
        super().__init__(message)
        self.code = code
        self.level = level


def _part_header(boundary: bytes, name: str, *, binary: bool) -> bytes:
    # Unity's WWWForm: Content-Type first, then "Content-disposition" (lower-case d), binary data with
    # a file name; every part but the first is preceded by the CRLF that ends the previous body.
    if binary:
        ctype = b"application/octet-stream"
        disp = b'form-data; name="' + name.encode() + b'"; filename="file.dat"'
    else:
        ctype = b'text/plain; charset="utf-8"'
        disp = b'form-data; name="' + name.encode() + b'"'
    return b"--" + boundary + b"\r\nContent-Type: " + ctype + b"\r\nContent-disposition: " + disp + b"\r\n\r\n"


def _json_default(value: Any) -> Any:
    # numpy scalars and arrays in metadata (msgpack takes them on the FIFO link; JSON needs help)
    tolist = getattr(value, "tolist", None)
    if tolist is not None:
        return tolist()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"metadata value of type {type(value).__name__} cannot be sent as JSON")


def build_form(metadata: dict | bytes, images: Images, token: str | None, boundary: bytes) -> list[Any]:
    """The multipart body of one /train post as a list of buffers (image arrays are not copied).

    ``metadata`` is a dict, or its JSON already encoded (``Answer.json_metadata()``, assembled from text
    cached per player state: 6-8 us where ``json.dumps`` takes 62 us at 4 KB and 1.5 ms at 97 KB)."""
    out: list[Any] = []
    for ftype, array in images:
        out.append(_part_header(boundary, FORM_FIELD_NAMES[ftype], binary=True))
        out.append(memoryview(array).cast("B"))
        out.append(b"\r\n")
    out.append(_part_header(boundary, "metadata", binary=False))
    if not isinstance(metadata, bytes):
        metadata = json.dumps(metadata, separators=(",", ":"), default=_json_default).encode("utf-8")
    out.append(metadata)
    out.append(b"\r\n")
    out.append(_part_header(boundary, "token", binary=False))
    out.append((token or "").encode("utf-8"))
    out.append(b"\r\n--" + boundary + b"--\r\n")
    return out


class HeadersCutShort(http.client.HTTPException):
    """The server closed the connection before the blank line that ends its answer's headers."""


class _LastLine:
    """A response's file, remembering the last line read from it (the last header line, once ``begin`` ends)."""

    def __init__(self, fp: Any) -> None:
        self.fp = fp
        self.last: bytes | None = None

    def readline(self, *args: Any) -> bytes:
        self.last = self.fp.readline(*args)
        return self.last

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fp, name)


class _Response(http.client.HTTPResponse):
    """An HTTPResponse that refuses headers the server cut short. ``http.client`` takes end of input for the end of
    the headers, and a body without Content-Length for one that ends when the connection closes: a server that
    hangs up in the middle of its headers would pass for one that answered with an empty body (an action that is
    not JSON, exit 4) or with the bytes before a Content-Length it never sent. Raises :class:`HeadersCutShort`."""

    def begin(self) -> None:
        if self.headers is not None:
            return
        fp = self.fp
        lines = self.fp = _LastLine(fp)
        try:
            super().begin()
        finally:
            if self.fp is lines:
                self.fp = fp
        if lines.last == b"":
            self._close_conn()
            raise HeadersCutShort(f"the server closed the connection inside the headers of its answer "
                                  f"({self.status} {self.reason}), before the blank line that ends them")


class _Connection(http.client.HTTPConnection):
    """An HTTPConnection whose every socket is set up the same way, including one that ``http.client``
    opens by itself when the server closed the last (``Connection: close``): with the connection's
    timeout (None once the ping is answered: a client may think as long as it likes) and TCP_NODELAY.
    Its responses refuse headers cut short (:class:`_Response`)."""

    response_class = _Response

    def connect(self) -> None:
        super().connect()
        self.sock.settimeout(self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _send_all(sock: socket.socket, buffers: Sequence[Any]) -> None:
    views = byte_views(buffers)
    while views:
        drop_written(views, sock.sendmsg(views[:MAX_IOV]))


class HttpLink:
    """One persistent connection to renderd's HTTP endpoint, running the message loop for a Player."""

    def __init__(self, player: Player, host: str, port: int, token: str | None) -> None:
        self.player = player
        self.host = host
        self.port = port
        self.token = token
        self.conn: http.client.HTTPConnection | None = None
        self.steps = 0
        player.limit_answer_size(MAX_ANSWER_SIZE)
        player.limit_metadata_size(MAX_JSON_PART_SIZE)  # the metadata form part

    # -- connection ----------------------------------------------------------------------------------
    def connect(self) -> None:
        """Connect and ``GET /ping``, retrying until :data:`CONNECT_TIMEOUT` while nothing listens or the server
        answers 503 (renderd's listener when every connection is taken). Raises _Stop."""
        timeout = ping_timeout()
        deadline = time.monotonic() + CONNECT_TIMEOUT
        last: Exception | str | None = None
        while time.monotonic() < deadline:
            conn = _Connection(self.host, self.port, timeout=timeout)
            try:
                conn.request("GET", "/ping")
                response = conn.getresponse()
                body = response.read()
                if response.status == 200 and body.strip() == b"pong":
                    conn.timeout = None  # for every socket from now on, see _Connection
                    if conn.sock is None:  # the server closed the connection after answering
                        conn.connect()
                    conn.sock.settimeout(None)
                    self.conn = conn
                    logger.info("connected to http://%s:%d (ping answered; ping timeout %g s)", self.host, self.port,
                                timeout)
                    return
                conn.close()
                answer = f"GET /ping answered {response.status} {body[:200]!r}, expected 200 'pong'"
                if response.status != 503:
                    raise _Stop(answer, EXIT_IO_ERROR)
                if not isinstance(last, str):  # (Service Unavailable: renderd's when every connection is taken)
                    logger.warning("%s; trying again for up to %g s", answer, CONNECT_TIMEOUT)
                last = answer
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                last = exc
            time.sleep(CONNECT_RETRY_INTERVAL)
        raise _Stop(f"cannot reach http://{self.host}:{self.port} within {CONNECT_TIMEOUT:g} s: {last}", EXIT_IO_ERROR)

    def close(self) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            conn.close()

    # -- I/O -------------------------------------------------------------------------------------------
    def _send_request(self, body: Sequence[Any], length: int, boundary: bytes) -> None:
        conn = self.conn
        # Exactly the header lines a Unity build writes (no Host, no Accept-Encoding).
        conn.putrequest("POST", "/train", skip_host=True, skip_accept_encoding=True)
        conn.putheader("Content-Length", str(length))
        conn.putheader("Content-Type", 'multipart/form-data; boundary="' + boundary.decode() + '"')
        conn.endheaders()
        _send_all(conn.sock, body)

    def send_answer(self, answer: Answer) -> None:
        """Post one of the player's answers (its metadata JSON comes from the player's cache); the next
        action is read with :meth:`receive_action`."""
        self.send_form(answer.json_metadata(), answer.images)

    def send_form(self, metadata: dict | bytes, images: Images) -> None:
        """Post one answer without reading the response. Raises _Stop."""
        boundary = secrets.token_hex(20).encode()
        body = build_form(metadata, images, self.token, boundary)
        self._send(body, sum(memoryview(b).nbytes for b in body), boundary)

    def _send(self, body: Sequence[Any], length: int, boundary: bytes) -> None:
        """POST ``body`` (``length`` is its Content-Length) without reading the response. Raises _Stop."""
        try:
            self._send_request(body, length, boundary)
        except OSError as exc:
            raise self._send_failed(exc) from exc

    def _send_failed(self, exc: OSError) -> _Stop:
        """Why a post failed: the server's own answer when it sent one before hanging up (413, a body over
        its limit), as :meth:`_action` reads any non-200; else the OS error."""
        failure = os_error_message(exc, "POST /train failed while sending")
        if isinstance(exc, (BrokenPipeError, ConnectionResetError)) and self.conn is not None \
                and self.conn.sock is not None:
            try:
                self.conn.sock.settimeout(ERROR_RESPONSE_TIMEOUT)
                response = self.conn.getresponse()
                data = response.read(MAX_ACTION_SIZE + 1)
            except (OSError, http.client.HTTPException):
                pass  # no answer came: the OS error is all there is
            else:
                if response.status != 200:
                    try:
                        self._action(response.status, data)
                    except _Stop as stop:
                        return _Stop(f"{failure}; the server had answered: {stop}", stop.code, stop.level)
        return _Stop(failure, EXIT_IO_ERROR)

    def receive_action(self) -> dict:
        """The response to the last post: the next action. Raises _Stop for anything but a 200 with a whole
        JSON object, and :class:`~renderd.protocol.ActionTooDeep` for one the player answers as failed."""
        try:
            response = self.conn.getresponse()
            data = response.read(MAX_ACTION_SIZE + 1)
        except (OSError, http.client.HTTPException) as exc:
            raise _Stop(f"POST /train failed: {type(exc).__name__}: {exc}", EXIT_IO_ERROR) from exc
        if len(data) <= MAX_ACTION_SIZE and response.length:  # http.client returns what came before EOF
            raise _Stop(f"POST /train answered {response.status} with a body cut short: the server closed the "
                        f"connection after {len(data)} of its {len(data) + response.length} bytes", EXIT_IO_ERROR)
        return self._action(response.status, data)

    def _action(self, status: int, data: bytes) -> dict:
        if status != 200:
            text = data[:500].decode("utf-8", "replace")
            if status == 410:
                raise _Stop(f"renderd no longer serves this player (410): {text}", EXIT_OK, logging.INFO)
            if status == 403:
                raise _Stop(f"renderd refused the token (403): {text}; check AI2THOR_CLIENT_TOKEN", EXIT_BAD_TOKEN)
            raise _Stop(f"POST /train answered {status}: {text}", EXIT_IO_ERROR)
        if len(data) > MAX_ACTION_SIZE:
            raise _Stop(f"the action is over {MAX_ACTION_SIZE} bytes", EXIT_PROTOCOL_ERROR)
        try:
            return parse_action(data)
        except ActionTooDeep:
            raise
        except ProtocolError as exc:
            raise _Stop(f"{exc}: {data[:200]!r}", EXIT_PROTOCOL_ERROR) from exc

    # -- the loop --------------------------------------------------------------------------------------
    def serve(self, *, garbage_first: bool = False) -> int:
        """Connect, post the first message, answer actions until told to stop. Returns an exit code.

        ``garbage_first`` (``--fault-at-start garbage``) posts a first frame whose metadata is not JSON instead,
        as the ``garbage`` fault does (renderd answers 400; the player then exits 1)."""
        try:
            self.connect()
            if garbage_first:
                logger.warning("fault at start: posting a malformed first message (metadata that is not JSON)")
                self.post_garbage()
            else:
                self.send_answer(self.player.first_answer())
            logger.info("first message posted (%d x %d); player is ready", self.player.width, self.player.height)
            while True:
                try:
                    action = self.receive_action()
                except ActionTooDeep as exc:  # a whole response, but not an action it can take: answer it
                    self.reject(exc)
                    continue
                self.step(action)
        except _Stop as exc:
            signals.exiting()  # the exit code is decided: a signal from now on must not change it
            logger.log(exc.level, "%s after %d step(s); exiting", exc, self.steps)
            return exc.code
        finally:
            self.close()

    def step(self, action: dict) -> None:
        """Answer ``action`` (faults included, see :func:`renderd.player.faults.serve_action`). Only the
        answer is sent here; the next action is read afterwards, so a ``"when": "after"`` fault happens
        between the two, as on the FIFO link."""
        self.steps += 1
        faults.serve_action(self.player, action, self.send_answer, self.stream_fault)

    def reject(self, exc: ActionTooDeep) -> None:
        """Answer an action the player cannot take as a failed action (``InvalidArgument``)."""
        self.steps += 1
        logger.warning("answering an unacceptable action as failed: %s", exc)
        self.send_answer(self.player.rejected_answer(exc.action, str(exc), "InvalidArgument"))

    def post_garbage(self) -> None:
        """Post a frame that is well-formed multipart with the right token, but whose metadata is not JSON:
        renderd blames this player's stream (400 here, ProtocolError on the client's call). Raises _Stop."""
        boundary = secrets.token_hex(20).encode()
        body = [_part_header(boundary, "metadata", binary=False), b"this is not JSON", b"\r\n",
                _part_header(boundary, "token", binary=False), (self.token or "").encode("utf-8"),
                b"\r\n--" + boundary + b"--\r\n"]
        self._send(body, sum(len(b) for b in body), boundary)

    def stream_fault(self, fault: faults.Fault, action: dict) -> None:
        if fault.kind == "garbage":
            self.post_garbage()
            return
        metadata, images = self.player.handle(action)
        boundary = secrets.token_hex(20).encode()
        if fault.kind == "oversize":
            # Headers only, announcing a body no server accepts: renderd answers 413 before reading any.
            self._send([], OVERSIZE_LENGTH, boundary)
            return
        body = build_form(metadata, images, self.token, boundary)
        length = sum(memoryview(b).nbytes for b in body)
        joined = b"".join(bytes(memoryview(b).cast("B")) for b in body)
        try:
            self._send_request([joined[: length // 2]], length, boundary)
        except OSError as exc:
            raise _Stop(f"POST /train failed: {type(exc).__name__}: {exc}", EXIT_IO_ERROR) from exc
        self.conn.sock.shutdown(socket.SHUT_RDWR)
        self.close()
        if fault.kind == "truncate":
            logger.error("fault: half a request sent, connection closed; exiting with code %d", fault.code)
            faults.crash("exit", fault.code)
        logger.warning("fault: half a request sent, connection closed; staying alive until SIGTERM")
        faults.hang()


def run_http(player: Player, host: str, port: int, token: str | None, *, garbage_first: bool = False) -> int:
    """Serve ``player`` over HTTP at ``host:port`` with ``token``; returns the process exit code.
    ``garbage_first``: post a malformed first message (see :meth:`HttpLink.serve`)."""
    return HttpLink(player, host, port, token).serve(garbage_first=garbage_first)
