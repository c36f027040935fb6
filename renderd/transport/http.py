"""HTTP players: the WSGI application they post frames to, and the bridge onto renderd's framing.

Some players cannot use named pipes (older AI2-THOR builds, players on another host). They speak HTTP,
the way AI2-THOR's Unity builds do::

    player                                  renderd (this module)                       client
    ------                                  ---------------------                       ------
    GET /ping                  ------>      "pong"
    POST /train  multipart:    ------>      token -> bridge (constant-time compare)
      image, image_depth, ...               frame -> Message(METADATA msgpack, images)  --> Channel.recv()
      metadata  (JSON)                      (image bodies are views of the request body)
      token
                               <------      the next action (JSON)                      <-- Channel.send()

* :func:`make_player_app` is the WSGI application (``/ping``, ``/train``); any WSGI server can serve it.
* :class:`PlayerBridgeRegistry` holds one :class:`PlayerBridge` per player, found by the player's token.
* A bridge is the client's end of that player's stream: it implements the
  :class:`~renderd.transport.Channel` protocol, so a :class:`renderd.client.Session` drives an HTTP
  player exactly like a FIFO one (standalone: :func:`launch_http`, i.e. ``renderd.launch(transport="http")``).
* :class:`FifoPump` puts a bridge's stream onto a FIFO pair instead, behaving as a FIFO player would
  (the daemon's case: leased clients open the pipes exactly as for FIFO players).
* :class:`PlayerHttpServer` serves the application on a background thread (a small HTTP/1.1 server of
  its own; its docstring says why not waitress).

Copies. A FIFO frame is read from the pipe straight into the numpy array the client's ``Event`` holds.
An HTTP frame is too: :class:`PlayerHttpServer` receives a request's body (after the first read, which
also carries the request head and is copied once) directly into the body's own ``bytearray``;
:mod:`renderd.transport.multipart` finds the parts in place, and every image part becomes a numpy array
over that buffer. Served by another WSGI server, the application reads ``wsgi.input`` into such a buffer
with ``readinto`` (one copy, plus whatever that server's own buffering costs).
"""

from __future__ import annotations

import collections
import errno
import hashlib
import hmac
import inspect
import json
import logging
import os
import re
import secrets
import select
import shutil
import tempfile
import threading
import time
from typing import Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import unquote_to_bytes

import numpy as np

from renderd.errors import (
    AlreadyPendingCallError,
    CallOrderError,
    PlayerCrashed,
    PlayerTimeout,
    ProtocolError,
    RenderdError,
    json_kind,
    os_error_message,
)
from renderd.protocol import (
    DEFAULT_MAX_BODY_SIZE,
    END_OF_MESSAGE,
    FIELD_TYPES_BY_FORM_NAME,
    HEADER,
    HEADER_SIZE,
    MAX_ACTION_SIZE,
    NEED_DATA,
    Decoder,
    FieldType,
    Message,
    byte_views,
    drop_written,
    encode_message,
    encode_metadata,
    message_nbytes,
)
from renderd.transport.multipart import (
    MAX_PART_HEADER_SIZE,
    URLENCODED,
    MultipartError,
    Part,
    boundary_from_content_type,
    form_decode,
    parse_header_params,
    split_multipart,
    split_urlencoded,
)

__all__ = [
    "MAX_REQUEST_SIZE",
    "MAX_JSON_PART_SIZE",
    "DISCONNECT_POLL_INTERVAL",
    "FORM_FIELD_ALIASES",
    "BridgeClosed",
    "TrainPost",
    "PlayerBridge",
    "PlayerBridgeRegistry",
    "PlayerHttpServer",
    "FifoPump",
    "make_player_app",
    "launch_http",
    "launch",
]

logger = logging.getLogger(__name__)

#: Largest ``POST /train`` body accepted, checked from Content-Length before any of the body is read:
#: four full 4096 x 4096 RGBA frames (a generous multi-agent, multi-camera post). Per registry.
MAX_REQUEST_SIZE = 4 * DEFAULT_MAX_BODY_SIZE
#: A request body's buffer starts at most this large and doubles as the bytes arrive, so a request that
#: only announces a large body commits memory for what it sends, not for what it announces.
BODY_START_SIZE = 1 << 20
#: Tokens of closed or unregistered bridges a registry remembers (by digest), to answer their players'
#: later posts 410 (no longer served) rather than 403 (wrong token).
RETIRED_TOKENS = 4096
#: Largest ``metadata`` / ``actionReturns`` part accepted (AI2-THOR metadata listing every object of a
#: big scene is a few hundred KB).
MAX_JSON_PART_SIZE = 32 * 1024 * 1024
#: While a ``/train`` request waits for its action, how often it asks the server whether the player hung
#: up (seconds): ``renderd.client_disconnected`` (this module's server) or ``waitress.client_disconnected``.
DISCONNECT_POLL_INTERVAL = 0.25
#: How often a waiting :meth:`PlayerBridge.recv` asks whether the attached player process exited (s).
EXIT_POLL_INTERVAL = 0.05
#: After the player hung up or exited, how long recv waits for its exit status, to report it (s).
EXIT_CLASSIFY_TIMEOUT = 1.0
#: After the attached player exited while its HTTP connection is still open in the server, how long recv
#: waits for the server to finish what the player sent before it exited (a last frame, delivered first,
#: as a FIFO channel reads what the pipe holds) or to see the connection close (s). The server sees it
#: close as soon as it has read what was sent; only a server that does not report closes (waitress) waits
#: this long. Before the bridge knows the player's connection (its first frame, or a player that opens one
#: per request), recv waits as long while this module's server holds a request not yet handed to a bridge that
#: may be a frame: one whose head is not yet read, or a ``POST /train`` (never a control API request or a ping).
EXIT_DRAIN_TIMEOUT = 1.0
#: Longest single wait of :meth:`PlayerBridge.recv` (s): a later deadline, or an infinite one, is waited
#: for in turns of this length (a lock takes no timeout beyond ``threading.TIMEOUT_MAX``).
RECV_WAIT_SLICE = 3600.0
#: Form names some AI2-THOR versions use besides :data:`renderd.protocol.FORM_FIELD_NAMES`.
FORM_FIELD_ALIASES: dict[str, FieldType] = {"image_thirdParty_flows": FieldType.THIRD_PARTY_FLOW}

#: The one request that carries a player's frame (method, path): the application's ``/train`` route, and what
#: the server counts as a request that may still become a bridge's frame (see EXIT_DRAIN_TIMEOUT).
FRAME_ROUTE = ("POST", "/train")
#: The path of a player's hello (``GET /ping``, or ``HEAD``): a connection that has carried nothing but pings may
#: be a starting player's, which posts its first frame on it once it is ready (see PlayerHttpServer._make_room).
PING_PATH = "/ping"

_IMAGE_TYPES_BY_NAME: dict[str, FieldType] = {**FIELD_TYPES_BY_FORM_NAME, **FORM_FIELD_ALIASES}
#: Part sizes of recent bodies by body length: a player posts the same layout frame after frame, so the
#: next body of that length is split without searching its images (see split_multipart's size_hints).
LAYOUT_CACHE_SIZE = 64
_LAYOUTS: dict[int, tuple[int, ...]] = {}
_LAYOUTS_LOCK = threading.Lock()
_DEPTH_TYPES = frozenset({FieldType.DEPTH_IMAGE, FieldType.THIRD_PARTY_DEPTH})


class BridgeClosed(RenderdError):
    """The bridge is closed: its client went away, or renderd stopped serving the player."""


def _token_bytes(token: str) -> bytes:
    return token.encode("utf-8", "surrogateescape")


def _token_key(token: str) -> bytes:
    # Bridges are found by the token's digest, so the dict lookup reveals nothing about how much of a
    # guessed token is right; the final check is hmac.compare_digest on the tokens themselves.
    return hashlib.sha256(_token_bytes(token)).digest()


# ---------------------------------------------------------------------------------------------------
# Parsing a /train body
# ---------------------------------------------------------------------------------------------------


def _allowed_sizes(agents: list[Any]) -> tuple[set[int], set[int]]:
    """Byte sizes an image (colour, depth) may have given the agents' screen sizes (see renderd.event)."""
    colour: set[int] = set()
    depth: set[int] = set()
    for i, agent in enumerate(agents):
        if not isinstance(agent, dict):
            raise ProtocolError(f"metadata agents[{i}] is {json_kind(agent)}, expected an object")
        try:
            width, height = int(agent["screenWidth"]), int(agent["screenHeight"])
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise ProtocolError(f"metadata agents[{i}] lacks a valid screenWidth/screenHeight ({exc!r})") from exc
        if width <= 0 or height <= 0:
            raise ProtocolError(f"metadata agents[{i}] has screen size {width} x {height}")
        pixels = width * height
        colour.update((pixels * 3, pixels * 4))  # RGB, RGBA
        depth.update((pixels * 4, pixels * 3))  # float32, legacy 24-bit
    return colour, depth


def _is_urlencoded(content_type: str | None) -> bool:
    return bool(content_type) and parse_header_params(content_type)[0] == URLENCODED


class TrainPost:
    """One parsed ``POST /train`` body. Nothing is copied: image arrays are views of ``body``.

    ``token`` is the posted token (None when absent); ``images`` the ``(field type, uint8 array)`` pairs
    in the order posted (parts with unknown names are ignored). :meth:`metadata` parses and checks the
    rest; it is separate so that a request's token is checked before more work is done for it.

    The body is multipart/form-data, or ``application/x-www-form-urlencoded``: what Unity's ``WWWForm``
    posts when it holds no image (a step with ``renderImage=False``), i.e. ``metadata``, ``token`` and
    perhaps ``actionReturns``, percent-encoded; AI2-THOR's own server reads both.
    """

    __slots__ = ("body", "token", "images", "_image_parts", "_metadata_part", "_returns_part", "_encoded")

    def __init__(self, body: bytearray, content_type: str | None) -> None:
        """Split ``body``. Raises :class:`~renderd.transport.multipart.MultipartError` if it is malformed."""
        self._encoded = _is_urlencoded(content_type)
        if self._encoded:
            parts = split_urlencoded(body)
        else:
            hints = _LAYOUTS.get(len(body))
            try:
                boundary = boundary_from_content_type(content_type)
            except MultipartError as exc:
                if content_type and parse_header_params(content_type)[0] != "multipart/form-data":
                    raise MultipartError(f"{exc} (or {URLENCODED}, as a step without images posts)") from None
                raise
            parts = split_multipart(body, boundary, size_hints=hints)
            layout = tuple(p.size for p in parts)
            if layout != hints:
                with _LAYOUTS_LOCK:
                    if len(_LAYOUTS) >= LAYOUT_CACHE_SIZE:
                        del _LAYOUTS[next(iter(_LAYOUTS))]
                    _LAYOUTS[len(body)] = layout
        self.body = body
        self.token: str | None = None
        self._metadata_part: Part | None = None
        self._returns_part: Part | None = None
        self._image_parts: list[tuple[FieldType, Part]] = []
        view = memoryview(body)
        for part in parts:
            name = part.name
            ftype = None if self._encoded else _IMAGE_TYPES_BY_NAME.get(name)  # images only as binary parts
            if ftype is not None:
                self._image_parts.append((ftype, part))
            elif name == "metadata":
                self._metadata_part = self._metadata_part or part
            elif name == "token":
                if self.token is None:
                    raw = view[part.start : part.end]
                    if self._encoded and part.size <= MAX_PART_HEADER_SIZE:  # (a longer one is wrong anyway)
                        raw = form_decode(raw)
                    self.token = bytes(raw).decode("utf-8", "surrogateescape")
            elif name == "actionReturns":
                self._returns_part = self._returns_part or part
            else:
                logger.debug("ignoring unknown form part %r (%d bytes)", name, part.size)
        self.images: list[tuple[FieldType, np.ndarray]] = [
            (ftype, np.frombuffer(body, dtype=np.uint8, count=p.size, offset=p.start)) for ftype, p in self._image_parts
        ]

    def _json(self, part: Part, what: str) -> Any:
        raw: Any = memoryview(self.body)[part.start : part.end]
        if self._encoded and part.size <= 3 * MAX_JSON_PART_SIZE:  # each byte is at most 3 as sent ("%7B")
            raw = form_decode(raw)
        if len(raw) > MAX_JSON_PART_SIZE:
            raise ProtocolError(f"the {what} part is {len(raw)} bytes, over the limit of {MAX_JSON_PART_SIZE}")
        try:
            return json.loads(bytes(raw))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ProtocolError(f"the {what} part is not valid JSON: {exc}") from exc
        except RecursionError:
            raise ProtocolError(f"the {what} part nests arrays or objects too deeply to decode") from None

    def metadata(self) -> dict[str, Any]:
        """The metadata object, legacy ``actionReturns`` merged into agents that lack ``actionReturn``.

        Raises :class:`ProtocolError` when the part is missing or is not a JSON object with a non-empty
        ``agents`` list of valid screen sizes, or when an image's size fits none of the agents' screens.
        """
        if self._metadata_part is None:
            raise ProtocolError("the POST /train body has no 'metadata' part (a JSON object describing the frame)")
        metadata = self._json(self._metadata_part, "metadata")
        if not isinstance(metadata, dict):
            raise ProtocolError(f"the metadata part must be a JSON object, got {json_kind(metadata)}")
        agents = metadata.get("agents")
        if not isinstance(agents, list) or not agents:
            raise ProtocolError("metadata has no 'agents' list (every frame must describe its agents)")
        if self._returns_part is not None and self._returns_part.size:
            returns = self._json(self._returns_part, "actionReturns")
            if isinstance(returns, list):
                for agent, value in zip(agents, returns):
                    if isinstance(agent, dict) and "actionReturn" not in agent:
                        agent["actionReturn"] = value
        colour, depth = _allowed_sizes(agents)
        for ftype, part in self._image_parts:
            allowed = depth if ftype in _DEPTH_TYPES else colour
            if part.size not in allowed:
                kind = "float32 or 24-bit depth" if ftype in _DEPTH_TYPES else "RGB or RGBA"
                raise ProtocolError(
                    f"image part {part.name!r} is {part.size} bytes, but the agents' screen sizes allow "
                    f"{sorted(allowed)} bytes ({kind})"
                )
        return metadata


