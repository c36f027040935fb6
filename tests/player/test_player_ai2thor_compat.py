"""AI2-THOR's own Python side (FifoServer + create_event) reads the reference player's frames correctly.

Skips when ``ai2thor`` is not installed (``pip install ai2thor``).
"""

from __future__ import annotations

import io
import os
import subprocess

import numpy as np
import pytest

from tests.helpers.fifo_driver import PlayerProcess, player_command
from tests.helpers.thor_review15d import RecordingPlayer

ai2thor_fifo = pytest.importorskip("ai2thor.fifo_server")

WIDTH, HEIGHT = 64, 48
TIMEOUT = 15.0


@pytest.fixture(params=["Linux64", "CloudRendering"])
def thor(request):
    """An ai2thor FifoServer talking to a player spawned with the environment AI2-THOR gives a build."""
    server = ai2thor_fifo.FifoServer(width=WIDTH, height=HEIGHT, timeout=TIMEOUT)
    server.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AI2THOR_", "RENDERD_"))}
    env.update(
        AI2THOR_CLIENT_TOKEN="token",
        AI2THOR_SERVER_TYPE=server.server_type,
        AI2THOR_SERVER_SIDE_SCREENSHOT="True",
        RENDERD_PLATFORM=request.param,
    )
    for key, value in server.unity_params().items():
        env["AI2THOR_" + key.upper()] = value
    argv = player_command(
        ["-screen-fullscreen", "0", "-screen-quality", "7", "-screen-width", str(WIDTH), "-screen-height", str(HEIGHT)]
    )
    server.unity_proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield server
    finally:
        try:
            server.stop()  # closes the pipes and kills the player
            server.unity_proc.wait(timeout=TIMEOUT)
        finally:
            server.tmp_dir.cleanup()


def steps(tmp_path, actions):
    """The same actions through renderd's own decoder, for comparison."""
    with PlayerProcess(tmp_path, ["-screen-width", str(WIDTH), "-screen-height", str(HEIGHT)]) as p:
        events = [p.start_session()]
        for action in actions:
            events.append(p.step(dict(action)))
        # Keep copies: the arrays are views of bytes the driver owns.
        return [(ev.frame.copy(), None if ev.depth_frame is None else ev.depth_frame.copy(),
                 None if ev.instance_segmentation_frame is None else ev.instance_segmentation_frame.copy())
                for ev in events]


