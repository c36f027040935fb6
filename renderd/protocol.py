"""The wire codec: framed messages between a client and a player, with no I/O in it.

A message is a sequence of fields followed by an end-of-message marker::

      0        1        2        3        4        5 ...                 5+length
    +--------+--------+--------+--------+--------+--------------------------+
    |  type  |     body length (uint32, big-endian)  |  body (length bytes)   |   one field
    +--------+--------+--------+--------+--------+--------------------------+
    +--------+--------+--------+--------+--------+
    |  0xff  |  0x00     0x00     0x00     0x00  |                              end of message
    +--------+--------+--------+--------+--------+

(``struct`` format ``!BI``). Field types are :class:`FieldType`. A player sends METADATA (msgpack) or
METADATA_PATCH, then image fields, then the end marker; a client sends one ACTION (JSON) then the marker.

This module turns messages into buffers (:func:`encode_message`, ready for one ``writev``) and bytes into
messages (:class:`Decoder`). The decoder is fed either by copying bytes in (:meth:`Decoder.receive_data`)
or, on the fast path, by letting the transport read straight into the decoder's buffers
(:meth:`Decoder.get_buffers` / :meth:`Decoder.buffers_updated`): a large body is read directly into the
buffer that becomes its numpy array, never assembled with ``bytes + bytes``. It never touches a file
descriptor, a clock or a logger. After a :class:`~renderd.errors.ProtocolError` the decoder stays failed
(whole messages decoded before the malformed bytes are handed out first).
"""

from __future__ import annotations

import enum
import gc
import json
import re
import struct
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import msgpack
import numpy as np

from renderd.errors import ProtocolError

__all__ = [
    "FieldType",
    "IMAGE_FIELDS",
    "FORM_FIELD_NAMES",
    "HEADER",
    "HEADER_SIZE",
    "END_OF_MESSAGE",
    "DEFAULT_MAX_BODY_SIZE",
    "DEFAULT_MAX_FIELDS",
    "MAX_RESOLUTION",
    "MAX_ACTION_SIZE",
    "MAX_ACTION_DEPTH",
    "ActionTooDeep",
    "NEED_DATA",
    "Message",
    "Decoder",
    "encode_message",
    "encode_action",
    "encode_metadata",
    "decode_metadata",
    "METADATA_BYTES_PER_CONTAINER",
    "METADATA_UNCOUNTED_SIZE",
    "decode_action",
    "parse_action",
    "message_nbytes",
    "byte_views",
    "drop_written",
]


class FieldType(enum.IntEnum):
    METADATA = 1
    ACTION = 2
    ACTION_RESULT = 3
    RGB_IMAGE = 4
    DEPTH_IMAGE = 5
    NORMALS_IMAGE = 6
    FLOWS_IMAGE = 7
    CLASSES_IMAGE = 8
    IDS_IMAGE = 9
    THIRD_PARTY_IMAGE = 10
    METADATA_PATCH = 11
    THIRD_PARTY_DEPTH = 12
    THIRD_PARTY_NORMALS = 13
    THIRD_PARTY_IMAGE_IDS = 14
    THIRD_PARTY_CLASSES = 15
    THIRD_PARTY_FLOW = 16
    END_OF_MESSAGE = 255


#: Field types that carry an image body.
IMAGE_FIELDS = frozenset(
    {
        FieldType.RGB_IMAGE,
        FieldType.DEPTH_IMAGE,
        FieldType.NORMALS_IMAGE,
        FieldType.FLOWS_IMAGE,
        FieldType.CLASSES_IMAGE,
        FieldType.IDS_IMAGE,
        FieldType.THIRD_PARTY_IMAGE,
        FieldType.THIRD_PARTY_DEPTH,
        FieldType.THIRD_PARTY_NORMALS,
        FieldType.THIRD_PARTY_IMAGE_IDS,
        FieldType.THIRD_PARTY_CLASSES,
        FieldType.THIRD_PARTY_FLOW,
    }
)

#: The multipart form names HTTP players use for each image field (and the reverse map below).
FORM_FIELD_NAMES: dict[FieldType, str] = {
    FieldType.RGB_IMAGE: "image",
    FieldType.DEPTH_IMAGE: "image_depth",
    FieldType.NORMALS_IMAGE: "image_normals",
    FieldType.FLOWS_IMAGE: "image_flow",
    FieldType.CLASSES_IMAGE: "image_classes",
    FieldType.IDS_IMAGE: "image_ids",
    FieldType.THIRD_PARTY_IMAGE: "image-thirdParty-camera",
    FieldType.THIRD_PARTY_DEPTH: "image_thirdParty_depth",
    FieldType.THIRD_PARTY_NORMALS: "image_thirdParty_normals",
    FieldType.THIRD_PARTY_IMAGE_IDS: "image_thirdParty_image_ids",
    FieldType.THIRD_PARTY_CLASSES: "image_thirdParty_classes",
    FieldType.THIRD_PARTY_FLOW: "image_thirdParty_flow",
}
FIELD_TYPES_BY_FORM_NAME: dict[str, FieldType] = {v: k for k, v in FORM_FIELD_NAMES.items()}

HEADER = struct.Struct("!BI")
HEADER_SIZE = HEADER.size  # 5
END_OF_MESSAGE = HEADER.pack(FieldType.END_OF_MESSAGE, 0)

