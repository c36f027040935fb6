"""Fuzzing ``POST /train`` (the multipart parser and the frame checks behind it) through the WSGI
application, called in-process with hand-built environs: random bodies, random and lying headers, and
mutated valid frames. The answer is always a JSON error with a 4xx status (or the action, 200, for a
body that is still a valid frame with the right token), never a 500, never an exception."""

from __future__ import annotations

import io
import json
import logging
import time
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from renderd.protocol import encode_action
from renderd.transport.http import PlayerBridgeRegistry, make_player_app

TOKEN = "fuzz-token-0123456789abcdefghijklmnop"
BOUNDARY = "fuzzBoundary42"
CONTENT_TYPE = f"multipart/form-data; boundary={BOUNDARY}"
ACTION = {"action": "Pass", "sequenceId": 1}
#: The registry's body limit in these tests (small, so that the 413 path is reached too).
MAX_REQUEST = 64 * 1024
FIELD_NAMES = ["image", "image_depth", "image_normals", "image_flow", "image_classes", "image_ids",
               "image-thirdParty-camera", "image_thirdParty_depth", "metadata", "actionReturns", "token",
               "other", ""]

FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def part(name: str, body: bytes, *, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + body + b"\r\n"


def form(parts: list[bytes]) -> bytes:
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


def valid_frame(width: int = 3, height: int = 2) -> bytes:
    md = {"agents": [{"screenWidth": width, "screenHeight": height, "lastAction": "", "lastActionSuccess": True}],
          "sequenceId": 0}
    return form([
        part("image", bytes(range(width * height * 3)), filename="f.dat"),
        part("image_depth", bytes(width * height * 4), filename="d.dat"),
        part("metadata", json.dumps(md).encode()),
        part("token", TOKEN.encode()),
    ])


VALID = valid_frame()


class ReadOnlyInput:
    """A ``wsgi.input`` with ``read`` only (no ``readinto``), as some servers give."""

    def __init__(self, data: bytes) -> None:
        self._io = io.BytesIO(data)

    def read(self, size: int = -1) -> bytes:
        return self._io.read(size)


def call(body: bytes, *, content_type: str | None = CONTENT_TYPE, content_length: str | None = None,
         read_only: bool = False, method: str = "POST", path: str = "/train") -> tuple[int, dict[str, str], bytes]:
    """One request through a fresh registry whose only bridge (token TOKEN) has an action waiting."""
    registry = PlayerBridgeRegistry(max_request_size=MAX_REQUEST)
    bridge = registry.register(TOKEN, name="fuzzed player")
    bridge.send(encode_action(ACTION), time.monotonic() + 5)
    app = make_player_app(registry)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method, "PATH_INFO": path, "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "40000",
        "wsgi.input": ReadOnlyInput(body) if read_only else io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)) if content_length is None else content_length,
    }
    if content_type is not None:
        environ["CONTENT_TYPE"] = content_type
    got: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        got["status"] = int(status.split()[0])
        got["headers"] = dict(headers)

    try:
        data = b"".join(app(environ, start_response))
    finally:
        registry.close()
    return got["status"], got["headers"], data


def check(status: int, headers: dict[str, str], data: bytes) -> None:
    assert headers["Content-Type"] == "application/json", headers
    assert int(headers["Content-Length"]) == len(data)
    payload = json.loads(data)
    if status == 200:
        assert payload == ACTION
        return
    assert 400 <= status < 500, (status, payload)
    error = payload["error"]
    assert set(error) == {"type", "message"} and isinstance(error["message"], str) and error["message"]
    assert error["type"] in {"ProtocolError", "LeaseError", "CallOrderError", "RenderdError", "PlayerCrashed"}


def test_a_valid_frame_gets_the_action() -> None:
    status, headers, data = call(VALID)
    assert status == 200, data
    check(status, headers, data)


@FUZZ
@given(st.binary(max_size=4096), st.booleans())
def test_random_bodies(body: bytes, read_only: bool) -> None:
    check(*call(body, read_only=read_only))


