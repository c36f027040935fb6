"""Review 9 of the reference player: each test drives a real player process over real FIFOs."""

from __future__ import annotations

import time

import pytest

FAST = ["-screen-width", "16", "-screen-height", "16"]
#: Deadline for a prompt answer or exit (seconds).
PROMPT = 10.0


def ready(spawn, *args, **kwargs):
    p = spawn([*FAST, *args], **kwargs)
    p.start_session()
    return p


def test_render_switches_are_read_as_a_unity_build_reads_them(spawn):
    # A Unity build converts renderImage (and the other switches) to bool as Json.NET does: 0 and "false"
    # are false. The player sent the RGB image for renderImage 0 or "false", and depth for
    # renderDepthImage "false".
    p = ready(spawn)
    for off in (0, 0.0, "false", "False"):
        ev = p.step("Pass", renderImage=off)
        assert ev and ev.frame is None, f"renderImage={off!r} sent an image"
    for on in (1, "true", True, None):
        assert p.step("Pass", renderImage=on).frame is not None, f"renderImage={on!r} sent no image"
    ev = p.step("Pass", renderDepthImage="false", renderInstanceSegmentation="false")
    assert ev.frame is not None and ev.depth_frame is None and ev.instance_segmentation_frame is None
    ev = p.step("Pass", renderDepthImage=1, renderInstanceSegmentation="TRUE")
    assert ev.depth_frame is not None and ev.instance_segmentation_frame is not None
    assert p.step("Initialize", renderDepthImage="false", renderInstanceSegmentation=0)
    ev = p.step("Pass")
    assert ev.depth_frame is None and ev.instance_segmentation_frame is None
    assert p.step("Initialize", renderDepthImage="true")
    ev = p.step("Pass", renderDepthImage=None)  # null: not given, the Initialize setting holds
    assert ev.depth_frame is not None


def test_reachable_positions_on_a_fine_grid_come_promptly(spawn):
    # Initialize takes gridSize down to 0.01 m: GetReachablePositions then lists about 230,000 points
    # (8 MB of metadata), each checked against the walls and boxes one at a time in Python: 10-15 s for
    # one answer. The points are now checked a whole grid row at a time: well under a second.
    from renderd.player.scene import SCENES

    p = ready(spawn)
    assert p.step("Initialize", gridSize=0.01)
    started = time.monotonic()
    ev = p.step("GetReachablePositions", timeout=PROMPT)
    took = time.monotonic() - started
    positions = ev.metadata["actionReturn"]
    assert ev and len(positions) > 200_000
    assert took < 5.0, f"GetReachablePositions at gridSize 0.01 took {took:.1f} s"
    scene = SCENES["FloorPlan1"]
    assert {"x": 0.0, "y": 0.9, "z": -2.0} in positions and positions == sorted(
        positions, key=lambda q: (q["x"], q["z"]))
    assert all(scene.collision(q["x"], q["z"]) is None for q in positions[::997])
    assert scene.collision(0.0, 1.0) is not None and {"x": 0.0, "y": 0.9, "z": 1.0} not in positions


def test_a_third_party_camera_without_a_field_of_view_has_unitys_default(spawn):
    # A Unity build gives a new third-party camera 90 degrees (DEFAULT_FOV) when no fieldOfView is
    # passed, whatever the agent's own field of view; the player gave it the agent's (Initialize's).
    p = ready(spawn)
    assert p.step("Initialize", fieldOfView=60)
    here = p.step("Pass").metadata
    pose = {"position": here["cameraPosition"],
            "rotation": {"x": here["agent"]["cameraHorizon"], "y": here["agent"]["rotation"]["y"], "z": 0}}
    ev = p.step("AddThirdPartyCamera", **pose)
    assert ev and ev.metadata["actionReturn"]["fieldOfView"] == 90
    assert ev.metadata["thirdPartyCameras"][0]["fieldOfView"] == 90
    seen = ev.third_party_camera_frames[0].copy()
    assert p.step("Initialize", fieldOfView=90)
    assert (p.step("Pass").frame == seen).all()  # rendered at 90 degrees, from the agent's own pose
