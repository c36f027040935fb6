"""AI2-THOR's own Python side (FifoServer + create_event) reads the reference player's frames correctly.

Skips when ``ai2thor`` is not installed (``pip install ai2thor``).
"""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from tests.helpers.fifo_driver import PlayerProcess, player_command

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
