"""The endpoint over real loopback sockets, written by hand as a Unity build writes it.

The client side here is the bridge itself (the Channel a Session reads); players are raw sockets, so
every malformed request can be sent byte for byte.
"""

from __future__ import annotations

import io
import json
import select
import socket
import threading
import time
import tracemalloc
import urllib.parse

import numpy as np
import pytest

from renderd.errors import AlreadyPendingCallError, CallOrderError, PlayerCrashed, PlayerTimeout, ProtocolError
from renderd.event import FrameAssembler
from renderd.protocol import FieldType, encode_action
from renderd.transport import http as http_transport
from renderd.transport.http import PlayerBridgeRegistry, PlayerHttpServer

from tests.helpers.http_util import (
    BOUNDARY,
    DEADLINE,
    RawClient,
    connect,
    form,
    frame_body,
    metadata,
    part,
    request_bytes,
)
from tests.helpers.leaks import wait_for


def deadline(seconds: float = DEADLINE) -> float:
    return time.monotonic() + seconds


def answer_in_background(bridge, action: dict, frames: list) -> threading.Thread:
    """Receive one frame from the bridge (as a client would) and send ``action``."""

    def run() -> None:
        frames.append(bridge.recv(deadline()))
        bridge.send(encode_action(action), deadline())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def answered_by_a_client(served, bridge, client=None):
    """A connection (``client``, or a new one) whose next post to ``bridge`` a client answers with ``Pass``:
    ``(connection, the answering thread, the frames it received)``."""
    frames: list = []
    thread = answer_in_background(bridge, {"action": "Pass"}, frames)
    return client or connect(served), thread, frames


def post_answered(served, bridge, body: bytes | None = None, client=None, raw: bytes | None = None):
    """Post ``body`` (default: a frame with ``bridge``'s token; or send the request ``raw``) while a client
    answers it with ``Pass``; the post gets 200. Returns the connection and the frames the client received."""
    client, thread, frames = answered_by_a_client(served, bridge, client)
    client.send(raw if raw is not None else request_bytes(body if body is not None else frame_body(bridge.token)))
    assert client.response().status == 200
    thread.join(DEADLINE)
    return client, frames


def awaiting_its_action(served):
    """``(bridge, connection)``: a new bridge, and a connection that has posted its first frame, which the bridge
    has received: the post now waits for an action."""
    registry, _, _ = served
    bridge = registry.register()
    client = connect(served)
    client.send(request_bytes(frame_body(bridge.token)))
    bridge.recv(deadline())
    return bridge, client


# -- the happy path -------------------------------------------------------------------------------------


def test_ping_and_keep_alive_train_loop(served):
    registry, server, _ = served
    bridge = registry.register()
    client = connect(served)
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")
    pong = client.response()
    assert (pong.status, pong.body) == (200, b"pong")
    assembler = FrameAssembler()
    for seq in range(3):
        frames: list = []
        thread = answer_in_background(bridge, {"action": "MoveAhead", "sequenceId": seq + 1}, frames)
        client.send(request_bytes(frame_body(bridge.token, seq=seq)))  # the same connection every time
        response = client.response()
        thread.join(DEADLINE)
        assert response.status == 200, response
        assert response.headers["content-type"] == "application/json"
        assert json.loads(response.body) == {"action": "MoveAhead", "sequenceId": seq + 1}
        event = assembler.event(frames[0])
        assert event.metadata["screenWidth"] == 4 and event.sequence_id == seq
        assert event.frame.shape == (3, 4, 3)
    assert bridge.frames_posted == 3