#: Largest frame width or height renderd accepts anywhere (configuration, launch arguments, the reference
#: player): the largest frame whose RGBA body fits :data:`DEFAULT_MAX_BODY_SIZE`.
MAX_RESOLUTION = 4096
#: Largest body accepted by default: one 4096 x 4096 RGBA frame (64 MiB). A length above the limit is
#: rejected from the header alone, before any of the body is read or allocated.
DEFAULT_MAX_BODY_SIZE = MAX_RESOLUTION * MAX_RESOLUTION * 4
#: Most fields accepted in one message by default (a player with many agents and third-party cameras
#: sends a few dozen); a stream that never sends its end marker is rejected instead of growing forever.
DEFAULT_MAX_FIELDS = 1024
#: Largest ACTION body a client may send and a player accepts (actions are small JSON objects):
#: :func:`encode_action` refuses a bigger one before anything is sent, so the stream stays usable.
MAX_ACTION_SIZE = 16 * 1024 * 1024
#: Largest whole message accepted, by default, in multiples of the largest body: sixteen (1 GiB by
#: default: a 4096 x 4096 agent with every image type, and third-party cameras besides). Without it, 1024
#: fields of 64 MiB each would be accepted, and a reader past its deadline would go on reading while the
#: bytes kept coming.
MESSAGE_SIZE_IN_BODIES = 16
#: Bodies up to this size are copied out of the decoder's scratch buffer; larger ones get a buffer of
#: their own that the transport reads into directly.
SMALL_BODY = 16 * 1024
#: Size of the scratch buffer that headers and small bodies are read into.
SCRATCH_SIZE = 64 * 1024

#: Large body buffers a decoder keeps for reuse: at most this many, and this many bytes in all.
POOL_BUFFERS = 16
POOL_BYTES = 64 * 1024 * 1024
#: A pooled buffer not handed out during this many messages is forgotten: after a change of resolution
#: (or of the image types asked for) the old size's buffers would otherwise stay for the rest of the
#: stream, since only new buffers push old ones out. Checked every POOL_BUFFERS messages.
POOL_IDLE_MESSAGES = 64

_VALID_TYPES = frozenset(int(t) for t in FieldType)
# Type byte -> FieldType (None where invalid): a tuple index costs 0.04 us, FieldType(t) 0.6 us per field.
_FIELD_TYPE_OF: tuple[FieldType | None, ...] = tuple(
    FieldType(i) if i in _VALID_TYPES else None for i in range(256)
)


def _pooled_refs(pool: list[Any], i: int) -> int:
    # The reference count of pool[i] as seen from here: the list's reference plus the call's own.
    return sys.getrefcount(pool[i])


# What _pooled_refs reports for a buffer nothing but the pool refers to (measured rather than assumed:
# how many references a call adds differs between Python versions). A buffer reporting more is still
# held somewhere: by a Message, an Event's frame (every numpy view keeps its base array alive), a
# memoryview, or the caller's own variables, and is never handed out again.
_FREE_REFS = _pooled_refs([np.empty(1, dtype=np.uint8)], 0)


class _NeedData:
    """Sentinel returned by :meth:`Decoder.next_message` when more bytes are needed."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"

    def __bool__(self) -> bool:
        return False


NEED_DATA = _NeedData()


@dataclass
class Message:
    """One decoded message: its fields in wire order, and the stream offset of its first byte."""

    fields: list[tuple[FieldType, Any]] = field(default_factory=list)
    offset: int = 0
    nbytes: int = 0
    #: stream offset of each field's header, parallel to ``fields``
    offsets: list[int] = field(default_factory=list)

    def first(self, ftype: FieldType) -> Any | None:
        for t, body in self.fields:
            if t == ftype:
                return body
        return None

    def bodies(self, ftype: FieldType) -> list[Any]:
        return [body for t, body in self.fields if t == ftype]


def _nbytes(buf: Any) -> int:
    if isinstance(buf, (bytes, bytearray)):
        return len(buf)
    return memoryview(buf).nbytes


def encode_message(fields: Iterable[tuple[int, Any]]) -> list[Any]:
    """Turn ``(field type, body)`` pairs into a list of buffers ready for one ``writev``.

    Bodies are any objects with the buffer protocol (bytes, bytearray, memoryview, contiguous numpy
    arrays) and are not copied; headers are packed, and the end-of-message marker is appended.
    """
    out: list[Any] = []
    for ftype, body in fields:
        ftype = int(ftype)
        if ftype not in _VALID_TYPES or ftype == FieldType.END_OF_MESSAGE:
            raise ValueError(f"cannot encode field type {ftype}")
        if isinstance(body, np.ndarray):
            if not body.flags.c_contiguous:
                body = np.ascontiguousarray(body)
            body = memoryview(body).cast("B")
        try:
            n = _nbytes(body)
        except TypeError:
            hint = " (metadata goes as msgpack bytes: encode_metadata(dict))" if ftype == FieldType.METADATA else ""
            raise TypeError(
                f"cannot encode the body of {FieldType(ftype).name}: a {type(body).__name__} is not a bytes-like "
                f"object{hint}"
            ) from None
        if n > 0xFFFFFFFF:
            raise ValueError(f"body of {FieldType(ftype).name} is {n} bytes, over the 4 GiB framing limit")
        out.append(HEADER.pack(ftype, n))
        if n:
            out.append(body)
    out.append(END_OF_MESSAGE)
    return out


def message_nbytes(buffers: Sequence[Any]) -> int:
    """Total size of an encoded message's buffers."""
    return sum(_nbytes(b) for b in buffers)


