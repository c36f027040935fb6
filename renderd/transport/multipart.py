"""multipart/form-data, split in place: a whole request body in, part offsets out, no I/O.

An HTTP player posts one frame as one multipart body (RFC 7578). Each part is a delimiter line, header
lines, an empty line and the part's bytes::

    [preamble]
    --BOUNDARY [padding] CRLF
    Content-Disposition: form-data; name="metadata" CRLF           <- header lines (at most
    Content-Type: text/plain; charset="utf-8" CRLF                    MAX_PART_HEADER_SIZE bytes)
    CRLF
    {"agents": [...], ...}                                          <- body, up to the next CRLF--BOUNDARY
    CRLF --BOUNDARY [padding] CRLF
    Content-disposition: form-data; name="image"; filename="file.dat" CRLF
    CRLF
    <raw pixels>
    CRLF --BOUNDARY-- [epilogue]                                    <- close delimiter

A frame without images comes as ``application/x-www-form-urlencoded`` (Unity's ``WWWForm`` with fields
only): :func:`split_urlencoded` finds its fields the same way, values still percent-encoded.

:func:`split_multipart` returns :class:`Part` records holding the ``start``/``end`` offsets of each body in
the buffer it was given, so an image part becomes a numpy array with ``np.frombuffer(buf, offset=start,
count=end-start)`` and its bytes are never copied again.

Why not the ``multipart`` package (a dependency, well kept): it is a streaming parser that hands a body
out as many ``bytes`` chunks to be joined, i.e. two more copies of every frame, and it is slower. The body
here is already whole in one buffer (it is received with a known Content-Length), so finding the
delimiters with ``bytearray.find`` is all the work there is. Measured on this machine (AMD EPYC, 2 CPUs,
Python 3.11, multipart 2.0.1; ``python benchmarks/transport_http.py --parsers``, best of 7 x 200 runs,
two runs) on the reference player's 300x300 RGB + depth frame (634,696 bytes, 4 parts):
``split_multipart`` 99-127 us, 65-79 us with ``size_hints`` (a player's next frame of the same
layout); ``multipart.PushMultipartParser`` with its chunks joined per part 199-236 us fed the body in
one chunk, 334-342 us fed 64 KiB chunks as a server reads them.
``tests/http_players/test_http_multipart.py`` fuzzes this module with hypothesis: round trips of bodies built by
an independent encoder, agreement with the ``multipart`` package on every valid body, size hints never
changing a valid split, and random or mutated bodies raising nothing but :class:`MultipartError`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Sequence, Union
from urllib.parse import unquote_to_bytes

__all__ = [
    "MAX_BOUNDARY_LENGTH",
    "MAX_PART_HEADER_SIZE",
    "MAX_PARTS",
    "MultipartError",
    "Part",
    "URLENCODED",
    "boundary_from_content_type",
    "form_decode",
    "parse_header_params",
    "split_multipart",
    "split_urlencoded",
]

#: RFC 2046 section 5.1.1: a boundary is 1 to 70 characters.
MAX_BOUNDARY_LENGTH = 70
#: Largest header block (all header lines of one part, with their line ends) accepted.
MAX_PART_HEADER_SIZE = 8 * 1024
#: Most parts accepted in one body: a player with many agents and third-party cameras, each with every
#: image kind, posts a few dozen; anything near this limit is an error, not a frame.
MAX_PARTS = 512
#: Distinct part header blocks remembered (a player repeats the same few with every frame), and the
#: largest block that is remembered.
HEADER_CACHE_SIZE = 256
MAX_CACHED_HEADER_SIZE = 512

#: Most transport padding (spaces and tabs, RFC 2046) accepted after a delimiter: senders use none or a
#: few bytes; a long run is refused before it costs anything.
MAX_PADDING = 1024

#: The other form encoding: Unity's WWWForm holding fields only (no binary data) is posted this way.
URLENCODED = "application/x-www-form-urlencoded"

_CRLF = b"\r\n"
_FIELD_START = re.compile(rb"[^&]")
# Padding is skipped by the regex engine, not byte by byte in Python: the body is parsed before the token
# is checked, so nothing in it may cost more than a search per byte.
_PADDING_RUN = re.compile(rb"[ \t]{0,%d}" % MAX_PADDING)

Buffer = Union[bytes, bytearray]


class MultipartError(ValueError):
    """The body is not valid multipart/form-data: says what is wrong and at which byte offset."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        if offset is not None:
            message = f"{message} (at byte offset {offset} of the request body)"
        super().__init__(message)
        self.offset = offset


@dataclass(frozen=True, slots=True)
class Part:
    """One form part: its ``name``, optional ``filename`` and ``content_type``, and where its body lies."""

    name: str
    filename: str | None
    content_type: str | None
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


