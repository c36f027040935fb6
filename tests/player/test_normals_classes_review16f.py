"""The reference player's normals and class (semantic) segmentation images, from real player processes: each
pixel's normal is the unit normal of the face it shows, in the camera's frame, encoded as a build's normals shader
encodes it; each class colour is one object type's, listed in ``colors`` under the type's name."""

from __future__ import annotations

import numpy as np

import renderd
from renderd.player.renderer import camera_basis

W, H = 40, 30
TIMEOUT = 60.0


def _world_normals(frame: np.ndarray, yaw: float, pitch: float) -> np.ndarray:
    """(H, W, 3) world-space normals decoded from a normals image (camera frame: x right, y up, z to the camera)."""
    right, up, forward = camera_basis(yaw, pitch)
    n = frame.astype(np.float64) / 255.0 * 2.0 - 1.0
    return n[..., :1] * right + n[..., 1:2] * up - n[..., 2:3] * forward


def _check_normals(ev, yaw: float, pitch: float, where: str) -> None:
    frame = ev.normals_frame
    assert frame is not None and frame.shape == (H, W, 3) and frame.dtype == np.uint8, where
    world = _world_normals(frame, yaw, pitch)
    # Unit normals (8 bits per component), each along one world axis: every face here is axis-aligned.
    assert np.allclose(np.linalg.norm(world, axis=-1), 1.0, atol=0.02), where
    assert np.allclose(np.abs(world).max(axis=-1), 1.0, atol=0.02), where
    masks = ev.instance_masks
    floor = next(k for k in masks if k.startswith("Floor|"))
    assert np.allclose(world[masks[floor]], (0.0, 1.0, 0.0), atol=0.02), where  # the floor's normal points up
    for object_id in masks:
        if object_id.startswith("Ceiling|"):
            assert np.allclose(world[masks[object_id]], (0.0, -1.0, 0.0), atol=0.02), where
    # Every face shown faces the ray that meets it (faces are one-sided); 90 degrees vertical field of view.
    right, up, forward = camera_basis(yaw, pitch)
    u = ((np.arange(W) + 0.5) * (2.0 / W) - 1.0) * (W / H)
    v = 1.0 - (np.arange(H) + 0.5) * (2.0 / H)  # top row first
    rays = u[None, :, None] * right + v[:, None, None] * up + forward
    assert ((world * rays).sum(axis=-1) < 0).all(), where


def _check_classes(ev, where: str) -> None:
    classes = ev.semantic_segmentation_frame
    assert classes is not None and classes.shape == (H, W, 3) and classes.dtype == np.uint8, where
    colors = ev.metadata["colors"]
    class_colors = {c["name"]: tuple(c["color"]) for c in colors if "|" not in c["name"]}
    instance_colors = {tuple(c["color"]) for c in colors if "|" in c["name"]}
    types = {c["name"].split("|")[0] for c in colors if "|" in c["name"]}
    # One class colour per object type, none shared with another type or an instance.
    assert set(class_colors) == types, where
    assert len(set(class_colors.values())) == len(class_colors), where
    assert not instance_colors & set(class_colors.values()), where
    shown = set()
    for object_id, mask in ev.instance_masks.items():
        kind = object_id.split("|")[0]
        pixels = classes[mask]
        assert (pixels == class_colors[kind]).all(), (where, object_id)
        shown.add(kind)
    # The class image's colour of a type marks exactly that type's pixels (event.class_masks).
    for kind in shown:
        assert np.array_equal((classes == class_colors[kind]).all(axis=-1), ev.class_masks[kind]), (where, kind)
    assert {"Floor", "Wall"} <= shown and len(shown) > 2, where


