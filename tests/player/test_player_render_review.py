"""What the reference player renders, checked against the scene's geometry with real player processes:
depth in metres for known poses, its orientation and its relation to the RGB frame, segmentation colours
against the metadata's ``colors``, third-party cameras anywhere (also outside the room)."""

from __future__ import annotations

import numpy as np
import pytest

from renderd.player.scene import AGENT_Y, CAMERA_HEIGHT

CAMERA_Y = AGENT_Y + CAMERA_HEIGHT
#: FloorPlan1: 6 x 2.5 x 6 m, the agent at (0, -2) facing +z, the Fridge's front face at z = 0.5.
ROOM = (6.0, 2.5, 6.0)
FRIDGE_DISTANCE = 2.5


def _v(x: float, y: float, z: float) -> dict[str, float]:
    return {"x": x, "y": y, "z": z}


def _colors(event) -> dict[tuple[int, int, int], str]:
    return {tuple(c["color"]): c["name"] for c in event.metadata["colors"]}


def _unique(ids: np.ndarray) -> set[tuple[int, int, int]]:
    return {tuple(int(v) for v in c) for c in np.unique(ids.reshape(-1, 3), axis=0)}


def _start(spawn, *args, **kwargs):
    p = spawn(list(args), **kwargs)
    p.start_session()
    ev = p.step("Initialize", renderDepthImage=True, renderInstanceSegmentation=True)
    assert ev, ev.metadata["errorMessage"]
    return p


def test_depth_matches_the_room_geometry_top_row_first(spawn):
    p = _start(spawn, "-screen-width", "320", "-screen-height", "200")
    ev = p.step("Pass")
    depth, ids, rgb = ev.depth_frame, ev.instance_segmentation_frame, ev.frame
    colors = _colors(ev)
    # Centre: the Fridge 2.5 m ahead. Top row: the ceiling 0.925 m above the camera, bottom row: the floor
    # 1.575 m below; the outermost pixel centres are half a pixel inside the 90 degree field of view.
    edge = 1 - 1 / 200
    assert depth[100, 160] == pytest.approx(FRIDGE_DISTANCE, rel=1e-6)
    assert colors[tuple(int(v) for v in ids[100, 160])].startswith("Fridge|")
    assert depth[0, 160] == pytest.approx((ROOM[1] - CAMERA_Y) / edge, rel=1e-5)
    assert colors[tuple(int(v) for v in ids[0, 160])].startswith("Ceiling|")
    assert depth[199, 160] == pytest.approx(CAMERA_Y / edge, rel=1e-5)
    assert colors[tuple(int(v) for v in ids[199, 160])].startswith("Floor|")
    # Left and right edges at mid height: the side walls 3 m away, seen 1.6 x tan(45) off axis.
    u = (1 - 1 / 320) * 320 / 200
    assert depth[100, 0] == pytest.approx(3.0 / u, rel=1e-5)
    assert depth[100, 319] == pytest.approx(3.0 / u, rel=1e-5)
    # Every colour in the ids image is listed; every edge between parts is an edge in the RGB frame too.
    assert _unique(ids) <= set(colors)
    part_edge = (ids[:, 1:] != ids[:, :-1]).any(axis=2)
    assert not (part_edge & ~(rgb[:, 1:] != rgb[:, :-1]).any(axis=2)).any()


def test_third_party_camera_outside_the_room_never_sees_behind_itself(spawn):
    """A third-party camera may stand anywhere. Outside the room, the rays that never cross the room
    used to hit a wall's plane behind the camera or beyond the room: negative depths (-2 m, -42 m) and
    segmentation naming a wall the camera has its back to."""
    p = _start(spawn, "-screen-width", "64", "-screen-height", "48")
    # 2 m south of the south wall (z = -3), looking away from the room.
    ev = p.step("AddThirdPartyCamera", position=_v(0.0, 1.0, -5.0), rotation=_v(0.0, 180.0, 0.0))
    assert ev, ev.metadata["errorMessage"]
    depth = ev.third_party_depth_frames[0]
    ids = ev.third_party_instance_segmentation_frames[0]
    assert depth.min() >= 0, f"depth from {depth.min()} to {depth.max()} m"
    assert (depth == 0).all() and (ids == 0).all() and (ev.third_party_camera_frames[0] == 0).all()
    # 10 m east of the room, looking along +z, parallel to the east wall: nothing in view either.
    ev = p.step("UpdateThirdPartyCamera", thirdPartyCameraId=0, position=_v(10.0, 1.0, 0.0),
                rotation=_v(0.0, 0.0, 0.0))
    assert ev.third_party_depth_frames[0].min() >= 0
    assert (ev.third_party_instance_segmentation_frames[0] == 0).all()
    # Above and south of the room, looking down 30 degrees: the room's inside where the rays cross it
    # (its ceiling and south wall face inwards), nothing (depth 0, ids black) elsewhere.
    ev = p.step("UpdateThirdPartyCamera", thirdPartyCameraId=0, position=_v(0.0, 5.0, -5.0),
                rotation=_v(30.0, 0.0, 0.0))
    depth = ev.third_party_depth_frames[0]
    ids = ev.third_party_instance_segmentation_frames[0]
    colors = _colors(ev)
    background = (ids == 0).all(axis=2)
    assert depth.min() >= 0
    assert (depth[background] == 0).all() and (depth[~background] > 0).all()
    assert 0 < background.mean() < 1
    assert _unique(ids[~background]) <= set(colors)
    # Straight above the Fridge, looking down: its top (the ceiling is seen from inside only).
    ev = p.step("UpdateThirdPartyCamera", thirdPartyCameraId=0, position=_v(0.0, 5.0, 1.0),
                rotation=_v(90.0, 0.0, 0.0))
    depth = ev.third_party_depth_frames[0]
    ids = ev.third_party_instance_segmentation_frames[0]
    assert depth[24, 32] == pytest.approx(5.0 - 1.8, rel=1e-5)  # the Fridge's top, 1.8 m high
    assert colors[tuple(int(v) for v in ids[24, 32])].startswith("Fridge|")
    assert _unique(ids) - {(0, 0, 0)} <= set(colors)  # the view reaches past the room's north edge
    # The agent's own view is unchanged by all this.
    assert ev.depth_frame[24, 32] == pytest.approx(FRIDGE_DISTANCE, rel=1e-6)