@pytest.mark.parametrize("start_size", [None, 7])
def test_frame_bytes_are_views_of_the_request_body(served, monkeypatch, start_size):
    if start_size is not None:  # the body's buffer grows as bytes arrive: 7, 14, 28 ... bytes
        monkeypatch.setattr(http_transport, "BODY_START_SIZE", start_size)
    registry, _, _ = served
    bridge = registry.register()
    rgb = bytes(range(36))
    depth = np.arange(12, dtype="<f4").tobytes()
    ids = bytes(range(100, 148))
    body = form([
        part("image", rgb, filename="file.dat"),
        part("image_depth", depth, filename="file.dat"),
        part("image_ids", ids, filename="file.dat"),
        part("metadata", json.dumps(metadata()).encode()),
        part("token", bridge.token.encode()),
        part("somethingNew", b"ignored"),
    ])
    _, frames = post_answered(served, bridge, body)
    message = frames[0]
    assert [t for t, _ in message.fields] == [
        FieldType.METADATA, FieldType.RGB_IMAGE, FieldType.DEPTH_IMAGE, FieldType.IDS_IMAGE
    ]
    images = [b for _, b in message.fields[1:]]
    assert [bytes(b) for b in images] == [rgb, depth, ids]
    body_buffer = images[0].base.obj  # np.frombuffer(bytearray) keeps a memoryview of it
    assert isinstance(body_buffer, bytearray) and all(b.base.obj is body_buffer for b in images)  # no copies
    assert all(b.flags.writeable for b in images)
    event = FrameAssembler().event(message)
    assert np.array_equal(event.depth_frame, np.arange(12, dtype="<f4").reshape(3, 4)[::-1])


def test_legacy_action_returns_and_third_party_aliases(served):
    registry, _, _ = served
    bridge = registry.register()
    md = metadata()
    md["agents"][0].pop("actionReturn")
    body = form([
        part("image-thirdParty-camera", bytes(36), filename="file.dat"),
        part("image_thirdParty_flows", bytes(48), filename="file.dat"),
        part("metadata", json.dumps(md).encode()),
        part("actionReturns", b'[{"x": 1}]'),
        part("token", bridge.token.encode()),
    ])
    _, frames = post_answered(served, bridge, body)
    assert [t for t, _ in frames[0].fields[1:]] == [FieldType.THIRD_PARTY_IMAGE, FieldType.THIRD_PARTY_FLOW]
    metadata_, _ = FrameAssembler().assemble(frames[0])
    assert metadata_["agents"][0]["actionReturn"] == {"x": 1}


def test_unity_writes_head_and_body_separately_and_unquoted_boundary_works(served):
    registry, _, _ = served
    bridge = registry.register()
    client, thread, frames = answered_by_a_client(served, bridge)
    body = frame_body(bridge.token)
    head = (f"POST /train HTTP/1.1\r\nContent-Length: {len(body)}\r\n"
            f"Content-Type: multipart/form-data; boundary={BOUNDARY.decode()}\r\n\r\n").encode()
    client.send(head)
    time.sleep(0.05)  # the body arrives in another segment, as Unity's two Send calls produce
    for i in range(0, len(body), 7):
        client.send(body[i : i + 7])
    assert client.response().status == 200
    thread.join(DEADLINE)
    assert frames


def test_a_frame_without_images_posted_urlencoded_as_unity_does(served):
    # Unity's WWWForm holding only fields (a step with renderImage=False, or a build that renders nothing)
    # is application/x-www-form-urlencoded, not multipart: AI2-THOR's server reads both.
    registry, _, _ = served
    bridge = registry.register()
    md = metadata(lastAction="Pass & go", errorMessage="100% = done+")
    md["agents"][0].pop("actionReturn")
    body = urllib.parse.urlencode(
        {"metadata": json.dumps(md), "actionReturns": '[{"x": 1}]', "token": bridge.token}).encode()
    request = (b"POST /train HTTP/1.1\r\nContent-Length: %d\r\n"
               b"Content-Type: application/x-www-form-urlencoded\r\n\r\n" % len(body)) + body
    _, frames = post_answered(served, bridge, client=None, raw=request)
    assert [t for t, _ in frames[0].fields] == [FieldType.METADATA]
    got, _ = FrameAssembler().assemble(frames[0])
    assert got["agents"][0]["lastAction"] == "Pass & go" and got["agents"][0]["errorMessage"] == "100% = done+"
    assert got["agents"][0]["actionReturn"] == {"x": 1}
    # the token is checked there too
    client = connect(served)
    wrong = urllib.parse.urlencode({"metadata": json.dumps(md), "token": "wrong"}).encode()
    client.send(request.replace(body, wrong).replace(b"%d" % len(body), b"%d" % len(wrong)))
    assert client.response().status == 403


