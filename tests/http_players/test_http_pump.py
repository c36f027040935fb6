"""FifoPump: an HTTP player's stream on a FIFO pair, read by a client exactly as a FIFO player's is; and the
WSGI application served by another WSGI server (waitress), as any deployment may do."""

from __future__ import annotations

import threading
import time

import pytest

from renderd.client import Session
from renderd.errors import PlayerCrashed
from renderd.transport.fifo import FifoPair
from renderd.transport.http import FifoPump, PlayerBridgeRegistry, make_player_app

from tests.helpers.http_util import DEADLINE, spawn_player
from tests.helpers.pump_review14b import pumped_bridge, raw_player, wait_until_ended


@pytest.fixture
def pumped(tmp_path):
    """(session, player, pump, bridge): an HTTP player behind a pump, a Session on the FIFO pair."""
    with pumped_bridge() as made:
        player = spawn_player(made.server.port, made.bridge.token, log_path=str(tmp_path / "player.log"))
        session = None
        try:
            made.channel.attach(player)
            session = Session(made.channel, step_timeout=DEADLINE)
            session.wait_ready(DEADLINE)
            yield session, player, made.pump, made.bridge, made.done
        finally:
            if session is not None:
                session.close()
            player.stop(1.0)


def test_pumped_player_steps_like_a_fifo_player(no_leaks, pumped):
    session, player, pump, bridge, done = pumped
    assert session.last_event.sequence_id == 0
    event = session.step("Initialize", renderDepthImage=True)
    assert event.frame.shape == (48, 64, 3) and event.depth_frame is not None
    for i in range(20):
        event = session.step("RotateRight")
    assert event.sequence_id == 21
    assert pump.frames >= 21 and pump.running
    session.channel.close()  # the client leaves: end of file on client.pipe
    assert player.wait(DEADLINE) == 0  # the pump closed the bridge: the player was told 410 and exited
    wait_until_ended(pump)
    assert done == [None] and pump.reason == "the client closed client.pipe"
    assert bridge.closed


def test_pumped_player_crash_reaches_the_fifo_client(no_leaks, pumped):
    session, player, pump, bridge, done = pumped
    session.step("MoveAhead")
    with pytest.raises(PlayerCrashed) as info:
        session.step({"action": "RenderdFault", "fault": "exit", "code": 5})
    assert info.value.returncode == 5
    wait_until_ended(pump)
    assert len(done) == 1 and isinstance(done[0], PlayerCrashed)


def test_a_player_that_hangs_up_between_steps_ends_the_pump(no_leaks):
    # The player posts its first frame, then closes its connection while its POST waits for an action (its
    # process may live on): the pump ends with that error at once, so the reader of server.pipe (the daemon)
    # sees end of file and fails the player before anyone leases it.
    with raw_player(name="idle player") as made:
        channel, pump, done = made.channel, made.pump, made.done
        made.player.close()
        wait_until_ended(pump)
        assert not pump.running, "the pump still waits for an action nobody will take"
        assert len(done) == 1 and isinstance(done[0], PlayerCrashed), done
        with pytest.raises(PlayerCrashed, match="closed server.pipe"):
            channel.recv(time.monotonic() + DEADLINE)


def test_pump_stop_is_prompt_even_with_no_reader(tmp_path, no_leaks):
    registry = PlayerBridgeRegistry()
    pair = FifoPair.create()
    try:
        bridge = registry.register()
        pump = FifoPump(bridge, pair.server_path, pair.client_path).start()
        time.sleep(0.05)
        started = time.monotonic()
        pump.stop()
        assert time.monotonic() - started < 1.0 and not pump.running
        assert pump.reason == "stopped"
    finally:
        registry.close()
        pair.remove()


def test_the_application_under_waitress(tmp_path, no_leaks):
    pytest.importorskip("waitress")
    import waitress
    import waitress.wasyncore

    from renderd.protocol import encode_action

    registry = PlayerBridgeRegistry()
    server = waitress.create_server(make_player_app(registry), host="127.0.0.1", port=0, threads=2,
                                    channel_request_lookahead=1)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    player = None
    try:
        bridge = registry.register()
        player = spawn_player(server.effective_port, bridge.token)
        bridge.attach(player)
        first = bridge.recv(time.monotonic() + DEADLINE)
        assert first.fields[0][0] == 1  # METADATA
        bridge.send(encode_action({"action": "MoveAhead", "sequenceId": 1}), time.monotonic() + DEADLINE)
        second = bridge.recv(time.monotonic() + DEADLINE)
        assert len(second.fields) >= 2
        bridge.close()
        assert player.wait(DEADLINE) == 0
    finally:
        registry.close()
        if player is not None:
            player.stop(1.0)
        done = threading.Event()

        def close_all() -> None:
            waitress.wasyncore.close_all(server._map, ignore_all=True)
            done.set()

        server.trigger.pull_trigger(close_all)
        done.wait(DEADLINE)
        thread.join(DEADLINE)
        server.task_dispatcher.shutdown(timeout=DEADLINE)