# ---------------------------------------------------------------------------------------------------
# The bridge: one player's stream
# ---------------------------------------------------------------------------------------------------


def _action_body(buffers: Sequence[Any]) -> bytes:
    """The ACTION JSON of one encoded client message (buffers from :func:`renderd.protocol.encode_action`)."""
    if len(buffers) == 3:  # the shape encode_action produces: header, body, end marker
        head = bytes(buffers[0])
        if len(head) == HEADER_SIZE:
            ftype, length = HEADER.unpack(head)
            body = bytes(buffers[1])
            if ftype == FieldType.ACTION and length == len(body) and bytes(buffers[2]) == END_OF_MESSAGE:
                return body
    decoder = Decoder(max_body_size=MAX_ACTION_SIZE)
    for buf in buffers:
        decoder.receive_data(buf)
    decoder.end_of_input()
    message = decoder.next_message()
    if message is NEED_DATA or decoder.next_message() is not NEED_DATA:
        raise ProtocolError("a client message for an HTTP player must be exactly one framed message")
    if len(message.fields) != 1 or message.fields[0][0] != FieldType.ACTION:
        raise ProtocolError(
            f"a client message must hold exactly one ACTION field, got {[t.name for t, _ in message.fields]}"
        )
    return bytes(message.fields[0][1])


class PlayerBridge:
    """One HTTP player's stream, between the WSGI application (the player's side) and a client.

    The client's side is the :class:`~renderd.transport.Channel` protocol: :meth:`recv` returns the
    player's next frame as a :class:`~renderd.protocol.Message` (a METADATA field holding the metadata as
    msgpack, then the image fields in the order posted, their bodies numpy views of the request body),
    :meth:`send` hands an encoded action to the player's waiting ``POST /train``, :meth:`close` ends the
    stream. The player's side is :meth:`post`, called by the application. Thread-safe; at most one frame
    and one action are in flight, as on the pipes.

    A player process can be watched with :meth:`attach` (a :class:`renderd.process.PlayerWatch`, as
    :func:`renderd.client.launch_player` passes) or an ``alive()`` callable: a waiting :meth:`recv`
    then raises :class:`PlayerCrashed` as soon as the player exits (after a frame it sent whole before it
    exited: see :data:`EXIT_DRAIN_TIMEOUT`), with its exit status and log tail.
    """

    def __init__(self, token: str, *, alive: Callable[[], bool] | None = None, name: str = "player") -> None:
        self.token = token
        self.name = name
        self._alive = alive
        self._player: Any = None
        self._cond = threading.Condition(threading.Lock())
        self._frames: collections.deque[Message] = collections.deque()
        self._action: bytes | None = None
        self._post_pending = False
        self._error: RenderdError | None = None
        self._closed = False
        self._offset = 0  # stream offset the frames would have on a pipe (for error messages)
        self._connection: str | None = None  # the player's HTTP connection, "host:port"
        self._closing_expected = False  # its last request asked the server to close the connection
        self._exit_seen: float | None = None  # time.monotonic() recv first saw the attached player exited
        # time.monotonic() the player's connection closed between requests, not taken as a hang-up, with no frame
        # since (for the timeout's message)
        self._idle_closed: float | None = None
        self._registry: PlayerBridgeRegistry | None = None  # the registry that made it (register())
        self._on_close: list[Callable[[], None]] = []
        self._woken = False
        # An eventfd that is readable while the client has something to take (a frame, or the stream's
        # error), so that a poll over many channels can include this one (made on first
        # fileno(); a bridge nobody polls never has one).
        self._ready_fd: int | None = None
        self._ready_signalled = False
        #: frames the player has posted (the first one included)
        self.frames_posted = 0
        #: ``time.monotonic()`` of the player's last ``POST /train`` (None before the first)
        self.last_post: float | None = None
        #: ``time.monotonic()`` the bridge was made: its player, started after, pings after it
        self.created = time.monotonic()

    # -- state -----------------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def error(self) -> RenderdError | None:
        """The error the stream failed with (the client's next call raises it), or None."""
        return self._error

    def attach(self, player: Any) -> None:
        """Watch ``player`` (a :class:`renderd.process.PlayerWatch`): its exit ends a waiting recv at once."""
        self._player = player

    @property
    def player(self) -> Any:
        """The attached :class:`renderd.process.PlayerWatch`, or None."""
        return self._player

    def fileno(self) -> int:
        """A descriptor that polls readable while :meth:`recv` would return or raise at once (a frame is
        waiting, or the stream failed), for waiting on many channels with one ``poll``
        (with the attached player's pidfd, which says when it exits). It belongs to the bridge and is
        closed by :meth:`close`; ``ValueError`` after that, as for a closed file."""
        with self._cond:
            if self._closed:
                raise ValueError(f"{self.name}: fileno() on a closed channel")
            if self._ready_fd is None:
                self._ready_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
                self._update_ready()
            return self._ready_fd

    def ready(self) -> bool:
        """True when :meth:`recv` would return or raise at once (a frame is waiting, the stream failed,
        the bridge is closed, or the attached player has exited); never waits."""
        with self._cond:
            if self._frames or self._error is not None or self._closed:
                return True
            watched = self._player is not None or self._alive is not None
            return watched and self._exited()

    def _update_ready(self) -> None:
        # Called with the lock held after any change of what recv would do: keep the eventfd readable
        # exactly while it would not wait.
        fd = self._ready_fd
        if fd is None:
            return
        ready = bool(self._frames) or self._error is not None
        if ready and not self._ready_signalled:
            os.eventfd_write(fd, 1)
            self._ready_signalled = True
        elif not ready and self._ready_signalled:
            try:
                os.eventfd_read(fd)
            except BlockingIOError:
                pass
            self._ready_signalled = False

    def add_close_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once when the bridge is closed (at once if it is closed already)."""
        with self._cond:
            if not self._closed:
                self._on_close.append(callback)
                return
        callback()

    def fail(self, error: RenderdError) -> None:
        """Fail the stream: the client's next (or current) recv/send raises ``error``; a waiting post ends."""
        with self._cond:
            if self._error is None and not self._closed:
                self._error = error
                logger.info("%s: stream failed: %s", self.name, error)
                self._update_ready()
            self._cond.notify_all()

    def connection_lost(self, connection: str, reason: str | None = None, *, between_requests: bool = False,
                        requests: int | None = None, failure: str | None = None, reset: bool = False) -> None:
        """The server saw ``connection`` ("host:port") close; if it was this player's, the stream ends:
        the player hung up, or (``reason``) the server closed it, e.g. after refusing a request.

        ``between_requests``: the player closed it while idle, no request begun. HTTP lets a client close
        an idle connection at any time (and post its next frame on a new one), so that ends the stream only
        when no player process is watched (:meth:`attach`, ``alive``: its exit says it died), and the
        connection carried more than one request (``requests``, when the server counts them): a player that
        kept its connection across requests and closes it has hung up, one that closes it after each
        request (``requests.post`` without a Session) says nothing by it.

        ``failure`` (why the peer is gone: the connection's socket failed, say its host answered no TCP keepalive
        probe) ends the stream whenever it happens: the player is gone, not just its connection. Except a reset
        (``reset``) of a watched player's connection: a player's process resets it when it closes it (or ends) with
        data unread, or aborts it (``SO_LINGER`` 0), and a restarted host is not what happened to a process renderd
        watches; it is a close like any other there, and the process's exit says whether the player is gone (and how
        it ended)."""
        with self._cond:
            if connection != self._connection:
                return
            self._connection = None
            if self._closed or self._closing_expected:
                return
            watched = self._player is not None or self._alive is not None
            if reset and watched:
                failure = None
            if (between_requests and reason is None and failure is None
                    and (watched or (requests is not None and requests <= 1))):
                logger.debug("%s closed its idle HTTP connection %s between frames", self.name, connection)
                self._idle_closed = time.monotonic()
                return
            if self._error is None:
                if failure is not None:
                    self._error = PlayerCrashed(f"{self.name} is gone: {failure}")
                elif reason is None:
                    self._error = PlayerCrashed(f"{self.name} closed its HTTP connection")
                else:
                    self._error = PlayerCrashed(f"renderd closed the HTTP connection of {self.name}: {reason}")
                logger.info("%s: %s", self.name, self._error)
                self._update_ready()
            self._cond.notify_all()

    # -- the player's side (the WSGI application) ----------------------------------------------------------
    def _check_postable(self) -> None:
        if self._closed:
            raise BridgeClosed(f"{self.name}: renderd no longer serves this player (its bridge is closed)")
        if self._error is not None:
            raise self._error
        if self._post_pending:
            raise AlreadyPendingCallError(
                f"{self.name}: a POST /train is already waiting for its action; post one frame at a time"
            )

    def check_postable(self) -> None:
        """Raise :class:`BridgeClosed`, :class:`AlreadyPendingCallError` or the stream's error if a post
        would be refused now."""
        with self._cond:
            self._check_postable()

    def post(
        self,
        fields: list[tuple[FieldType, Any]],
        *,
        connection: str | None = None,
        closing: bool = False,
        disconnected: Callable[[], bool] | None = None,
    ) -> bytes:
        """Hand one frame (metadata and image fields) to the client; wait for and return the action.

        ``connection`` ("host:port") names the player's HTTP connection, so that :meth:`connection_lost`
        can tell when it closes; ``closing`` says this request asked for the connection to be closed
        after it (then its closing is not a hang-up). Waits as long as the bridge lives: a ready player
        idles here until a client steps it. ``disconnected()``, if given, is asked every
        :data:`DISCONNECT_POLL_INTERVAL` seconds; a true answer fails the stream with :class:`PlayerCrashed`
        (a string answer says why the player is gone, and is quoted). Raises :class:`BridgeClosed` when the
        bridge closes, :class:`AlreadyPendingCallError` when another post is waiting, or the stream's error.
        """
        sizes = [memoryview(body).nbytes for _, body in fields]
        with self._cond:
            self._check_postable()
            offsets = []
            pos = self._offset
            for size in sizes:
                offsets.append(pos)
                pos += HEADER_SIZE + size
            pos += HEADER_SIZE  # end of message
            self._frames.append(Message(fields, self._offset, pos - self._offset, offsets))
            self._offset = pos
            self._post_pending = True
            self._connection = connection
            self._idle_closed = None
            self._closing_expected = closing
            self.frames_posted += 1
            self.last_post = time.monotonic()
            self._update_ready()
            self._cond.notify_all()
            interval = DISCONNECT_POLL_INTERVAL if disconnected is not None else None
            try:
                while True:
                    action = self._action
                    if action is not None:
                        self._action = None
                        return action
                    if self._closed:
                        raise BridgeClosed(f"{self.name}: the bridge closed while the player waited for an action")
                    if self._error is not None:
                        raise self._error
                    gone = disconnected() if disconnected is not None else False
                    if gone:
                        if isinstance(gone, str):  # why the peer is gone (renderd's server: its socket failed)
                            self._error = PlayerCrashed(f"{self.name} is gone while waiting for an action: {gone}")
                        else:
                            self._error = PlayerCrashed(f"{self.name} closed its HTTP connection while waiting for an action")
                        self._update_ready()
                        self._cond.notify_all()
                        raise self._error
                    self._cond.wait(interval)
            finally:
                self._post_pending = False

    # -- the client's side: the Channel protocol ------------------------------------------------------------
    def _exited(self) -> bool:
        if self._player is not None:
            return bool(self._player.exited())
        if self._alive is not None:
            return not self._alive()
        return False

    def _requests_unattributed(self) -> bool:
        registry = self._registry
        return registry is not None and registry._requests_unattributed(self)

    def _crashed(self, context: str) -> PlayerCrashed:
        player = self._player
        if player is None:
            return PlayerCrashed(context)
        player.wait_exit(EXIT_CLASSIFY_TIMEOUT)
        return player.crashed(context)

    def recv(self, deadline: float, deadline_name: str = "step_timeout") -> Message:
        """The player's next frame.

        Raises :class:`PlayerTimeout` when ``deadline`` (``time.monotonic()``) passes,
        :class:`PlayerCrashed` when the player exits or hangs up (with its exit status and log tail when a
        player is attached), :class:`ProtocolError` when it posted a bad frame, and
        :class:`CallOrderError` after :meth:`close`.
        """
        started = time.monotonic()
        message = self.wait_frame(deadline, deadline_name)
        if message is None:
            now = time.monotonic()
            waited = now - started
            closed = self._idle_closed
            hint = ""
            if closed is not None and self._player is None and self._alive is None:
                hint = (f"; it closed its HTTP connection {now - closed:.3g} s ago, after its last answer, and has "
                        "posted nothing since (renderd watches no process of it, so cannot tell whether it exited: "
                        "register its bridge with alive= or attach() to have its exit noticed at once)")
            raise PlayerTimeout(
                f"{self.name} posted no frame within {deadline_name} (waited {waited:.3g} s){hint}",
                deadline=deadline_name,
                seconds=waited,
            )
        return message

    def wait_frame(self, deadline: float, deadline_name: str = "step_timeout") -> Message | None:
        """Like :meth:`recv`, but None when ``deadline`` passes (or :meth:`wake` is called) with no frame."""
        watched = self._player is not None or self._alive is not None
        with self._cond:
            self._woken = False
            while True:
                if self._frames:
                    message = self._frames.popleft()
                    self._update_ready()
                    return message
                error = self._error
                if error is not None:
                    break
                if self._closed:
                    raise CallOrderError(f"{self.name}: recv() on a closed channel")
                remaining = deadline - time.monotonic()
                if not remaining > 0 or self._woken:  # (a NaN deadline too, which never compares as passed)
                    return None
                if watched:
                    if self._exited():
                        # While its connection is still open, the server may still be reading or parsing
                        # a frame the player sent whole before it exited: that frame comes first (or the
                        # connection's close, an error), for at most EXIT_DRAIN_TIMEOUT.
                        now = time.monotonic()
                        if self._exit_seen is None:
                            self._exit_seen = now
                        # Before the bridge knows the player's connection (its first frame, or a player that
                        # opens one per request), that frame may be any request the server has not yet
                        # handed to a bridge.
                        draining = self._connection is not None or self._requests_unattributed()
                        if not draining or now - self._exit_seen >= EXIT_DRAIN_TIMEOUT:
                            error = self._error = PlayerCrashed(f"{self.name} exited")
                            self._update_ready()
                            break
                    remaining = min(remaining, EXIT_POLL_INTERVAL)
                self._cond.wait(min(remaining, RECV_WAIT_SLICE))
        if isinstance(error, PlayerCrashed) and self._player is not None and error.returncode is None:
            # Say how the player ended (exit code or signal, and the tail of its log).
            raise self._crashed(f"{error} while renderd waited for its next frame ({deadline_name})") from None
        raise error

    def wake(self) -> None:
        """Make a waiting :meth:`wait_frame` return None now (for a pump being stopped)."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def send(self, buffers: Sequence[Any], deadline: float, deadline_name: str = "step_timeout") -> None:
        """Give the player its next action (one encoded ACTION message). Never blocks.

        Raises :class:`ProtocolError` for anything but one ACTION message, the stream's error,
        :class:`CallOrderError` after :meth:`close`, :class:`AlreadyPendingCallError` if the previous
        action has not been taken by the player yet.
        """
        body = _action_body(buffers)
        if len(body) > MAX_ACTION_SIZE:
            raise ProtocolError(f"the action is {len(body)} bytes, over the limit of {MAX_ACTION_SIZE}")
        with self._cond:
            if self._error is not None:
                error = self._error
            elif self._closed:
                raise CallOrderError(f"{self.name}: send() on a closed channel")
            elif self._action is not None:
                raise AlreadyPendingCallError(f"{self.name}: the previous action has not been taken by the player yet")
            else:
                self._action = body
                self._cond.notify_all()
                return
        if isinstance(error, PlayerCrashed) and self._player is not None and error.returncode is None:
            raise self._crashed(f"{error} before taking its next action") from None
        raise error

    def close(self) -> None:
        """End the stream: a waiting post, and every later one, is answered 410 Gone. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            callbacks, self._on_close = self._on_close, []
            self._frames.clear()
            fd, self._ready_fd = self._ready_fd, None
            if fd is not None:
                os.close(fd)
            self._cond.notify_all()
        for callback in callbacks:
            try:
                callback()
            except Exception:  # one failing callback must not stop the others
                logger.exception("%s: close callback failed", self.name)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("failed" if self._error else "open")
        return f"<PlayerBridge {self.name} {state} frames={self.frames_posted}>"