@pytest.mark.parametrize("version", ["HTTP/1.1", "HTTP/1.0"])
def test_expect_100_continue(served, version):
    # HTTP/1.1: 100 Continue once the head passed its checks. HTTP/1.0: RFC 9110 has the server ignore the
    # expectation (such a client cannot read an interim response), so the first answer is the real one.
    registry, _, _ = served
    bridge = registry.register()
    client, thread, frames = answered_by_a_client(served, bridge)
    body = frame_body(bridge.token)
    request = request_bytes(body, headers=["Expect: 100-continue", "Connection: keep-alive"])
    head, _, rest = request.replace(b"HTTP/1.1", version.encode(), 1).partition(b"\r\n\r\n")
    client.send(head + b"\r\n\r\n")
    if version == "HTTP/1.1":
        assert client.response().status == 100
    client.send(rest)
    assert client.response().status == 200
    thread.join(DEADLINE)


# -- tokens ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [None, "", "wrong-token", "x" * 10_000])
def test_wrong_or_missing_token_is_403_and_reaches_no_bridge(served, token):
    registry, _, _ = served
    bridge = registry.register()
    client = connect(served)
    client.send(request_bytes(frame_body(token)))
    response = client.response()
    assert response.status == 403
    assert response.json()["error"]["type"] == "LeaseError"
    assert bridge.frames_posted == 0
    with pytest.raises(PlayerTimeout):
        bridge.recv(time.monotonic() + 0.05)
    # the refused connection stays usable: the right token works on it
    post_answered(served, bridge, client=client)


def test_a_post_for_a_closed_bridge_is_410_between_steps_too(served):
    # The session closed while its player worked on an action: its next post is told "no longer served".
    registry, _, _ = served
    bridge = registry.register()
    client, _ = post_answered(served, bridge)
    bridge.close()
    client.send(request_bytes(frame_body(bridge.token, seq=1)))
    response = client.response()
    assert response.status == 410 and response.json()["error"]["type"] == "LeaseError"
    other = connect(served)  # an unknown token is still a wrong one
    other.send(request_bytes(frame_body("never-registered")))
    assert other.response().status == 403


def test_tokens_select_their_own_bridge(served):
    registry, _, _ = served
    a, b = registry.register(), registry.register()
    assert a.token != b.token and len(a.token) >= 32
    client, _ = post_answered(served, b)
    assert (a.frames_posted, b.frames_posted) == (0, 1)
    registry.unregister(b)
    client.send(request_bytes(frame_body(b.token)))
    assert client.response().status == 410  # no longer served (not a wrong token: the player exits 0)
    with pytest.raises(ValueError, match="already registered"):
        registry.register(a.token)


# -- bad input ------------------------------------------------------------------------------------------


def test_malformed_multipart_is_400_json(served):
    registry, _, _ = served
    bridge = registry.register()
    client = connect(served)
    client.send(request_bytes(b"--" + BOUNDARY + b"\r\nnot a header\r\n\r\nno end"))
    response = client.response()
    assert response.status == 400
    assert response.json()["error"]["type"] == "ProtocolError"
    assert "multipart" in response.json()["error"]["message"]
    assert bridge.error is None  # the token is unknown: no bridge is blamed


def test_wrong_content_type_is_400(served):
    client = connect(served)
    body = b'{"metadata": {}}'
    client.send(b"POST /train HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(body)).encode() + b"\r\n\r\n" + body)
    response = client.response()
    assert response.status == 400 and "multipart/form-data" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "body_kwargs, match",
    [
        ({"md": {"no": "agents"}}, "no 'agents' list"),
        ({"rgb": b"\x00" * 35}, "image part 'image' is 35 bytes"),
        ({"md": {"agents": [{"screenWidth": 0, "screenHeight": 3}]}}, "screen size 0 x 3"),
        ({"md": {"agents": ["x"]}}, "agents\\[0\\] is a string, expected an object"),
        ({"md": {"agents": [{"screenWidth": float("inf"), "screenHeight": 3}]}}, "screenWidth/screenHeight"),
        # Valid JSON that msgpack cannot carry: answered 400 and the stream failed, not a 500.
        ({"md": {**metadata(), "big": 2**70}}, "msgpack cannot carry"),
        ({"md": {**metadata(), "text": "\ud800"}}, "msgpack cannot carry"),
    ],
)
def test_bad_frame_is_400_and_the_client_gets_protocol_error(served, body_kwargs, match):
    registry, _, _ = served
    bridge = registry.register()
    client = connect(served)
    client.send(request_bytes(frame_body(bridge.token, **body_kwargs)))
    response = client.response()
    assert response.status == 400
    assert response.json()["error"]["type"] == "ProtocolError"
    with pytest.raises(ProtocolError, match=match):
        bridge.recv(deadline())
    # the stream stays failed, as a decoder does after bad bytes
    client.send(request_bytes(frame_body(bridge.token)))
    assert client.response().status == 409