def test_initialize_switches_both_images_on_for_every_step():
    with renderd.launch(width=W, height=H, start_timeout=TIMEOUT, step_timeout=TIMEOUT) as session:
        ev = session.reset("FloorPlan1", renderNormalsImage=True, renderSemanticSegmentation=True)
        assert ev, ev.error_message
        # The class switch sends the instance segmentation image and the colours too, as a build's.
        assert ev.instance_segmentation_frame is not None
        _check_normals(ev, 0.0, 0.0, "start")
        _check_classes(ev, "start")
        # Looking at the Fridge's front face: (0, 0, -1) in the world, straight back at the camera.
        fridge = ev.instance_masks[next(k for k in ev.instance_masks if k.startswith("Fridge|"))]
        assert (ev.normals_frame[fridge] == (128, 128, 255)).all()
        for action, yaw, pitch in (({"action": "LookDown", "degrees": 30}, 0.0, 30.0),
                                   ({"action": "RotateRight", "degrees": 90}, 90.0, 30.0)):
            ev = session.step(action)
            assert ev, ev.error_message
            _check_normals(ev, yaw, pitch, str(action))
            _check_classes(ev, str(action))
        # The floor seen 30 degrees down: (0, cos 30, sin 30) in the camera's frame.
        floor = ev.instance_masks[next(k for k in ev.instance_masks if k.startswith("Floor|"))]
        assert (ev.normals_frame[floor] == (128, 238, 191)).all()
        # A third-party camera looking straight down sees the floor's normal pointing back at it.
        ev = session.step("AddThirdPartyCamera", position={"x": 0.0, "y": 2.3, "z": 0.0},
                          rotation={"x": 90, "y": 0, "z": 0}, fieldOfView=60)
        assert ev, ev.error_message
        assert len(ev.third_party_normals_frames) == len(ev.third_party_semantic_segmentation_frames) == 1
        masks = ev.third_party_instance_masks[0]
        floor = masks[next(k for k in masks if k.startswith("Floor|"))]
        assert (ev.third_party_normals_frames[0][floor] == (128, 128, 255)).all()
        # Initialize without them: gone.
        ev = session.step("Initialize")
        assert ev and ev.normals_frame is None and ev.semantic_segmentation_frame is None
        assert ev.metadata["colors"] is None


def test_step_switches_turn_the_images_on_for_that_step_only():
    with renderd.launch(width=W, height=H, start_timeout=TIMEOUT, step_timeout=TIMEOUT) as session:
        ev = session.reset("FloorPlan2")
        assert ev and ev.normals_frame is None and ev.semantic_segmentation_frame is None
        ev = session.step("Pass", renderNormalsImage=True, renderInstanceSegmentation=True)
        assert ev, ev.error_message
        _check_normals(ev, 0.0, 0.0, "step normals")
        assert ev.semantic_segmentation_frame is None
        assert all("|" in c["name"] for c in ev.metadata["colors"])  # instance colours only without the class image
        # renderClassImage, the name a build's every step takes (renderd's client sends renderSemanticSegmentation
        # with it, which an action a build dispatches by signature refuses: LookDown takes any key).
        ev = session.step({"action": "LookDown", "degrees": 10, "renderClassImage": True})
        assert ev, ev.error_message
        assert ev.normals_frame is None
        _check_classes(ev, "step classes")
        ev = session.step("Pass")
        assert ev.normals_frame is None and ev.semantic_segmentation_frame is None and ev.metadata["colors"] is None
        # The AgentManager's own actions take no per-step switch, as renderInstanceSegmentation.
        ev = session.step("ChangeResolution", x=W, y=H, renderNormalsImage=True)
        assert ev and ev.normals_frame is None


def test_static_frame_sends_the_start_views_images(spawn):
    p = spawn(["--static-frame", "-screen-width", str(W), "-screen-height", str(H)])
    p.start_session()
    ev = p.step("Pass", renderNormalsImage=True, renderClassImage=True)
    assert ev.metadata["lastActionSuccess"]
    _check_normals(ev, 0.0, 0.0, "static")
    _check_classes(ev, "static")
    normals, classes = ev.normals_frame.copy(), ev.semantic_segmentation_frame.copy()
    ev = p.step("RotateRight", renderNormalsImage=True, renderClassImage=True)
    assert np.array_equal(ev.normals_frame, normals) and np.array_equal(ev.semantic_segmentation_frame, classes)
    ev = p.step("Pass")
    assert ev.normals_frame is None and ev.semantic_segmentation_frame is None


def test_a_renderer_without_render_maps_refuses_the_switches():
    from renderd.player.core import Player
    from renderd.player.renderer import NumpyRenderer

    class RgbOnly:  # a renderer of the plain interface only: render(), no render_maps()
        name = "rgb-only"

        def __init__(self):
            self._numpy = NumpyRenderer()

        def render(self, state):
            return self._numpy.render(state)

    p = Player(width=8, height=6, renderer=RgbOnly())
    md, images = p.handle({"action": "Pass", "renderNormalsImage": True})
    agent = md["agents"][0]
    assert not agent["lastActionSuccess"] and agent["errorCode"] == "InvalidArgument"
    assert "rgb-only" in agent["errorMessage"] and "normals" in agent["errorMessage"]
    assert [kind.name for kind, _ in images] == ["RGB_IMAGE"]
    md, _ = p.handle({"action": "Initialize", "renderSemanticSegmentation": True})
    assert md["agents"][0]["errorCode"] == "InvalidArgument" and not p.render_classes
