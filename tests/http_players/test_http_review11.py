"""The players' HTTP server and bridge, over real sockets and processes: a player's exit reported at once
whatever else the listener is doing; idle connections that cannot keep a new player out; what the listener
does with a lease request's ``client_pid``; players that close their connection between frames."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Iterator

import pytest

from renderd.errors import PlayerCrashed, PlayerTimeout
from renderd.protocol import FieldType, encode_action
from renderd.transport import http as http_transport
from renderd.transport.http import PlayerBridgeRegistry, PlayerHttpServer, make_player_app

from tests.helpers.http_util import BOUNDARY, DEADLINE, RawClient, connect, frame_body, request_bytes, small_server
from tests.helpers.leaks import wait_for
from tests.helpers.pump_review14b import Pumped, raw_player


def deadline(seconds: float = DEADLINE) -> float:
    return time.monotonic() + seconds


class SlowRoute:
    """A WSGI application serving the players' routes, plus ``/v1/slow``, which waits (as a control API lease
    request waits for a player) until :meth:`release`: a request in progress that is no player's frame."""

    def __init__(self, registry: PlayerBridgeRegistry) -> None:
        self.players = make_player_app(registry)
        self.entered = threading.Event()
        self.released = threading.Event()

    def __call__(self, environ: dict, start_response: Any) -> list[bytes]:
        if environ.get("PATH_INFO") != "/v1/slow":
            return self.players(environ, start_response)
        self.entered.set()
        self.released.wait(DEADLINE)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "4")])
        return [b"done"]

    def release(self) -> None:
        self.released.set()


@contextlib.contextmanager
def pumped_raw_player(app_factory=None) -> Iterator[tuple]:
    """(server, bridge, channel, player connection, exited event, app): a pumped bridge watched through an
    ``alive()`` that turns False when ``exited`` is set, its first frame posted over a raw connection and read
    from server.pipe, its first action answered."""
    exited = threading.Event()
    with raw_player(app=app_factory, alive=lambda: not exited.is_set()) as made:
        made.channel.send(encode_action({"action": "Pass", "sequenceId": 1}), deadline())
        assert made.player.response().status == 200
        yield made.server, made.bridge, made.channel, made.player, exited, made.app


# -- a player's exit reaches its client at once ------------------------------------------------------------------


def test_a_pumped_players_exit_is_reported_at_once_while_another_request_is_in_progress(no_leaks, monkeypatch):
    # The player answered its action's request, then exited (closing its connection between requests, as a
    # crash mid-step does). Meanwhile another request (a control API lease request waiting for a player, on
    # the daemon's listener) is in progress on the same listener: it can never be the player's last frame,
    # so it must not hold the crash report for EXIT_DRAIN_TIMEOUT (lengthened here to make that plain).
    monkeypatch.setattr(http_transport, "EXIT_DRAIN_TIMEOUT", 3.0)
    with pumped_raw_player(SlowRoute) as (server, bridge, channel, player, exited, app):
        other = RawClient(server.port)
        try:
            other.send(b"GET /v1/slow HTTP/1.1\r\n\r\n")
            assert app.entered.wait(DEADLINE)
            player.close()
            wait_for(lambda: len(server._connections) == 1, DEADLINE, "the server to see the player's close")
            exited.set()
            started = time.monotonic()
            with pytest.raises(PlayerCrashed, match="closed server.pipe"):
                channel.recv(deadline())
            elapsed = time.monotonic() - started
            assert elapsed < 1.0, f"the crash was reported {elapsed:.2f} s after the exit"
            app.release()
            assert other.response().body == b"done"
        finally:
            app.release()
            other.close()


def test_a_request_that_may_be_the_players_last_frame_is_still_waited_for(no_leaks, monkeypatch):
    # The other side of the test above: a POST /train not yet handed to a bridge (its body not all here) may
    # be the exited player's last frame, sent whole on a new connection, so the report waits for it (up to
    # EXIT_DRAIN_TIMEOUT) and the frame comes first.
    monkeypatch.setattr(http_transport, "EXIT_DRAIN_TIMEOUT", 0.5)
    with pumped_raw_player() as (server, bridge, channel, player, exited, _):
        player.close()
        wait_for(lambda: not server._connections, DEADLINE, "the server to see the player's close")
        late = RawClient(server.port)
        try:
            body = frame_body(bridge.token, seq=1)
            request = request_bytes(body)
            late.send(request[:-10])
            wait_for(lambda: any(c.in_request for c in server._connections), DEADLINE, "the request to begin")
            exited.set()
            started = time.monotonic()
            with pytest.raises(PlayerCrashed, match="closed server.pipe"):
                channel.recv(deadline())
            assert time.monotonic() - started >= 0.4  # it waited for the request that might have been the frame
        finally:
            late.close()