def _refused_form(served, first: bytes, match: str) -> None:
    """Post a form of the part ``first`` and a new bridge's token: the post gets 400, and the bridge's next
    recv raises ProtocolError matching ``match``."""
    registry, _, _ = served
    bridge = registry.register()
    client = connect(served)
    client.send(request_bytes(form([first, part("token", bridge.token.encode())])))
    assert client.response().status == 400
    with pytest.raises(ProtocolError, match=match):
        bridge.recv(deadline())


def test_metadata_nested_too_deeply_is_400_and_protocol_error(served):
    deep = b"[" * 100_000 + b"]" * 100_000
    _refused_form(served, part("metadata", deep), "too deeply")


def test_missing_metadata_is_400_and_protocol_error(served):
    _refused_form(served, part("image", bytes(36), filename="f"), "no 'metadata' part")


def test_metadata_not_json_is_protocol_error(served):
    _refused_form(served, part("metadata", b"{nope"), "not valid JSON")


def test_oversize_body_is_refused_from_content_length_before_reading(served):
    registry, server, _ = served
    client = connect(served)
    limit = registry.max_request_size
    client.send(f"POST /train HTTP/1.1\r\nContent-Length: {limit + 1}\r\n"
                f"Content-Type: multipart/form-data; boundary=x\r\n\r\n".encode())
    response = client.response()  # answered without a single body byte sent
    assert response.status == 413
    assert str(limit) in response.json()["error"]["message"]
    assert client.closed_by_server()


def test_a_refused_post_on_the_players_connection_is_not_called_a_hang_up(served):
    # renderd refuses the player's next post (413) and closes its connection: the client is told that,
    # not that the player hung up.
    registry, _, _ = served
    bridge = registry.register()
    client, _ = post_answered(served, bridge)
    limit = registry.max_request_size
    client.send(f"POST /train HTTP/1.1\r\nContent-Length: {limit + 1}\r\n"
                f"Content-Type: multipart/form-data; boundary=x\r\n\r\n".encode())
    assert client.response().status == 413
    with pytest.raises(PlayerCrashed, match=f"413.*over the limit of {limit}") as info:
        bridge.recv(deadline())
    assert "closed its HTTP connection" not in str(info.value)


def test_a_body_announced_but_not_sent_costs_no_memory():
    # The body's buffer follows the bytes that arrive: heads announcing 48 MiB each, followed by a few
    # bytes, must not make the server allocate 48 MiB per connection.
    registry = PlayerBridgeRegistry(max_request_size=48 << 20)
    server = PlayerHttpServer(registry).start()
    clients = []
    tracemalloc.start()
    try:
        for _ in range(4):
            client = RawClient(server.port)
            clients.append(client)
            client.send(f"POST /train HTTP/1.1\r\nContent-Length: {48 << 20}\r\n"
                        f"Content-Type: multipart/form-data; boundary=x\r\n\r\n--x".encode())
        # Every connection is in its body once four buffers of the start size exist.
        wait_for(lambda: tracemalloc.get_traced_memory()[0] >= 4 * http_transport.BODY_START_SIZE, DEADLINE,
                 "the server to start reading four bodies")
        assert tracemalloc.get_traced_memory()[1] < 24 << 20  # 192 MiB if allocated as announced
    finally:
        tracemalloc.stop()
        for client in clients:
            client.close()
        server.stop()


def test_wsgi_body_reader_grows_with_the_bytes(monkeypatch):
    monkeypatch.setattr(http_transport, "BODY_START_SIZE", 5)
    data = bytes(range(256)) * 3

    class ReadOnly:  # a WSGI input without readinto
        def __init__(self, raw: bytes) -> None:
            self.raw = io.BytesIO(raw)

        def read(self, size: int) -> bytes:
            return self.raw.read(min(size, 13))

    for stream in (io.BytesIO(data), ReadOnly(data)):
        assert http_transport._read_body(stream, len(data)) == data
    assert http_transport._read_body(io.BytesIO(data[:-1]), len(data)) is None  # the stream ended early