# A header parameter: `; key=value` or `; key="quoted \" value"`.
_PARAM = re.compile(r';\s*([^\s=;"]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*)')
_TOKEN_END = re.compile(r"[;\s]")
_QUOTED_PAIR = re.compile(r"\\(.)")


def parse_header_params(value: str) -> tuple[str, dict[str, str]]:
    """Split ``'form-data; name="x"; filename=y'`` into ``('form-data', {'name': 'x', 'filename': 'y'})``.

    The main value is lowercased, parameter names too; quoted values are unquoted (``\\"`` -> ``"``).
    """
    value = value.strip()
    m = _TOKEN_END.search(value)
    main = (value[: m.start()] if m else value).strip().lower()
    params: dict[str, str] = {}
    for key, raw in _PARAM.findall(value):
        raw = raw.strip()
        if len(raw) >= 2 and raw[0] == raw[-1] == '"':
            raw = _QUOTED_PAIR.sub(r"\1", raw[1:-1])
        params.setdefault(key.lower(), raw)
    return main, params


def boundary_from_content_type(content_type: str | None) -> bytes:
    """The boundary of a ``multipart/form-data`` Content-Type header value.

    Raises :class:`MultipartError` when the type is not multipart/form-data or the boundary is missing,
    empty, longer than :data:`MAX_BOUNDARY_LENGTH` or not ASCII.
    """
    if not content_type:
        raise MultipartError("the request has no Content-Type (expected multipart/form-data; boundary=...)")
    main, params = parse_header_params(content_type)
    if main != "multipart/form-data":
        raise MultipartError(f"Content-Type is {main!r}, expected multipart/form-data")
    boundary = params.get("boundary")
    if not boundary:
        raise MultipartError("Content-Type multipart/form-data has no boundary parameter")
    if len(boundary) > MAX_BOUNDARY_LENGTH:
        raise MultipartError(f"multipart boundary is {len(boundary)} characters, over {MAX_BOUNDARY_LENGTH}")
    try:
        return boundary.encode("ascii")
    except UnicodeEncodeError as exc:
        raise MultipartError(f"multipart boundary {boundary!r} is not ASCII") from exc


def _after_delimiter(body: Buffer, pos: int, length: int) -> tuple[int, bool]:
    """Past a delimiter ending at ``pos``: (offset of the next part's headers, whether it was the last)."""
    if body[pos : pos + 2] == b"--":
        return pos + 2, True
    start = pos
    pos = _PADDING_RUN.match(body, pos).end()  # type: ignore[union-attr]  # matches the empty string too
    if pos - start == MAX_PADDING and body[pos : pos + 1] in (b" ", b"\t"):
        raise MultipartError(f"more than {MAX_PADDING} bytes of padding after a multipart delimiter", start)
    if body[pos : pos + 2] != _CRLF:
        got = bytes(body[pos : pos + 8])
        raise MultipartError(f"a multipart delimiter must be followed by CRLF or '--', got {got!r}", pos)
    return pos + 2, False


@functools.lru_cache(maxsize=HEADER_CACHE_SIZE)
def _parse_block(block: bytes) -> tuple[str, str | None, str | None] | str:
    """(name, filename, content type) of a part's header block, or the reason it is malformed.

    Cached: a player sends the same few header blocks with every frame.
    """
    disposition: str | None = None
    content_type: str | None = None
    if block:
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError:
            text = block.decode("latin-1")
        for line in text.split("\r\n"):
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                return f"malformed part header line {line[:80]!r}"
            key = name.lower()
            if key == "content-disposition":
                disposition = value
            elif key == "content-type":
                content_type = value.strip()
    if disposition is None:
        return "a part has no Content-Disposition header"
    kind, params = parse_header_params(disposition)
    if kind != "form-data":
        return f"part Content-Disposition is {kind!r}, expected form-data"
    name = params.get("name")
    if name is None:
        return "a part's Content-Disposition has no name"
    return name, params.get("filename"), content_type


