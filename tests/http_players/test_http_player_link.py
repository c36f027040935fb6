"""The reference player's HTTP link (``renderd/player/http_link.py``) against renderd's own server and
against a scripted one that answers each post exactly as told: unacceptable actions, responses cut
short, ``Connection: close``, refused bodies, faults between steps. Real processes and sockets; every
wait has a deadline."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

import renderd
from renderd.player.http_link import ENV_PING_TIMEOUT, PING_TIMEOUT
from renderd.protocol import MAX_ACTION_DEPTH
from renderd.transport.http import PlayerBridgeRegistry, PlayerHttpServer

from tests.helpers.http_util import DEADLINE, spawn_player


def response(status: str, body: bytes, *, close: bool = False) -> bytes:
    extra = b"Connection: close\r\n" if close else b""
    return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n" % (
        status.encode(), extra, len(body)) + body


GONE = response("410 Gone", b"done")


class ScriptedServer:
    """Answers /ping with pong and the n-th POST /train with ``replies[n]`` (bytes, or a callable taking
    nothing and returning bytes, for a reply that is late); a ``Connection: close`` reply closes that
    connection. Records each post's metadata part, decoded, in ``posts``, and when each arrived."""

    def __init__(self, replies: list) -> None:
        self.replies = list(replies)
        self.posts: list[dict] = []
        self.arrivals: list[float] = []
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(DEADLINE)
        self.port = self.sock.getsockname()[1]
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="scripted server", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while self.replies:
                conn, _ = self.sock.accept()
                self.connections += 1
                with conn:
                    conn.settimeout(DEADLINE)
                    self._serve(conn)
        except BaseException as exc:  # reported by close()
            self.error = exc

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        while self.replies:
            while b"\r\n\r\n" not in buf:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
            head, buf = buf.split(b"\r\n\r\n", 1)
            lines = head.split(b"\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(buf) < length:
                data = conn.recv(1 << 20)
                if not data:
                    return
                buf += data
            body, buf = buf[:length], buf[length:]
            if lines[0].startswith(b"GET /ping"):
                conn.sendall(response("200 OK", b"pong"))
                continue
            self.arrivals.append(time.monotonic())
            self.posts.append(_metadata_part(body))
            reply = self.replies.pop(0)
            if callable(reply):
                reply = reply()
            conn.sendall(reply)
            if b"Connection: close" in reply.split(b"\r\n\r\n")[0]:
                return

    def close(self) -> None:
        self.sock.close()
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive(), "the scripted server did not finish"


def _metadata_part(body: bytes) -> dict:
    start = body.index(b'name="metadata"')
    start = body.index(b"\r\n\r\n", start) + 4
    end = body.index(b"\r\n--", start)
    return json.loads(body[start:end])


@pytest.fixture
def scripted(tmp_path):
    """``scripted(replies, width=..)`` -> (server, player process, log path); both stopped afterwards."""
    made: list = []

    def start(replies: list, **kwargs):
        server = ScriptedServer(replies)
        log = tmp_path / f"player{len(made)}.log"
        player = spawn_player(server.port, "t", log_path=str(log), **kwargs)
        made.append((server, player))
        return server, player, log

    yield start
    for server, player in made:
        player.stop(1.0)
        server.close()
        assert server.error is None, server.error


def agent(post: dict) -> dict:
    return post["agents"][0]


@pytest.mark.parametrize("levels", [MAX_ACTION_DEPTH, 100_000])
def test_an_action_nested_too_deeply_is_answered_as_failed(scripted, levels):
    deep = b'{"action":"Pass","sequenceId":1,"x":' + b"[" * levels + b"]" * levels + b"}"
    server, player, log = scripted([response("200 OK", deep), response("200 OK", b'{"action":"Pass"}'), GONE])
    assert player.wait(DEADLINE) == 0  # answered both, then told 410
    first, failed, passed = server.posts
    assert agent(failed)["lastActionSuccess"] is False and agent(failed)["errorCode"] == "InvalidArgument"
    assert "nests arrays or objects" in agent(failed)["errorMessage"]
    assert failed["sequenceId"] == 1
    assert agent(passed)["lastActionSuccess"] is True and passed["sequenceId"] == 2


def test_an_integer_with_thousands_of_digits_is_an_invalid_argument(scripted):
    big = b'{"action":"MoveAhead","moveMagnitude":' + b"9" * 5000 + b"}"
    server, player, _ = scripted([response("200 OK", big), GONE])
    assert player.wait(DEADLINE) == 0
    answer = agent(server.posts[1])
    assert answer["lastActionSuccess"] is False and answer["errorCode"] == "InvalidArgument"
    assert "moveMagnitude must be a finite number" in answer["errorMessage"]


def test_a_response_cut_short_is_an_io_error_not_an_action(scripted):
    # Content-Length 100 but only `{}` before the server hangs up: the player must not act on `{}`.
    server, player, log = scripted([b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 100\r\n\r\n{}"])
    assert player.wait(DEADLINE) == 1
    assert "cut short" in log.read_text()
    assert len(server.posts) == 1


def test_a_client_thinking_past_the_ping_timeout_after_connection_close(scripted, monkeypatch):
    # Each answer closes the connection; http.client opens the next itself, which must wait without the
    # ping's timeout for an agent that thinks longer than the ping timeout (set short here through
    # ENV_PING_TIMEOUT, so the test need not wait PING_TIMEOUT out; the log shows the player took it).
    ping_timeout = 0.3
    monkeypatch.setenv(ENV_PING_TIMEOUT, str(ping_timeout))

    def late() -> bytes:
        time.sleep(ping_timeout + 0.15)
        return response("200 OK", b'{"action":"Pass"}', close=True)

    started = time.monotonic()
    server, player, log = scripted([response("200 OK", b'{"action":"Pass"}', close=True), late, GONE])
    assert player.wait(DEADLINE + PING_TIMEOUT) == 0, log.read_text()
    assert f"ping timeout {ping_timeout:g} s" in log.read_text()
    assert len(server.posts) == 3 and server.connections == 3
    assert time.monotonic() - started > ping_timeout + 0.15


def test_a_refused_post_logs_the_servers_answer(tmp_path, no_leaks):
    # A frame over the server's limit: renderd answers 413 and hangs up while the player is still sending
    # (EPIPE or a reset). The log says why, not just "Broken pipe".
    registry = PlayerBridgeRegistry(max_request_size=1 << 20)
    server = PlayerHttpServer(registry).start()
    try:
        bridge = registry.register()
        log = tmp_path / "player.log"
        player = spawn_player(server.port, bridge.token, log_path=str(log), width=1024, height=1024)
        try:
            assert player.wait(DEADLINE) == 1
        finally:
            player.stop(1.0)
        text = log.read_text()
        assert "413" in text and "over the limit" in text, text
    finally:
        server.stop()


def test_a_fault_after_the_answer_happens_between_steps(no_leaks):
    # The answer is posted, then the player dies: before the client sends its next action.
    with renderd.launch(width=32, height=32, transport="http", start_timeout=DEADLINE, step_timeout=DEADLINE) as s:
        assert s.step("RenderdFault", fault="exit", code=9, when="after")
        deadline = time.monotonic() + DEADLINE
        while s.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.process.poll() == 9


def test_a_resolution_whose_answer_would_exceed_the_request_limit_is_refused(no_leaks):
    # 4096 x 4096 with depth, segmentation and one third-party camera is over 256 MiB (MAX_REQUEST_SIZE):
    # refused as an InvalidArgument that changes nothing, instead of a post renderd must answer 413.
    with renderd.launch(width=64, height=64, transport="http", args=["--static-frame"], start_timeout=DEADLINE,
                        step_timeout=DEADLINE) as s:
        assert s.step("Initialize", renderDepthImage=True, renderInstanceSegmentation=True)
        assert s.step("AddThirdPartyCamera", position=dict(x=0, y=2, z=0), rotation=dict(x=30, y=0, z=0))
        event = s.step("ChangeResolution", x=4096, y=4096)
        assert not event and event.metadata["errorCode"] == "InvalidArgument"
        assert "this player's transport carries" in event.metadata["errorMessage"]
        event = s.step("Pass")
        assert event and (event.screen_width, event.screen_height) == (64, 64)
        assert len(event.third_party_camera_frames) == 1