class PlayerBridgeRegistry:
    """The players one WSGI application serves, each found by its token.

    :meth:`register` makes a bridge (and a token, unless one is given); the player is given the token as
    ``AI2THOR_CLIENT_TOKEN``. A post whose token matches no registered bridge is answered 403 and reaches
    no bridge, unless the token was one of a bridge closed or unregistered since (the last
    :data:`RETIRED_TOKENS` are remembered by digest): that player is told 410, no longer served, as a
    waiting post is. Tokens are compared with :func:`hmac.compare_digest`.
    """

    def __init__(self, *, max_request_size: int = MAX_REQUEST_SIZE) -> None:
        if max_request_size <= 0:
            raise ValueError("max_request_size must be > 0")
        self.max_request_size = max_request_size
        self._lock = threading.Lock()
        self._bridges: dict[bytes, PlayerBridge] = {}
        self._retired: collections.OrderedDict[bytes, None] = collections.OrderedDict()  # digests of tokens no longer served
        # Servers of this registry that can say whether they hold a request not yet handed to a bridge:
        # probe(exclude) -> bool, ``exclude`` the connections known to be other players'.
        self._probes: list[Callable[[set[str]], bool]] = []

    def register(
        self, token: str | None = None, *, alive: Callable[[], bool] | None = None, name: str = "player"
    ) -> PlayerBridge:
        """A new bridge for one player; ``token`` defaults to a fresh random one (256 bits).

        ``alive()``, if given, tells whether the player process still runs (see :class:`PlayerBridge`).
        Raises ValueError for an empty token or one already registered.
        """
        if token is None:
            token = secrets.token_urlsafe(32)
        if not token:
            raise ValueError("a player token must not be empty")
        bridge = PlayerBridge(token, alive=alive, name=name)
        key = _token_key(token)
        with self._lock:
            if key in self._bridges:
                raise ValueError("this token is already registered for another player")
            self._bridges[key] = bridge
        bridge._registry = self
        bridge.add_close_callback(lambda: self._forget(key, bridge))
        return bridge

    def _forget(self, key: bytes, bridge: PlayerBridge) -> None:
        with self._lock:
            if self._bridges.get(key) is bridge:
                del self._bridges[key]
                self._retired[key] = None
                self._retired.move_to_end(key)
                while len(self._retired) > RETIRED_TOKENS:
                    self._retired.popitem(last=False)

    def retired(self, token: str | None) -> bool:
        """Whether ``token`` was a bridge's that has been closed or unregistered (one of the last
        :data:`RETIRED_TOKENS`): its player is answered 410, not 403."""
        if not token:
            return False
        with self._lock:
            return _token_key(token) in self._retired

    def unregister(self, bridge: PlayerBridge) -> None:
        """Stop serving ``bridge``'s player and close the bridge (idempotent)."""
        self._forget(_token_key(bridge.token), bridge)
        bridge.close()

    def lookup(self, token: str | None) -> PlayerBridge | None:
        """The bridge registered for ``token``, or None (the tokens are compared in constant time)."""
        if not token:
            return None
        with self._lock:
            bridge = self._bridges.get(_token_key(token))
        if bridge is None or not hmac.compare_digest(_token_bytes(bridge.token), _token_bytes(token)):
            return None
        return bridge

    def connection_closed(self, connection: str, reason: str | None = None, *, between_requests: bool = False,
                          requests: int | None = None, failure: str | None = None, reset: bool = False) -> None:
        """The server saw the HTTP connection ``connection`` ("host:port") close (``reason``: why the
        server closed it; None when the peer did; ``between_requests``: while idle, no request begun;
        ``requests``: how many it carried, when the server counts them; ``failure``: why the peer is gone,
        when its socket failed so; ``reset``: that failure was a reset). See :meth:`PlayerBridge.connection_lost`."""
        for bridge in self.bridges():
            bridge.connection_lost(connection, reason, between_requests=between_requests, requests=requests,
                                   failure=failure, reset=reset)

    def bridges(self) -> list[PlayerBridge]:
        with self._lock:
            return list(self._bridges.values())

    def _player_connections(self) -> set[str]:
        """The HTTP connections ("host:port") of the players served, as their bridges know them."""
        with self._lock:
            connections = {b._connection for b in self._bridges.values()}
        connections.discard(None)
        return connections  # type: ignore[return-value]

    def _players_starting(self) -> list[float]:
        """When the bridges of the served players that have posted no frame yet (not closed, not failed) were made,
        oldest first: each such player may have pinged, since, on a connection it will post its first frame on."""
        with self._lock:
            bridges = list(self._bridges.values())
        return sorted(b.created for b in bridges if b.frames_posted == 0 and not b._closed and b._error is None)

    def _requests_unattributed(self, bridge: PlayerBridge) -> bool:
        """Whether a server of this registry holds a request that may still become ``bridge``'s frame: one
        begun or received (or a connection not yet accepted) on a connection no other player is known by."""
        with self._lock:
            probes = list(self._probes)
            others = {b._connection for b in self._bridges.values() if b is not bridge}
        others.discard(None)
        return any(probe(others) for probe in probes)  # type: ignore[arg-type]

    def close(self) -> None:
        """Close every bridge."""
        for bridge in self.bridges():
            self.unregister(bridge)

    def __len__(self) -> int:
        with self._lock:
            return len(self._bridges)


# ---------------------------------------------------------------------------------------------------
# The WSGI application
# ---------------------------------------------------------------------------------------------------

_STATUS = {
    200: "200 OK",
    400: "400 Bad Request",
    403: "403 Forbidden",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    409: "409 Conflict",
    410: "410 Gone",
    411: "411 Length Required",
    413: "413 Content Too Large",
    500: "500 Internal Server Error",
}


def _json_response(
    start_response: Callable, status: int, payload: Any, extra: Iterable[tuple[str, str]] = ()
) -> list[bytes]:
    body = json.dumps(payload, separators=(",", ":")).encode("utf-8")
    start_response(_STATUS[status], [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *extra])
    return [body]


def _error(
    start_response: Callable, status: int, type_: str, message: str, extra: Iterable[tuple[str, str]] = ()
) -> list[bytes]:
    return _json_response(start_response, status, {"error": {"type": type_, "message": message}}, extra)


def _grown(body: bytearray, got: int, length: int) -> bytearray:
    """``body`` (``got`` bytes filled) doubled, up to ``length``. In place when nothing else views it; a
    bytearray cannot grow while a view of it exists, and one may outlive the read that made it (another
    thread inspecting this one's frames keeps their locals alive), so then into a new buffer."""
    more = min(len(body), length - len(body))
    try:
        body.extend(bytes(more))
        return body
    except BufferError:
        grown = bytearray(len(body) + more)
        grown[:got] = memoryview(body)[:got]
        return grown


def _read_body(stream: Any, length: int) -> bytearray | None:
    """The request body: the server's own buffer when it is a frame body, else read into a new one.

    Returns None if the stream ends before ``length`` bytes.
    """
    body = getattr(stream, "frame_body", None)
    if isinstance(body, bytearray) and len(body) == length and getattr(stream, "complete", False):
        return body
    body = bytearray(min(length, BODY_START_SIZE))  # grows with what arrives (BODY_START_SIZE)
    view = memoryview(body)
    got = 0
    readinto = getattr(stream, "readinto", None)
    while got < length:
        if got == len(body):
            view.release()
            body = _grown(body, got, length)
            view = memoryview(body)
        if readinto is not None:
            n = readinto(view[got:])
        else:
            chunk = stream.read(min(len(body) - got, 1 << 20))
            n = len(chunk)
            view[got : got + n] = chunk
        if not n:
            return None
        got += n
    view.release()
    return body


def _path_and_query(target: str) -> tuple[str, str]:
    """The path (percent-decoded, as PATH_INFO) and the query string of a request target (origin or
    absolute form)."""
    path, _, query = target.partition("?")
    if path.startswith(("http://", "https://")):  # absolute form
        path = "/" + path.split("/", 3)[3] if path.count("/") >= 3 else "/"
    if "%" in path:
        path = unquote_to_bytes(path).decode("latin-1")
    return path, query


def _connection_options(value: str) -> set[str]:
    """The options of a Connection header, as whole tokens (``x-close-later`` is not ``close``)."""
    return {option.strip().lower() for option in value.split(",")}


def _wants_close(environ: Mapping[str, Any]) -> bool:
    connection = _connection_options(str(environ.get("HTTP_CONNECTION", "")))
    if environ.get("SERVER_PROTOCOL") == "HTTP/1.0":
        return "keep-alive" not in connection
    return "close" in connection


#: Refused posts (wrong or missing token) are logged at most once per this many seconds (a count of the
#: ones not logged follows), so that something hammering the port cannot flood the log.
REFUSAL_LOG_INTERVAL = 10.0


class _RefusalLog:
    """Refusals of one kind, logged at most once per :data:`REFUSAL_LOG_INTERVAL`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = -float("inf")  # time.monotonic() of the last line
        self._quiet = 0

    def due(self) -> str | None:
        """None if a refusal was logged less than REFUSAL_LOG_INTERVAL ago (this one is counted), else
        the text to append to this one's line: how many were not logged since the last."""
        now = time.monotonic()
        with self._lock:
            if now - self._last < REFUSAL_LOG_INTERVAL:
                self._quiet += 1
                return None
            quiet, self._quiet = self._quiet, 0
            self._last = now
        return f" ({quiet} more refused since the last report)" if quiet else ""

    def note(self, address: str, what: str) -> None:
        more = self.due()
        if more is not None:
            logger.warning("refused POST /train from %s: %s token (403)%s", address, what, more)


class _RefusalLogs:
    """Refused requests, logged at most once per :data:`REFUSAL_LOG_INTERVAL` for each status (a count of the ones
    not logged follows), so that a client sending one kind of bad request in a loop cannot flood the log, nor hide
    the refusals of another kind."""

    def __init__(self) -> None:
        self._logs: dict[int, _RefusalLog] = {}
        self._lock = threading.Lock()

    def log(self, status: int, what: str, message: str, level: int = logging.WARNING) -> None:
        """Log that a request was answered ``status`` (``what``: which request, from whom), unless one with this
        status was logged less than REFUSAL_LOG_INTERVAL ago."""
        with self._lock:
            log = self._logs.get(status)
            if log is None:
                log = self._logs[status] = _RefusalLog()
        more = log.due()
        if more is not None:
            logger.log(level, "refused %s: %d %s: %s%s", what, status, _REASONS.get(status, "Error"), message, more)