# -- idle connections cannot keep a new player out ---------------------------------------------------------------


def _answered(served, bridge, client=None, seq: int = 0) -> RawClient:
    """Post a frame of ``bridge``'s (on ``client``, else a new connection) and have it answered ``Pass``."""
    client = client or connect(served)
    client.send(request_bytes(frame_body(bridge.token, seq=seq)))
    bridge.recv(deadline(5.0))
    bridge.send(encode_action({"action": "Pass"}), deadline())
    assert client.response().status == 200
    return client


def test_idle_connections_cannot_keep_a_new_player_out(no_leaks):
    # Connections that served a ping (or any request) and went idle would hold every place of MAX_CONNECTIONS
    # for IDLE_TIMEOUT, an hour: a new player was answered 503. The one idle longest that is no player's now
    # makes room.
    with small_server(3) as served:
        registry, server, _ = served
        idle = []
        for n in range(1, 4):
            client = connect(served)
            client.send(b"GET /ping HTTP/1.1\r\n\r\n")
            assert client.response().body == b"pong"
            idle.append(client)
            # (its thread is back waiting, idle since after its answer, before the next ping: so the first is the
            # one idle longest, whichever thread the machine ran first)
            wait_for(lambda: sum(c.waiting_idle for c in list(server._connections)) == n, DEADLINE,
                     f"connection {n} to wait idle")
        bridge = registry.register()
        player = _answered(served, bridge)  # 503 before: too many connections
        assert idle[0].closed_by_server()  # the one idle longest
        for client in idle[1:]:
            client.send(b"GET /ping HTTP/1.1\r\n\r\n")
            assert client.response().body == b"pong"
        _answered(served, bridge, player, seq=1)
        assert bridge.error is None


def test_a_players_idle_connection_is_not_closed_to_make_room(no_leaks):
    # Between its requests (while it works out its answer) a player's connection is idle too: it is never the
    # one closed; a connection only idle players hold leaves no room, and the new one is refused (503).
    with small_server(2) as served:
        registry, server, _ = served
        first, second = registry.register(alive=lambda: True), registry.register(alive=lambda: True)
        a = _answered(served, first)
        b = _answered(served, second)
        extra = connect(served)
        extra.send(b"GET /ping HTTP/1.1\r\n\r\n")
        response = extra.response()
        assert response.status == 503 and "too many connections" in response.json()["error"]["message"]
        _answered(served, first, a, seq=1)
        _answered(served, second, b, seq=1)
        assert first.error is None and second.error is None


# -- the listener knows no client process ------------------------------------------------------------------------


def test_no_request_can_pose_as_a_peer_process(no_leaks):
    # The control socket's server puts the connecting process's pid (SO_PEERCRED) under PEER_PID_KEY, which a
    # lease request's client_pid is checked against. A TCP peer has no such credential: this server never sets
    # the key, and no header can (a header is HTTP_..., and one named with "_" is dropped).
    from renderd.daemon.api import PEER_PID_KEY

    seen: list[dict] = []

    def app(environ: dict, start_response: Any) -> list[bytes]:
        seen.append(dict(environ))
        start_response("200 OK", [("Content-Length", "0")])
        return []

    server = PlayerHttpServer(PlayerBridgeRegistry(), app=app).start()
    client = None
    try:
        client = RawClient(server.port)
        client.send(b"POST /v1/environments/demo/leases HTTP/1.1\r\nrenderd.peer_pid: 1\r\nrenderd.peer-pid: 1\r\n"
                    b"renderd_peer_pid: 1\r\nContent-Length: 2\r\n\r\n{}")
        assert client.response().status == 200
    finally:
        if client is not None:
            client.close()
        server.stop()
    (environ,) = seen
    assert PEER_PID_KEY not in environ
    assert not [key for key in environ if "peer" in key.lower() and not key.startswith("HTTP_")], environ


