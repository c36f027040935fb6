"""The server's request-head parser never raises anything but its own refusal on arbitrary input."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from renderd.transport.http import _Connection, _HttpError


def parse(head: bytes):
    return _Connection._parse_head(None, head)  # the parser uses no connection state


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_heads(raw):
    try:
        method, target, version, headers = parse(raw)
    except _HttpError as exc:
        assert 400 <= exc.status < 600
        return
    assert version in ("HTTP/1.1", "HTTP/1.0") and method and isinstance(headers, dict)


lines = st.lists(st.sampled_from([
    "Content-Length: 5", "Content-Length: 7", "Content-Type: multipart/form-data; boundary=x", "Connection: close",
    "X: y", "bad line", " folded", "Expect: 100-continue", "Transfer-Encoding: chunked", ":", "A:", "",
]), max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["POST /train HTTP/1.1", "GET /ping HTTP/1.0", "GET / HTTP/2", "X Y", ""]), lines)
def test_structured_heads(first, rest):
    try:
        parse("\r\n".join([first, *rest]).encode())
    except _HttpError as exc:
        assert 400 <= exc.status < 600