def byte_views(buffers: Iterable[Any]) -> list[memoryview]:
    """Flat byte views of an encoded message's non-empty buffers, for writing it in parts."""
    views = [memoryview(b).cast("B") for b in buffers]
    return [v for v in views if v.nbytes]


def drop_written(views: list[memoryview], n: int) -> None:
    """Drop the first ``n`` bytes from ``views`` (in place): what a partial ``writev``/``sendmsg`` wrote."""
    while n and views:
        first = views[0]
        if n >= first.nbytes:
            n -= first.nbytes
            views.pop(0)
        else:
            views[0] = first[n:]
            n = 0


def _numpy_scalar(obj: np.generic) -> Any:
    """The Python value of a numpy scalar. ``item()`` gives a numpy scalar back for the extended precision
    types (longdouble, clongdouble), which an encoder would hand to its default hook again and again until
    it ran out of stack: a longdouble is sent as the nearest float, anything else is refused by name."""
    value = obj.item()
    if isinstance(value, np.generic):
        if isinstance(value, np.floating):
            return float(value)
        raise TypeError(f"value of numpy type {type(obj).__name__} has no JSON or msgpack equivalent: {obj!r}")
    return value


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return _numpy_scalar(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"action value of type {type(obj).__name__} cannot be sent as JSON: {obj!r}")


# One encoder for every action: json.dumps with options builds a new JSONEncoder per call (3.6 us per
# action against 2.2 us for this one's encode()).
_ACTION_ENCODER = json.JSONEncoder(default=_json_default, separators=(",", ":"))

#: Deepest nesting of arrays and objects an action may have (AI2-THOR's actions nest a few levels).
#: :func:`encode_action` refuses a deeper one before anything is sent, and :func:`parse_action` raises
#: :class:`ActionTooDeep` for one, which a player answers as a failed action. Python's JSON parser
#: recurses once per level and fails with RecursionError somewhere below the interpreter's recursion
#: limit (1000), depending on how deep the caller's stack already is; this limit is the same everywhere.
MAX_ACTION_DEPTH = 512
# A JSON string (escapes included): removed before counting brackets, which may appear inside strings.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_NOT_QUOTES_OR_BRACKETS = bytes(b for b in range(256) if b not in b'"[]{}')


def _depth_over_limit(body: bytes) -> int | None:
    """How deep the arrays and objects of the valid JSON text ``body`` nest (the top-level object counts
    as one level), when that is over :data:`MAX_ACTION_DEPTH`; else None."""
    if body.count(b"[") + body.count(b"{") <= MAX_ACTION_DEPTH:  # an upper bound: the common case ends here
        return None
    if b"\\" in body:
        # A quote may be escaped: strip the strings with the regex (exact; 10x slower than below).
        marks = np.frombuffer(_JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKETS), dtype=np.uint8)
        outside = np.ones(marks.shape, dtype=bool)
    else:
        # No backslash, so no escaped quote: every quote opens or closes a string, and a bracket is inside
        # a string exactly when an odd number of quotes comes before it. (About 70 us for an action listing
        # 200 objects, 15 KB, against 250 us stripping the strings with the regex.)
        marks = np.frombuffer(body.translate(None, _NOT_QUOTES_OR_BRACKETS), dtype=np.uint8)
        outside = (np.cumsum(marks == 0x22) & 1) == 0
    opening = ((marks == 0x5B) | (marks == 0x7B)) & outside
    closing = ((marks == 0x5D) | (marks == 0x7D)) & outside
    if not opening.any():
        return None
    depth = int(np.cumsum(opening.astype(np.int64) - closing).max())
    return depth if depth > MAX_ACTION_DEPTH else None


def encode_action(action: dict[str, Any]) -> list[Any]:
    """Encode one action (a JSON object; numpy scalars and arrays allowed) as a complete message.

    Raises ``ValueError`` for an action JSON cannot hold, one over :data:`MAX_ACTION_SIZE` encoded, or one
    nested deeper than :data:`MAX_ACTION_DEPTH`; nothing is sent then, and the stream stays usable.
    """
    try:
        body = _ACTION_ENCODER.encode(action).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ValueError(f"action cannot be encoded as JSON: {exc}") from exc
    except RecursionError:  # nested deeper than the encoder can follow from here
        raise ValueError(
            f"action {action.get('action')!r} nests arrays or objects too deeply to be encoded as JSON "
            f"(over the limit of {MAX_ACTION_DEPTH} levels, MAX_ACTION_DEPTH); nothing was sent"
        ) from None
    if len(body) > MAX_ACTION_SIZE:
        raise ValueError(
            f"action {action.get('action')!r} is {len(body)} bytes as JSON, over the limit of {MAX_ACTION_SIZE} "
            "bytes (MAX_ACTION_SIZE); nothing was sent"
        )
    depth = _depth_over_limit(body)
    if depth is not None:
        raise ValueError(
            f"action {action.get('action')!r} nests arrays or objects {depth} levels deep, over the limit "
            f"of {MAX_ACTION_DEPTH} (MAX_ACTION_DEPTH) a player accepts; nothing was sent"
        )
    return [HEADER.pack(FieldType.ACTION, len(body)), body, END_OF_MESSAGE]


