"""Every action of the reference player, driven by a real client over real FIFOs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from renderd.player.scene import SCENES
from renderd.protocol import HEADER, FieldType, encode_action


def color_of(event, prefix: str) -> tuple[int, int, int]:
    names = [c for c in event.metadata["colors"] if c["name"].startswith(prefix)]
    assert names, f"no colour for {prefix} in metadata"
    return tuple(names[0]["color"])


def center(a: np.ndarray):
    h, w = a.shape[:2]
    return a[h // 2, w // 2]


def test_start_view_matches_the_scene(player):
    ev = player.step("Pass")
    assert ev and ev.metadata["sceneName"] == "FloorPlan1"
    assert ev.frame.shape == (300, 300, 3) and ev.depth_frame.shape == (300, 300)
    # A tall red box stands 2.5 m straight ahead.
    r, g, b = (int(v) for v in center(ev.frame))
    assert r > 150 and g < 60 and b < 60
    assert center(ev.depth_frame) == pytest.approx(2.5, abs=1e-3)
    assert tuple(center(ev.instance_segmentation_frame)) == color_of(ev, "Fridge|")
    # Top row first: ceiling at the top, floor at the bottom; blue cabinet left, green sofa right.
    ids = ev.instance_segmentation_frame
    assert tuple(ids[0, 150]) == color_of(ev, "Ceiling|")
    assert tuple(ids[-1, 150]) == color_of(ev, "Floor|")
    key = lambda a: {tuple(v) for v in a.reshape(-1, 3)}  # noqa: E731
    assert color_of(ev, "Cabinet|") in key(ids[:, :150]) and color_of(ev, "Cabinet|") not in key(ids[:, 150:])
    assert color_of(ev, "Sofa|") in key(ids[:, 150:]) and color_of(ev, "Sofa|") not in key(ids[:, :150])
    # Every id colour in the image is named in metadata["colors"].
    assert key(ids) <= {tuple(c["color"]) for c in ev.metadata["colors"]}
    d = ev.depth_frame
    assert np.isfinite(d).all() and (d > 0.1).all() and (d < 20).all()
    # Floor at the bottom-centre pixel: the camera is 1.575 m up, the ray's slope ~45 degrees.
    assert d[-1, 150] == pytest.approx(1.575 / (1 - 1 / 300), rel=1e-3)


def test_rows_are_bottom_up_on_the_wire(player):
    player.send("Pass")
    message = player.recv_message()
    raw = np.frombuffer(message.first(FieldType.IDS_IMAGE), dtype=np.uint8).reshape(300, 300, 4)
    ev = player.assembler.event(message)
    assert tuple(raw[0, 150, :3]) == color_of(ev, "Floor|")  # first row on the wire is the bottom
    assert tuple(raw[-1, 150, :3]) == color_of(ev, "Ceiling|")
    assert (raw[..., 3] == 255).all()
    rgb = message.first(FieldType.RGB_IMAGE)
    assert len(rgb) == 300 * 300 * 3  # 3 bytes per pixel without RENDERD_PLATFORM=CloudRendering


def test_move_ahead_until_blocked(player):
    z0 = player.step("Pass").metadata["agent"]["position"]["z"]
    for i in range(9):
        ev = player.step("MoveAhead")
        assert ev, ev.metadata["errorMessage"]
    assert ev.metadata["agent"]["position"]["z"] == pytest.approx(z0 + 9 * 0.25)
    assert center(ev.depth_frame) == pytest.approx(0.25, abs=1e-3)
    fridge = next(o for o in ev.metadata["objects"] if o["objectType"] == "Fridge")
    assert fridge["visible"] is True
    blocked = player.step("MoveAhead")
    assert not blocked and blocked.metadata["lastActionSuccess"] is False
    # Worded as a build's: the blocking object by its name (the metadata's), the agent, the move's world offset.
    assert blocked.metadata["errorMessage"] == f"{fridge['name']} is blocking Agent 0 from moving by (0.0000, 0.0000, 0.2500)."
    assert blocked.metadata["agent"]["position"]["z"] == pytest.approx(z0 + 9 * 0.25)


@pytest.mark.parametrize(
    "action, dx, dz",
    [("MoveAhead", 0.0, 0.5), ("MoveBack", 0.0, -0.5), ("MoveLeft", -0.5, 0.0), ("MoveRight", 0.5, 0.0)],
)
def test_moves_with_magnitude(player, action, dx, dz):
    player.step("Teleport", position={"x": 0.0, "y": 0.9, "z": -1.0}, rotation={"x": 0, "y": 0, "z": 0}, horizon=0)
    ev = player.step(action, moveMagnitude=0.5)
    assert ev, ev.metadata["errorMessage"]
    pos = ev.metadata["agent"]["position"]
    assert (pos["x"], pos["z"]) == (pytest.approx(dx), pytest.approx(-1.0 + dz))


def test_move_into_wall_fails(player):
    ev = player.step("MoveBack", moveMagnitude=2.0)  # from z=-2, the south wall is 1 m behind
    assert not ev and ev.metadata["errorMessage"] == "WallSouth is blocking Agent 0 from moving by (0.0000, 0.0000, -2.0000)."


def test_rotate(player):
    ev = player.step("RotateRight")
    assert ev.metadata["agent"]["rotation"]["y"] == pytest.approx(90)
    # Facing +x from (0, -2): the east wall 3 m away.
    assert tuple(center(ev.instance_segmentation_frame)) == color_of(ev, "Wall|+03.00")
    assert center(ev.depth_frame) == pytest.approx(3.0, abs=1e-3)
    ev = player.step("RotateLeft", degrees=45)
    assert ev.metadata["agent"]["rotation"]["y"] == pytest.approx(45)
    ev = player.step("RotateLeft", degrees=90)
    assert ev.metadata["agent"]["rotation"]["y"] == pytest.approx(315)


def test_look_up_and_down(player):
    ev = player.step("LookDown")
    assert ev and ev.metadata["agent"]["cameraHorizon"] == pytest.approx(30)
    # Half a pixel off the exact centre of an even-sized frame: allow 0.5%.
    assert center(ev.depth_frame) == pytest.approx(2.5 / math.cos(math.radians(30)), rel=5e-3)
    assert player.step("LookDown")  # 60: the limit
    ev = player.step("LookDown", degrees=1)
    assert not ev and ev.metadata["agent"]["cameraHorizon"] == pytest.approx(60)
    ev = player.step("LookUp", degrees=90)
    assert ev and ev.metadata["agent"]["cameraHorizon"] == pytest.approx(-30)
    assert tuple(center(ev.instance_segmentation_frame)) == color_of(ev, "Ceiling|")
    ev = player.step("LookUp")
    assert not ev and "look up" in ev.metadata["errorMessage"]


def test_teleport(player):
    ev = player.step("Teleport", position={"x": 1.0, "y": 0.9, "z": -1.0}, rotation={"x": 0, "y": 270, "z": 0},
                     horizon=0)
    assert ev, ev.metadata["errorMessage"]
    assert ev.metadata["agent"]["position"] == {"x": 1.0, "y": 0.9, "z": -1.0}
    assert center(ev.depth_frame) == pytest.approx(4.0, abs=1e-3)  # the west wall at x=-3
    assert tuple(center(ev.instance_segmentation_frame)) == color_of(ev, "Wall|-03.00")
    ev = player.step("TeleportFull", position={"x": 0.0, "y": 0.9, "z": 1.0}, rotation=0, horizon=0, standing=True)
    assert not ev and ev.metadata["errorMessage"] == "InvalidOperationException: Collided with: Fridge|+00.00|+00.90|+01.00."
    assert ev.metadata["agent"]["position"]["x"] == pytest.approx(1.0)


def test_pass_and_done_change_nothing(player):
    a = player.step("Pass")
    frame = a.frame.copy()
    b = player.step("Done")
    assert b and b.metadata["agent"] == a.metadata["agent"]
    assert np.array_equal(b.frame, frame)


def test_change_resolution(player):
    ev = player.step("ChangeResolution", x=200, y=100)
    assert ev and (ev.metadata["screenWidth"], ev.metadata["screenHeight"]) == (200, 100)
    assert ev.frame.shape == (100, 200, 3) and ev.depth_frame.shape == (100, 200)
    assert ev.instance_segmentation_frame.shape == (100, 200, 3)
    assert player.step("MoveAhead").frame.shape == (100, 200, 3)
    ev = player.step("ChangeResolution", x=-1, y=100)
    assert not ev and ev.metadata["errorCode"] == "InvalidArgument"


def test_reset_and_scenes(player):
    ev = player.step("GetScenesInBuild")
    assert ev and {"FloorPlan1", "FloorPlan2", "FloorPlan3"} <= set(ev.metadata["actionReturn"])
    for name in ("FloorPlan2", "FloorPlan3_physics", "FloorPlan1"):
        ev = player.step("Reset", sceneName=name)
        assert ev and ev.metadata["sceneName"] == name
        start = SCENES[name.removesuffix("_physics")].start
        assert ev.metadata["agent"]["position"]["z"] == pytest.approx(start.z)
    player.step("Reset", sceneName="FloorPlan2")
    ev = player.step("Initialize", renderDepthImage=True, renderInstanceSegmentation=True)  # (a Reset clears them)
    assert tuple(center(ev.instance_segmentation_frame)) == color_of(ev, "Television|")
    assert center(ev.depth_frame) == pytest.approx(3.7, abs=1e-3)
    ev = player.step("Reset", sceneName="FloorPlan404")
    assert not ev and "FloorPlan404" in ev.metadata["errorMessage"]
    assert ev.metadata["sceneName"] == "FloorPlan2"


def test_initialize_settings(player):
    ev = player.step("Initialize", gridSize=0.5, fieldOfView=60, renderDepthImage=False)
    assert ev and ev.depth_frame is None and ev.metadata["fov"] == 60
    ev = player.step("MoveAhead")
    assert ev.metadata["agent"]["position"]["z"] == pytest.approx(-1.5)
    ev = player.step("Pass", renderDepthImage=True)  # per action, not persistent
    assert ev.depth_frame is not None
    assert player.step("Pass").depth_frame is None
    ev = player.step("Initialize", gridSize=0.25, fieldOfView=90, renderDepthImage=True)
    assert ev.depth_frame is not None


def test_render_flags_per_action(player):
    ev = player.step("Pass", renderImage=False)
    assert ev and ev.frame is None and ev.depth_frame is None and ev.instance_segmentation_frame is None
    # As in a build, a step's renderInstanceSegmentation only switches segmentation on: false leaves
    # Initialize's setting (on for this fixture).
    ev = player.step("Pass", renderInstanceSegmentation=False)
    assert ev.frame is not None and ev.instance_segmentation_frame is not None


def test_reachable_positions(player):
    ev = player.step("GetReachablePositions")
    positions = ev.metadata["actionReturn"]
    assert ev and len(positions) > 100
    assert {"x": 0.0, "y": 0.9, "z": -2.0} in positions
    scene = SCENES["FloorPlan1"]
    assert all(scene.collision(p["x"], p["z"]) is None for p in positions)


def test_third_party_cameras(player):
    ev = player.step("AddThirdPartyCamera", position={"x": 0, "y": 2.4, "z": 0}, rotation={"x": 90, "y": 0, "z": 0},
                     fieldOfView=90)
    assert ev, ev.metadata["errorMessage"]
    assert len(ev.metadata["thirdPartyCameras"]) == 1
    assert len(ev.third_party_camera_frames) == 1 and ev.third_party_camera_frames[0].shape == (300, 300, 3)
    assert len(ev.third_party_depth_frames) == 1
    assert center(ev.third_party_depth_frames[0]) == pytest.approx(2.4, abs=1e-3)  # straight down to the floor
    assert not np.array_equal(ev.third_party_camera_frames[0], ev.frame)
    ev = player.step("UpdateThirdPartyCamera", thirdPartyCameraId=0, position={"x": 0, "y": 2.4, "z": 1.0})
    assert ev and center(ev.third_party_depth_frames[0]) == pytest.approx(0.6, abs=1e-3)  # the fridge top, 1.8 m
    ev = player.step("Reset", sceneName="FloorPlan1")
    assert ev.metadata["thirdPartyCameras"] == [] and ev.third_party_camera_frames == []


def test_unknown_and_malformed_actions_answer_errors(player):
    ev = player.step("Fly")
    assert not ev and ev.metadata["errorCode"] == "InvalidAction" and "Fly" in ev.metadata["errorMessage"]
    before = player.step("Pass").metadata["agent"]["rotation"]["y"]
    # A string .NET cannot parse: a build's FormatException, answered as any exception (errorCode null).
    ev = player.step("RotateLeft", degrees="a lot")
    assert not ev and ev.metadata["errorCode"] is None
    assert ev.metadata["errorMessage"] == "System.FormatException: Input string was not in a correct format."
    assert ev.metadata["agent"]["rotation"]["y"] == before
    # What Json.NET cannot convert at all (an array for a float): InvalidArgument.
    ev = player.step("RotateLeft", degrees=[30])
    assert not ev and ev.metadata["errorCode"] == "InvalidArgument" and "degrees" in ev.metadata["errorMessage"]
    assert ev.metadata["agent"]["rotation"]["y"] == before
    ev = player.step({"noAction": True})
    assert not ev and ev.metadata["errorCode"] == "InvalidAction"
    assert player.step("Pass")  # still serving


def test_sequence_ids(player):
    ev = player.step("Pass", sequenceId=1000)
    assert ev.sequence_id == 1000 and ev.metadata is not None
    # No sequenceId in the action: the player counts on from the last one.
    player.send_raw_buffers(encode_action({"action": "Pass"}))
    assert player.recv_event().sequence_id == 1001
    player.sequence_id = 1001


def test_first_field_is_metadata(player):
    player.send("Pass")
    message = player.recv_message()
    assert [t for t, _ in message.fields] == [FieldType.METADATA, FieldType.RGB_IMAGE, FieldType.DEPTH_IMAGE,
                                              FieldType.IDS_IMAGE]
    assert HEADER.size == 5


def test_change_quality_takes_unitys_level_names_and_changes_no_frame(player):
    from renderd.config import QUALITIES
    from renderd.player.core import QUALITY_NAMES

    assert set(QUALITY_NAMES) == set(QUALITIES) | {"DONOTUSE"}  # AI2-THOR's QUALITY_SETTINGS names
    before = player.step("Pass")
    ev = player.step("ChangeQuality", quality="Very Low")
    assert ev and ev.metadata["lastAction"] == "ChangeQuality"
    np.testing.assert_array_equal(ev.frame, before.frame)
    ev = player.step("ChangeQuality", quality="Potato")
    assert not ev and ev.metadata["errorCode"] == "InvalidArgument" and "'Potato'" in ev.metadata["errorMessage"]
    ev = player.step("ChangeQuality")
    assert not ev and ev.metadata["errorCode"] == "MissingArguments"
