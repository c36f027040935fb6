"""The gl renderer draws the normals and class segmentation images (``renderNormalsImage``,
``renderSemanticSegmentation``) as the numpy renderer does: real ``renderd-player --renderer gl`` processes
through EGL and through GLX on an Xvfb of the test's own, launched with ``renderd.launch``, compared with a numpy
player at the same poses. Rasterisation and ray casting may differ along edges, so the share of agreeing pixels
is compared, not every pixel."""

from __future__ import annotations

import numpy as np
import pytest

import renderd
from renderd.errors import PlayerCrashed
from renderd.player.core import Player
from renderd.player.renderer import NumpyRenderer, camera_basis
from tests.helpers.xvfb_review14e import _Xvfb

W, H = 64, 48
TIMEOUT = 60.0
MIN_AGREEMENT = 0.95
MAPS = {"renderNormalsImage": True, "renderSemanticSegmentation": True}
#: (action, its arguments, the agent's yaw and pitch after it) from FloorPlan1's start pose (yaw 0, level).
STEPS = [
    ("Pass", {}, 0.0, 0.0),
    ("LookDown", {"degrees": 30}, 0.0, 30.0),
    ("RotateRight", {"degrees": 90}, 90.0, 30.0),
    ("MoveBack", {}, 90.0, 30.0),
]
#: A third-party camera above the room looking straight down (through the ceiling, which faces inwards), and one
#: outside a wall looking past the room: background pixels too.
CAMERAS = [
    {"position": {"x": 0.0, "y": 5.0, "z": 0.0}, "rotation": {"x": 90, "y": 0, "z": 0}, "fieldOfView": 60},
    {"position": {"x": 0.0, "y": 1.5, "z": -6.0}, "rotation": {"x": 0, "y": 30, "z": 0}, "fieldOfView": 90},
]


def _launch_gl(kind: str, display, log_path):
    """A gl player through EGL (``kind`` "egl") or GLX on ``display``; skips when this machine has no driver."""
    pytest.importorskip("moderngl")
    if kind == "egl":
        where = dict(platform="CloudRendering", env={"DISPLAY": ""})
    else:
        pytest.importorskip("Xlib")
        where = dict(platform="Linux64", x_display=display().name)
    try:
        return renderd.launch(args=["--renderer", "gl"], width=W, height=H, start_timeout=TIMEOUT,
                              step_timeout=TIMEOUT, log_path=str(log_path), **where)
    except PlayerCrashed as exc:
        if "GLUnavailable" in str(exc) or "cannot create an OpenGL" in str(exc):
            pytest.skip(f"no OpenGL through {kind} here: {exc}")
        raise


@pytest.fixture
def display():
    """``display()`` starts an Xvfb with GLX (skips without Xvfb); it is killed after the test."""
    servers: list[_Xvfb] = []

    def _start() -> _Xvfb:
        servers.append(_Xvfb())
        return servers[-1]

    yield _start
    for server in servers:
        server.kill()