def encode_metadata(metadata: dict[str, Any]) -> bytes:
    """Pack metadata with msgpack (numpy scalars and arrays allowed)."""
    return msgpack.packb(metadata, default=_msgpack_default, use_bin_type=True)


def _msgpack_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return _numpy_scalar(obj)
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    raise TypeError(f"metadata value of type {type(obj).__name__} cannot be packed: {obj!r}")


# How msgpack refuses a count over the limits it derives from the body's size, and what each counts.
_OVER_MSGPACK_LIMIT = re.compile(r"(\d+) exceeds max_(str|bin|array|map|ext)_len\(\d+\)$")
_MSGPACK_COUNTED = {
    "str": "-byte string",
    "bin": "-byte binary",
    "array": "-element array",
    "map": "-entry map",
    "ext": "-byte extension",
}


#: A metadata body over :data:`METADATA_UNCOUNTED_SIZE` may decode into at most one map or array per this
#: many bytes of body. An empty map or array is one byte of msgpack and 56-72 bytes of Python (a map of one
#: entry, 3 bytes with its value, takes about 290), so without a limit a 64 MiB body of them would take
#: 4-6 GiB; AI2-THOR's metadata has one per 10-60 bytes (a position ``{x, y, z}`` of float32s is 22 bytes,
#: a point ``[x, z]`` 11, an object about 60). Set it lower (1 turns the limit off) for a player whose metadata is denser.
METADATA_BYTES_PER_CONTAINER = 8
#: Metadata bodies up to this size are decoded without counting their maps and arrays (they take at most
#: about 100 MiB whatever they hold), so the common case pays nothing.
METADATA_UNCOUNTED_SIZE = 1 << 20
# Bytes that can start a map or an array: fixmap 0x80-0x8f, fixarray 0x90-0x9f, array 16/32 0xdc/0xdd,
# map 16/32 0xde/0xdf (tested on the byte's top bits with numpy).


def metadata_container_limit(nbytes: int) -> int | None:
    """How many maps and arrays a metadata body of ``nbytes`` bytes may decode into; None for no limit."""
    if nbytes <= METADATA_UNCOUNTED_SIZE or METADATA_BYTES_PER_CONTAINER <= 1:
        return None
    return nbytes // METADATA_BYTES_PER_CONTAINER


def metadata_may_exceed(body: Any, limit: int) -> bool:
    """False when ``body`` cannot decode into more than ``limit`` maps and arrays: it holds no more bytes
    that could start one (an upper bound, 0.3 ms for 2 MB, where counting them while decoding adds a third
    to the decode)."""
    a = np.frombuffer(body, dtype=np.uint8)
    return int(np.count_nonzero((a >> 5) == 4)) + int(np.count_nonzero((a & 0xFC) == 0xDC)) > limit


class _TooManyContainers(Exception):
    pass


def _counting_hook(limit: int) -> Any:
    left = limit

    def hook(obj: Any) -> Any:
        nonlocal left
        left -= 1
        if left < 0:
            raise _TooManyContainers
        return obj

    return hook


def decode_metadata(
    body: Any,
    *,
    offset: int | None = None,
    ftype: FieldType = FieldType.METADATA,
    limit_containers: bool = True,
) -> dict:
    """Unpack a METADATA or METADATA_PATCH body; anything but a msgpack map is a ProtocolError.

    A body over :data:`METADATA_UNCOUNTED_SIZE` that would decode into more than one map or array per
    :data:`METADATA_BYTES_PER_CONTAINER` bytes is a ProtocolError as well, raised once that many are built
    (``limit_containers=False`` skips the check, for bytes packed from metadata decoded already).
    """
    if memoryview(body).nbytes == 0:
        raise ProtocolError(f"{ftype.name} body is empty (0 bytes); it must be a msgpack map", offset=offset,
                            field_type=ftype)
    limit = metadata_container_limit(memoryview(body).nbytes) if limit_containers else None
    hooks: dict[str, Any] = {}
    if limit is not None and metadata_may_exceed(body, limit):
        hooks["list_hook"] = hooks["object_hook"] = _counting_hook(limit)
    # Metadata with many objects unpacks into thousands of small containers, none in a reference cycle;
    # letting the cyclic collector run again and again in the middle of that costs a third of the decode
    # time. Pause it for the unpack: the new objects are counted and collected normally afterwards.
    collecting = gc.isenabled()
    if collecting:
        gc.disable()
    try:
        value = msgpack.unpackb(body, raw=False, strict_map_key=False, **hooks)
    except _TooManyContainers:
        size = memoryview(body).nbytes
        raise ProtocolError(
            f"{ftype.name} body of {size} bytes decodes into more than {limit} maps and arrays, over the limit "
            f"of one per {METADATA_BYTES_PER_CONTAINER} bytes of body (renderd.protocol."
            f"METADATA_BYTES_PER_CONTAINER; real metadata has one per 10-60 bytes, and a body of tiny "
            f"containers takes up to 100 times its size in memory): the player sent malformed metadata; if "
            f"its metadata really is that dense, set METADATA_BYTES_PER_CONTAINER lower (1 turns the limit off)",
            offset=offset,
            field_type=ftype,
        ) from None
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        # Some carry no text (StackError, FormatError): their class's description says what they mean.
        detail = str(exc) or (type(exc).__doc__ or "").strip().split("\n")[0].rstrip(".") or "no details"
        what = f" ({type(exc).__name__}: {detail})"
        # msgpack limits each count to what the body could hold ("3000 exceeds max_array_len(100)"): over it,
        # the body ends before what it announces; no limit a user could raise was reached.
        short = _OVER_MSGPACK_LIMIT.match(detail)
        if short is not None:
            counted = f"{short[1]}{_MSGPACK_COUNTED[short[2]]}"
            size = memoryview(body).nbytes
            what = f": it is {size} bytes, too few for the {counted} it announces (cut short, or not msgpack){what}"
        raise ProtocolError(f"{ftype.name} body is not valid msgpack{what}", offset=offset, field_type=ftype) from exc
    finally:
        if collecting:
            gc.enable()
    if not isinstance(value, dict):
        raise ProtocolError(
            f"{ftype.name} body must be a msgpack map, got {type(value).__name__}", offset=offset, field_type=ftype
        )
    return value