@pytest.mark.parametrize(
    "raw, status",
    [
        (b"POST /train HTTP/1.1\r\nContent-Length: 12abc\r\n\r\n", 400),
        (b"POST /train HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411),
        (b"POST /train HTTP/1.1\r\n\r\n", 411),
        (b"BROKEN\r\n\r\n", 400),
        (b"GET /ping HTTP/2.0\r\n\r\n", 505),
        (b"GET /ping HTTP/1.1\r\nbad header line\r\n\r\n", 400),
        ("POST /train HTTP/1.1\r\nContent-Length: \u00b2\r\n\r\n".encode("latin-1"), 400),  # isdigit() is true
        (b"POST /train HTTP/1.1\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n", 413),  # int() refuses it
        (b"POST /train HTTP/1.1\r\nContent-Length: " + b"1" + b"0" * 19 + b"\r\n\r\n", 413),  # 20 digits
        (b"POST /train HTTP/1.1\r\nContent_Length: 5\r\n\r\nhello", 411),  # not an alias of Content-Length
        (b"POST /train HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx", 400),
        (b"POST /train HTTP/1.1\r\nContent-Length:\r\n\r\n", 400),  # present but empty is not "no body"
        (b"GET /ping HTTP/1.1\nHost: x\n\n", 400),  # bare LF line ends: answered, not left to time out
        (b"GET /ping HTTP/1.1\r\nX: a\nContent-Length: 5\r\n\r\n", 400),  # LF inside a header value
        (b"GET /ping HTTP/1.1\r\nX: a\x00b\r\n\r\n", 400),
        (b"GET /nowhere HTTP/1.1\r\n\r\n", 404),
        (b"POST /ping HTTP/1.1\r\n\r\n", 405),
        (b"GET /train HTTP/1.1\r\n\r\n", 405),
    ],
)
def test_malformed_requests_get_json_errors(served, raw, status):
    client = connect(served)
    client.send(raw)
    response = client.response()
    assert response.status == status, response
    assert "error" in response.json()


def test_head_too_long_is_431(served):
    client = connect(served)
    client.send(b"GET /ping HTTP/1.1\r\nX-Long: " + b"a" * 20_000 + b"\r\n\r\n")
    assert client.response().status == 431


def test_disconnect_mid_request_hangs_nothing(served):
    registry, server, _ = served
    bridge = registry.register()
    body = request_bytes(frame_body(bridge.token))
    for cut in (10, len(body) // 2, len(body) - 1):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE)
        sock.sendall(body[:cut])
        sock.close()
    # nothing reached the bridge, and the server still answers everyone
    client = connect(served)
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")
    assert client.response().body == b"pong"
    assert bridge.frames_posted == 0


@pytest.mark.parametrize("where", ["head", "body"])
def test_a_request_trickled_byte_by_byte_is_dropped_at_its_deadline(served, monkeypatch, where):
    # Slowloris: a byte every 0.1 s is progress within every REQUEST_TIMEOUT, yet the request must not
    # hold its connection thread for ever: a head has REQUEST_TIMEOUT in all, a body that plus its size
    # at MIN_BODY_RATE.
    monkeypatch.setattr(http_transport, "REQUEST_TIMEOUT", 0.5)
    monkeypatch.setattr(http_transport, "MIN_BODY_RATE", 1000.0)  # 200 bytes: 0.2 s more
    client = connect(served)
    request = (b"POST /train HTTP/1.1\r\nContent-Length: 200\r\nX-Pad: " + b"x" * 200 + b"\r\n\r\n"
               + b"y" * 200)
    if where == "body":
        client.send(request[:-200])
        request = request[-200:]
    client.sock.settimeout(3.0)
    started = time.monotonic()
    for i in range(len(request)):
        if select.select([client.sock], [], [], 0.05)[0] or time.monotonic() - started > 3.0:
            break  # answered (or, unfixed, still trickling)
        try:
            client.send(request[i : i + 1])
        except OSError:
            break
    elapsed = time.monotonic() - started
    response = client.response()
    assert response.status == 408 and elapsed < 2.0, (response, elapsed)
    assert "did not arrive within" in response.json()["error"]["message"]
    assert client.closed_by_server()


def test_player_hanging_up_fails_the_clients_next_call(served):
    registry, _, _ = served
    bridge, other = registry.register(), registry.register()
    client = connect(served)
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")  # (it keeps its connection across requests: see below)
    assert client.response().body == b"pong"
    client, _ = post_answered(served, bridge, client=client)
    client.close()  # between requests: the player hung up (one that closes after each request says nothing by
    # it, and posts its next frame on a new connection: test_http_review11)
    started = time.monotonic()
    with pytest.raises(PlayerCrashed, match="closed its HTTP connection"):
        bridge.recv(deadline())
    assert time.monotonic() - started < 2.0  # noticed at once, not at the deadline
    # another player on the same server is unaffected
    post_answered(served, other)


def test_player_hanging_up_while_waiting_for_its_action(served):
    bridge, client = awaiting_its_action(served)
    client.close()
    end = time.monotonic() + 5.0
    while bridge.error is None and time.monotonic() < end:
        time.sleep(0.01)
    with pytest.raises(PlayerCrashed, match="closed its HTTP connection"):
        bridge.send(encode_action({"action": "Pass"}), deadline())


def test_connection_close_requested_by_the_player_is_not_a_crash(served):
    registry, _, _ = served
    bridge = registry.register()
    client, thread, frames = answered_by_a_client(served, bridge)
    client.send(request_bytes(frame_body(bridge.token), headers=["Connection: close"]))
    response = client.response()
    assert response.status == 200 and response.headers.get("connection") == "close"
    thread.join(DEADLINE)
    assert client.closed_by_server()
    time.sleep(0.05)
    assert bridge.error is None


# -- the bridge as a Channel ----------------------------------------------------------------------------


def test_bridge_channel_order_and_close(served):
    registry, _, _ = served
    bridge = registry.register()
    with pytest.raises(PlayerTimeout, match="posted no frame within start_timeout"):
        bridge.recv(time.monotonic() + 0.05, "start_timeout")
    bridge.send(encode_action({"action": "Pass"}), deadline())  # taken by the next post, like a pipe
    with pytest.raises(AlreadyPendingCallError):
        bridge.send(encode_action({"action": "Pass"}), deadline())
    with pytest.raises(ProtocolError, match="exactly one ACTION"):
        bridge.send([b"\x01\x00\x00\x00\x00", b"\xff\x00\x00\x00\x00"], deadline())
    client = connect(served)
    client.send(request_bytes(frame_body(bridge.token)))
    assert json.loads(client.response().body) == {"action": "Pass"}
    bridge.recv(deadline())
    client.send(request_bytes(frame_body(bridge.token)))  # now waits for an action...
    bridge.recv(deadline())
    bridge.close()  # ...and is told the player is no longer served
    response = client.response()
    assert response.status == 410
    with pytest.raises(CallOrderError):
        bridge.recv(deadline())
    with pytest.raises(CallOrderError):
        bridge.send(encode_action({"action": "Pass"}), deadline())
    client.send(request_bytes(frame_body(bridge.token)))
    assert client.response().status == 410  # unregistered with the close: still "no longer served"


def test_bridge_fileno_is_readable_exactly_while_recv_would_not_wait(served):
    """The bridge's descriptor can join a poll over many channels: readable while a frame (or the
    stream's error) is waiting, not after the frame is taken; closed with the bridge."""
    import os
    import select

    def readable(fd: int, timeout: float = 0.0) -> bool:
        return bool(select.select([fd], [], [], timeout)[0])

    registry, _, _ = served
    bridge = registry.register()
    fd = bridge.fileno()
    assert bridge.fileno() == fd and not readable(fd) and not bridge.ready()
    client = connect(served)
    client.send(request_bytes(frame_body(bridge.token)))
    assert readable(fd, DEADLINE)  # the poll wakes when the frame arrives
    assert bridge.ready()
    bridge.recv(deadline())
    assert not readable(fd) and not bridge.ready()
    bridge.send(encode_action({"action": "Pass"}), deadline())
    assert json.loads(client.response().body) == {"action": "Pass"}
    assert not readable(fd)
    bridge.fail(PlayerCrashed("the player went away"))
    assert readable(fd) and bridge.ready()
    with pytest.raises(PlayerCrashed):
        bridge.recv(deadline())
    bridge.close()
    assert bridge.ready()  # recv raises at once on a closed bridge
    with pytest.raises(OSError):
        os.fstat(fd)
    with pytest.raises(ValueError, match="closed"):
        bridge.fileno()


def test_bridge_is_ready_once_its_player_has_exited(served):
    # A player that posts with Connection: close and then exits leaves no error on its bridge; recv
    # raises PlayerCrashed at once, so ready() must say so (a VectorSession polls on it).
    registry, _, _ = served
    alive = [True]
    bridge = registry.register(alive=lambda: alive[0])
    assert not bridge.ready()
    alive[0] = False
    assert bridge.ready()
    with pytest.raises(PlayerCrashed, match="exited"):
        bridge.recv(deadline())


def test_a_second_concurrent_post_is_409(served):
    bridge, first = awaiting_its_action(served)
    second = connect(served)
    second.send(request_bytes(frame_body(bridge.token)))
    assert second.response().status == 409
    bridge.send(encode_action({"action": "Pass"}), deadline())
    assert first.response().status == 200


def test_stop_answers_waiting_players_and_joins_threads(served):
    _, server, _ = served
    _, client = awaiting_its_action(served)
    server.stop()
    response = client.response()
    assert response.status == 410 and response.headers.get("connection") == "close"
    assert client.closed_by_server()


def test_http_1_0_keep_alive_and_close(served):
    client = connect(served)
    client.send(b"GET /ping HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    response = client.response()
    assert response.body == b"pong" and response.headers["connection"] == "keep-alive"
    client.send(b"GET /ping HTTP/1.0\r\n\r\n")
    response = client.response()
    assert response.headers["connection"] == "close"
    assert client.closed_by_server()


def test_connection_options_are_whole_tokens(served):
    client = connect(served)
    client.send(b"GET /ping HTTP/1.1\r\nConnection: x-close-later, Upgrade\r\n\r\n")  # neither is "close"
    assert client.response().headers.get("connection") != "close"
    client.send(b"GET /ping HTTP/1.1\r\nConnection: Keep-Alive , CLOSE\r\n\r\n")
    assert client.response().headers["connection"] == "close"
    assert client.closed_by_server()


def test_a_connection_no_thread_can_serve_is_refused_and_the_server_goes_on(served, monkeypatch):
    import threading

    real_start = threading.Thread.start
    failed = []

    def start_once_failing(self):
        if self.name.startswith("renderd-http-conn") and not failed:
            failed.append(self.name)
            raise RuntimeError("can't start new thread")
        return real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start_once_failing)
    refused = connect(served)
    refused.send(b"GET /ping HTTP/1.1\r\n\r\n")
    assert refused.response().status == 503 and failed
    client = connect(served)  # the next connection is served: the accept loop lives on
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")
    assert client.response().body == b"pong"


def test_head_ping_has_no_body(served):
    client = connect(served)
    client.send(b"HEAD /ping HTTP/1.1\r\n\r\n")
    raw = b""
    while b"\r\n\r\n" not in raw:
        raw += client.sock.recv(65536)
    assert raw.startswith(b"HTTP/1.1 200 OK") and raw.endswith(b"\r\n\r\n")  # headers only
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")  # and the connection goes on
    assert client.response().body == b"pong"


def test_connection_limit_is_503_json(no_leaks):
    from renderd.transport.http import PlayerBridgeRegistry, PlayerHttpServer

    from tests.helpers.http_util import RawClient

    server = PlayerHttpServer(PlayerBridgeRegistry(), max_connections=1).start()
    first = second = None
    try:
        first = RawClient(server.port)
        first.send(b"GET /ping HTTP/1.1\r\n")  # a request in progress: the first connection is being served
        # (an idle one would make room for the next: test_http_review11)
        wait_for(lambda: any(c.in_request for c in server._connections), DEADLINE, "the request to begin")
        second = RawClient(server.port)
        response = second.response()
        assert response.status == 503 and "too many connections" in response.json()["error"]["message"]
        assert second.closed_by_server()
        first.send(b"\r\n")
        assert first.response().body == b"pong"
    finally:
        for client in (first, second):
            if client is not None:
                client.close()
        server.stop()