def _shown_path(path: str) -> str:
    """A request's path as a log line shows it: as is when it is printable ASCII, else quoted (escapes shown)."""
    shown = path[:100]
    return shown if shown.isascii() and shown.isprintable() else repr(shown)


def make_player_app(registry: PlayerBridgeRegistry) -> Callable:
    """The WSGI application HTTP players talk to: ``GET /ping`` and ``POST /train``.

    ``POST /train`` answers 200 with the next action (JSON), or a JSON error ``{"error": {"type",
    "message"}}``: 403 for a missing or unknown token (nothing reaches any bridge); 400 for malformed
    multipart, a missing or invalid metadata part, or an image whose size fits no agent's screen (when
    the token was valid the client's next call raises :class:`ProtocolError` too; an empty body,
    ``Content-Length: 0``, is malformed multipart); 409 when the player already has a request waiting,
    or its stream failed; 410 when its bridge is closed; 411 without a Content-Length; 413 when
    Content-Length exceeds the registry's ``max_request_size`` (checked before the body is read).

    Every answer of 400 or more is logged, at most once per :data:`REFUSAL_LOG_INTERVAL` for each status: 403s
    with the sender's address, the others naming the request, its sender and the player (when known), a 410 at
    INFO (a player told it is no longer served, the usual end of a session), the rest as warnings; a frame
    refused 400 for its content fails its player's stream, which logs why; a 500 logs its traceback.
    """

    refusals = _RefusalLog()
    answered = _RefusalLogs()

    def refuse(environ: dict, start_response: Callable, status: int, type_: str, message: str,
               extra: Iterable[tuple[str, str]] = (), bridge: PlayerBridge | None = None) -> list[bytes]:
        """Answer ``status`` with a JSON error, and log it (see above)."""
        what = (f"{environ.get('REQUEST_METHOD', 'GET')} {_shown_path(environ.get('PATH_INFO') or '/')} from "
                f"{environ.get('REMOTE_ADDR', '?')}:{environ.get('REMOTE_PORT', '?')}")
        if bridge is not None:
            what += f" ({bridge.name})"
        answered.log(status, what, message, logging.INFO if status == 410 else logging.WARNING)
        return _error(start_response, status, type_, message, extra)

    def ping(environ: dict, start_response: Callable) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "4")])
        return [b"pong"]

    def train(environ: dict, start_response: Callable) -> list[bytes]:
        try:  # "0" is an empty body (refused below as malformed); only a missing length is 411
            length = int(environ.get("CONTENT_LENGTH") or "")
        except ValueError:
            length = -1
        if length < 0:
            return refuse(environ, start_response, 411, "ProtocolError", "POST /train needs a Content-Length header")
        if length > registry.max_request_size:
            return refuse(
                environ,
                start_response,
                413,
                "ProtocolError",
                f"the body is {length} bytes, over the limit of {registry.max_request_size} bytes",
                [("Connection", "close")],
            )
        body = _read_body(environ["wsgi.input"], length)
        if body is None:
            return refuse(environ, start_response, 400, "ProtocolError",
                          "the request body ended before Content-Length bytes")
        try:
            post = TrainPost(body, environ.get("CONTENT_TYPE"))
        except MultipartError as exc:
            form = URLENCODED if _is_urlencoded(environ.get("CONTENT_TYPE")) else "multipart/form-data"
            return refuse(environ, start_response, 400, "ProtocolError", f"malformed {form}: {exc}")
        bridge = registry.lookup(post.token)
        if bridge is not None:  # a served player's: its body no longer counts as a stranger's
            environ.get("renderd.body_attributed", lambda: None)()
        if bridge is None and registry.retired(post.token):
            return refuse(environ, start_response, 410, "LeaseError",
                          "this player is no longer served (its session ended)")
        if bridge is None:
            refusals.note(environ.get("REMOTE_ADDR", "?"), "an unknown" if post.token else "no")
            return _error(start_response, 403, "LeaseError", "missing or wrong token: this player is not served here")
        try:
            bridge.check_postable()
            try:
                metadata = post.metadata()
                try:
                    packed = encode_metadata(metadata)
                except (TypeError, ValueError, OverflowError) as exc:  # a number beyond 64 bits, a lone surrogate
                    raise ProtocolError(f"the metadata holds a value msgpack cannot carry: {exc}") from exc
            except ProtocolError as exc:
                bridge.fail(ProtocolError(f"{bridge.name} posted a bad frame: {exc}"))
                return _error(start_response, 400, "ProtocolError", str(exc))
            fields: list[tuple[FieldType, Any]] = [(FieldType.METADATA, packed), *post.images]
            action = bridge.post(
                fields,
                connection=f"{environ.get('REMOTE_ADDR')}:{environ.get('REMOTE_PORT')}",
                closing=_wants_close(environ),
                disconnected=environ.get("renderd.client_disconnected") or environ.get("waitress.client_disconnected"),
            )
        except BridgeClosed as exc:
            return refuse(environ, start_response, 410, "LeaseError", str(exc), bridge=bridge)
        except AlreadyPendingCallError as exc:
            return refuse(environ, start_response, 409, "CallOrderError", str(exc), bridge=bridge)
        except RenderdError as exc:
            return refuse(environ, start_response, 409, type(exc).__name__, f"this player's stream has failed: {exc}",
                          bridge=bridge)
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(action)))])
        return [action]

    routes = {"/ping": ("GET", ping), FRAME_ROUTE[1]: (FRAME_ROUTE[0], train)}

    def app(environ: dict, start_response: Callable) -> list[bytes]:
        path = environ.get("PATH_INFO") or "/"
        route = routes.get(path)
        if route is None:
            return refuse(environ, start_response, 404, "RenderdError",
                          f"no such route {path!r}: HTTP players use /ping and /train")
        method, handler = route
        request_method = environ.get("REQUEST_METHOD", "GET")
        if request_method != method and not (method == "GET" and request_method == "HEAD"):
            allow = "GET, HEAD" if method == "GET" else method  # (HEAD is served wherever GET is)
            return refuse(environ, start_response, 405, "RenderdError", f"{path} takes {allow}, not {request_method}",
                          [("Allow", allow)])
        try:
            return handler(environ, start_response)
        except Exception as exc:  # a JSON answer, never a traceback page
            logger.exception("%s %s failed", request_method, path)
            return _error(start_response, 500, "RenderdError", f"internal error: {type(exc).__name__}: {exc}")

    return app


# ---------------------------------------------------------------------------------------------------
# Serving the application
# ---------------------------------------------------------------------------------------------------

#: Largest request head (request line and header lines) accepted; a longer one is answered 431.
MAX_HEAD_SIZE = 16 * 1024
#: Most simultaneous connections. Each player keeps one. One more closes the connection idle longest that is
#: no served player's, nor a starting player's that pinged on it (see :meth:`PlayerHttpServer._make_room`); with
#: none, it is answered 503 and closed.
MAX_CONNECTIONS = 256
#: An idle keep-alive connection (no request begun) is closed after this long (seconds), or sooner when its
#: place is needed for a new connection and it is no served player's. A player waiting for its action is not
#: idle: its request is in progress. A served player's connection is idle while the player works out its
#: answer, which may take its client's step_timeout (up to 7 days): it is not closed while the player is served.
IDLE_TIMEOUT = 3600.0
#: A new connection must begin its first request within this long (seconds), or it is closed: players send
#: their first frame as soon as they connect, and a connection that sends nothing holds one of the
#: MAX_CONNECTIONS places (at IDLE_TIMEOUT, 256 silent connections would shut players out for an hour).
FIRST_REQUEST_TIMEOUT = 60.0
#: Most bytes of request bodies held at once for connections that are no served player's (see
#: :meth:`PlayerHttpServer._hold`). A post's token is in its body, so whose it is is known only once the body has
#: arrived whole: without a bound, anyone who can connect (any local user, on 127.0.0.1) could make renderd hold
#: MAX_CONNECTIONS bodies of ``max_request_size`` (256 x 256 MiB) and run the machine out of memory. A request that
#: does not fit waits (unread) for up to :data:`BODY_ROOM_TIMEOUT`, then is answered 503 and closed. One body
#: always fits when no other is held; a post is counted until its token is found to be a served player's (or it
#: is answered), and a served player's connection is not counted.
MAX_UNATTRIBUTED_BODY_BYTES = 1 << 30
#: How long a request body waits for room under :data:`MAX_UNATTRIBUTED_BODY_BYTES` (seconds).
BODY_ROOM_TIMEOUT = 30.0
#: A request in progress (head or body) that makes no progress for this long is dropped (seconds). A
#: request head must also arrive whole within this long of its first byte, and a body within this long
#: plus its size at :data:`MIN_BODY_RATE`: a client trickling bytes (slowloris) is answered 408 and
#: closed, never holding its connection thread for ever.
REQUEST_TIMEOUT = 30.0
#: Slowest average rate a request body may arrive at (bytes per second), beyond :data:`REQUEST_TIMEOUT`:
#: 64 KiB/s gives a 256 MiB body 68 minutes.
MIN_BODY_RATE = 64 * 1024.0
#: A connection the server closes after an answer (an error, ``Connection: close``) is half-closed first,
#: and what the client still sends is read and discarded for up to this long (seconds), or this many bytes,
#: before the close: a close with unread bytes resets the connection, and a reset discards the answer if it
#: is not yet delivered (the "lingering close" of RFC 9112 9.6).
LINGER_TIMEOUT = 2.0
LINGER_MAX_BYTES = 4 << 20
#: Most refused connections (503) lingered on at once (each for up to LINGER_TIMEOUT, by the accept loop);
#: beyond this a refused connection is closed at once, even if that resets it.
MAX_REFUSED_LINGERING = 64
#: TCP keepalive on every accepted connection, so that a peer whose host vanishes without a word (powered off,
#: unplugged, its network gone: no FIN, no reset) is noticed: after KEEPALIVE_IDLE seconds without a packet from
#: it, the kernel probes it every KEEPALIVE_INTERVAL seconds and gives up after KEEPALIVE_COUNT unanswered probes,
#: so it is found gone within KEEPALIVE_IDLE + KEEPALIVE_INTERVAL x KEEPALIVE_COUNT = 30 s of its last packet
#: (rather than at its client's step_timeout, 100 s by default), its player's stream fails naming the peer, and
#: the connection's place is freed. The peer's kernel answers the probes, so a player that thinks long is never
#: affected. The same total is the connection's TCP_USER_TIMEOUT: how long an answer sent may stay unacknowledged
#: (keepalive probes only a connection with nothing in flight). An option the platform lacks keeps its default.
KEEPALIVE_IDLE = 10
KEEPALIVE_INTERVAL = 5
KEEPALIVE_COUNT = 4
#: Errors of a connection's socket that say its peer is gone, not that it closed the connection: its host
#: answered no keepalive probe, or did not acknowledge an answer in time (ETIMEDOUT); an ICMP error came back
#: instead (unreachable); or it reset the connection (a host that restarted answers a probe so). The player is
#: gone even when this happens between requests, where a close is not a hang-up.
_PEER_GONE_ERRNOS = frozenset(
    getattr(errno, name) for name in ("ETIMEDOUT", "ECONNRESET", "EHOSTUNREACH", "ENETUNREACH", "EHOSTDOWN", "ENETDOWN")
    if hasattr(errno, name)
)
#: How long :meth:`PlayerHttpServer.stop` waits for its threads (seconds).
STOP_TIMEOUT = 5.0
#: Backlog of the listening socket.
LISTEN_BACKLOG = 64
#: While connections cannot be accepted (no descriptor or memory left), how long the server waits before
#: trying again (seconds), and how often it logs that it cannot (a count of the failures not logged follows).
ACCEPT_RETRY_INTERVAL = 0.1
ACCEPT_ERROR_LOG_INTERVAL = 10.0
#: Bytes of a request head read at a time (what follows the head in the same read is copied into the
#: body buffer; the rest of the body is received directly into it).
HEAD_READ_SIZE = 16 * 1024

_HTTP_VERSIONS = ("HTTP/1.1", "HTTP/1.0")
_TOKEN_CHARS = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_REASONS = {
    **{code: text.split(" ", 1)[1] for code, text in _STATUS.items()},
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}
_BLANK_LINES = re.compile(rb"(?:\r\n)*")
_POLL_HUP = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


class _RequestBody:
    """``wsgi.input``: the request body, received straight into the ``bytearray`` its frames will view.

    The application takes :attr:`frame_body` as is; ``read``/``readinto`` are the file API WSGI promises.
    """

    __slots__ = ("frame_body", "_pos")
    complete = True

    def __init__(self, body: bytearray) -> None:
        self.frame_body = body
        self._pos = 0

    def readinto(self, buffer: Any) -> int:
        target = memoryview(buffer).cast("B")
        n = min(target.nbytes, len(self.frame_body) - self._pos)
        target[:n] = memoryview(self.frame_body)[self._pos : self._pos + n]
        self._pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        end = len(self.frame_body) if size is None or size < 0 else min(len(self.frame_body), self._pos + size)
        data = bytes(self.frame_body[self._pos : end])
        self._pos = end
        return data

    def readline(self, size: int = -1) -> bytes:
        end = self.frame_body.find(b"\n", self._pos)
        end = len(self.frame_body) if end < 0 else end + 1
        if size is not None and size >= 0:
            end = min(end, self._pos + size)
        data = bytes(self.frame_body[self._pos : end])
        self._pos = end
        return data


