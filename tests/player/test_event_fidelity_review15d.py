"""What an agent gets from the reference player's frames agrees with the scene and with AI2-THOR's Event.

Guards (the behaviour was right when they were written): every pixel's depth, put back into the world along
its ray, lies on the part its instance mask names (agent and third-party cameras, several poses, each
scene); the masks cover the frame once, their colours are unique, their boxes are their masks' bounds and
every object the metadata calls visible has one; and a multi-agent stream gives every agent's event the
frames, depth, masks and third-party images AI2-THOR's create_event gives it for the same bytes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import renderd
from renderd.player.renderer import camera_basis
from renderd.player.scene import scene_by_name
from tests.helpers.thor_review15d import RecordingPlayer, ThorReader

W, H = 48, 36
TIMEOUT = 60.0
# How far (metres) a reconstructed point may lie outside its part: float32 depth at a few metres.
TOLERANCE = 2e-3


def _world_points(depth: np.ndarray, position, yaw: float, pitch: float, fov: float) -> np.ndarray:
    """(H, W, 3) world position of each pixel's centre at its depth along the camera's forward axis."""
    right, up, forward = camera_basis(yaw, pitch)
    h, w = depth.shape
    t = math.tan(math.radians(fov) / 2)
    ys, xs = np.mgrid[0:h, 0:w]
    px = ((xs + 0.5) / w * 2 - 1) * t * w / h
    py = (1 - (ys + 0.5) / h * 2) * t
    rays = forward + px[..., None] * right + py[..., None] * up
    return np.asarray(position, dtype=np.float64) + depth[..., None].astype(np.float64) * rays


def _check_view(scene_name: str, masks, depth: np.ndarray, position, yaw, pitch, fov, where: str) -> None:
    assert depth.dtype == np.float32 and depth.shape == (H, W), where
    parts = {p.object_id: p for p in scene_by_name(scene_name).parts()}
    points = _world_points(depth, position, yaw, pitch, fov)
    cover = np.zeros(depth.shape, int)
    for object_id in masks:
        mask = masks[object_id]
        assert mask.dtype == bool and mask.shape == (H, W), (where, object_id)
        cover += mask
        part = parts[object_id]
        q = points[mask]
        outside = np.maximum(np.maximum(np.array(part.lo) - q, q - np.array(part.hi)), 0).max(axis=1)
        assert outside.max() <= TOLERANCE, (where, object_id, float(outside.max()))
    # Inside the room every ray meets exactly one part.
    assert cover.min() == 1 and cover.max() == 1, where


def _check_masks_against_metadata(ev, where: str) -> None:
    md = ev.metadata
    colors = [tuple(c["color"]) for c in md["colors"]]
    assert len(set(colors)) == len(colors), where
    in_view = set(ev.instance_masks)
    for obj in md["objects"]:
        if obj["visible"]:
            assert obj["objectId"] in in_view, (where, obj["objectId"])
    for object_id in in_view:
        ys, xs = np.nonzero(ev.instance_masks[object_id])
        assert ev.instance_detections2D[object_id] == (xs.min(), ys.min(), xs.max(), ys.max()), (where, object_id)
        assert ev.object_id_to_color[object_id] == tuple(ev.instance_segmentation_frame[ys[0], xs[0]])
    types = {object_id.split("|")[0] for object_id in in_view}
    assert set(ev.class_masks) == types and set(ev.class_detections2D) == types, where


@pytest.mark.parametrize("scene", ["FloorPlan1", "FloorPlan2", "FloorPlan3"])
def test_depth_and_masks_of_real_frames_agree_with_the_scene(scene):
    # A guard: renderd's Event over the reference player's frames, checked against the scene's geometry.
    with renderd.launch(width=W, height=H, start_timeout=TIMEOUT, step_timeout=TIMEOUT) as session:
        ev = session.reset(scene, renderInstanceSegmentation=True, renderDepthImage=True, fieldOfView=75,
                           visibilityDistance=10)
        steps = [
            {"action": "Pass"},
            {"action": "RotateRight", "degrees": 30},
            {"action": "LookDown", "degrees": 30},
            {"action": "RotateLeft", "degrees": 100},
            {"action": "Teleport", "horizon": -90, "forceAction": True},
        ]
        for action in steps:
            ev = session.step(dict(action))
            assert ev, (action, ev.error_message)
            md = ev.metadata
            camera = md["cameraPosition"]
            where = f"{scene} after {action}"
            _check_view(scene, ev.instance_masks, ev.depth_frame, (camera["x"], camera["y"], camera["z"]),
                        md["agent"]["rotation"]["y"], md["agent"]["cameraHorizon"], md["fov"], where)
            _check_masks_against_metadata(ev, where)
        ev = session.step("AddThirdPartyCamera", position={"x": 0.5, "y": 2.0, "z": 0.3},
                          rotation={"x": 40, "y": 200, "z": 0}, fieldOfView=60)
        assert ev, ev.error_message
        (camera,) = ev.metadata["thirdPartyCameras"]
        assert len(ev.third_party_depth_frames) == len(ev.third_party_instance_masks) == 1
        _check_view(scene, ev.third_party_instance_masks[0], ev.third_party_depth_frames[0], (0.5, 2.0, 0.3),
                    camera["rotation"]["y"], camera["rotation"]["x"], camera["fieldOfView"], f"{scene} camera")


def _same_array(ours, theirs, what):
    if theirs is None:
        assert ours is None, what
        return
    assert ours is not None and ours.shape == theirs.shape and ours.dtype == theirs.dtype, what
    assert np.array_equal(ours, theirs), what


def _same_masks(ours, theirs, what):
    if isinstance(theirs, dict):
        assert ours == theirs == {}, what
        return
    assert sorted(ours) == sorted(theirs), what
    for key in theirs:
        _same_array(ours[key], theirs[key], f"{what}[{key!r}]")


def test_every_agents_event_of_a_real_multi_agent_stream_is_ai2thors(tmp_path):
    # A guard: the same bytes of a two-agent player with a third-party camera, read by renderd and by
    # AI2-THOR; each agent's event (events[i]) holds what AI2-THOR's gives that agent.
    fifo_server = pytest.importorskip("ai2thor.fifo_server")
    actions = [
        {"action": "Initialize", "renderDepthImage": True, "renderInstanceSegmentation": True, "agentCount": 2},
        {"action": "MoveAhead", "agentId": 1},
        {"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 2.4, "z": 0}, "rotation": {"x": 90, "y": 0, "z": 0}},
        {"action": "RotateRight", "agentId": 1},
        {"action": "LookDown", "agentId": 0},
    ]
    thor = ThorReader(fifo_server, W, H)
    player = RecordingPlayer(tmp_path, ["-screen-width", str(W), "-screen-height", str(H)], platform="CloudRendering")
    try:
        events = [player.start_session()]
        for action in actions:
            events.append(player.step(dict(action)))
        theirs = [thor.receive(bytes(player.raw) if i == 0 else b"", ev.sequence_id) for i, ev in enumerate(events)]
        for step, (ours, t) in enumerate(zip(events, theirs)):
            assert len(ours.events) == len(t.events) and bool(ours) == bool(t), step
            assert ours.metadata == t.metadata, step
            for i, (a, b) in enumerate(zip(ours.events, t.events)):
                where = f"step {step} agent {i}"
                assert a.metadata == b.metadata, where
                for attr in ("frame", "depth_frame", "instance_segmentation_frame"):
                    _same_array(getattr(a, attr), getattr(b, attr), f"{where} {attr}")
                _same_masks(a.instance_masks, b.instance_masks, f"{where} instance_masks")
                _same_masks(a.class_masks, b.class_masks, f"{where} class_masks")
                assert len(a.third_party_camera_frames) == len(b.third_party_camera_frames), where
                for x, y in zip(a.third_party_camera_frames, b.third_party_camera_frames):
                    _same_array(x, y[..., :3], f"{where} third_party_camera_frames")  # RGBA there: docs/client.md
                for attr in ("third_party_depth_frames", "third_party_instance_segmentation_frames"):
                    assert len(getattr(a, attr)) == len(getattr(b, attr)), (where, attr)
                    for x, y in zip(getattr(a, attr), getattr(b, attr)):
                        _same_array(x, y, f"{where} {attr}")
                assert len(a.third_party_instance_masks) == len(b.third_party_instance_masks), where
                for x, y in zip(a.third_party_instance_masks, b.third_party_instance_masks):
                    _same_masks(x, y, f"{where} third_party_instance_masks")
        assert len(events[-1].events) == 2 and len(events[-1].third_party_depth_frames) == 1
    finally:
        player.close()
        thor.close()