def test_create_event_decodes_frames(thor, tmp_path):
    first = thor.receive(timeout=TIMEOUT)
    assert first.frame.shape == (HEIGHT, WIDTH, 3) and first.metadata["lastActionSuccess"]
    actions = [
        {"action": "Reset", "sceneName": "FloorPlan1_physics", "sequenceId": 0},  # as Controller.reset sends it
        {"action": "Initialize", "renderDepthImage": True, "renderInstanceSegmentation": True},
        {"action": "MoveAhead"},
        {"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 2.4, "z": 0}, "rotation": {"x": 90, "y": 0, "z": 0}},
    ]
    events = [first]
    for action in actions:
        thor.send(dict(action))
        events.append(thor.receive(timeout=TIMEOUT))
    ev = events[3]
    assert ev and ev.metadata["agent"]["position"]["z"] == pytest.approx(-1.75)
    assert ev.frame.shape == (HEIGHT, WIDTH, 3)
    assert ev.depth_frame.shape == (HEIGHT, WIDTH) and ev.depth_frame.dtype == np.float32
    assert ev.depth_frame[HEIGHT // 2, WIDTH // 2] == pytest.approx(2.25, abs=1e-3)
    # Orientation: ceiling on top, floor at the bottom, as the colour map names them.
    names = ev.color_to_object_id
    assert names[tuple(ev.instance_segmentation_frame[0, WIDTH // 2])].startswith("Ceiling|")
    assert names[tuple(ev.instance_segmentation_frame[-1, WIDTH // 2])].startswith("Floor|")
    fridge = next(o["objectId"] for o in ev.metadata["objects"] if o["objectType"] == "Fridge")
    assert ev.instance_masks[fridge][HEIGHT // 2, WIDTH // 2]
    assert "Fridge" in ev.class_masks
    tp = events[4]
    assert len(tp.third_party_camera_frames) == 1 and tp.third_party_camera_frames[0].shape[:2] == (HEIGHT, WIDTH)
    # Same pixels as renderd's own Event for the same actions.
    ours = steps(tmp_path, actions)
    for theirs, (frame, depth, ids) in zip(events[:4], ours[:4]):
        assert np.array_equal(theirs.frame[..., :3], frame)
        if depth is not None:
            assert np.array_equal(theirs.depth_frame, depth)
        if ids is not None:
            assert np.array_equal(theirs.instance_segmentation_frame, ids)


def test_unknown_action_is_an_error_ai2thor_understands(thor):
    thor.receive(timeout=TIMEOUT)
    thor.send({"action": "NotAnAction"})
    ev = thor.receive(timeout=TIMEOUT)
    assert not ev and ev.metadata["errorCode"] == "InvalidAction"
    thor.send({"action": "GetScenesInBuild"})
    ev = thor.receive(timeout=TIMEOUT)
    assert "FloorPlan1_physics" in ev.metadata["actionReturn"]


class ThorReader:
    """AI2-THOR's FifoServer reading a recorded stream, one message per ``receive``."""

    def __init__(self):
        self.server = ai2thor_fifo.FifoServer(width=WIDTH, height=HEIGHT, timeout=None)
        self.stream = io.BytesIO()
        self.server.server_pipe = self.stream

    def receive(self, data: bytes, sequence_id: int):
        pos = self.stream.tell()
        self.stream.seek(0, io.SEEK_END)
        self.stream.write(data)
        self.stream.seek(pos)
        self.server.sequence_id = sequence_id
        return self.server.receive()

    def close(self):
        self.server.tmp_dir.cleanup()


def _same_array(ours, theirs, what):
    if theirs is None:
        assert ours is None, what
        return
    assert ours is not None, what
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (what, ours.shape, theirs.shape)
    assert np.array_equal(ours, theirs), what


def _same_masks(ours, theirs, what, absent):
    if isinstance(theirs, dict):
        assert ours == theirs == {}, what
        return
    # (the order of the keys is that in which they were first asked for, in both)
    assert sorted(ours) == sorted(theirs) and len(ours) == len(theirs), what
    for key in theirs:
        _same_array(ours[key], theirs[key], f"{what}[{key!r}]")
    for key in absent:
        assert (key in ours) == (key in theirs), (what, key)
        assert ours.get(key) is None if theirs.get(key) is None else np.array_equal(ours.get(key), theirs.get(key))


def assert_same_event(ours, theirs):
    """renderd's Event gives what AI2-THOR's gives, attribute by attribute (documented differences aside)."""
    assert ours.metadata == theirs.metadata
    assert (ours.screen_width, ours.screen_height) == (theirs.screen_width, theirs.screen_height)
    assert bool(ours) == bool(theirs)
    assert len(ours.events) == len(theirs.events) == 1
    for attr in ("frame", "depth_frame", "instance_segmentation_frame", "semantic_segmentation_frame",
                 "normals_frame", "cv2img"):
        _same_array(getattr(ours, attr), getattr(theirs, attr) if theirs.frame is not None or attr != "cv2img"
                    else None, attr)
    # AI2-THOR leaves third-party RGB at the bytes per pixel the player sent (RGBA from CloudRendering);
    # renderd gives RGB for every camera, as for the agent's own frame.
    assert len(ours.third_party_camera_frames) == len(theirs.third_party_camera_frames)
    for a, b in zip(ours.third_party_camera_frames, theirs.third_party_camera_frames):
        _same_array(a, b[..., :3], "third_party_camera_frames")
    for attr in ("third_party_depth_frames", "third_party_instance_segmentation_frames",
                 "third_party_semantic_segmentation_frames", "third_party_normals_frames",
                 "third_party_flows_frames"):
        assert len(getattr(ours, attr)) == len(getattr(theirs, attr)), attr
        for a, b in zip(getattr(ours, attr), getattr(theirs, attr)):
            _same_array(a, b, attr)
    assert ours.color_to_object_id == theirs.color_to_object_id
    assert ours.object_id_to_color == theirs.object_id_to_color
    absent = ["Fridge|nowhere", "Sofa", "NoSuchType", "background", ""]
    _same_masks(ours.instance_masks, theirs.instance_masks, "instance_masks", absent + list(ours.object_id_to_color))
    _same_masks(ours.class_masks, theirs.class_masks, "class_masks", absent)
    if theirs.instance_detections2D is None:
        assert ours.instance_detections2D is None
    else:
        assert dict(ours.instance_detections2D.items()) == dict(theirs.instance_detections2D.items())
    assert dict(ours.class_detections2D.items()) == dict(theirs.class_detections2D.items())
    assert len(ours.third_party_instance_masks) == len(theirs.third_party_instance_masks)
    for a, b in zip(ours.third_party_instance_masks, theirs.third_party_instance_masks):
        _same_masks(a, b, "third_party_instance_masks", absent)
    for a, b in zip(ours.third_party_class_masks, theirs.third_party_class_masks):
        _same_masks(a, b, "third_party_class_masks", absent)
    fridge = next((o["objectId"] for o in theirs.metadata["objects"] if o["objectType"] == "Fridge"), None)
    assert ours.get_object(fridge) == theirs.get_object(fridge) and ours.get_object("nothing") is None
    assert ours.objects_by_type("Fridge") == theirs.objects_by_type("Fridge")
    assert ours.pose == theirs.pose and ours.pose_discrete == theirs.pose_discrete
    if theirs.metadata["lastAction"] == "GetReachablePositions":
        with pytest.warns(UserWarning):
            assert ours.metadata["reachablePositions"] == theirs.metadata["reachablePositions"]


@pytest.mark.parametrize("platform", ["Linux64", "CloudRendering"])
def test_the_same_player_bytes_give_the_same_events_in_ai2thor(tmp_path, platform):
    # A real player's stream, read by renderd's decoder and by AI2-THOR's FifoServer + create_event.
    actions = [
        {"action": "Initialize", "renderDepthImage": True, "renderInstanceSegmentation": True},
        {"action": "MoveAhead"},
        {"action": "RotateRight", "degrees": 45},
        {"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 2.4, "z": 0}, "rotation": {"x": 90, "y": 0, "z": 0}},
        {"action": "LookDown"},
        {"action": "MoveAhead", "renderInstanceSegmentation": False},
        {"action": "NoSuchAction"},
        {"action": "Pass", "renderImage": False},
        {"action": "GetReachablePositions"},
    ]
    thor = ThorReader()
    p = RecordingPlayer(tmp_path, ["-screen-width", str(WIDTH), "-screen-height", str(HEIGHT)], platform=platform)
    try:
        events = [p.start_session()]
        for action in actions:
            events.append(p.step(dict(action)))
        assert len(events[4].third_party_instance_masks) == 1 and "Fridge" in events[1].class_masks
        # A step's renderInstanceSegmentation false leaves Initialize's setting, as in a build.
        assert events[6].instance_masks != {} and events[8].frame is None
        theirs = [thor.receive(bytes(p.raw) if i == 0 else b"", ev.sequence_id) for i, ev in enumerate(events)]
        for ours, t in zip(events, theirs):
            assert_same_event(ours, t)
    finally:
        p.close()
        thor.close()


# The Controller opens its build's log file twice and never closes it (a ResourceWarning of its own).
@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
def test_ai2thors_controller_drives_the_player(tmp_path, monkeypatch):
    # AI2-THOR's Controller, end to end: it launches the player as a local build, asks for the scenes,
    # resets (ChangeResolution, Initialize) and steps; failures of the player's own kind raise as they do
    # with a Unity build.
    controller_module = pytest.importorskip("ai2thor.controller")
    monkeypatch.setenv("HOME", str(tmp_path))  # its log and lock directories
    executable = tmp_path / "player.sh"
    executable.write_text(f"#!/bin/sh\nexec {' '.join(player_command())} \"$@\"\n")
    executable.chmod(0o755)
    controller = controller_module.Controller(
        local_executable_path=str(executable), x_display=":0", width=WIDTH, height=HEIGHT, server_timeout=TIMEOUT,
        server_start_timeout=TIMEOUT, renderInstanceSegmentation=True,
    )
    try:
        assert controller.last_event.frame.shape == (HEIGHT, WIDTH, 3) and controller.last_event.instance_masks
        ev = controller.reset("FloorPlan2", width=32, height=24, renderDepthImage=True)
        assert ev.metadata["sceneName"] == "FloorPlan2_physics" and ev.frame.shape == (24, 32, 3)
        assert ev.depth_frame.shape == (24, 32) and "Television" in ev.class_masks
        ev = controller.step("RotateLeft")
        assert ev and ev.metadata["agent"]["rotation"]["y"] == 270
        with pytest.raises(ValueError, match="Bogus"):
            controller.step("Bogus")
    finally:
        controller.stop()
        if controller.server is not None and controller.server.unity_proc is not None:
            controller.server.unity_proc.wait(timeout=TIMEOUT)


def test_ai2thors_wsgi_server_reads_the_players_http_posts():
    wsgi = pytest.importorskip("ai2thor.wsgi_server")
    server = wsgi.WsgiServer(host="127.0.0.1", port=0, width=WIDTH, height=HEIGHT, timeout=TIMEOUT)
    server.start()
    server.client_token = "token"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AI2THOR_", "RENDERD_"))}
    env.update(AI2THOR_CLIENT_TOKEN="token", AI2THOR_SERVER_TYPE=server.server_type,
               AI2THOR_SERVER_SIDE_SCREENSHOT="True")
    for key, value in server.unity_params().items():
        env["AI2THOR_" + key.upper()] = str(value)
    argv = player_command(["-screen-width", str(WIDTH), "-screen-height", str(HEIGHT)])
    server.unity_proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert server.receive().frame.shape == (HEIGHT, WIDTH, 3)
        server.send({"action": "Initialize", "renderDepthImage": True, "renderInstanceSegmentation": True})
        ev = server.receive()
        assert ev and ev.depth_frame.shape == (HEIGHT, WIDTH) and ev.instance_masks
        server.send({"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 2, "z": 0},
                     "rotation": {"x": 90, "y": 0, "z": 0}})
        ev = server.receive()
        assert len(ev.third_party_camera_frames) == len(ev.third_party_instance_masks) == 1
    finally:
        server.stop()
        server.unity_proc.terminate()
        server.unity_proc.wait(timeout=TIMEOUT)
