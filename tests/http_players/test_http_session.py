"""``renderd.launch(transport="http")`` with the real reference player: the same events as over FIFO,
long runs, crashes, faults and wrong tokens. Real processes, loopback sockets, deadlines everywhere."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

import renderd
from renderd.errors import PlayerCrashed, ProtocolError
from renderd.transport import http as http_transport
from renderd.transport.http import PlayerBridgeRegistry, PlayerHttpServer

from tests.helpers.http_util import DEADLINE, spawn_player

W, H = 64, 48
SCRIPT = [
    {"action": "Initialize", "renderDepthImage": True, "renderInstanceSegmentation": True, "gridSize": 0.25},
    {"action": "MoveAhead"},
    {"action": "RotateRight"},
    {"action": "LookDown"},
    {"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 1.5, "z": 0}, "rotation": {"x": 30, "y": 0, "z": 0}},
    {"action": "MoveAhead", "renderImage": True},
    {"action": "Teleport", "x": 0.5, "y": 0.9, "z": -0.5},
    {"action": "NoSuchAction"},
    {"action": "Reset", "sceneName": "FloorPlan1", "sequenceId": 0},
    {"action": "RotateLeft"},
]
IMAGE_ATTRS = ("frame", "depth_frame", "instance_segmentation_frame")


def launch(transport: str, *args: str, **kwargs):
    return renderd.launch(width=W, height=H, transport=transport, args=list(args), start_timeout=DEADLINE,
                          step_timeout=DEADLINE, **kwargs)


def run_script(transport: str):
    out = []
    with launch(transport) as session:
        out.append(session.last_event)
        for action in SCRIPT:
            out.append(session.step(dict(action)))
    return out


def test_fifo_and_http_give_byte_identical_frames_and_equal_metadata(no_leaks):
    fifo, http = run_script("fifo"), run_script("http")
    assert len(fifo) == len(http) == len(SCRIPT) + 1
    compared = 0
    for a, b in zip(fifo, http):
        assert a.metadata == b.metadata
        assert a.sequence_id == b.sequence_id
        for attr in IMAGE_ATTRS:
            x, y = getattr(a, attr), getattr(b, attr)
            assert (x is None) == (y is None), attr
            if x is not None:
                assert x.dtype == y.dtype and x.shape == y.shape
                assert x.tobytes() == y.tobytes(), attr
                compared += 1
        assert len(a.third_party_camera_frames) == len(b.third_party_camera_frames)
        for x, y in zip(a.third_party_camera_frames, b.third_party_camera_frames):
            assert x.tobytes() == y.tobytes()
            compared += 1
    assert compared > 20
    assert any(e.third_party_camera_frames for e in http)
    assert any(e.depth_frame is not None for e in http)


def test_a_thousand_steps(no_leaks):
    with launch("http", "--static-frame") as session:
        seen = set()
        for i in range(1000):
            event = session.step("RotateRight" if i % 2 else "Pass")
            assert event.sequence_id == i + 1
            seen.add(event.metadata["agent"]["rotation"]["y"])
        assert event.frame.shape == (H, W, 3) and event.frame.flags.writeable
        assert seen  # metadata follows the actions
        pid = session.pid
    with pytest.raises(ProcessLookupError):  # stopped and reaped
        os.kill(pid, 0)


@pytest.mark.parametrize("transport", ["fifo", "http"])
def test_an_action_over_the_size_limit_is_refused_before_sending(no_leaks, transport):
    # Refused from its encoded size, with nothing sent: the session keeps its sequence and stays usable.
    from renderd.protocol import MAX_ACTION_SIZE

    with launch(transport) as session:
        with pytest.raises(ValueError, match="over the limit of 16777216 bytes"):
            session.step("Pass", blob="x" * MAX_ACTION_SIZE)
        assert session.step("Pass", blob="x" * 1024).sequence_id == 1
        assert session.step("MoveAhead").metadata["lastActionSuccess"]


def test_player_exit_is_player_crashed_with_its_exit_code(no_leaks):
    with launch("http") as session:
        session.step("MoveAhead")
        started = time.monotonic()
        with pytest.raises(PlayerCrashed) as info:
            session.step({"action": "RenderdFault", "fault": "exit", "code": 7})
        assert time.monotonic() - started < 5.0
        assert info.value.returncode == 7
        assert "exit code 7" in str(info.value)


def test_player_killed_between_steps(no_leaks):
    with launch("http") as session:
        session.step("MoveAhead")
        os.kill(session.pid, signal.SIGKILL)
        with pytest.raises(PlayerCrashed, match="SIGKILL") as info:
            session.step("MoveAhead")
        assert info.value.returncode == -signal.SIGKILL


def test_player_dying_after_answering(no_leaks):
    with launch("http") as session:
        session.step({"action": "RenderdFault", "fault": "abort", "when": "after"})
        with pytest.raises(PlayerCrashed, match="SIGABRT"):
            session.step("Pass")


def test_garbage_post_is_protocol_error_on_the_clients_call(no_leaks):
    with launch("http") as session:
        with pytest.raises(ProtocolError, match="malformed|posted a bad frame|multipart"):
            session.step({"action": "RenderdFault", "fault": "garbage"})


@pytest.mark.parametrize("fault, code", [("truncate", 3), ("oversize", None), ("close", None)])
def test_stream_faults_are_crashes_never_hangs(no_leaks, fault, code, monkeypatch):
    if fault == "close":  # the player lives on: waiting the default 1 s for its exit status is only waited out
        monkeypatch.setattr(http_transport, "EXIT_CLASSIFY_TIMEOUT", 0.2)
    action = {"action": "RenderdFault", "fault": fault}
    if code is not None:
        action["code"] = code
    with launch("http") as session:
        started = time.monotonic()
        with pytest.raises(PlayerCrashed) as info:
            session.step(action)
        assert time.monotonic() - started < 5.0
        if code is not None:
            assert info.value.returncode == code


def test_wrong_token_player_is_refused_and_exits(tmp_path, no_leaks):
    registry = PlayerBridgeRegistry()
    server = PlayerHttpServer(registry).start()
    try:
        bridge = registry.register()
        log = str(tmp_path / "player.log")
        player = spawn_player(server.port, "not-the-token", log_path=log)
        try:
            assert player.wait(DEADLINE) == 2  # renderd refused the token (403): exit 2
        finally:
            player.stop(1.0)
        assert bridge.frames_posted == 0
        with open(log) as f:
            assert "403" in f.read()
    finally:
        server.stop()


def test_closing_the_session_ends_the_player_cleanly(tmp_path, no_leaks):
    log = tmp_path / "player.log"
    with launch("http", log_path=str(log)) as session:
        session.step("MoveAhead")
        process = session.process
    assert process.returncode == 0  # told 410 Gone (or SIGTERM, whichever came first): a clean exit
    text = log.read_text()
    assert "no longer serves this player (410)" in text or "received SIGTERM" in text


def test_frames_are_views_not_copies(no_leaks):
    with launch("http", "--static-frame") as session:
        event = session.step("Initialize", renderDepthImage=True)
        owner = event.frame.base
        while owner is not None and not isinstance(owner, memoryview):
            owner = owner.base
        assert isinstance(owner, memoryview) and isinstance(owner.obj, bytearray)
        assert np.shares_memory(event.frame, np.frombuffer(owner.obj, dtype=np.uint8))


def test_player_exiting_before_its_first_post(no_leaks):
    import sys

    from renderd.errors import PlayerCrashed

    started = time.monotonic()
    with pytest.raises(PlayerCrashed) as info:
        renderd.launch([sys.executable, "-c", "import sys; print('bye'); sys.exit(3)"], transport="http",
                       start_timeout=DEADLINE)
    assert info.value.returncode == 3 and "bye" in info.value.log_tail
    assert time.monotonic() - started < DEADLINE / 2


def test_player_that_never_posts_times_out_at_start(no_leaks):
    import sys

    from renderd.errors import PlayerTimeout

    with pytest.raises(PlayerTimeout, match="start_timeout"):
        renderd.launch([sys.executable, "-c", "import time; time.sleep(60)"], transport="http", start_timeout=0.5)