def _agreement(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape == (H, W, 3) and a.dtype == b.dtype == np.uint8
    return float((a == b).all(axis=2).mean())


def _floor_normal(ev, normals, masks, yaw: float, pitch: float) -> np.ndarray:
    """The floor's most common normal in ``normals`` (a camera-frame image), as a world-space vector."""
    floor = masks[next(k for k in masks if k.startswith("Floor|"))]
    assert floor.any()
    colors, counts = np.unique(normals[floor].reshape(-1, 3), axis=0, return_counts=True)
    n = colors[counts.argmax()].astype(np.float64) / 255.0 * 2.0 - 1.0
    right, up, forward = camera_basis(yaw, pitch)
    return n[0] * right + n[1] * up - n[2] * forward


def _compare(gl_ev, ref_ev, where: str) -> None:
    assert gl_ev, (where, gl_ev.error_message)
    assert ref_ev, (where, ref_ev.error_message)
    assert gl_ev.metadata["colors"] == ref_ev.metadata["colors"], where  # the same class colours, listed alike
    assert _agreement(gl_ev.normals_frame, ref_ev.normals_frame) >= MIN_AGREEMENT, where
    assert _agreement(gl_ev.semantic_segmentation_frame, ref_ev.semantic_segmentation_frame) >= MIN_AGREEMENT, where
    assert len(gl_ev.third_party_normals_frames) == len(ref_ev.third_party_normals_frames), where
    for k, (a, b) in enumerate(zip(gl_ev.third_party_normals_frames, ref_ev.third_party_normals_frames)):
        assert _agreement(a, b) >= MIN_AGREEMENT, (where, k)
    for k, (a, b) in enumerate(zip(gl_ev.third_party_semantic_segmentation_frames,
                                   ref_ev.third_party_semantic_segmentation_frames)):
        assert _agreement(a, b) >= MIN_AGREEMENT, (where, k)


@pytest.mark.parametrize("kind", ["egl", "glx"])
def test_gl_normals_and_classes_match_the_numpy_renderers(kind, display, tmp_path):
    log_path = tmp_path / "gl.log"
    with _launch_gl(kind, display, log_path) as gl, renderd.launch(
        width=W, height=H, start_timeout=TIMEOUT, step_timeout=TIMEOUT
    ) as ref:
        assert ("OpenGL through EGL" if kind == "egl" else "OpenGL through GLX") in log_path.read_text()
        events = [s.reset("FloorPlan1", **MAPS) for s in (gl, ref)]
        _compare(*events, "reset")
        for action, kwargs, yaw, pitch in STEPS:
            gl_ev, ref_ev = (s.step(action, **kwargs) for s in (gl, ref))
            _compare(gl_ev, ref_ev, action)
            up = _floor_normal(gl_ev, gl_ev.normals_frame, gl_ev.instance_masks, yaw, pitch)
            assert np.allclose(up, (0.0, 1.0, 0.0), atol=0.02), (action, up)
        for camera in CAMERAS:
            gl_ev, ref_ev = (s.step("AddThirdPartyCamera", **camera) for s in (gl, ref))
            _compare(gl_ev, ref_ev, str(camera))
        # Straight down at the floor: its normal points back at the camera; outside the room: background (0, 0, 0).
        above, outside = gl_ev.third_party_normals_frames
        masks = gl_ev.third_party_instance_masks[0]
        assert np.allclose(_floor_normal(gl_ev, above, masks, 0.0, 90.0), (0.0, 1.0, 0.0), atol=0.02)
        background = (gl_ev.third_party_instance_segmentation_frames[1] == 0).all(axis=2)
        assert background.any()
        assert (outside[background] == 0).all()
        assert (gl_ev.third_party_semantic_segmentation_frames[1][background] == 0).all()
        # A per-step switch only: the class image alone for this step, then neither.
        gl_ev, ref_ev = (s.step("Initialize") for s in (gl, ref))
        assert gl_ev and gl_ev.normals_frame is None and gl_ev.semantic_segmentation_frame is None
        # (renderd's client sends renderSemanticSegmentation with renderClassImage: LookDown takes any key.)
        gl_ev, ref_ev = (s.step({"action": "LookDown", "degrees": 10, "renderClassImage": True}) for s in (gl, ref))
        assert gl_ev, gl_ev.error_message
        assert gl_ev.normals_frame is None
        assert _agreement(gl_ev.semantic_segmentation_frame, ref_ev.semantic_segmentation_frame) >= MIN_AGREEMENT
        gl_ev = gl.step("Pass")
        assert gl_ev and gl_ev.semantic_segmentation_frame is None


class _CountingNumpyRenderer(NumpyRenderer):
    """The numpy renderer, counting how often it traces each state."""

    def __init__(self) -> None:
        super().__init__()
        self.traced: dict = {}

    def _render(self, state, maps=False):
        self.traced[state] = self.traced.get(state, 0) + 1
        return super()._render(state, maps)


@pytest.mark.parametrize("static_frame", [False, True])
def test_a_view_with_the_maps_is_drawn_once(static_frame):
    """The player asks for a view's maps before its frame: a renderer draws them with the frame and keeps it, so
    the frame is not drawn a second time (it was, without the maps, then again with them)."""
    renderer = _CountingNumpyRenderer()
    p = Player(width=W, height=H, renderer=renderer, static_frame=static_frame)
    try:
        camera = {"action": "AddThirdPartyCamera", "position": {"x": 0, "y": 2, "z": 0},
                  "rotation": {"x": 90, "y": 0, "z": 0}}
        for action in ({"action": "RotateRight", "renderNormalsImage": True, "renderClassImage": True}, camera,
                       {"action": "LookDown", "renderNormalsImage": True},
                       {"action": "RotateLeft", "renderClassImage": True}):
            renderer.traced.clear()
            md, images = p.handle(action)
            assert md["agents"][0]["lastActionSuccess"], md["agents"][0]["errorMessage"]
            kinds = [kind.name for kind, _ in images]
            assert action is camera or "NORMALS_IMAGE" in kinds or "CLASSES_IMAGE" in kinds, kinds
            # (A view whose frame an earlier answer traced without them is traced again: once.)
            twice = {state: n for state, n in renderer.traced.items() if n > 1}
            assert not twice, (action, twice)
    finally:
        renderer.close()
