"""The player endpoint's refusals speak HTTP's and JSON's words: a 405 on /ping allows HEAD as well as GET (HEAD
is served there), and a metadata part that is valid JSON but no object is named as JSON names it."""

from __future__ import annotations

import time

import pytest

from renderd.errors import ProtocolError

from tests.helpers.http_util import DEADLINE, connect, form, part, request_bytes


@pytest.mark.parametrize("method", ["DELETE", "POST", "PUT"])
def test_a_405_on_ping_allows_get_and_head(served, method):
    client = connect(served)
    client.send(f"{method} /ping HTTP/1.1\r\nContent-Length: 0\r\n\r\n".encode())
    response = client.response()
    assert response.status == 405
    assert response.headers["allow"] == "GET, HEAD"  # (it said "GET" while HEAD /ping is answered 200)
    assert "GET, HEAD" in response.json()["error"]["message"]
    client.send(b"HEAD /ping HTTP/1.1\r\n\r\n")  # what the header allows is served
    raw = b""
    while b"\r\n\r\n" not in raw:
        chunk = client.sock.recv(65536)
        assert chunk, "the connection closed"
        raw += chunk
    assert raw.startswith(b"HTTP/1.1 200 OK")


def test_a_405_on_train_allows_post_only(served):
    client = connect(served)
    client.send(b"GET /train HTTP/1.1\r\n\r\n")
    response = client.response()
    assert response.status == 405 and response.headers["allow"] == "POST"


@pytest.mark.parametrize(
    ("body", "kind"),
    [(b"[1, 2]", "an array"), (b"null", "null"), (b'"text"', "a string"), (b"3.5", "a number"), (b"true", "true")],
)
def test_metadata_that_is_no_object_is_named_in_json_words(served, body, kind):
    registry, _, _ = served
    bridge = registry.register()
    client = connect(served)
    client.send(request_bytes(form([part("metadata", body), part("token", bridge.token.encode())])))
    response = client.response()
    assert response.status == 400
    message = response.json()["error"]["message"]
    assert message.endswith(f"must be a JSON object, got {kind}"), message  # (it said "got list", "got NoneType")
    with pytest.raises(ProtocolError, match=f"got {kind}"):
        bridge.recv(time.monotonic() + DEADLINE)