class ActionTooDeep(ProtocolError):
    """An ACTION nested deeper than :data:`MAX_ACTION_DEPTH`. The message's framing is intact, so a player
    answers it as a failed action (``InvalidArgument``) and carries on; a caller that does not tell it
    apart from other ProtocolErrors treats it as a malformed message.

    ``action`` is the parsed action when the parser could follow it (its name and ``sequenceId`` can be
    echoed), else ``{}``.
    """

    def __init__(self, message: str, action: dict[str, Any] | None = None, *, offset: int | None = None) -> None:
        # ``action`` may be left out: a copy or an unpickled error is rebuilt from the message alone.
        super().__init__(message, offset=offset)
        self.action = {} if action is None else action


def _parse_int(digits: str) -> int | float:
    # int() refuses a literal of more than sys.get_int_max_str_digits() (4,300) digits with ValueError,
    # which would make the whole action "not JSON". Such a number is far too large for a float anyway:
    # read it as the infinity of its sign, which every number check a player makes rejects.
    try:
        return int(digits)
    except ValueError:
        return float("-inf") if digits.startswith("-") else float("inf")


_ACTION_DECODER = json.JSONDecoder(parse_int=_parse_int)


def parse_action(body: Any, *, offset: int | None = None) -> dict[str, Any]:
    """An ACTION body (bytes-like: UTF-8 JSON) as a JSON object.

    Raises :class:`ActionTooDeep` for one nested deeper than :data:`MAX_ACTION_DEPTH`, and
    :class:`ProtocolError` for anything else that is not a JSON object (``offset`` goes into the message).
    An integer of more than 4,300 digits is read as an infinity.
    """
    data = bytes(body)
    try:
        action = _ACTION_DECODER.decode(data.decode("utf-8"))
    except RecursionError:  # the parser recursed past the interpreter's limit, well beyond MAX_ACTION_DEPTH
        raise ActionTooDeep(
            f"the action nests arrays or objects too deeply to be parsed (the limit is {MAX_ACTION_DEPTH} levels)",
            {},
            offset=offset,
        ) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"ACTION body is not valid UTF-8 JSON: {exc}", offset=offset) from exc
    if not isinstance(action, dict):
        raise ProtocolError(f"ACTION body must be a JSON object, got {type(action).__name__}", offset=offset)
    depth = _depth_over_limit(data)
    if depth is not None:
        raise ActionTooDeep(
            f"the action nests arrays or objects {depth} levels deep, over the limit of {MAX_ACTION_DEPTH}",
            action,
            offset=offset,
        )
    return action


def decode_action(message: Message) -> dict[str, Any]:
    """The action a client sent: the single ACTION field of ``message``, parsed as a JSON object.

    Raises :class:`ProtocolError`, or its subclass :class:`ActionTooDeep` (see :func:`parse_action`).
    """
    bodies = message.bodies(FieldType.ACTION)
    if len(bodies) != 1:
        raise ProtocolError(
            f"a client message must hold exactly one ACTION field, got {len(bodies)}", offset=message.offset
        )
    return parse_action(bodies[0], offset=message.offset)