@FUZZ
@given(
    st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=8),
    st.lists(st.tuples(st.integers(0, len(VALID)), st.binary(min_size=1, max_size=40)), max_size=3),
    st.integers(1, len(VALID)),
)
def test_mutated_valid_frames(flips, inserts, keep) -> None:
    body = bytearray(VALID)
    for pos, value in flips:
        body[pos] = value
    for pos, chunk in inserts:
        body[pos:pos] = chunk
    check(*call(bytes(body[:keep + sum(len(c) for _, c in inserts)])))


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=8,
)
_agent = st.fixed_dictionaries(
    {}, optional={"screenWidth": st.one_of(st.integers(-2, 5), st.text(max_size=3), st.none()),
                  "screenHeight": st.one_of(st.integers(-2, 5), st.floats(allow_nan=True), st.none())})
_metadata = st.one_of(
    _json,
    st.fixed_dictionaries({"agents": st.one_of(st.lists(_agent | _json, max_size=3), _json)},
                          optional={"sequenceId": _json}),
)
_part = st.tuples(
    st.sampled_from(FIELD_NAMES) | st.text(max_size=10),
    st.one_of(_metadata.map(lambda m: json.dumps(m).encode()), st.binary(max_size=120)),
    st.none() | st.just("f.dat") | st.text(max_size=8),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_part, max_size=6), st.sampled_from(["first", "first", "last", "none", "wrong"]))
def test_structured_forms(parts, token: str) -> None:
    """Forms with real and made-up part names, random metadata and image sizes, mostly with the right
    token (so the frame checks behind the token check are reached), sometimes without or with a wrong one."""
    raw = []
    for name, body, filename in parts:
        safe = name.replace('"', "").replace("\r", "").replace("\n", "")
        raw.append(part(safe, body, filename=filename.replace('"', "") if filename else None))
    if token == "first":
        raw.insert(0, part("token", TOKEN.encode()))
    elif token == "last":
        raw.append(part("token", TOKEN.encode()))
    elif token == "wrong":
        raw.insert(0, part("token", TOKEN[:-1].encode()))
    status, headers, data = call(form(raw))
    check(status, headers, data)
    event(f"status {status}")


_content_type = st.one_of(
    st.none(), st.just(CONTENT_TYPE), st.text(max_size=60),
    st.builds(lambda b: f"multipart/form-data; boundary={b}", st.text(max_size=90)),
    st.builds(lambda b: f'multipart/form-data; boundary="{b}"', st.text(max_size=20)),
    st.sampled_from(["multipart/form-data", "application/json", "multipart/form-data; boundary=",
                     "multipart/form-data; boundary=x" * 40]),
)
_content_length = st.one_of(
    st.none(), st.just(""), st.integers(-10, MAX_REQUEST * 2).map(str), st.text(max_size=12),
    st.just(str(2**70)),
)


@FUZZ
@given(st.binary(max_size=600) | st.just(VALID), _content_type, _content_length)
def test_lying_headers(body: bytes, content_type, content_length) -> None:
    check(*call(body, content_type=content_type, content_length=content_length))


@FUZZ
@given(st.sampled_from(["GET", "POST", "PUT", "HEAD", "DELETE", "", "BREW"]),
       st.sampled_from(["/train", "/ping", "/", "", "/train/", "/TRAIN", "/../train"]) | st.text(max_size=20))
def test_methods_and_paths(method: str, path: str) -> None:
    status, headers, data = call(VALID, method=method, path=path)
    if path == "/ping" and method in ("GET", "HEAD"):
        assert status == 200 and data == b"pong"
        return
    check(status, headers, data)


def test_no_error_was_logged_as_a_crash(caplog) -> None:
    """The application logs an internal error (and answers 500) only for a bug: none may occur here."""
    caplog.set_level(logging.ERROR, logger="renderd")
    for body in (b"", VALID[:10], VALID + VALID, b"--" + BOUNDARY.encode() * 100):
        check(*call(body))
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