def split_multipart(
    body: Buffer,
    boundary: bytes,
    *,
    max_parts: int = MAX_PARTS,
    max_header_size: int = MAX_PART_HEADER_SIZE,
    size_hints: Sequence[int] | None = None,
) -> list[Part]:
    """Find every part of a complete multipart/form-data ``body``.

    Returns the parts in order; their ``start``/``end`` index ``body``. Raises :class:`MultipartError`
    on anything malformed: no opening delimiter, a part without a name or whose headers never end, a body
    that is truncated (no close delimiter), more than ``max_parts`` parts, a header block over
    ``max_header_size`` bytes. Text before the first delimiter and after the last is ignored (RFC 2046).

    ``size_hints`` (the part sizes of a previous body of the same layout) makes the search cheaper:
    where a delimiter sits exactly where the hint says part *i* ends, the part's bytes are only checked
    backwards for an earlier delimiter (keyed on CR) instead of searched forwards. The result is always
    the same as without hints.
    """
    if not boundary or len(boundary) > MAX_BOUNDARY_LENGTH:
        raise MultipartError(f"invalid multipart boundary {boundary!r}")
    length = len(body)
    if not length:
        raise MultipartError("the body is empty (Content-Length: 0); a multipart body has at least one part", 0)
    delimiter = b"--" + boundary
    separator = _CRLF + delimiter
    if body[: len(delimiter)] == delimiter:
        pos = len(delimiter)
    else:
        found = body.find(separator)
        if found < 0:
            raise MultipartError(f"the body never contains the multipart boundary {boundary!r}", 0)
        pos = found + len(separator)
    parts: list[Part] = []
    pos, last = _after_delimiter(body, pos, length)
    while not last:
        if len(parts) >= max_parts:
            raise MultipartError(f"more than {max_parts} parts in one body", pos)
        header_start = pos
        if body[pos : pos + 2] == _CRLF:
            block = b""
            start = pos + 2
        else:
            end_headers = body.find(b"\r\n\r\n", pos, pos + max_header_size + 4)
            if end_headers < 0:
                if length - pos > max_header_size:
                    raise MultipartError(f"a part's headers are longer than {max_header_size} bytes", pos)
                raise MultipartError("a part's headers never end (no empty line): the body is truncated", pos)
            block = bytes(body[pos:end_headers])
            start = end_headers + 4
        parsed = _parse_block(block) if len(block) <= MAX_CACHED_HEADER_SIZE else _parse_block.__wrapped__(block)
        if isinstance(parsed, str):
            raise MultipartError(parsed, header_start)
        name, filename, content_type = parsed
        end = -1
        if size_hints is not None and len(parts) < len(size_hints):
            # The hint holds if a delimiter starts there and none starts before it: rfind checks the
            # latter keyed on the delimiter's first byte, CR, which is rare in image data.
            hinted = start + size_hints[len(parts)]
            if body.startswith(separator, hinted) and body.rfind(separator, start, hinted + len(separator) - 1) < 0:
                end = hinted
        if end < 0:
            end = body.find(separator, start)
        if end < 0:
            raise MultipartError(
                f"part {name!r} is never closed by a delimiter: the body is truncated or the boundary is wrong",
                start,
            )
        parts.append(Part(name, filename, content_type, start, end))
        pos, last = _after_delimiter(body, end + len(separator), length)
    if not parts:
        raise MultipartError("the body holds no part (RFC 2046: a multipart body has at least one)", pos)
    return parts


def form_decode(raw: Buffer | memoryview) -> bytes:
    """One name or value of an ``application/x-www-form-urlencoded`` body, decoded (``+`` is a space)."""
    return unquote_to_bytes(bytes(raw).replace(b"+", b" "))


def split_urlencoded(body: Buffer, *, max_fields: int = MAX_PARTS, max_name_size: int = MAX_PART_HEADER_SIZE) -> list[Part]:
    """The fields of an ``application/x-www-form-urlencoded`` body (``name=value&name=value``), in order.

    A Unity build posts a frame this way when its form holds no image. Each :class:`Part` has the decoded
    ``name``, ``content_type`` :data:`URLENCODED`, and ``start``/``end`` around the value *as sent*
    (still percent-encoded: decode it with :func:`form_decode`). Raises :class:`MultipartError` for more
    than ``max_fields`` fields or a name over ``max_name_size`` bytes.
    """
    parts: list[Part] = []
    length = len(body)
    pos = 0
    while pos < length:
        # Empty fields ("&&") are skipped by the regex engine: the form is split before the token is
        # checked, so a run of them must not cost a Python loop turn per byte.
        field = _FIELD_START.search(body, pos)
        if field is None:
            break
        pos = field.start()
        end = body.find(b"&", pos)
        if end < 0:
            end = length
        if end > pos:
            if len(parts) >= max_fields:
                raise MultipartError(f"more than {max_fields} fields in one form", pos)
            equals = body.find(b"=", pos, end)
            name_end, value_start = (equals, equals + 1) if equals >= 0 else (end, end)
            if name_end - pos > max_name_size:
                raise MultipartError(f"a form field name is longer than {max_name_size} bytes", pos)
            name = form_decode(body[pos:name_end]).decode("utf-8", "surrogateescape")
            parts.append(Part(name, None, URLENCODED, value_start, end))
        pos = end + 1
    return parts
