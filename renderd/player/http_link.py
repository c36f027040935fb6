"""The player side of the HTTP transport, posting exactly as an AI2-THOR Unity build does.

With ``AI2THOR_SERVER_TYPE=WSGI`` the player reads ``AI2THOR_HOST``, ``AI2THOR_PORT`` and
``AI2THOR_CLIENT_TOKEN`` and, over one persistent HTTP/1.1 connection (``http.client``):

1. ``GET /ping`` (expects ``pong``; retried for :data:`CONNECT_TIMEOUT` seconds while the server is not
   listening yet);
2. ``POST /train``: a multipart/form-data body the way Unity's ``WWWForm`` lays it out (image parts first,
   named ``image``, ``image_depth``, ...; then ``metadata`` (JSON) and ``token``), sent with only
   ``Content-Length`` and ``Content-Type`` headers, as a build writes it on a raw socket;
3. the response body is the next action (JSON); act, post the answer, and so on.

Image parts are sent with ``socket.sendmsg`` straight from the image arrays. A response other than 200
ends the player: 410 (its client is gone, or renderd stopped serving it) with exit 0; 403 (wrong token)
with exit 2; anything else with exit 1. An action that is not a JSON object exits 4, as on the FIFO link.

Fault actions (:mod:`renderd.player.faults`) work as on the FIFO link; the stream faults become their
HTTP equivalents: ``garbage`` posts a frame whose metadata is not JSON (renderd answers 400 and the
client's next call raises ProtocolError; the player then exits 1), ``oversize`` declares a
Content-Length over any limit (413; exit 1), ``truncate`` sends half a request, hangs up and exits with
``code``, ``close`` sends half a request, hangs up and stays alive until SIGTERM.
"""

from __future__ import annotations

import http.client
import json
import logging
import secrets
import socket
import time
from typing import Any, Sequence

from renderd.player import faults
from renderd.player.core import Answer, Images, Player
from renderd.protocol import FORM_FIELD_NAMES, MAX_ACTION_SIZE, byte_views, drop_written

__all__ = [
    "run_http",
    "HttpLink",
    "build_form",
    "EXIT_OK",
    "EXIT_IO_ERROR",
    "EXIT_BAD_TOKEN",
    "EXIT_PROTOCOL_ERROR",
    "CONNECT_TIMEOUT",
]

EXIT_OK = 0
EXIT_IO_ERROR = 1
#: 403: the server does not know AI2THOR_CLIENT_TOKEN (a bad environment, like a bad command line).
EXIT_BAD_TOKEN = 2
EXIT_PROTOCOL_ERROR = 4
#: How long the player keeps trying to reach the server at start (seconds).
CONNECT_TIMEOUT = 30.0
#: Pause between connection attempts at start (seconds).
CONNECT_RETRY_INTERVAL = 0.05
#: Timeout of each connection attempt and of the /ping answer (seconds). Once connected, the player
#: waits for its next action without a timeout (a client may think for as long as it likes); SIGTERM
#: ends the wait.
PING_TIMEOUT = 5.0
#: Most buffers passed to one sendmsg.
MAX_IOV = 512
#: A Content-Length no server accepts (the ``oversize`` fault).
OVERSIZE_LENGTH = 2**40

logger = logging.getLogger(__name__)


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

    # -- connection ----------------------------------------------------------------------------------
    def connect(self) -> None:
        """Connect and ``GET /ping``, retrying until :data:`CONNECT_TIMEOUT`. Raises _Stop."""
        deadline = time.monotonic() + CONNECT_TIMEOUT
        last: Exception | None = None
        while time.monotonic() < deadline:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=PING_TIMEOUT)
            try:
                conn.request("GET", "/ping")
                response = conn.getresponse()
                body = response.read()
                if response.status == 200 and body.strip() == b"pong":
                    if conn.sock is None:  # the server closed the connection after answering
                        conn.connect()
                    conn.sock.settimeout(None)
                    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    self.conn = conn
                    logger.info("connected to http://%s:%d (ping answered)", self.host, self.port)
                    return
                conn.close()
                raise _Stop(f"GET /ping answered {response.status} {body[:200]!r}, expected 200 'pong'", EXIT_IO_ERROR)
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

    def post_answer(self, answer: Answer) -> dict:
        """Post one of the player's answers (its metadata JSON comes from the player's cache)."""
        return self.post(answer.json_metadata(), answer.images)

    def post(self, metadata: dict | bytes, images: Images) -> dict:
        """Post one answer; return the next action. Raises _Stop for anything but a 200 with a JSON object."""
        boundary = secrets.token_hex(20).encode()
        body = build_form(metadata, images, self.token, boundary)
        return self._exchange(body, sum(memoryview(b).nbytes for b in body), boundary)

    def _exchange(self, body: Sequence[Any], length: int, boundary: bytes) -> dict:
        """POST ``body`` (``length`` is its Content-Length) and return the action renderd answers with."""
        try:
            self._send_request(body, length, boundary)
            response = self.conn.getresponse()
            data = response.read(MAX_ACTION_SIZE + 1)
        except (OSError, http.client.HTTPException) as exc:
            raise _Stop(f"POST /train failed: {type(exc).__name__}: {exc}", EXIT_IO_ERROR) from exc
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
            action = json.loads(data)
        except (UnicodeDecodeError, ValueError) as exc:
            raise _Stop(f"the action is not valid JSON: {exc}: {data[:200]!r}", EXIT_PROTOCOL_ERROR) from exc
        if not isinstance(action, dict):
            raise _Stop(f"the action must be a JSON object, got {type(action).__name__}", EXIT_PROTOCOL_ERROR)
        return action

    # -- the loop --------------------------------------------------------------------------------------
    def serve(self) -> int:
        """Connect, post the first message, answer actions until told to stop. Returns an exit code."""
        try:
            self.connect()
            action = self.post_answer(self.player.first_answer())
            logger.info("first message posted (%d x %d); player is ready", self.player.width, self.player.height)
            while True:
                action = self.step(action)
        except _Stop as exc:
            logger.log(exc.level, "%s after %d step(s); exiting", exc, self.steps)
            return exc.code
        finally:
            self.close()

    def step(self, action: dict) -> dict:
        """Answer ``action`` (faults included, see :func:`renderd.player.faults.serve_action`); return the
        next one."""
        self.steps += 1
        return faults.serve_action(self.player, action, self.post_answer, self.stream_fault)

    def stream_fault(self, fault: faults.Fault, action: dict) -> dict:
        metadata, images = self.player.handle(action)
        boundary = secrets.token_hex(20).encode()
        if fault.kind == "garbage":
            # Well-formed multipart with the right token, but metadata that is not JSON: renderd blames
            # this player's stream (400 here, ProtocolError on the client's next call).
            body = [_part_header(boundary, "metadata", binary=False), b"this is not JSON", b"\r\n",
                    _part_header(boundary, "token", binary=False), (self.token or "").encode("utf-8"),
                    b"\r\n--" + boundary + b"--\r\n"]
            return self._exchange(body, sum(len(b) for b in body), boundary)
        if fault.kind == "oversize":
            # Headers only, announcing a body no server accepts: renderd answers 413 before reading any.
            return self._exchange([], OVERSIZE_LENGTH, boundary)
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


def run_http(player: Player, host: str, port: int, token: str | None) -> int:
    """Serve ``player`` over HTTP at ``host:port`` with ``token``; returns the process exit code."""
    return HttpLink(player, host, port, token).serve()