class _HttpError(Exception):
    """A request the server refuses before the application sees it; the connection is closed after."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Closed(Exception):
    """The peer closed the connection (or it timed out) between or inside requests.

    ``by_server`` is the reason when the server is the one closing it (a timeout), else None;
    ``between_requests`` is set when it closed while idle, no byte of a next request read; ``failure``
    says why the peer is gone when the socket failed with one of :data:`_PEER_GONE_ERRNOS` (``reset``: the
    peer reset the connection, ECONNRESET)."""

    def __init__(self, message: str, by_server: str | None = None, failure: str | None = None,
                 reset: bool = False, *, stalled: bool = False, ended: bool = False) -> None:
        super().__init__(message)
        self.by_server = by_server
        self.between_requests = False
        self.failure = failure
        self.reset = reset
        self.stalled = stalled  # inside a request, nothing arrived for REQUEST_TIMEOUT
        self.ended = ended  # the peer closed its sending side (end of file)


def _keepalive_seconds() -> int:
    """How long after its last packet a vanished peer is found gone (see KEEPALIVE_IDLE)."""
    return KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_COUNT


def _set_keepalive(sock: Any) -> None:
    """Turn on TCP keepalive (:data:`KEEPALIVE_IDLE` and the rest) on an accepted connection; an option the
    platform lacks, or refuses, keeps its default."""
    import socket

    options = [(socket.SOL_SOCKET, "SO_KEEPALIVE", 1)]
    options += [(socket.IPPROTO_TCP, name, value) for name, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL), ("TCP_KEEPCNT", KEEPALIVE_COUNT),
        ("TCP_USER_TIMEOUT", _keepalive_seconds() * 1000),  # milliseconds
    )]
    for level, name, value in options:
        option = getattr(socket, name, None)
        if option is None:
            continue
        try:
            sock.setsockopt(level, option, value)
        except OSError as exc:
            logger.debug("cannot set %s on an HTTP connection: %s", name, exc)


def _peer_gone(key: str, code: int) -> str:
    """Why the connection ``key`` ("host:port") failed with errno ``code``, one of :data:`_PEER_GONE_ERRNOS`."""
    name = errno.errorcode.get(code, str(code))
    if code == errno.ECONNRESET:
        why = ("its peer reset it (a process that ends, or closes the connection, with data unread resets it, or one "
               "that aborts it; so does a host that restarted: it no longer knows the connection)")
    elif code == errno.ETIMEDOUT:
        why = (f"its peer's host answered nothing for {_keepalive_seconds()} s (no reply to TCP keepalive probes, or "
               "no acknowledgement of an answer; KEEPALIVE_IDLE + KEEPALIVE_INTERVAL x KEEPALIVE_COUNT): the host is "
               "down or no longer reachable")
    else:
        why = "its peer's host is no longer reachable"
    return f"its HTTP connection from {key} failed ({os.strerror(code)} [{name}]): {why}"


def _error_bytes(status: int, message: str, type_: str = "ProtocolError", close: bool = True) -> bytes:
    body = json.dumps({"error": {"type": type_, "message": message}}, separators=(",", ":")).encode("utf-8")
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
    )
    return head.encode("latin-1") + body


class _Held:
    """The bytes of a server's :data:`MAX_UNATTRIBUTED_BODY_BYTES` held for one request (none at first):
    :meth:`release` gives them back, once (the application calls it as ``environ["renderd.body_attributed"]``
    when the post's token is a served player's; the connection calls it when the request is answered or fails)."""

    def __init__(self, server: PlayerHttpServer) -> None:
        self.server = server
        self.nbytes = 0
        self._lock = threading.Lock()

    def hold(self, nbytes: int) -> bool:
        """Hold ``nbytes`` (see :meth:`PlayerHttpServer._hold`); False if there was no room in time."""
        if not self.server._hold(nbytes):
            return False
        with self._lock:
            self.nbytes = nbytes
        return True

    def release(self) -> None:
        with self._lock:
            nbytes, self.nbytes = self.nbytes, 0
        if nbytes:
            self.server._unhold(nbytes)


class _Connection:
    """One client connection, served on a thread of its own: read a request, call the app, answer, repeat."""

    def __init__(self, server: PlayerHttpServer, sock: Any, addr: Any) -> None:
        self.server = server
        self.sock = sock
        self.key = f"{addr[0]}:{addr[1]}"
        self.addr = addr
        self.accepted = time.monotonic()  # FIRST_REQUEST_TIMEOUT counts from here
        self.buf = bytearray(HEAD_READ_SIZE)
        self.view = memoryview(self.buf)
        self.have = 0  # bytes of the next request already read into buf
        self.last_body = 0  # size of the last request body received whole
        self.requests = 0  # requests begun on this connection (heads read)
        self.closed_because: str | None = None  # why the server closed the connection (None: the peer did)
        self.closed_idle = False  # it closed between requests (no byte of a next request read)
        self.failure: str | None = None  # why the peer is gone, when its socket failed so (_PEER_GONE_ERRNOS)
        self.reset = False  # that failure was a reset (ECONNRESET)
        self.in_request = False  # a request has begun and is not yet answered
        # time.monotonic() its first ping was received, while it has carried nothing but pings (PING_PATH): it may be
        # a starting player's, which posts its first frame on it once ready (PlayerHttpServer._make_room)
        self.pinged: float | None = None
        self.only_pings = True
        # Between requests: since when (time.monotonic()) no request has begun, and whether the thread waits in
        # recv for the next one with nothing received (then, under the server's lock, the accept loop may close
        # the connection to make room for a new one: `evicted` says why).
        self.idle_since = self.accepted
        self.waiting_idle = False
        self.evicted: str | None = None
        # The request in progress may be a player's frame: True until its head shows it is no POST /train
        # (a control API request, a ping), which never reaches a bridge however long it takes.
        self.may_carry_frame = True
        self.linger = False  # the server closes the connection after an answer: half-close and drain first
        self.request: str | None = None  # the request in progress, "METHOD path", once its head is parsed (for logs)
        self.sending_since: float | None = None  # time.monotonic() an answer's send began, while it lasts
        self.thread = threading.Thread(target=self.run, name=f"renderd-http-conn-{self.key}", daemon=True)

    # -- reading ---------------------------------------------------------------------------------------------
    def _idle_deadline(self) -> tuple[float, str]:
        """(``time.monotonic()`` by which the next request must begin, why the connection is closed past it):
        :data:`FIRST_REQUEST_TIMEOUT` after the connection was accepted for its first request, else
        :data:`IDLE_TIMEOUT` after the last answer. Empty lines before a request line begin no request,
        so they do not move it."""
        if self.requests:
            return (time.monotonic() + IDLE_TIMEOUT, f"idle between requests (IDLE_TIMEOUT) for {IDLE_TIMEOUT:g} s")
        return (self.accepted + FIRST_REQUEST_TIMEOUT,
                f"no request since the connection was accepted (FIRST_REQUEST_TIMEOUT) for {FIRST_REQUEST_TIMEOUT:g} s")

    def _recv_into(self, view: memoryview, idle: tuple[float, str] | None = None,
                   deadline: tuple[float, str] | None = None) -> int:
        """Receive into ``view``. ``idle`` is the :meth:`_idle_deadline` while no request has begun (past it,
        the connection is closed, unless it is a served player's: see :meth:`_idle_past`), None inside a
        request; ``deadline`` is (``time.monotonic()`` by which the part being read must be whole, what it
        is): past it, a 408."""
        while True:
            if idle is not None:
                timeout = idle[0] - time.monotonic()
                if timeout <= 0:
                    timeout = self._idle_past(idle)
            else:
                timeout = REQUEST_TIMEOUT
            if deadline is not None:
                left = deadline[0] - time.monotonic()
                if left <= 0:
                    raise _HttpError(408, deadline[1])
                timeout = min(timeout, left)
            self.sock.settimeout(timeout)
            if idle is not None:
                self._wait_idle(True)
            try:
                n = self.sock.recv_into(view)
            except OSError as exc:
                if exc.errno in _PEER_GONE_ERRNOS:  # (a keepalive failure is a TimeoutError too, with an errno)
                    raise _Closed(str(exc), failure=_peer_gone(self.key, exc.errno),
                                  reset=exc.errno == errno.ECONNRESET) from None
                if not isinstance(exc, TimeoutError):
                    raise _Closed(str(exc)) from None
                if deadline is not None and time.monotonic() >= deadline[0]:
                    raise _HttpError(408, deadline[1]) from None
                if idle is not None:
                    idle = (time.monotonic() + self._idle_past(idle), idle[1])
                    continue
                raise _Closed("timed out", f"a request sent nothing more for {timeout:g} s", stalled=True) from None
            finally:
                if idle is not None:
                    self._wait_idle(False)
            if n == 0:
                raise _Closed("end of input", ended=True)
            return n

    def _idle_past(self, idle: tuple[float, str]) -> float:
        """The connection has been idle past ``idle``'s deadline: raise _Closed, unless it is a served player's
        (as the registry knows it). That player is working out its answer, for as long as its client's
        ``step_timeout`` allows (up to 7 days): its exit, its bridge's close or that deadline ends the wait, not
        this server. Then how long to wait before asking again (:data:`IDLE_TIMEOUT`)."""
        if self.requests and self.key in self.server.registry._player_connections():
            return IDLE_TIMEOUT
        raise _Closed("timed out", idle[1])

    def _wait_idle(self, waiting: bool) -> None:
        """Enter (True) or leave a wait between requests with nothing received; raises _Closed if the accept loop
        closed the connection to make room (:meth:`PlayerHttpServer._make_room`), whatever recv then read."""
        with self.server._lock:
            self.waiting_idle = waiting
            evicted = self.evicted
        if evicted is not None and not waiting:
            raise _Closed("closed to make room", evicted)

    def _read_head(self) -> tuple[bytes, int]:
        """The request head (without its final blank line) and where its end is in buf."""
        searched = 0
        deadline = None
        idle = self._idle_deadline()
        blank = 0  # bytes of empty lines skipped before the request line
        while True:
            if deadline is None and self.have:
                # RFC 9112 2.2: empty lines before a request line are ignored (a client may end a body
                # with an extra CRLF); the connection stays idle until the request line's first byte.
                skip = _BLANK_LINES.match(self.buf, 0, self.have).end()  # type: ignore[union-attr]
                if skip:
                    blank += skip
                    if blank > MAX_HEAD_SIZE:
                        raise _HttpError(400, f"more than {MAX_HEAD_SIZE} bytes of empty lines before a request line")
                    self._consume(skip)
                    searched = 0
                if self.have and not (self.have == 1 and self.buf[0] == 0x0D):  # (a lone CR: a blank line's start)
                    self.in_request = True
                    deadline = (time.monotonic() + REQUEST_TIMEOUT,  # from the head's first byte
                                f"the request head did not arrive within {REQUEST_TIMEOUT:g} s (REQUEST_TIMEOUT)")
            end = self.buf.find(b"\r\n\r\n", max(0, searched - 3), self.have)
            if end >= 0:
                return bytes(self.buf[:end]), end + 4
            if self.buf.find(b"\n\n", max(0, searched - 1), self.have) >= 0:  # (CRLF CRLF has no LF LF)
                raise _HttpError(400, "the request head's lines end in a bare LF; HTTP lines end in CRLF")
            searched = self.have
            if self.have >= MAX_HEAD_SIZE:
                raise _HttpError(431, f"the request head is longer than {MAX_HEAD_SIZE} bytes")
            try:
                self.have += self._recv_into(self.view[self.have :], idle if deadline is None else None, deadline)
            except _Closed as exc:
                exc.between_requests = deadline is None
                if deadline is not None:
                    self._incomplete(exc, f"the request head stopped after {self.have} bytes, before its end "
                                          "(an empty line)")
                raise

    def _read_body(self, start: int, length: int) -> bytearray:
        # The buffer grows with the bytes that arrive (see BODY_START_SIZE), except up to the size of the
        # last body this connection delivered whole: a player posting frames of one size gets its buffer
        # at once and its bytes are received straight into it.
        try:
            body = bytearray(min(length, max(BODY_START_SIZE, self.last_body)))
        except MemoryError:
            raise self._no_memory(length) from None
        extra = min(self.have - start, length)
        body[:extra] = self.view[start : start + extra]
        rest = self.have - start - extra
        if rest:
            self.buf[:rest] = self.buf[start + extra : self.have]
        self.have = rest
        got = extra
        target = memoryview(body)
        seconds = REQUEST_TIMEOUT + length / MIN_BODY_RATE
        deadline = (time.monotonic() + seconds, f"the request body of {length} bytes did not arrive within "
                    f"{seconds:.3g} s (REQUEST_TIMEOUT + its size at MIN_BODY_RATE)")
        while got < length:
            if got == len(body):
                target.release()
                try:
                    body = _grown(body, got, length)
                except MemoryError:
                    raise self._no_memory(length) from None
                target = memoryview(body)
            try:
                got += self._recv_into(target[got:], None, deadline)
            except _HttpError as exc:  # (its whole-body deadline: say how much of it came)
                raise _HttpError(exc.status, f"{exc.message}: {got} of its {length} bytes arrived") from None
            except _Closed as exc:
                self._incomplete(exc, f"the request body stopped after {got} of its {length} bytes (Content-Length)")
                raise
        target.release()
        self.last_body = length
        return body

    def _incomplete(self, exc: _Closed, what: str) -> None:
        """A request in progress got no further (``what``: how far it came). A stall is answered 408 (raised); a
        client that shut its sending side can still read, so it is told (400) before the connection closes, and
        ``exc`` (the peer closed it, a hang-up) is raised by the caller; a failed connection gets nothing."""
        if exc.stalled:
            raise _HttpError(408, f"{what}: nothing more arrived for {REQUEST_TIMEOUT:g} s (REQUEST_TIMEOUT)") from None
        if exc.ended:
            message = f"{what}: the client closed its side of the connection"
            self._log_refusal(400, message)
            self._send(_error_bytes(400, message))

    def _no_memory(self, length: int) -> _HttpError:
        """The refusal of a body this process has no memory for (503, the connection closed): the player is
        told, and its client's PlayerCrashed says renderd closed the connection and why (the refusal is logged
        by :meth:`run`)."""
        return _HttpError(503, f"the server has no memory left for this request body of {length} bytes")

    def _log_refusal(self, status: int, message: str) -> None:
        """Log (at most once per :data:`REFUSAL_LOG_INTERVAL` for each status) that the server answered the request
        on this connection ``status``: which request, the connection, and whose it is (a served player's, by
        name, or none known)."""
        players = [b.name for b in self.server.registry.bridges() if b._connection == self.key]
        whose = f"{players[0]}'s" if players else "not known as a served player's"
        request = self.request or "a request"
        self.server._request_refusals.log(status, f"{request} on the HTTP connection {self.key} ({whose})", message)

    def _consume(self, end: int) -> None:
        rest = self.have - end
        if rest:
            self.buf[:rest] = self.buf[end : self.have]
        self.have = rest

    def disconnected(self) -> bool | str:
        """Truthy once the peer has closed (or reset) the connection (asked while its request waits): why the
        peer is gone when its socket failed with one of :data:`_PEER_GONE_ERRNOS` (a keepalive failure), else
        True."""
        import socket

        poller = select.poll()
        try:
            poller.register(self.sock.fileno(), _POLL_HUP)
        except (OSError, ValueError):
            return True
        if not poller.poll(0):
            return False
        try:
            code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        except OSError:
            return True
        if code in _PEER_GONE_ERRNOS:
            self.failure = _peer_gone(self.key, code)
            self.reset = code == errno.ECONNRESET
            return self.failure
        return True

    # -- parsing ---------------------------------------------------------------------------------------------
    def _parse_head(self, head: bytes) -> tuple[str, str, str, dict[str, str]]:
        try:
            text = head.decode("latin-1")
        except UnicodeDecodeError:  # latin-1 decodes everything; kept for clarity
            raise _HttpError(400, "the request head is not text") from None
        lines = text.split("\r\n")
        while lines and not lines[0]:  # RFC 9112 2.2: ignore blank lines before a request
            lines.pop(0)
        if not lines:
            raise _HttpError(400, "empty request")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            raise _HttpError(400, f"malformed request line {lines[0][:100]!r}")
        method, target, version = parts
        if not method or not set(method.encode("latin-1")) <= _TOKEN_CHARS:
            raise _HttpError(400, f"malformed request method {method[:40]!r}")
        if version not in _HTTP_VERSIONS:
            if len(version) == 8 and version.startswith("HTTP/1.") and version[7] in "0123456789":
                # RFC 9110 6.2: a later HTTP/1 minor version is served as the highest this server speaks.
                version = "HTTP/1.1"
            elif version.startswith("HTTP/"):
                raise _HttpError(505, f"{version} is not supported (use HTTP/1.1)")
            else:
                raise _HttpError(400, f"malformed request line {lines[0][:100]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or not set(name.encode("latin-1")) <= _TOKEN_CHARS:
                raise _HttpError(400, f"malformed header line {line[:100]!r}")
            if "_" in name:  # its CGI-style key would alias the same name with "-" (Content_Length)
                continue
            key = name.upper().replace("-", "_")
            value = value.strip(" \t")
            if "\r" in value or "\n" in value or "\0" in value:  # RFC 9112 5.5: reject, never pass on
                raise _HttpError(400, f"header {name[:40]!r} holds a CR, LF or NUL")
            if key in headers:
                if key == "CONTENT_LENGTH" and headers[key] != value:
                    raise _HttpError(400, "conflicting Content-Length headers")
                headers[key] = f"{headers[key]}, {value}" if key != "CONTENT_LENGTH" else value
            else:
                headers[key] = value
        return method, target, version, headers

    def _environ(self, method: str, target: str, version: str, headers: dict[str, str], body: bytearray) -> dict:
        path, query = _path_and_query(target)
        environ: dict[str, Any] = {
            "REQUEST_METHOD": method,
            "SCRIPT_NAME": "",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "SERVER_NAME": self.server.host,
            "SERVER_PORT": str(self.server.port),
            "SERVER_PROTOCOL": version,
            "REMOTE_ADDR": str(self.addr[0]),
            "REMOTE_PORT": str(self.addr[1]),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": _RequestBody(body),
            "wsgi.errors": _LogWriter(),
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
            "renderd.client_disconnected": self.disconnected,
        }
        for key, value in headers.items():
            if key == "CONTENT_TYPE":
                environ["CONTENT_TYPE"] = value
            elif key == "CONTENT_LENGTH":
                environ["CONTENT_LENGTH"] = value
            else:
                environ["HTTP_" + key] = value
        environ.setdefault("CONTENT_LENGTH", str(len(body)) if body else "")
        return environ

    # -- the loop ----------------------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while not self.server.stopping:
                if not self._serve_one():
                    break
        except _Closed as exc:
            self.closed_because = exc.by_server
            self.closed_idle = exc.between_requests
            if exc.failure is not None:
                self.failure, self.reset = exc.failure, exc.reset
        except _HttpError as exc:
            self.closed_because = f"it refused a request ({exc.status} {_REASONS.get(exc.status, 'Error')}: {exc.message})"
            self._log_refusal(exc.status, exc.message)
            self.linger = self._send(_error_bytes(exc.status, exc.message))
        except Exception as exc:
            logger.exception("HTTP connection %s failed", self.key)
            if self.in_request:  # its client is told, and a player's client is not told that the player hung up
                message = f"internal error: {type(exc).__name__}: {exc}"
                self.closed_because = f"it failed on a request (500 Internal Server Error: {message})"
                self.linger = self._send(_error_bytes(500, message, "RenderdError"))
        finally:
            self.in_request = False  # (whatever it holds now is never handed to a bridge)
            notified = False
            try:
                if self.linger:
                    # The player's stream ends now, not once the lingering close is over.
                    self.server._notify_closed(self)
                    notified = True
                    self._linger()
            finally:
                try:
                    self.sock.close()
                finally:
                    self.server._connection_done(self, notify=not notified)

    def _linger(self) -> None:
        """Half-close, then read and discard what the client still sends until it closes its end, or for
        :data:`LINGER_TIMEOUT` (:data:`LINGER_MAX_BYTES`), so that closing does not reset the connection
        while the last answer may still be undelivered."""
        import socket

        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            return
        deadline = time.monotonic() + LINGER_TIMEOUT
        drained = 0
        while drained < LINGER_MAX_BYTES:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                self.sock.settimeout(left)
                n = self.sock.recv_into(self.view)
            except OSError:  # a timeout or a reset: nothing more to wait for
                return
            if not n:
                return
            drained += n

    def _send(self, data: bytes | list[Any]) -> bool:
        # An answer gets the time a request body of its size gets (REQUEST_TIMEOUT plus its size at
        # MIN_BODY_RATE), not whatever timeout the last read left on the socket: that was IDLE_TIMEOUT (an
        # hour) when the request came whole in one read, and next to nothing when its body arrived just
        # before its deadline. A peer that reads nothing for that long has its connection closed, and its
        # player's client is told that renderd closed it (not that the player hung up).
        if isinstance(data, (bytes, bytearray)):
            size = len(data)
        else:
            size = message_nbytes(data)
        seconds = REQUEST_TIMEOUT + size / MIN_BODY_RATE
        self.sending_since = time.monotonic()
        try:
            self.sock.settimeout(seconds)
            if isinstance(data, (bytes, bytearray)):
                self.sock.sendall(data)
            else:
                for chunk in data:
                    self.sock.sendall(chunk)
            return True
        except TimeoutError:
            if self.closed_because is None:
                self.closed_because = (
                    f"the player did not read its answer of {size} bytes within {seconds:.3g} s "
                    "(REQUEST_TIMEOUT + its size at MIN_BODY_RATE)"
                )
            return False
        except OSError:
            return False
        finally:
            self.sending_since = None

    def _serve_one(self) -> bool:
        """Serve one request; False when the connection is to be closed."""
        self.may_carry_frame = True
        self.request = None
        head, end = self._read_head()
        self.requests += 1
        method, target, version, headers = self._parse_head(head)
        path = _path_and_query(target)[0]
        self.request = f"{method} {_shown_path(path)}"  # (for logs)
        self.may_carry_frame = (method, path) == FRAME_ROUTE
        ping = path == PING_PATH and method in ("GET", "HEAD")
        self.only_pings = self.only_pings and ping
        if not self.only_pings:
            self.pinged = None
        elif self.pinged is None:  # (from the request, not its answer: a client acts on the answer at once)
            self.pinged = time.monotonic()
        if "TRANSFER_ENCODING" in headers:
            raise _HttpError(411, "chunked request bodies are not accepted: send a Content-Length")
        raw_length = headers.get("CONTENT_LENGTH")
        if raw_length is not None:
            # ASCII digits only ("²".isdigit() is true) and at most 19 of them (int() refuses 4,300 digits), not
            # counting leading zeros (RFC 9110 8.6 allows them: 0005 is 5).
            if not (raw_length.isascii() and raw_length.isdigit()):
                raise _HttpError(400, f"Content-Length {raw_length[:40]!r} is not a number")
            raw_length = raw_length.lstrip("0") or "0"
            length = int(raw_length) if len(raw_length) <= 19 else None
            if length is not None:  # (the application reads the number: int() refuses 4,300 leading zeros)
                headers["CONTENT_LENGTH"] = str(length)
        else:
            length = 0
        limit = self.server.registry.max_request_size
        if self.server.body_limit is not None:  # before any of the body is read (or buffered)
            limit = min(limit, self.server.body_limit(method, _path_and_query(target)[0]))
        if length is None:  # (a number of 20 digits or more: no body is that large)
            raise _HttpError(413, f"the body is a {len(raw_length)}-digit number of bytes (Content-Length), over "
                                  f"the limit of {limit} bytes")
        if length > limit:
            raise _HttpError(413, f"the body is {length} bytes, over the limit of {limit} bytes")
        connection = _connection_options(headers.get("CONNECTION", ""))
        keep_alive = "keep-alive" in connection if version == "HTTP/1.0" else "close" not in connection
        expects = version != "HTTP/1.0" and headers.get("EXPECT", "").lower() == "100-continue"  # RFC 9110 10.1.1
        held = _Held(self.server)
        try:
            stranger = self.key not in self.server.registry._player_connections()
            if length and stranger and not held.hold(length):
                raise _HttpError(503, f"no room for a request body of {length} bytes: the bodies being received "
                                      "on connections not known to be a served player's already fill the limit of "
                                      f"{self.server.max_unattributed} bytes (MAX_UNATTRIBUTED_BODY_BYTES), and none "
                                      f"ended within {BODY_ROOM_TIMEOUT:g} s (BODY_ROOM_TIMEOUT); try again later")
            if length and expects and self.have == end:
                if not self._send(b"HTTP/1.1 100 Continue\r\n\r\n"):
                    return False
            if length:
                body = self._read_body(end, length)
            else:
                body = bytearray()
                self._consume(end)
            environ = self._environ(method, target, version, headers, body)
            environ["renderd.body_attributed"] = held.release
            status, response_headers, chunks = self._call_app(environ)
        finally:
            held.release()
        names = {name.lower() for name, _ in response_headers}
        payload = b"".join(chunks)
        if method == "HEAD":
            out_body = b""
        else:
            out_body = payload
        lines = [f"HTTP/1.1 {status}\r\n"]
        lines.extend(f"{name}: {value}\r\n" for name, value in response_headers)
        if "content-length" not in names:
            lines.append(f"Content-Length: {len(payload)}\r\n")
        if self.server.stopping:  # the connection closes after this answer (a waiting post's 410 at stop)
            keep_alive = False
        if any(name.lower() == "connection" and value.lower() == "close" for name, value in response_headers):
            if keep_alive:
                self.closed_because = f"it answered {status} and closed the connection"
            keep_alive = False
        elif not keep_alive:
            lines.append("Connection: close\r\n")
        elif version == "HTTP/1.0":
            lines.append("Connection: keep-alive\r\n")
        lines.append("\r\n")
        if not self._send(["".join(lines).encode("latin-1") + out_body]):
            return False
        self.in_request = False
        self.idle_since = time.monotonic()
        self.linger = not keep_alive
        return keep_alive

    def _call_app(self, environ: dict) -> tuple[str, list[tuple[str, str]], list[bytes]]:
        state: dict[str, Any] = {}
        written: list[bytes] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable:
            if exc_info is not None and state:
                raise exc_info[1].with_traceback(exc_info[2])
            state["status"], state["headers"] = status, list(headers)
            return written.append

        try:
            result = self.server.app(environ, start_response)
            try:
                chunks = written + [bytes(c) for c in result]
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
        except Exception as exc:
            logger.exception("the WSGI application failed on %s %s", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"))
            body = json.dumps({"error": {"type": "RenderdError", "message": f"internal error: {exc!r}"}}).encode()
            return "500 Internal Server Error", [("Content-Type", "application/json"), ("Connection", "close")], [body]
        if "status" not in state:
            body = b'{"error":{"type":"RenderdError","message":"the application did not start a response"}}'
            return "500 Internal Server Error", [("Content-Type", "application/json"), ("Connection", "close")], [body]
        return state["status"], state["headers"], chunks


class _LogWriter:
    """``wsgi.errors``: lines written here go to this module's logger."""

    def write(self, text: str) -> int:
        if text.strip():
            logger.warning("wsgi.errors: %s", text.rstrip())
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass


class PlayerHttpServer:
    """Serve :func:`make_player_app` (or ``app``, any WSGI application) on a background thread.

    ``PlayerHttpServer(registry, host="127.0.0.1", port=0).start()`` binds and serves; :attr:`host` and
    :attr:`port` are the bound address; :meth:`stop` closes every bridge, every connection and the
    listening socket, and joins the threads. ``players`` is accepted for compatibility (there is one
    thread per connection, so nothing needs sizing).

    A small HTTP/1.1 server of its own, for one job: each connection (a player keeps one) is served by
    a thread that receives a request's body straight into the buffer its frames will view (so a frame
    is never copied after the socket), calls the application, and answers on the same connection.
    Requests need a Content-Length (chunked bodies are refused with 411); the head is limited to
    :data:`MAX_HEAD_SIZE`, the body to the registry's ``max_request_size`` (checked before reading,
    413), the bodies of connections that are no served player's to ``max_unattributed`` together
    (:data:`MAX_UNATTRIBUTED_BODY_BYTES` by default; beyond it a body waits, then 503), connections to :data:`MAX_CONNECTIONS` (the idle one longest that is no player's makes room,
    else 503); a request that stalls for
    :data:`REQUEST_TIMEOUT` is dropped, one that trickles in slower than that allows
    (:data:`MIN_BODY_RATE`) is answered 408. The connection's closing is reported to the registry at once,
    so a player that hangs up or dies fails its client's next call with :class:`PlayerCrashed`.

    Why not waitress (a production server renderd already uses for its control API, and which serves
    this application unchanged; tested) or cheroot: ``benchmarks/transport_http.py --waitress --cheroot``
    (table in docs/http.md) puts the same application and bridge behind each. Per 300x300 frame the
    client process spent 0.2-0.45 ms more CPU behind waitress or cheroot than behind this server (about
    0.75-1.3 ms against 0.5-0.86 ms) and stepped 16-47% slower: waitress's I/O thread receives and spools
    the body, a worker runs the application, and a trigger wakes the I/O thread to answer; cheroot's
    workers read the body through buffered file objects; here one thread does it all and the body is
    received straight into its frame buffer (waitress copies it twice more). Neither can tell the
    application that an idle keep-alive connection closed, which is how a dead player is noticed
    between frames.
    """

    def __init__(
        self,
        registry: PlayerBridgeRegistry,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        players: int = 1,
        app: Callable | None = None,
        max_connections: int = MAX_CONNECTIONS,
        body_limit: Callable[[str, str], int] | None = None,
        max_unattributed: int | None = None,
    ) -> None:
        self.registry = registry
        #: Most bytes of request bodies held at once for connections that are no served player's
        #: (:data:`MAX_UNATTRIBUTED_BODY_BYTES` when None), and how many are held now.
        self.max_unattributed = MAX_UNATTRIBUTED_BODY_BYTES if max_unattributed is None else max_unattributed
        self._held = 0
        self._held_changed = threading.Condition(threading.Lock())
        self.app = app if app is not None else make_player_app(registry)
        #: ``body_limit(method, path)``: the largest body a request may have, when lower than the registry's
        #: ``max_request_size`` (an ``app`` that serves other routes than the players' gives those a lower one).
        self.body_limit = body_limit
        self.max_connections = max_connections
        self._host = host
        self._port = port
        self._sock: Any = None
        self._bound: tuple[str, int] | None = None
        self._wake_r: int | None = None
        self._wake_w: int | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._connections: set[_Connection] = set()
        # Refused connections (503) the accept loop lingers on: fd -> (socket, close by, bytes drained).
        self._refused: dict[int, tuple[Any, float, int]] = {}
        self._drain_buffer = bytearray(64 * 1024)
        self._connection_refusals = _RefusalLog()  # (logged once per REFUSAL_LOG_INTERVAL)
        self._request_refusals = _RefusalLogs()  # requests the server refuses itself (as often, for each status)
        self._thread_failures = _RefusalLog()  # connections refused for want of a thread (as often)
        self._evictions = _RefusalLog()  # idle connections closed to make room (as often)
        self._accepting = False  # a connection is being accepted: out of the backlog, not yet in _connections
        self.stopping = False

    def start(self) -> PlayerHttpServer:
        """Bind and serve. Raises OSError (address in use, unknown host) naming the address."""
        import socket

        try:
            infos = socket.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            family, socktype, proto, _, address = infos[0]
            sock = socket.socket(family, socktype, proto)
        except OSError as exc:
            raise OSError(exc.errno, os_error_message(exc, f"cannot listen on {self._host}:{self._port}")) from exc
        wake: tuple[int, int] | None = None
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(LISTEN_BACKLOG)
            bound = sock.getsockname()[:2]
            wake = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
            thread = threading.Thread(target=self._accept_loop, name=f"renderd-http-{bound[1]}", daemon=True)
            self._sock, self._bound, (self._wake_r, self._wake_w) = sock, bound, wake
            thread.start()
            self._thread = thread
            with self.registry._lock:
                self.registry._probes.append(self._requests_unattributed)
        except (OSError, RuntimeError) as exc:  # RuntimeError: no thread can be started
            # Nothing of a failed start stays open, and stop() after it has nothing to do.
            self._sock = self._bound = self._wake_r = self._wake_w = None
            for fd in wake or ():
                os.close(fd)
            sock.close()
            if isinstance(exc, OSError):
                raise OSError(exc.errno, os_error_message(exc, f"cannot listen on {self._host}:{self._port}")) from exc
            raise
        logger.info("serving HTTP players on %s:%d", self.host, self.port)
        return self

    @property
    def host(self) -> str:
        return str(self._bound[0]) if self._bound is not None else self._host

    @property
    def port(self) -> int:
        return int(self._bound[1]) if self._bound is not None else self._port

    def _accept_loop(self) -> None:
        poller = select.poll()
        poller.register(self._sock.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        try:
            self._accept_until_stopped(poller)
        finally:
            for sock, _, _ in self._refused.values():  # (stop() or a bug ended the loop)
                sock.close()
            self._refused.clear()

    def _accept_until_stopped(self, poller: Any) -> None:
        import socket

        next_log, quiet = 0.0, 0  # accept failures are logged once per ACCEPT_ERROR_LOG_INTERVAL
        listener = self._sock.fileno()
        while not self.stopping:
            timeout = None
            if self._refused:
                timeout = max(0.0, min(d for _, d, _ in self._refused.values()) - time.monotonic())
            events = poller.poll(None if timeout is None else timeout * 1000)
            if self.stopping or any(fd == self._wake_r for fd, _ in events):
                return
            self._drain_refused(poller, [fd for fd, _ in events if fd in self._refused])
            if not any(fd == listener for fd, _ in events):
                continue
            self._accepting = True
            try:
                conn, addr = self._sock.accept()
            except OSError as exc:
                self._accepting = False
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    now = time.monotonic()
                    if now >= next_log:
                        more = f" ({quiet} more failed accepts since the last report)" if quiet else ""
                        logger.error("%s%s", os_error_message(exc, "cannot accept an HTTP connection"), more)
                        next_log, quiet = now + ACCEPT_ERROR_LOG_INTERVAL, 0
                    else:
                        quiet += 1
                    time.sleep(ACCEPT_RETRY_INTERVAL)  # let connections close; polling again at once would spin
                continue
            try:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            _set_keepalive(conn)
            connection = _Connection(self, conn, addr)
            players = self.registry._player_connections()
            starting = self.registry._players_starting()
            with self._lock:
                full = sum(c.evicted is None for c in self._connections) >= self.max_connections
                if full:
                    full = not self._make_room(players, starting)
                if not full:
                    self._connections.add(connection)
                self._accepting = False
            if full:
                more = self._connection_refusals.due()
                if more is not None:
                    logger.warning(
                        "refused an HTTP connection from %s: %d connections open (503)%s", addr[0], self.max_connections, more
                    )
                self._refuse(poller, conn, f"too many connections (limit {self.max_connections})")
                continue
            try:
                connection.thread.start()
            except RuntimeError as exc:  # no thread can be started (a process or memory limit): refuse this one
                more = self._thread_failures.due()
                if more is not None:
                    logger.error("cannot serve an HTTP connection from %s (answered 503): %s%s", addr[0], exc, more)
                with self._lock:
                    self._connections.discard(connection)
                self._refuse(poller, conn, "the server cannot start a thread for this connection")

    def _hold(self, nbytes: int) -> bool:
        """Hold ``nbytes`` of :attr:`max_unattributed` for a request body about to be read, waiting up to
        :data:`BODY_ROOM_TIMEOUT` for room; False if there was none (or the server is stopping). A body fits when
        nothing else is held, whatever its size (the registry's ``max_request_size`` bounds it)."""
        deadline = time.monotonic() + BODY_ROOM_TIMEOUT
        with self._held_changed:
            while self._held and self._held + nbytes > self.max_unattributed:
                left = deadline - time.monotonic()
                if left <= 0 or self.stopping:
                    return False
                self._held_changed.wait(left)
            self._held += nbytes
            return True

    def _unhold(self, nbytes: int) -> None:
        with self._held_changed:
            self._held -= nbytes
            self._held_changed.notify_all()

    def _make_room(self, players: set[str], starting: Sequence[float] = ()) -> bool:
        """With ``_lock`` held and every place taken: close the connection idle longest (no request begun, nothing
        received) that is not a served player's (``players``: theirs, as the registry knows them); False when there
        is none. A connection idle between requests holds a place for up to IDLE_TIMEOUT (an hour): a ping's, a
        refused post's, a control API client's kept alive, one whose player is no longer served. HTTP lets a
        server close an idle connection at any time; a player's is idle while it works out its answer, so it is
        never the one closed.

        Nor is a starting player's: one that pinged (the reference player does, on the connection it then posts
        every frame on) and is still getting ready, its first frame not yet posted. A ping carries no token, so
        each served player that has posted no frame yet (``starting``: when their bridges were made, oldest
        first) is taken to own the connection first pinged after its bridge was made, of those that have carried
        nothing but pings and are not taken by an older one: at most one connection per starting player is
        spared, for as long as it starts (its first frame, or its bridge's close when its start_timeout runs
        out, ends that), and a ping from before every starting player's bridge spares nothing."""
        import socket

        candidates = [c for c in self._connections if c.waiting_idle and c.evicted is None and c.key not in players]
        pinged = sorted(((c.pinged, c) for c in candidates if c.pinged is not None), key=lambda pair: pair[0])
        spared: set[_Connection] = set()
        i = 0
        for created in starting:
            while i < len(pinged) and pinged[i][0] < created:
                i += 1
            if i == len(pinged):
                break
            spared.add(pinged[i][1])
            i += 1
        idle = sorted((c for c in candidates if c not in spared), key=lambda c: c.idle_since)
        now = time.monotonic()
        for connection in idle:
            poller = select.poll()
            poller.register(connection.sock.fileno(), select.POLLIN)
            if poller.poll(0):  # a request (or its close) is arriving: not idle any more
                continue
            connection.evicted = (f"it was idle for {now - connection.idle_since:.3g} s and its place was needed "
                                  f"for a new connection ({self.max_connections} open, MAX_CONNECTIONS)")
            try:  # (its thread waits in recv, and cannot close the socket meanwhile: it needs _lock first)
                connection.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            more = self._evictions.due()
            if more is not None:
                logger.info("closed the idle HTTP connection %s to make room for a new one: %s%s",
                            connection.key, connection.evicted, more)
            return True
        return False

    def _refuse(self, poller: Any, conn: Any, message: str) -> None:
        """Answer ``conn`` 503 and close it without a thread of its own: the accept loop half-closes it and
        drains what the client sends (its request) for up to :data:`LINGER_TIMEOUT`, as a connection thread
        does after its last answer; closing at once with the request unread would reset the connection and
        the client would never read the 503. Past :data:`MAX_REFUSED_LINGERING` such connections, a new
        one is closed at once."""
        import socket

        try:
            conn.setblocking(False)
            data = _error_bytes(503, message, "RenderdError")
            if conn.send(data) != len(data):  # (a new connection's send buffer holds far more)
                raise OSError(errno.EAGAIN, "short write")
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            conn.close()
            return
        if len(self._refused) >= MAX_REFUSED_LINGERING:
            conn.close()
            return
        fd = conn.fileno()
        self._refused[fd] = (conn, time.monotonic() + LINGER_TIMEOUT, 0)
        poller.register(fd, select.POLLIN)

    def _drain_refused(self, poller: Any, ready: list[int]) -> None:
        """Read and discard what refused connections sent; close those whose client closed, that failed,
        sent :data:`LINGER_MAX_BYTES` or lingered :data:`LINGER_TIMEOUT`."""
        now = time.monotonic()
        for fd in ready:
            conn, deadline, drained = self._refused[fd]
            try:
                n = conn.recv_into(self._drain_buffer)
            except BlockingIOError:
                continue
            except OSError:
                n = 0
            drained += n
            if n and drained < LINGER_MAX_BYTES:
                self._refused[fd] = (conn, deadline, drained)
            else:
                self._refused[fd] = (conn, now, drained)  # done: closed below
        for fd, (conn, deadline, _) in list(self._refused.items()):
            if deadline <= now:
                poller.unregister(fd)
                del self._refused[fd]
                conn.close()

    def _requests_unattributed(self, exclude: set[str]) -> bool:
        """Whether a connection not in ``exclude`` has a request begun that may be a frame (any request whose
        head is not yet parsed, or a ``POST /train``), or bytes (or its close) not yet read, or a connection
        waits to be accepted: what a player sent just before it exited may still be there. A request whose
        head shows it is something else (a control API request waiting for a player, a ping) never is."""
        sock = self._sock
        if sock is None or self.stopping:
            return False
        # In this order, so that a connection moving from the backlog to _connections is seen somewhere.
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        if poller.poll(0) or self._accepting:
            return True
        with self._lock:
            connections = [c for c in self._connections if c.key not in exclude]
        if any(c.in_request and c.may_carry_frame for c in connections):
            return True
        connections = [c for c in connections if not c.in_request]  # (the rest serve no frame, see above)
        poller = select.poll()
        for connection in connections:
            fd = connection.sock.fileno()
            if fd >= 0:  # (-1: closed now, so read to its end)
                poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))

    def _notify_closed(self, connection: _Connection) -> None:
        try:
            self.registry.connection_closed(
                connection.key, connection.closed_because, between_requests=connection.closed_idle,
                requests=connection.requests, failure=connection.failure, reset=connection.reset,
            )
        except Exception:
            logger.exception("connection close notification failed")

    def _connection_done(self, connection: _Connection, notify: bool = True) -> None:
        with self._lock:
            self._connections.discard(connection)
        if notify:
            self._notify_closed(connection)

    def stop(self) -> None:
        """Close every bridge (waiting requests answer 410), every connection and the socket; join the threads.

        Idempotent.
        """
        import socket

        if self.stopping:
            return
        began = time.monotonic()
        self.stopping = True
        with self._held_changed:  # (requests waiting for room for their bodies give up now)
            self._held_changed.notify_all()
        with self.registry._lock:
            if self._requests_unattributed in self.registry._probes:
                self.registry._probes.remove(self._requests_unattributed)
        self.registry.close()
        if self._sock is None:
            return
        os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT)
        self._sock.close()
        with self._lock:
            connections = list(self._connections)
        # Reading ends first: idle connections wake with end of file, while a connection answering its
        # waiting request (410 now that the bridges are closed) still gets its answer out. A connection
        # already sending an answer when stop() began is shut both ways at once: a shut reading end does not
        # wake a send its peer is not reading (a hung player), which would hold stop() for STOP_TIMEOUT.
        for how in (socket.SHUT_RD, socket.SHUT_RDWR):
            for connection in connections:
                since = connection.sending_since
                try:
                    connection.sock.shutdown(socket.SHUT_RDWR if since is not None and since < began else how)
                except OSError:
                    pass
            deadline = time.monotonic() + STOP_TIMEOUT
            for connection in connections:
                connection.thread.join(max(0.0, deadline - time.monotonic()))
            connections = [c for c in connections if c.thread.is_alive()]
            if not connections:
                break
        for connection in connections:
            logger.warning("HTTP connection %s did not stop within %.1f s", connection.key, 2 * STOP_TIMEOUT)
        for fd in (self._wake_r, self._wake_w):
            if fd is not None:
                os.close(fd)
        self._wake_r = self._wake_w = None

    def __enter__(self) -> PlayerHttpServer:
        return self.start() if self._sock is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------------