# -- players that close their connection between frames, on a bridge that watches no process --------------------


def _post_on_new_connection(port: int, bridge, seq: int) -> tuple[int, bytes, Any]:
    """One frame on a connection of its own (HTTP/1.1, no ``Connection: close``), answered ``Pass`` by a client
    thread; the connection is closed after the answer, as ``requests.post`` without a Session does."""
    import http.client

    got: list = []

    def client() -> None:
        try:
            got.append(bridge.recv(deadline(5.0)))
            bridge.send(encode_action({"action": "Pass"}), deadline())
        except Exception as exc:  # (the test looks at what it got)
            got.append(exc)

    thread = threading.Thread(target=client, daemon=True)
    thread.start()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE)
    try:
        conn.request("POST", "/train", body=frame_body(bridge.token, seq=seq),
                     headers={"Content-Type": f'multipart/form-data; boundary="{BOUNDARY.decode()}"'})
        response = conn.getresponse()
        status, body = response.status, response.read()
    finally:
        conn.close()
    thread.join(DEADLINE)
    return status, body, got[0] if got else None


def test_an_unwatched_player_posting_each_frame_on_a_new_connection_is_served(served):
    # HTTP lets a client close an idle connection at any time. A connection that carried one request and
    # closed says nothing of the player (the next frame comes on a new one); on a bridge with no process to
    # watch it failed the stream, so such a player could never take a second step there.
    registry, server, _ = served
    bridge = registry.register()
    for seq in range(3):
        status, body, frame = _post_on_new_connection(server.port, bridge, seq)
        assert status == 200, body
        assert not isinstance(frame, Exception), frame
        wait_for(lambda: not server._connections, DEADLINE, "the server to see the connection close")
    assert bridge.error is None


def test_an_unwatched_player_that_never_comes_back_times_out_saying_it_closed_its_connection(served):
    registry, server, _ = served
    bridge = registry.register()
    status, _, frame = _post_on_new_connection(server.port, bridge, 0)
    assert status == 200 and not isinstance(frame, Exception), frame
    wait_for(lambda: not server._connections, DEADLINE, "the server to see the connection close")
    with pytest.raises(PlayerTimeout) as info:
        bridge.recv(deadline(0.3))
    message = str(info.value)
    assert "closed its HTTP connection" in message and "alive" in message, message


def test_an_unwatched_player_that_kept_its_connection_and_closes_it_between_requests_hung_up(served):
    # A player that kept its connection across requests (here a ping, then its frame) and closes it between
    # requests has hung up: with no process to watch, that close is the only sign, and it fails the next call
    # at once, as before.
    registry, server, _ = served
    bridge = registry.register()
    client = connect(served)
    client.send(b"GET /ping HTTP/1.1\r\n\r\n")
    assert client.response().body == b"pong"
    _answered(served, bridge, client)
    client.close()
    started = time.monotonic()
    with pytest.raises(PlayerCrashed, match="closed its HTTP connection"):
        bridge.recv(deadline())
    assert time.monotonic() - started < 2.0


# -- the reference player's ping timeout ---------------------------------------------------------------------


@pytest.mark.parametrize("value", ["soon", "0", "nan", "31"])
def test_a_bad_ping_timeout_in_the_environment_is_a_bad_environment(tmp_path, monkeypatch, value):
    from renderd.player.http_link import ENV_PING_TIMEOUT

    from tests.helpers.http_util import spawn_player

    monkeypatch.setenv(ENV_PING_TIMEOUT, value)
    log = tmp_path / "player.log"
    player = spawn_player(1, "t", log_path=str(log))  # (nothing listens on port 1: never reached)
    try:
        assert player.wait(DEADLINE) == 2
    finally:
        player.stop(1.0)
    text = log.read_text()
    assert f"{ENV_PING_TIMEOUT}={value!r}" in text and "at most 30" in text, text


# -- a served player's connection is not closed as idle while it works out its answer -----------------------------


