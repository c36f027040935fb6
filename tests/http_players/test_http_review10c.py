"""The players' HTTP server over real sockets: a player that closes its idle connection between frames, and
a body the server has no memory for."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import pytest

from renderd.errors import PlayerCrashed
from renderd.protocol import FieldType, encode_action
from renderd.transport import http as http_transport

from tests.helpers.http_util import BOUNDARY, DEADLINE, connect, frame_body, part, request_bytes
from tests.helpers.leaks import wait_for


def deadline(seconds: float = DEADLINE) -> float:
    return time.monotonic() + seconds


def _answer(bridge, frames: list, action: dict | None = None) -> threading.Thread:
    """Receive one frame from the bridge (as a client does) and answer it, on a thread."""

    def run() -> None:
        try:
            frames.append(bridge.recv(deadline()))
            bridge.send(encode_action(action or {"action": "Pass"}), deadline())
        except Exception as exc:  # (the test looks at what it got)
            frames.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# -- a player that closes its idle connection between frames -------------------------------------------------


def test_a_watched_player_posting_each_frame_on_a_new_connection_is_served(served):
    # A client that drops its connection once it has the answer (requests.post without a Session, an HTTP
    # client closing idle connections), here http.client: each frame on a new HTTP/1.1 connection without
    # "Connection: close". HTTP lets a client close an idle connection at any time, and renderd learns that a
    # player died from its process (watched here by alive()), so such a close between frames is not a
    # hang-up: every frame is delivered.
    registry, server, _ = served
    bridge = registry.register(alive=lambda: True)
    headers = {"Content-Type": f'multipart/form-data; boundary="{BOUNDARY.decode()}"'}
    for seq in range(3):
        frames: list = []
        thread = _answer(bridge, frames)
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=DEADLINE)
        try:
            conn.request("POST", "/train", body=frame_body(bridge.token, seq=seq), headers=headers)
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
        thread.join(DEADLINE)
        assert response.status == 200, body
        assert json.loads(body) == {"action": "Pass"}
        assert len(frames) == 1 and not isinstance(frames[0], Exception), frames
        assert frames[0].fields[0][0] == FieldType.METADATA
        wait_for(lambda: not server._connections, DEADLINE, "the server to see the connection close")
    assert bridge.error is None


def test_a_watched_player_that_exits_after_closing_its_idle_connection_fails_the_next_call_at_once(served):
    registry, _, _ = served
    exited = threading.Event()
    bridge = registry.register(alive=lambda: not exited.is_set())
    frames: list = []
    thread = _answer(bridge, frames)
    client = connect(served)
    client.send(request_bytes(frame_body(bridge.token)))
    assert client.response().status == 200
    thread.join(DEADLINE)
    client.close()
    exited.set()
    started = time.monotonic()
    with pytest.raises(PlayerCrashed, match="exited"):
        bridge.recv(deadline())
    assert time.monotonic() - started < 2.0


def test_a_watched_player_cut_off_inside_a_request_still_fails_the_stream(served):
    # Only an idle connection may close: a request cut off (here in its head) is a hang-up, as before.
    registry, _, _ = served
    bridge = registry.register(alive=lambda: True)
    frames: list = []
    thread = _answer(bridge, frames)
    client = connect(served)
    client.send(request_bytes(frame_body(bridge.token)))
    assert client.response().status == 200
    thread.join(DEADLINE)
    client.send(b"POST /train HTTP/1.1\r\nContent-Le")
    time.sleep(0.05)  # (the bytes reach the server before the close)
    client.close()
    started = time.monotonic()
    with pytest.raises(PlayerCrashed, match="closed its HTTP connection"):
        bridge.recv(deadline(5.0))
    assert time.monotonic() - started < 2.0


# -- a body the server cannot allocate -------------------------------------------------------------------------


def test_a_body_the_server_has_no_memory_for_is_answered_and_not_called_a_hang_up(served, monkeypatch):
    # The body's buffer cannot grow (the process is out of memory): the player is told so (503, the connection
    # closed), and its client's PlayerCrashed says renderd closed the connection and why, not that the player
    # closed it.
    registry, _, _ = served
    bridge = registry.register()
    frames: list = []
    thread = _answer(bridge, frames)
    client = connect(served)
    client.send(request_bytes(frame_body(bridge.token)))
    assert client.response().status == 200
    thread.join(DEADLINE)

    def no_memory(body, got, length):
        raise MemoryError()

    monkeypatch.setattr(http_transport, "BODY_START_SIZE", 64)
    monkeypatch.setattr(http_transport, "_grown", no_memory)
    client.send(request_bytes(frame_body(bridge.token, extra=[part("padding", b"x" * 200_000)])))
    response = client.response()
    assert response.status == 503, response
    assert "memory" in response.json()["error"]["message"]
    assert client.closed_by_server()
    with pytest.raises(PlayerCrashed, match="renderd closed the HTTP connection.*memory") as info:
        bridge.recv(deadline(5.0))
    assert "closed its HTTP connection" not in str(info.value)


# -- a frame sent whole just before the player exited, on a connection the bridge does not know yet ------------


def _slow_handover(monkeypatch, seconds: float = 0.4) -> None:
    """The server is slow to hand a frame to its bridge (a loaded machine): it parses the metadata late."""
    encode = http_transport.encode_metadata

    def slow_encode(metadata):
        time.sleep(seconds)
        return encode(metadata)

    monkeypatch.setattr(http_transport, "encode_metadata", slow_encode)
    monkeypatch.setattr(http_transport, "EXIT_DRAIN_TIMEOUT", DEADLINE)  # (a loaded machine)


def _recv_then_crash(bridge) -> None:
    message = bridge.recv(deadline())
    assert message.fields[0][0] == FieldType.METADATA
    started = time.monotonic()
    with pytest.raises(PlayerCrashed):
        bridge.recv(deadline())
    assert time.monotonic() - started < 2.0


def test_a_first_frame_sent_whole_before_the_player_exited_is_received(served, monkeypatch):
    # The player posts its first frame and exits at once: the bridge does not know its connection yet (it
    # learns it from the post), but the frame was sent whole, so it is delivered before the crash.
    registry, _, _ = served
    exited = threading.Event()
    bridge = registry.register(alive=lambda: not exited.is_set())
    _slow_handover(monkeypatch)
    client = connect(served)
    client.send(request_bytes(frame_body(bridge.token)))
    exited.set()
    client.close()
    _recv_then_crash(bridge)


def test_a_frame_on_a_new_connection_sent_whole_before_the_player_exited_is_received(served, monkeypatch):
    # A player that opens a connection per request (Connection: close, or HTTP/1.0): its last frame comes on
    # a connection the bridge has not seen yet.
    registry, server, _ = served
    exited = threading.Event()
    bridge = registry.register(alive=lambda: not exited.is_set())
    frames: list = []
    thread = _answer(bridge, frames)
    client = connect(served)
    client.send(request_bytes(frame_body(bridge.token), headers=["Connection: close"]))
    assert client.response().status == 200
    thread.join(DEADLINE)
    assert client.closed_by_server()
    client.close()  # (the player's side closes too: the server's lingering close ends at once)
    wait_for(lambda: not server._connections, DEADLINE, "the server to close the connection")
    _slow_handover(monkeypatch)
    client = connect(served)
    client.send(request_bytes(frame_body(bridge.token, seq=1), headers=["Connection: close"]))
    exited.set()
    client.close()
    _recv_then_crash(bridge)


def test_a_player_that_exits_having_sent_nothing_fails_the_call_at_once(served, monkeypatch):
    registry, _, _ = served
    monkeypatch.setattr(http_transport, "EXIT_DRAIN_TIMEOUT", DEADLINE)
    bridge = registry.register(alive=lambda: False)
    started = time.monotonic()
    with pytest.raises(PlayerCrashed, match="exited"):
        bridge.recv(deadline())
    assert time.monotonic() - started < 1.0


# -- a client that shuts its write side after its request -----------------------------------------------------


def test_a_half_close_while_a_post_waits_for_its_action_is_a_hang_up_and_the_player_reads_why(served):
    # A shut write side cannot be told from a closed connection (both are only a FIN until renderd writes),
    # and a player that closes while its request waits has hung up: the stream fails at once, as for a
    # close. The player, still reading, gets the answer saying so instead of nothing.
    registry, _, _ = served
    bridge = registry.register(alive=lambda: True)
    client = connect(served)
    client.send(request_bytes(frame_body(bridge.token)))
    assert bridge.recv(deadline()).fields[0][0] == FieldType.METADATA
    client.sock.shutdown(socket.SHUT_WR)
    response = client.response()
    assert response.status == 409, response
    assert "closed its HTTP connection while waiting for an action" in response.json()["error"]["message"]
    with pytest.raises(PlayerCrashed, match="closed its HTTP connection while waiting for an action"):
        bridge.send(encode_action({"action": "Pass"}), deadline())


def test_a_half_close_after_a_request_that_waits_for_nothing_gets_its_answer(served):
    client = connect(served)
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")
    client.sock.shutdown(socket.SHUT_WR)
    assert client.response().body == b"pong"
    assert client.closed_by_server()