# The daemon's case: a bridge's stream onto a FIFO pair
# ---------------------------------------------------------------------------------------------------

#: How often the pump's waits look at whether :meth:`FifoPump.stop` was called (seconds).
PUMP_POLL_INTERVAL = 0.1
#: Longest pause between attempts to open ``server.pipe`` while no reader has it open (seconds).
PUMP_OPEN_RETRY_MAX = 0.05
#: Bytes read from ``client.pipe`` at a time.
PUMP_READ_SIZE = 64 * 1024
#: Most buffers passed to one writev.
PUMP_MAX_IOV = 512


class _PumpEnd(Exception):
    """The pump's loop ends: ``error`` is None for a clean end (the client closed its pipes)."""

    def __init__(self, reason: str, error: BaseException | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = error


class FifoPump:
    """Put one bridged HTTP player's stream onto a FIFO pair, behaving exactly as a FIFO player does.

    On a thread of its own: it takes the player's first frame from the bridge, opens ``server.pipe`` for
    writing (retrying while nobody reads it, as a player's blocking open waits) and writes the frame as
    a framed message; then it opens ``client.pipe`` for reading and, for each ACTION message read there,
    hands the action to the bridge and writes the player's answer to ``server.pipe``. So the daemon's
    readiness check reads the first frame from ``server.pipe`` and leased clients open the pipes exactly
    as for a FIFO player.

    It ends, closing its pipe ends (the reader of ``server.pipe`` then sees end of file, i.e. a crashed
    player, unless the stream ended cleanly) and calling ``on_done(error)``, when: the client closes
    ``client.pipe`` at a message boundary or ``server.pipe`` (clean: ``error`` None; the bridge is closed,
    so the player is told it is no longer served, as a FIFO player exits when its client leaves); the
    bridge is closed (clean too; whatever the pump waits for: a frame, a reader, the next action); the
    player crashes, hangs up or posts a bad frame (the bridge's error); a client sends a malformed
    message (a :class:`ProtocolError`); or :meth:`stop` is called.
    """

    def __init__(
        self,
        bridge: PlayerBridge,
        server_path: str,
        client_path: str,
        *,
        on_done: Callable[[BaseException | None], None] | None = None,
    ) -> None:
        self.bridge = bridge
        self.server_path = server_path
        self.client_path = client_path
        self.on_done = on_done
        self.decoder = Decoder(max_body_size=MAX_ACTION_SIZE)
        self._stop = threading.Event()
        self._expected_end = False
        self._thread: threading.Thread | None = None
        self._wfd: int | None = None
        self._rfd: int | None = None
        #: why the pump ended (None while running), and the error if it was not a clean end
        self.reason: str | None = None
        self.error: BaseException | None = None
        #: messages written to server.pipe
        self.frames = 0

    def start(self) -> FifoPump:
        """Start the pump's thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"renderd-pump-{self.bridge.name}", daemon=True)
            self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float | None = STOP_TIMEOUT) -> None:
        """Stop the pump and wait (up to ``timeout`` s) for its thread; it closes its pipe ends. Idempotent.

        ``None`` or ``inf`` waits without a limit; 0, a negative or a NaN timeout does not wait."""
        self._stop.set()
        self.bridge.wake()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            if timeout is None or timeout >= threading.TIMEOUT_MAX:  # a lock takes no longer timeout
                thread.join()
            else:
                thread.join(timeout if timeout > 0 else 0.0)  # (NaN compares false: no wait)
            if thread.is_alive() and timeout is not None and timeout > 0:
                logger.warning("%s: the FIFO pump did not stop within %.1f s", self.bridge.name, timeout)

    close = stop

    def expect_end(self) -> None:
        """The player is being stopped on purpose: its stream ending from now on is logged as information,
        not as a warning (its connection closing, a frame it never sends)."""
        self._expected_end = True

    # -- the loop --------------------------------------------------------------------------------------------
    def _run(self) -> None:
        reason, error = "stopped", None
        try:
            while True:
                message = self._next_frame()
                if self._wfd is None:
                    self._open_server()
                self._write(encode_message(message.fields))
                self.frames += 1
                if self._rfd is None:
                    self._rfd = os.open(self.client_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                action = self._read_action()
                self.bridge.send([HEADER.pack(FieldType.ACTION, len(action)), action, END_OF_MESSAGE], time.monotonic())
        except _PumpEnd as end:
            reason, error = end.reason, end.error
            if error is None and not self._stop.is_set():
                self.bridge.close()
        except RenderdError as exc:
            reason, error = f"the stream failed: {exc}", exc
        except OSError as exc:
            reason = os_error_message(exc, "the FIFO pump's pipe I/O failed")
            error = RenderdError(reason)
        except Exception as exc:  # a bug: never leave the pipes open
            logger.exception("%s: the FIFO pump failed", self.bridge.name)
            reason, error = f"internal error: {exc!r}", exc
        finally:
            for attr in ("_wfd", "_rfd"):
                fd = getattr(self, attr)
                if fd is not None:
                    setattr(self, attr, None)
                    os.close(fd)
            self.reason, self.error = reason, error
            level = logging.INFO if error is None or self._expected_end else logging.WARNING
            logger.log(level, "%s: FIFO pump ended after %d frame(s): %s", self.bridge.name, self.frames, reason)
            if self.on_done is not None:
                try:
                    self.on_done(error)
                except Exception:
                    logger.exception("%s: the pump's on_done callback failed", self.bridge.name)

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise _PumpEnd("stopped")

    def _next_frame(self) -> Message:
        while True:
            self._check_stop()
            try:
                message = self.bridge.wait_frame(time.monotonic() + PUMP_POLL_INTERVAL)
            except CallOrderError:  # the bridge was closed
                self._check_stop()
                raise _PumpEnd("the bridge was closed") from None
            if message is not None:
                return message

    def _open_server(self) -> None:
        pause = 0.001
        while True:
            self._check_stop()
            if self.bridge.closed:  # (no reader came before renderd stopped serving the player)
                raise _PumpEnd("the bridge was closed")
            try:
                self._wfd = os.open(self.server_path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                return
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                    raise
            self._stop.wait(pause)
            pause = min(pause * 2, PUMP_OPEN_RETRY_MAX)

    def _write(self, buffers: list[Any]) -> None:
        views = byte_views(buffers)
        poller = select.poll()
        poller.register(self._wfd, select.POLLOUT)
        while views:
            try:
                n = os.writev(self._wfd, views[:PUMP_MAX_IOV])
            except BlockingIOError:
                self._check_stop()
                poller.poll(int(PUMP_POLL_INTERVAL * 1000))
                continue
            except BrokenPipeError:
                raise _PumpEnd("the client closed server.pipe") from None
            except OSError as exc:  # named in the pump's reason
                exc.filename = exc.filename or self.server_path
                raise
            drop_written(views, n)

    def _read_action(self) -> bytes:
        try:
            return self._read_action_message()
        except ProtocolError as exc:  # say which pipe the bad bytes came from
            text, suffix = str(exc), f" (at byte offset {exc.offset})"
            if exc.offset is not None and text.endswith(suffix):
                text = text[: -len(suffix)]
            raise ProtocolError(f"client.pipe ({self.client_path}): {text}", offset=exc.offset,
                                field_type=exc.field_type) from None

    def _read_action_message(self) -> bytes:
        decoder = self.decoder
        poller = select.poll()
        poller.register(self._rfd, select.POLLIN | select.POLLHUP)
        while True:
            message = decoder.next_message()
            if message is not NEED_DATA:
                fields = message.fields
                if len(fields) != 1 or fields[0][0] != FieldType.ACTION:
                    raise ProtocolError(
                        f"a client message must hold exactly one ACTION field, got {[t.name for t, _ in fields]}",
                        offset=message.offset,
                    )
                return bytes(fields[0][1])
            self._check_stop()
            error = self.bridge.error
            if error is not None:  # the player hung up (or failed) while nothing was asked of it
                raise _PumpEnd(f"the player's stream failed between steps: {error}", error)
            if self.bridge.closed:  # (unregistered, or the server stopped, with no stop() of the pump)
                raise _PumpEnd("the bridge was closed")
            if not poller.poll(int(PUMP_POLL_INTERVAL * 1000)):
                continue
            try:
                data = os.read(self._rfd, PUMP_READ_SIZE)
            except OSError as exc:  # named in the pump's reason
                exc.filename = exc.filename or self.client_path
                raise
            if not data:
                decoder.end_of_input()  # a ProtocolError if the client left mid-message
                raise _PumpEnd("the client closed client.pipe")
            decoder.receive_data(data)


# ---------------------------------------------------------------------------------------------------
# renderd.launch(transport="http")
# ---------------------------------------------------------------------------------------------------


def launch_http(
    executable: str | os.PathLike[str] | Sequence[str] = "renderd-player",
    *,
    host: str = "127.0.0.1",
    log_path: str | os.PathLike[str] | None = None,
    **kwargs: Any,
) -> Any:
    """``renderd.launch(transport="http")``: serve one player over HTTP and return its Session.

    A private :class:`PlayerHttpServer` listens on ``host`` (loopback by default) on a free port with one
    bridge registered under a fresh token; the player is spawned with ``AI2THOR_SERVER_TYPE=WSGI``,
    ``AI2THOR_HOST``, ``AI2THOR_PORT`` and ``AI2THOR_CLIENT_TOKEN``, and the Session reads the bridge.
    Every other keyword is :func:`renderd.launch`'s (``width``, ``height``, ``platform``, ``x_display``,
    ``args``, ``env``, ``start_timeout``, ``step_timeout``, ``quality``). Closing the session closes the
    bridge (the player's waiting request is answered 410), stops the player and then the server.
    Raises what :func:`renderd.launch` raises; nothing is left behind when it raises.
    """
    from renderd.client import launch_player
    from renderd.config import check_seconds
    from renderd.process import player_env

    kwargs.pop("transport", None)
    kwargs.pop("pipe_size", None)
    try:  # a misspelt keyword fails here, before there is a listener, a thread or a directory to leave behind
        inspect.signature(launch_player).bind(
            None, {}, executable=executable, log_path=log_path, keep_log=False, cleanup=(), **kwargs
        )
    except TypeError as exc:
        raise TypeError(f"launch_http(): {exc}") from None
    for key in ("start_timeout", "step_timeout"):  # finite, > 0, at most MAX_SECONDS: ArgumentError otherwise
        if kwargs.get(key) is not None:
            kwargs[key] = check_seconds(kwargs[key], key)
    directory = tempfile.mkdtemp(prefix="renderd-http-")  # 0700: the player's log
    registry = PlayerBridgeRegistry()
    server = PlayerHttpServer(registry, host=host, players=1)
    try:
        server.start()
        bridge = registry.register(name="the player")
    except BaseException:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
        raise
    keep_log = log_path is not None
    if log_path is None:
        log_path = os.path.join(directory, "player.log")
    endpoint = player_env({}, server_type="WSGI", host=server.host, port=server.port, token=bridge.token)
    endpoint.pop("AI2THOR_SERVER_SIDE_SCREENSHOT", None)  # decided by the platform in launch_player
    return launch_player(
        bridge,
        endpoint,
        executable=executable,
        log_path=log_path,
        keep_log=keep_log,
        cleanup=[server.stop, lambda: shutil.rmtree(directory, ignore_errors=True)],
        **kwargs,
    )


#: The name :func:`renderd.launch` calls for ``transport="http"``.
launch = launch_http