class Decoder:
    """Incremental decoder: bytes in, whole messages out.

    Two ways to feed it:

    * ``receive_data(data)`` copies bytes in (any transport; tests feed bytes one at a time);
    * ``get_buffers()`` returns writable memoryviews the next bytes should land in, in order; after
      reading ``n`` bytes into them (``os.readv``), call ``buffers_updated(n)``. The first buffer is the
      rest of a large body when one is being read, so its bytes are never copied.

    ``next_message()`` returns a :class:`Message` or :data:`NEED_DATA`. ``end_of_input()`` says the
    stream ended; it raises :class:`ProtocolError` if that happened inside a message. Errors leave the
    decoder failed: every later call raises the same error, except that whole messages decoded before the
    malformed bytes (read together with them) are still handed out by ``next_message()`` first; the call
    that fed those bytes then returns without raising. An unknown field type fails from its type byte
    alone, as soon as that arrives, without waiting for the rest of its header. Limits, each a
    :class:`ProtocolError` from a field's header alone: ``max_body_size`` per body, ``max_fields`` per
    message, and ``max_message_size`` for a whole message, its end-of-message marker included (so every
    :attr:`Message.nbytes` is at most that; default: :data:`MESSAGE_SIZE_IN_BODIES` times ``max_body_size``).
    Each fails as soon as the header bytes in prove it: ``max_fields`` from the type byte, the others (and
    an end marker's non-zero length) from the first length bytes that do, the length being big-endian
    (its most significant byte first), so a stream that stalls after them is not waited for.

    Large bodies (over ``SMALL_BODY``) get buffers of their own, which the decoder keeps (up to
    ``pool_bytes`` in all, ``POOL_BUFFERS`` buffers) and hands out again for a body of the same size once
    nothing else refers to them: not the message, not an event, not any numpy view of the frame, not a
    weak reference. A frame an agent still holds is therefore never overwritten, and a stream of
    same-sized frames reuses the same few buffers instead of having the allocator map, fault in and trim
    fresh pages every message (up to 70 page faults per message at 300x300 RGB+depth, where the C
    allocator trims its heap each time). A pooled buffer not handed out during ``POOL_IDLE_MESSAGES``
    messages is forgotten, so the buffers of a resolution left behind go back to the allocator once
    nothing else holds them. ``pool_bytes=0`` turns the pool off.
    """

    def __init__(
        self,
        *,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        max_fields: int = DEFAULT_MAX_FIELDS,
        pool_bytes: int = POOL_BYTES,
        max_message_size: int | None = None,
    ) -> None:
        if max_body_size < 0:
            raise ValueError("max_body_size must be >= 0")
        if max_message_size is None:
            max_message_size = MESSAGE_SIZE_IN_BODIES * max(max_body_size, 1)
        if max_message_size < HEADER_SIZE:
            raise ValueError(f"max_message_size must be >= {HEADER_SIZE} (the end-of-message marker alone)")
        self.max_message_size = max_message_size
        if pool_bytes < 0:
            raise ValueError("pool_bytes must be >= 0")
        self.max_body_size = max_body_size
        self.max_fields = max_fields
        self._pool: list[np.ndarray] = []  # least recently handed out first
        self._pool_used: list[int] = []  # for each pooled buffer, self._messages when last handed out
        self._pool_bytes = 0
        self._messages = 0  # whole messages decoded so far
        self._pool_limit = pool_bytes
        self._scratch = bytearray(SCRATCH_SIZE)
        self._sview = memoryview(self._scratch)
        self._start = 0  # first unparsed byte in scratch
        self._end = 0  # end of valid bytes in scratch
        self._consumed = 0  # stream offset of scratch[_start]
        # The large body being filled, if any.
        self._body: np.ndarray | None = None
        self._body_view: memoryview | None = None
        self._body_filled = 0
        self._body_type: FieldType | None = None
        self._body_offset = 0
        # The message being assembled.
        self._fields: list[tuple[FieldType, Any]] = []
        self._offsets: list[int] = []
        self._msg_offset: int | None = None
        # Bytes of the message being assembled, counted from each field's header, its end marker included.
        self._msg_size = HEADER_SIZE
        self._ready: list[Message] = []
        self._error: ProtocolError | None = None
        self._eof = False

    # -- feeding -----------------------------------------------------------------------------------
    def get_buffers(self) -> list[memoryview]:
        """Writable buffers to read the next bytes into, in order (pass them to ``os.readv``)."""
        self._check()
        if self._body is not None:
            rest = self._body_view[self._body_filled :]
            self._compact()
            return [rest, self._sview[self._end :]]
        self._compact()
        return [self._sview[self._end :]]

    def buffers_updated(self, nbytes: int) -> None:
        """``nbytes`` bytes were written into the buffers from :meth:`get_buffers`, in order."""
        self._check()
        if nbytes < 0:
            raise ValueError("nbytes must be >= 0")
        try:
            if self._body is not None:
                want = self._body_view.nbytes - self._body_filled
                take = min(want, nbytes)
                self._body_filled += take
                nbytes -= take
                if self._body_filled == self._body_view.nbytes:
                    self._finish_body()
            self._end += nbytes
            if self._end > len(self._scratch):
                raise ValueError("buffers_updated() was told of more bytes than get_buffers() offered")
            self._parse()
        except ProtocolError:
            if not self._ready:
                raise
            # Whole messages came before the malformed bytes: they are handed out first, and the error is
            # raised by the first call after the last of them is taken (the decoder is failed already).

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Copy ``data`` into the decoder (the general path; every byte is accepted)."""
        self._check()
        if self._eof:
            raise RuntimeError("receive_data() after end_of_input()")
        view = memoryview(data).cast("B")
        pos = 0
        total = view.nbytes
        while pos < total and self._error is None:  # (the rest of the bytes after an error is of no use)
            # Fill the first offered buffer, then ask again: the layout changes once a body completes.
            first = self.get_buffers()[0]
            n = min(first.nbytes, total - pos)
            first[:n] = view[pos : pos + n]
            pos += n
            self.buffers_updated(n)

    def end_of_input(self) -> None:
        """The stream ended. Raises :class:`ProtocolError` if it ended inside a header, body or message."""
        self._check()
        self._eof = True
        if self._body is not None:
            missing = self._body_view.nbytes - self._body_filled
            self._fail(
                f"end of input inside the body of a {self._body_type.name} field: "
                f"expected {self._body_view.nbytes} bytes, got {self._body_filled} ({missing} missing)",
                self._body_offset,
                self._body_type,
            )
        pending = self._end - self._start
        if pending:
            if pending < HEADER_SIZE:
                t = self._scratch[self._start]  # the type byte is there: name what the header announced
                what = _FIELD_TYPE_OF[t]  # a valid type: an unknown one failed as soon as it arrived
                if what is FieldType.END_OF_MESSAGE:
                    announced = "the end-of-message marker"
                else:
                    announced = f"the header of a {what.name} field"
                self._fail(
                    f"end of input inside a field header: got {pending} of {HEADER_SIZE} bytes ({announced})",
                    self._consumed,
                    t,
                )
            ftype, length = HEADER.unpack_from(self._scratch, self._start)
            name = FieldType(ftype).name if ftype in _VALID_TYPES else str(ftype)
            self._fail(
                f"end of input inside the body of a {name} field: expected {length} bytes, "
                f"got {pending - HEADER_SIZE}",
                self._consumed,
                ftype,
            )
        if self._fields:
            last = self._fields[-1][0]
            # (the message's offset said here, once: ProtocolError adds no second one)
            where = "" if self._offsets[-1] == self._msg_offset else f" at byte offset {self._offsets[-1]}"
            self._fail(
                f"end of input inside a message, which starts at byte offset {self._msg_offset}: "
                f"{len(self._fields)} field{'' if len(self._fields) == 1 else 's'} received, no end-of-message "
                f"marker; input ended at byte offset {self._consumed}, after the {last.name} field{where}",
                self._msg_offset,
                last,
            )

    @property
    def in_message(self) -> bool:
        """True while part of a message has been received (so ending now would be an error)."""
        return bool(self._fields) or self._body is not None or self._end > self._start

    @property
    def offset(self) -> int:
        """Stream offset of the next byte to parse."""
        if self._body is not None:
            return self._body_offset + HEADER_SIZE + self._body_filled
        return self._consumed

    @property
    def failed(self) -> ProtocolError | None:
        return self._error

    @property
    def has_message(self) -> bool:
        """True when :meth:`next_message` would return a message."""
        return bool(self._ready)

    # -- output ------------------------------------------------------------------------------------
    def next_message(self) -> Message | _NeedData:
        """The next whole message, or :data:`NEED_DATA`; raises the decoder's error once every message
        completed before it has been taken."""
        if self._ready:
            return self._ready.pop(0)
        self._check()
        return NEED_DATA

    # -- internals ---------------------------------------------------------------------------------
    def _check(self) -> None:
        if self._error is not None:
            # The same error, with only this call's frames: raised as it is, each raise would prepend its
            # frames to the traceback of the last one (growing, and keeping every frame alive, for a
            # reader that keeps asking a failed decoder).
            raise self._error.with_traceback(None)

    def _fail(self, message: str, offset: int | None, ftype: int | None = None) -> None:
        self._error = ProtocolError(message, offset=offset, field_type=ftype)
        raise self._error

    def _unknown_type(self, t: int) -> None:
        self._fail(f"unknown field type {t} (expected 1-16 or 255)", self._consumed, t)

    def _compact(self) -> None:
        # Move unparsed bytes to the front of scratch so the free space is as large as possible.
        if self._start == self._end:
            self._start = self._end = 0
        elif self._start > 0 and (len(self._scratch) - self._end) < HEADER_SIZE + SMALL_BODY:
            n = self._end - self._start
            self._scratch[0:n] = self._scratch[self._start : self._end]
            self._start, self._end = 0, n

    def _body_buffer(self, length: int) -> np.ndarray:
        """A buffer for a large body: a pooled one nothing else refers to, or a new one (uninitialised:
        it is about to be overwritten)."""
        pool = self._pool
        for i in range(len(pool)):
            if (
                pool[i].nbytes == length
                and _pooled_refs(pool, i) == _FREE_REFS
                and not weakref.getweakrefcount(pool[i])  # a weak reference could still reach it
            ):
                buf = pool.pop(i)
                del self._pool_used[i]
                pool.append(buf)
                self._pool_used.append(self._messages)
                return buf
        buf = np.empty(length, dtype=np.uint8)
        if length <= self._pool_limit:
            pool.append(buf)
            self._pool_used.append(self._messages)
            self._pool_bytes += length
            while len(pool) > POOL_BUFFERS or self._pool_bytes > self._pool_limit:
                # Forget the least recently used (if it is in use, its holders keep it alive).
                self._pool_bytes -= pool.pop(0).nbytes
                del self._pool_used[0]
        return buf

    def _forget_idle(self) -> None:
        """Forget pooled buffers not handed out during the last POOL_IDLE_MESSAGES messages (the pool is
        in least-recently-handed-out order, so they are at its front)."""
        pool, used = self._pool, self._pool_used
        oldest = self._messages - POOL_IDLE_MESSAGES
        n = 0
        while n < len(used) and used[n] < oldest:
            n += 1
        if n:
            self._pool_bytes -= sum(buf.nbytes for buf in pool[:n])
            del pool[:n], used[:n]

    @property
    def pooled_bytes(self) -> int:
        """Bytes of body buffers kept for reuse."""
        return self._pool_bytes

    def release_pool(self) -> None:
        """Forget the buffers kept for reuse (frames still held elsewhere stay valid): for a stream that
        has ended, so that its memory goes back as soon as nothing else holds it."""
        self._pool.clear()
        self._pool_used.clear()
        self._pool_bytes = 0

    def _finish_body(self) -> None:
        body = self._body
        ftype = self._body_type
        self._body = self._body_view = None
        self._body_filled = 0
        self._add_field(ftype, body, self._body_offset)

    def _add_field(self, ftype: FieldType, body: Any, offset: int) -> None:
        if self._msg_offset is None:
            self._msg_offset = offset
        self._fields.append((ftype, body))
        self._offsets.append(offset)

    def _check_partial_header(self, avail: int) -> None:
        """Fail now if the first ``avail`` (1-4) bytes of a header, its type byte valid, already break a limit.

        The length is big-endian: the bytes in give its high part, so the smallest length the header can
        still announce is theirs followed by zero bytes. A stream that stalls mid-header after an impossible
        length is then a ProtocolError as soon as the byte that makes it impossible arrives, not a wait until
        the caller's deadline; a length that some remaining bytes could still make valid is waited for.
        """
        start = self._start
        ftype = _FIELD_TYPE_OF[self._scratch[start]]
        if ftype is not FieldType.END_OF_MESSAGE and len(self._fields) >= self.max_fields:
            self._fail(
                f"message has more than {self.max_fields} fields without an end-of-message marker",
                self._consumed,
                ftype,
            )
        if avail == 1:
            return
        least = int.from_bytes(self._scratch[start + 1 : start + avail], "big") << (8 * (HEADER_SIZE - avail))
        if not least:
            return
        seen = f"from the first {avail - 1} of its 4 length bytes, the most significant first"
        if ftype is FieldType.END_OF_MESSAGE:
            self._fail(
                f"end-of-message marker with a length of at least {least} (expected 0; {seen})",
                self._consumed,
                ftype,
            )
        if least > self.max_body_size:
            self._fail(
                f"{ftype.name} field declares a body of at least {least} bytes ({seen}), over the limit of "
                f"{self.max_body_size} bytes (max_body_size)",
                self._consumed,
                ftype,
            )
        msg_size = self._msg_size + HEADER_SIZE + least
        if msg_size > self.max_message_size:
            self._fail(
                f"message grows to at least {msg_size} bytes with this {ftype.name} field ({seen}) and its "
                f"end-of-message marker, over the limit of {self.max_message_size} bytes (max_message_size)",
                self._consumed,
                ftype,
            )

    def _parse(self) -> None:
        scratch = self._scratch
        while self._body is None:
            avail = self._end - self._start
            if avail < HEADER_SIZE:
                # A type byte that starts no field fails now, not once (if ever) the rest of its header came:
                # a player that wrote garbage and hung is a ProtocolError, not a timeout.
                if avail:
                    if _FIELD_TYPE_OF[scratch[self._start]] is None:
                        self._unknown_type(scratch[self._start])
                    self._check_partial_header(avail)
                return
            offset = self._consumed
            t, length = HEADER.unpack_from(scratch, self._start)
            ftype = _FIELD_TYPE_OF[t]
            if ftype is None:
                self._unknown_type(t)
            if ftype is FieldType.END_OF_MESSAGE:
                if length != 0:
                    self._fail(f"end-of-message marker with length {length} (expected 0)", offset, ftype)
                self._start += HEADER_SIZE
                self._consumed += HEADER_SIZE
                start = self._msg_offset if self._msg_offset is not None else offset
                self._ready.append(Message(self._fields, start, self._consumed - start, self._offsets))
                self._messages += 1
                if not self._messages % POOL_BUFFERS and self._pool:
                    self._forget_idle()
                self._fields = []
                self._offsets = []
                self._msg_offset = None
                self._msg_size = HEADER_SIZE
                continue
            if len(self._fields) >= self.max_fields:  # from the header: the body is never read or allocated
                self._fail(
                    f"message has more than {self.max_fields} fields without an end-of-message marker",
                    offset,
                    ftype,
                )
            if length > self.max_body_size:
                self._fail(
                    f"{ftype.name} field declares a body of {length} bytes, over the limit of "
                    f"{self.max_body_size} bytes (max_body_size)",
                    offset,
                    ftype,
                )
            msg_size = self._msg_size + HEADER_SIZE + length
            if msg_size > self.max_message_size:
                self._fail(
                    f"message grows to {msg_size} bytes with this {ftype.name} field and its end-of-message "
                    f"marker, over the limit of {self.max_message_size} bytes (max_message_size)",
                    offset,
                    ftype,
                )
            have = avail - HEADER_SIZE
            body_start = self._start + HEADER_SIZE
            if length <= SMALL_BODY:
                if have < length:
                    return
                body = bytes(scratch[body_start : body_start + length])
                self._start = body_start + length
                self._consumed += HEADER_SIZE + length
                self._msg_size = msg_size
                self._add_field(ftype, body, offset)
                continue
            # A large body: give it its own buffer and move whatever part of it is already in scratch.
            buf = self._body_buffer(length)
            view = memoryview(buf)
            take = min(have, length)
            view[:take] = scratch[body_start : body_start + take]
            self._start = body_start + take
            self._consumed += HEADER_SIZE + length  # the body's bytes are counted now, filled or not
            self._msg_size = msg_size
            if take == length:
                self._add_field(ftype, buf, offset)
                continue
            self._body, self._body_view, self._body_filled = buf, view, take
            self._body_type, self._body_offset = ftype, offset
            return
