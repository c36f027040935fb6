"""What the reference player renders, checked against the scene's geometry with real player processes:
depth in metres for known poses, its orientation and its relation to the RGB frame, segmentation colours
against the metadata's ``colors``, third-party cameras anywhere (also outside the room), and the gl
renderer (EGL) drawing what the numpy renderer draws at odd sizes and fields of view."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from renderd.player.scene import AGENT_Y, CAMERA_HEIGHT

CAMERA_Y = AGENT_Y + CAMERA_HEIGHT
#: FloorPlan1: 6 x 2.5 x 6 m, the agent at (0, -2) facing +z, the Fridge's front face at z = 0.5.
ROOM = (6.0, 2.5, 6.0)
FRIDGE_DISTANCE = 2.5
#: gl and numpy must agree on at least this share of pixels (ids and depth; rasterisation may differ on
#: an edge or a checker line), depth within this relative error.
MIN_AGREEMENT = 0.97
DEPTH_RELATIVE_TOLERANCE = 1e-3


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


def _gl_and_numpy(spawn, *args):
    pytest.importorskip("moderngl")
    gl = spawn(["--renderer", "gl", *args], platform="CloudRendering", env={"DISPLAY": ""})
    try:
        gl.start_session(timeout=30)
    except Exception:
        log = gl.log_text()
        if "GLUnavailable" in log or "cannot create an OpenGL" in log:
            pytest.skip("no EGL driver here")
        raise
    ref = spawn(list(args), platform="CloudRendering")
    ref.start_session()
    return gl, ref


def _step_both(players, action, **kwargs):
    events = [p.step(action, **kwargs) for p in players]
    for ev in events:
        assert ev, ev.metadata["errorMessage"]
    return events


def _agreement(a_depth, a_ids, b_depth, b_ids) -> tuple[float, float]:
    ids = (a_ids == b_ids).all(axis=2).mean()
    depth = (np.abs(a_depth - b_depth) <= DEPTH_RELATIVE_TOLERANCE * np.abs(b_depth)).mean()
    return float(ids), float(depth)


@pytest.mark.parametrize(
    "size, fov",
    [((4096, 1), 90.0), ((64, 48), 179.0), ((320, 200), 120.0)],
    ids=["4096x1", "fov179", "320x200-fov120"],
)
def test_gl_draws_what_numpy_draws_at_wide_views(spawn, size, fov):
    """The gl renderer's near plane (0.01 m) cut off every surface nearer than that: at 4096 x 1 (a
    horizontal field of view of nearly 180 degrees) 93% of the pixels came out black, depth 0, ids
    (0, 0, 0), a colour not in ``colors``, where the numpy renderer shows the side walls."""
    gl, ref = _gl_and_numpy(spawn)
    players = (gl, ref)
    _step_both(players, "Initialize", renderDepthImage=True, renderInstanceSegmentation=True, fieldOfView=fov)
    a, b = _step_both(players, "ChangeResolution", x=size[0], y=size[1])
    assert a.depth_frame.shape == (size[1], size[0])
    assert a.depth_frame.min() > 0
    assert _unique(a.instance_segmentation_frame) <= set(_colors(a))
    ids, depth = _agreement(a.depth_frame, a.instance_segmentation_frame, b.depth_frame, b.instance_segmentation_frame)
    assert ids >= MIN_AGREEMENT and depth >= MIN_AGREEMENT, (ids, depth)


def test_gl_draws_what_numpy_draws_from_outside_the_room(spawn):
    """Room surfaces are seen from inside only, box faces from outside only, in both renderers: a
    third-party camera above the room sees its floor and boxes through the ceiling (the gl renderer
    showed the ceiling's back), one outside a wall sees into the room through it."""
    gl, ref = _gl_and_numpy(spawn, "-screen-width", "64", "-screen-height", "64")
    players = (gl, ref)
    _step_both(players, "Initialize", renderDepthImage=True, renderInstanceSegmentation=True)
    poses = [
        (_v(0.0, 5.0, 0.0), _v(90.0, 0.0, 0.0)),  # above, looking down
        (_v(0.0, 2.0, -5.0), _v(20.0, 0.0, 0.0)),  # south of the room, looking in
        (_v(1.0, 1.0, -5.0), _v(0.0, 180.0, 0.0)),  # south of the room, looking away
        (_v(0.0, 1.0, 1.0), _v(0.0, 0.0, 0.0)),  # inside the Fridge, looking out
    ]
    a, b = _step_both(players, "AddThirdPartyCamera", position=poses[0][0], rotation=poses[0][1])
    for i, (position, rotation) in enumerate(poses):
        if i:
            a, b = _step_both(players, "UpdateThirdPartyCamera", thirdPartyCameraId=0, position=position,
                              rotation=rotation)
        ids, depth = _agreement(a.third_party_depth_frames[0], a.third_party_instance_segmentation_frames[0],
                                b.third_party_depth_frames[0], b.third_party_instance_segmentation_frames[0])
        assert ids >= MIN_AGREEMENT and depth >= MIN_AGREEMENT, (position, rotation, ids, depth)
        assert math.isclose(float(a.depth_frame[32, 32]), FRIDGE_DISTANCE, rel_tol=1e-5)


_PEAK_MEMORY_PROBE = """
import resource
from renderd.player.renderer import NumpyRenderer, RenderState
from renderd.player.scene import SCENES
renderer = NumpyRenderer()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
renderer.render(RenderState(SCENES["FloorPlan1"], 2048, 2048, (0.0, 1.575, -2.0), 0.0, 0.0, 90.0))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def test_numpy_renderer_memory_stays_near_the_frame_size():
    """A large frame was traced in one piece, ~150 bytes of temporaries per ray: 2048 x 2048 (42 MB of
    images) raised the process's peak memory by 637 MB, 4096 x 4096 (a size ChangeResolution allows) by
    2.5 GB, on every new view."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", _PEAK_MEMORY_PROBE], capture_output=True, text=True, timeout=60,
                          cwd=root, check=False)
    assert done.returncode == 0, done.stderr
    grown_mb = int(done.stdout.strip()) / 1024
    images_mb = 2048 * 2048 * (3 + 4 + 3) / 2**20  # rgb, depth, ids
    rays_mb = 2048 * 2048 * 8 / 2**20  # the cached camera-space ray table
    assert grown_mb < images_mb + rays_mb + 128, f"peak memory grew by {grown_mb:.0f} MB"