def test_a_served_players_step_may_outlast_the_idle_timeout(served, monkeypatch):
    # Between its requests a player works out its answer, for up to the client's step_timeout (up to 7 days):
    # renderd's own IDLE_TIMEOUT (an hour; shortened here) closed its connection meanwhile and failed the stream,
    # "renderd closed the HTTP connection ... idle", although the player was alive and about to answer.
    monkeypatch.setattr(http_transport, "IDLE_TIMEOUT", 0.2)
    registry, server, _ = served
    bridge = registry.register(alive=lambda: True)
    client = _answered(served, bridge)
    client.sock.settimeout(0.8)  # four IDLE_TIMEOUTs of work on the step
    assert not client.closed_by_server()
    client.sock.settimeout(DEADLINE)
    _answered(served, bridge, client, seq=1)
    assert bridge.error is None


def test_the_idle_connection_of_a_player_no_longer_served_is_closed_at_the_idle_timeout(served, monkeypatch):
    monkeypatch.setattr(http_transport, "IDLE_TIMEOUT", 0.2)
    registry, server, _ = served
    bridge = registry.register(alive=lambda: True)
    client = _answered(served, bridge)
    registry.unregister(bridge)
    started = time.monotonic()
    assert client.closed_by_server()
    assert time.monotonic() - started < DEADLINE / 2


# -- a pump whose bridge is closed between steps -----------------------------------------------------------------


def _unregistering_ends_the_pump(made: Pumped) -> None:
    """Unregister ``made``'s bridge: the player's waiting post is answered 410, and the pump ends (at once) as for
    a bridge closed."""
    made.registry.unregister(made.bridge)
    assert made.player.response().status == 410
    wait_for(lambda: not made.pump.running, 2.0, "the pump to end")
    assert made.done == [None] and made.pump.reason == "the bridge was closed", (made.done, made.pump.reason)


def test_a_pump_ends_when_its_bridge_is_closed_between_steps(no_leaks):
    # Between steps the pump waits for the client's next action on client.pipe. A bridge closed meanwhile
    # (unregistered, or every bridge at the server's stop) without a stop() of the pump left it waiting there,
    # holding both pipe ends, until the client sent something; it ends at once now, as it does when the bridge
    # is closed while it waits for a frame, and the reader of server.pipe sees end of file.
    with raw_player() as made:
        wait_for(lambda: made.pump._rfd is not None, DEADLINE, "the pump to open client.pipe")
        _unregistering_ends_the_pump(made)
        with pytest.raises(PlayerCrashed, match="closed server.pipe"):
            made.channel.recv(deadline())


def test_a_pump_waiting_for_a_reader_ends_when_its_bridge_is_closed(no_leaks):
    # After the first frame the pump opens server.pipe as soon as a reader has it open; a bridge closed before
    # any reader came left its thread retrying the open until stop().
    with raw_player(reader=False) as made:
        bridge = made.bridge
        wait_for(lambda: bridge.frames_posted == 1 and not bridge._frames, DEADLINE, "the pump to take the frame")
        _unregistering_ends_the_pump(made)


# -- the reference player meets a full listener ----------------------------------------------------------------


def test_the_reference_player_waits_out_a_full_listener(tmp_path, no_leaks):
    # 503 is the listener's "not now" (every connection taken by a request in progress): the player tries again
    # until CONNECT_TIMEOUT, as while nothing listens yet, instead of exiting 1 at its first ping.
    from tests.helpers.http_util import spawn_player

    registry = PlayerBridgeRegistry()
    server = PlayerHttpServer(registry, max_connections=1).start()
    held = player = None
    try:
        bridge = registry.register(name="late player")
        held = RawClient(server.port)
        held.send(b"GET /ping HTTP/1.1\r\n")  # the one place, its request in progress
        wait_for(lambda: any(c.in_request for c in server._connections), DEADLINE, "the request to begin")
        log = tmp_path / "player.log"
        player = spawn_player(server.port, bridge.token, log_path=str(log))
        # Three refused pings (the first logged, two more counted), or the player's exit at the first (before).
        wait_for(lambda: server._connection_refusals._quiet >= 2 or player.exited(), DEADLINE, "refused pings")
        assert not player.exited(), log.read_text()
        held.send(b"\r\n")
        assert held.response().body == b"pong"
        held.close()
        frame = bridge.recv(deadline(), "start_timeout")
        assert frame.first(FieldType.METADATA) is not None
    finally:
        if held is not None:
            held.close()
        server.stop()
        if player is not None:
            player.stop(1.0)
