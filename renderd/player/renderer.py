"""Renderers for the reference player, and the interface every renderer implements.

The renderer interface
----------------------
A renderer is any object with::

    render(state: RenderState) -> (rgb, depth, ids)

* ``state`` is a :class:`RenderState` (frozen, hashable): the :class:`~renderd.player.scene.Scene`, the
  image size, the camera position in metres, its yaw and pitch in degrees, and the vertical field of view.
* ``rgb`` is ``(height, width, 3)`` ``uint8``; ``depth`` is ``(height, width)`` ``float32`` in metres,
  measured along the camera's forward axis (Unity's linear eye depth, not the Euclidean distance);
  ``ids`` is ``(height, width, 3)`` ``uint8`` holding each visible part's ``Part.id_color``.
* All three are **top row first** (row 0 is the top of the picture). They may be views with a negative
  row stride (the player flips them bottom-up for the wire; flipping such a view back is free), and the
  caller treats them as read-only, so a renderer may return cached arrays.
* Optional: ``render_maps(state) -> (normals, classes)``, the surface normals and the class (semantic)
  segmentation images, each ``(height, width, 3)`` ``uint8``, top row first, read-only like the others:
  ``normals`` holds each pixel's unit surface normal in the camera's frame (Unity's view space: ``x`` right,
  ``y`` up, ``z`` towards the camera) encoded as a build's normals shader encodes it,
  ``round((n * 0.5 + 0.5) * 255)`` (:func:`normal_colors`); ``classes`` holds each visible part's type's
  :meth:`~renderd.player.scene.Scene.class_colors` colour. Background pixels are ``(0, 0, 0)`` in both. A
  renderer without it cannot answer ``renderNormalsImage`` or ``renderSemanticSegmentation`` (the player
  refuses them, ``InvalidArgument``).
* Optional: ``close()`` releases resources; ``name`` (str) is logged; ``check()`` raises when the
  renderer can no longer render (the GL renderer's X server is gone): the player calls it before every
  answer, including those it sends from its caches without rendering.

Camera convention (Unity's, as AI2-THOR reports it): yaw 0 looks along ``+z``, yaw 90 along ``+x``;
a positive pitch (AI2-THOR's ``cameraHorizon``) looks down; the field of view is vertical and the
horizontal one follows from the aspect ratio. Pixel centres are sampled (``(col + 0.5) / width``).

The scene's parts (:meth:`Scene.parts`) are drawn with their ``color``, lit per face (``FACE_SHADE``
by the face's normal axis, with a checker pattern on the floor); exact shading is a renderer's choice,
but the ids image must use ``id_color`` exactly, since the player's ``colors`` metadata maps those
colours to object ids. Every face is one-sided: a room surface is seen only from inside the room (a
camera above the room sees its floor through the ceiling, one outside a wall sees in through it), a box
face only from outside the box. Nothing is cut off by a near or far plane. A ray that meets no surface
(only a camera outside the room has such rays) gives the background: RGB and ids ``(0, 0, 0)``, which is
no part's ``id_color``, and depth 0.

:func:`make_renderer` picks one by name: ``numpy`` (:class:`NumpyRenderer`, here) or ``gl``
(``renderd.player.gl.GLRenderer``, constructed with ``device_index=``).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from renderd.player.scene import SURFACES, Scene

__all__ = [
    "RenderState", "Renderer", "NumpyRenderer", "make_renderer", "RENDERERS", "FACE_SHADE", "FLOOR_TILE",
    "BACKGROUND_COLOR", "BACKGROUND_ID_COLOR", "BACKGROUND_DEPTH", "BACKGROUND_NORMAL_COLOR", "normal_colors",
    "class_palette",
]

#: Light falling on a face, by the axis of its normal (x, y, z).
FACE_SHADE = (0.78, 1.0, 0.9)
#: Floor checker tile size in metres, and the darker tiles' brightness.
FLOOR_TILE = 0.5
FLOOR_DARK = 0.82
#: How many frames a NumpyRenderer keeps (keyed by RenderState) so repeated poses cost nothing.
FRAME_CACHE_SIZE = 8
#: At most this many bytes of them (the latest is always kept): a 4096 x 4096 frame is 176 MiB (RGB, float32
#: depth, RGBA ids), so eight of them would hold 1.4 GiB.
FRAME_CACHE_BYTES = 128 << 20
#: How many ray-direction tables (one per width, height, field of view) a NumpyRenderer keeps.
RAY_CACHE_SIZE = 4
#: A larger frame is traced this many rays at a time, so its temporaries stay small (tens of MB).
CHUNK_RAYS = 1 << 18

RENDERERS = ("numpy", "gl")


def trim_cache(cache: OrderedDict[Any, tuple[np.ndarray, ...]], size: int, max_bytes: int) -> None:
    """Drop the least recently used entries of ``cache`` (arrays per key) until it holds at most ``size`` of
    them and at most ``max_bytes`` in all; the most recent entry stays whatever its size."""
    total = sum(a.nbytes for arrays in cache.values() for a in arrays)
    while len(cache) > size or (total > max_bytes and len(cache) > 1):
        _, arrays = cache.popitem(last=False)
        total -= sum(a.nbytes for a in arrays)

#: What a pixel whose ray meets no surface holds (only a camera outside the room has such rays: the
#: room's surfaces face inwards, and one seen from outside is not drawn): black RGB, the ids colour
#: (0, 0, 0), which is no part's ``id_color``, and depth 0.
BACKGROUND_COLOR = (0, 0, 0)
BACKGROUND_ID_COLOR = (0, 0, 0)
BACKGROUND_DEPTH = 0.0
#: A background pixel of the normals and class segmentation images (which no surface's normal encodes to, and no
#: type's class colour is).
BACKGROUND_NORMAL_COLOR = (0, 0, 0)
#: The part index of the background in NumpyRenderer (the palettes' last entry).
BACKGROUND = -1
#: The face code (:func:`normal_colors`' index) of the background.
BACKGROUND_FACE = 6


def normal_colors(yaw: float, pitch: float) -> np.ndarray:
    """``(7, 3)`` uint8: the normals image's colour of each face code seen by a camera with this yaw and pitch: code
    ``2 * axis + (1 if the world normal points along +axis else 0)`` (axis 0 x, 1 y, 2 z), and 6 for the background
    (:data:`BACKGROUND_NORMAL_COLOR`). A world normal ``n`` is taken into the camera's frame as Unity's view space
    holds it (``n . right``, ``n . up``, ``-(n . forward)``: ``z`` points back at the camera) and encoded as a
    build's normals shader encodes it, ``n * 0.5 + 0.5``, stored as 8 bits (``round(c * 255)``)."""
    right, up, forward = camera_basis(yaw, pitch)
    out = np.empty((7, 3), dtype=np.uint8)
    for code in range(6):
        axis, sign = code // 2, (1.0 if code % 2 else -1.0)
        n = np.array([right[axis], up[axis], -forward[axis]]) * sign
        out[code] = np.clip(np.rint((n * 0.5 + 0.5) * 255.0), 0, 255).astype(np.uint8)
    out[BACKGROUND_FACE] = BACKGROUND_NORMAL_COLOR
    return out


def class_palette(scene: Scene) -> np.ndarray:
    """``(len(parts) + 1, 3)`` uint8: each part's type's class segmentation colour, in :meth:`Scene.parts` order, and
    the background's (:data:`BACKGROUND_NORMAL_COLOR`) last."""
    classes = scene.class_colors()
    return np.array([classes[p.object_type] for p in scene.parts()] + [BACKGROUND_NORMAL_COLOR], dtype=np.uint8)


@dataclass(frozen=True)
class RenderState:
    """Everything that decides a frame."""

    scene: Scene
    width: int
    height: int
    position: tuple[float, float, float]  # camera position, metres
    yaw: float  # degrees about +y; 0 looks along +z
    pitch: float  # degrees; positive looks down
    fov: float = 90.0  # vertical field of view, degrees


@runtime_checkable
class Renderer(Protocol):
    def render(self, state: RenderState) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


def camera_basis(yaw: float, pitch: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """World-space (right, up, forward) unit vectors of a camera with this yaw and pitch (degrees)."""
    p, t = math.radians(yaw), math.radians(pitch)
    right = np.array([math.cos(p), 0.0, -math.sin(p)])
    up = np.array([math.sin(p) * math.sin(t), math.cos(t), math.cos(p) * math.sin(t)])
    forward = np.array([math.sin(p) * math.cos(t), -math.sin(t), math.cos(p) * math.cos(t)])
    return right, up, forward


class NumpyRenderer:
    """Vectorised ray casting against the room's planes and the boxes, on the CPU.

    Camera-space ray directions (forward component 1, so a ray's parameter is its depth) are computed
    once per (width, height, fov), in bottom-up row order: the images come out bottom-up and contiguous,
    and are returned as top-row-first views, so the player's flip back to wire order copies nothing.
    """

    name = "numpy"

    def __init__(self, *, device_index: int | None = None, cache_size: int = FRAME_CACHE_SIZE) -> None:
        self.device_index = device_index  # no device to pick on the CPU; kept for the interface
        self._rays: OrderedDict[tuple[int, int, float], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._frames: OrderedDict[RenderState, tuple[np.ndarray, np.ndarray, np.ndarray]] = OrderedDict()
        self._cache_size = cache_size
        self._palettes: dict[Scene, tuple[np.ndarray, np.ndarray]] = {}
        #: (normals, classes) per state, kept as the frames are: only renders that asked for them fill it.
        self._maps: OrderedDict[RenderState, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._class_palettes: dict[Scene, np.ndarray] = {}

    def close(self) -> None:
        self._rays.clear()
        self._frames.clear()
        self._maps.clear()

    def _camera_rays(self, width: int, height: int, fov: float) -> tuple[np.ndarray, np.ndarray]:
        key = (width, height, fov)
        rays = self._rays.get(key)
        if rays is None:
            tan_half = math.tan(math.radians(fov) / 2)
            xs = ((np.arange(width, dtype=np.float64) + 0.5) * (2.0 / width) - 1.0) * tan_half * (width / height)
            ys = ((np.arange(height, dtype=np.float64) + 0.5) * (2.0 / height) - 1.0) * tan_half  # bottom row first
            u = np.broadcast_to(xs[None, :], (height, width)).astype(np.float32).ravel()
            v = np.broadcast_to(ys[:, None], (height, width)).astype(np.float32).ravel()
            rays = (u, v)
            self._rays[key] = rays
            trim_cache(self._rays, RAY_CACHE_SIZE, FRAME_CACHE_BYTES)  # (128 MiB of them at 4096 x 4096)
        else:
            self._rays.move_to_end(key)
        return rays

    def _palette(self, scene: Scene) -> tuple[np.ndarray, np.ndarray]:
        pal = self._palettes.get(scene)
        if pal is None:
            parts = scene.parts()
            # The last entry is the background's (index BACKGROUND, -1).
            albedo = np.array([p.color for p in parts] + [BACKGROUND_COLOR], dtype=np.float32)
            ids = np.array([p.id_color for p in parts] + [BACKGROUND_ID_COLOR], dtype=np.uint8)
            pal = (albedo, ids)
            self._palettes[scene] = pal
        return pal

    def render(self, state: RenderState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Render ``state``: (rgb, depth, ids), top row first, read-only. Raises ValueError on a bad size."""
        if state.width <= 0 or state.height <= 0:
            raise ValueError(f"cannot render a {state.width} x {state.height} image")
        cached = self._frames.get(state)
        if cached is not None:
            self._frames.move_to_end(state)
            return cached
        frame = self._render(state)
        self._frames[state] = frame
        trim_cache(self._frames, self._cache_size, FRAME_CACHE_BYTES)
        return frame

    def render_maps(self, state: RenderState) -> tuple[np.ndarray, np.ndarray]:
        """The (normals, classes) images of ``state`` (see the module docstring), top row first, read-only. Traced
        with the frame (which is cached too), only when asked for: :meth:`render` alone never computes them."""
        if state.width <= 0 or state.height <= 0:
            raise ValueError(f"cannot render a {state.width} x {state.height} image")
        cached = self._maps.get(state)
        if cached is not None:
            self._maps.move_to_end(state)
            return cached
        rgb, depth, ids, normals, classes = self._render(state, maps=True)
        if state not in self._frames:
            self._frames[state] = (rgb, depth, ids)
            trim_cache(self._frames, self._cache_size, FRAME_CACHE_BYTES)
        self._maps[state] = (normals, classes)
        trim_cache(self._maps, self._cache_size, FRAME_CACHE_BYTES)
        return normals, classes

    def _render(self, state: RenderState, maps: bool = False) -> tuple[np.ndarray, ...]:
        w, h = state.width, state.height
        u, v = self._camera_rays(w, h, state.fov)
        n = w * h
        if n <= CHUNK_RAYS:
            images = self._trace(state, u, v, maps)
        else:  # in chunks: tracing needs ~150 bytes per ray, 2.5 GB at once for 4096 x 4096
            images = (np.empty((n, 3), dtype=np.uint8), np.empty(n, dtype=np.float32), np.empty((n, 3), dtype=np.uint8))
            if maps:
                images += (np.empty((n, 3), dtype=np.uint8), np.empty((n, 3), dtype=np.uint8))
            for start in range(0, n, CHUNK_RAYS):
                chunk = slice(start, start + CHUNK_RAYS)
                for whole, part in zip(images, self._trace(state, u[chunk], v[chunk], maps)):
                    whole[chunk] = part
        out = []
        for a in images:
            a = a.reshape((h, w) + a.shape[1:])
            a.flags.writeable = False
            out.append(a[::-1])
        return tuple(out)

    def _trace(self, state: RenderState, u: np.ndarray, v: np.ndarray, maps: bool = False) -> tuple[np.ndarray, ...]:
        """(rgb (n, 3) uint8, depth (n,) float32, ids (n, 3) uint8) of the rays with these camera-space
        directions (u right, v up, 1 forward); with ``maps`` also (normals (n, 3) uint8, classes (n, 3) uint8)."""
        right, up, forward = camera_basis(state.yaw, state.pitch)
        f32 = np.float32
        # World-space directions, one component array each (forward component 1 in camera space).
        dx = u * f32(right[0]) + v * f32(up[0]) + f32(forward[0])
        dy = v * f32(up[1]) + f32(forward[1])  # right has no y component
        dz = u * f32(right[2]) + v * f32(up[2]) + f32(forward[2])
        ox, oy, oz = (float(c) for c in state.position)
        sx, sy, sz = state.scene.size
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ix, iy, iz = f32(1.0) / dx, f32(1.0) / dy, f32(1.0) / dz
            # Leaving the room: the nearest boundary plane ahead on each axis (the room's surfaces face
            # inwards, so a ray sees the one where it leaves the room's box). Per axis the exit is the
            # larger of the two slab parameters (+inf for a parallel ray inside the slab), the entry the
            # smaller; fmax/fmin ignore the NaN of a parallel ray starting on a boundary plane.
            ax_, bx_ = f32(sx / 2 - ox) * ix, f32(-sx / 2 - ox) * ix
            ay_, by_ = f32(sy - oy) * iy, f32(-oy) * iy
            az_, bz_ = f32(sz / 2 - oz) * iz, f32(-sz / 2 - oz) * iz
            tx = np.fmax(ax_, bx_)
            ty = np.fmax(ay_, by_)
            tz = np.fmax(az_, bz_)
            # Surface indices follow SURFACES: 0 floor, 1 ceiling, 2 west, 3 east, 4 south, 5 north.
            part = np.where(dx > 0, np.int16(3), np.int16(2))
            axis = np.zeros(dx.shape, dtype=np.int8)
            best = tx
            closer = ty < best
            best = np.where(closer, ty, best)
            part = np.where(closer, np.where(dy > 0, np.int16(1), np.int16(0)), part)
            axis[closer] = 1
            closer = tz < best
            best = np.where(closer, tz, best)
            part = np.where(closer, np.where(dz > 0, np.int16(5), np.int16(4)), part)
            axis[closer] = 2
            # A camera outside the room (a third-party camera may be anywhere): a ray that never crosses
            # the room's box, or crosses it behind the camera, sees no surface (BACKGROUND, below).
            if not (-sx / 2 < ox < sx / 2 and 0.0 < oy < sy and -sz / 2 < oz < sz / 2):
                entry = np.fmax(np.fmax(np.fmin(ax_, bx_), np.fmin(ay_, by_)), np.fmin(az_, bz_))
                missed = (entry > best) | ~(best > 0)
                if missed.any():
                    best = np.where(missed, np.float32(np.inf), best)
                    part[missed] = BACKGROUND
            # Boxes: slab test per box. A camera inside a box (only a third-party camera can be) does not
            # see it: its faces are seen from outside only (near > 0).
            for k, box in enumerate(state.scene.box_parts(), start=len(SURFACES)):
                (lx, ly, lz), (hx, hy, hz) = box.lo, box.hi
                ax = f32(lx - ox) * ix
                bx = f32(hx - ox) * ix
                nx = np.minimum(ax, bx)
                fx = np.maximum(ax, bx)
                ay = f32(ly - oy) * iy
                by = f32(hy - oy) * iy
                ny = np.minimum(ay, by)
                fy = np.maximum(ay, by)
                az = f32(lz - oz) * iz
                bz = f32(hz - oz) * iz
                nz = np.minimum(az, bz)
                fz = np.maximum(az, bz)
                near = np.maximum(np.maximum(nx, ny), nz)
                far = np.minimum(np.minimum(fx, fy), fz)
                hit = (near <= far) & (near > 0) & (near < best)
                if not hit.any():
                    continue
                best = np.where(hit, near, best)
                part[hit] = k
                hn = near[hit]
                axis[hit] = np.where(nx[hit] == hn, 0, np.where(ny[hit] == hn, 1, 2))
        background = part == BACKGROUND
        if background.any():
            best = np.where(background, np.float32(BACKGROUND_DEPTH), best)
        depth = best.astype(np.float32, copy=False)
        albedo, id_palette = self._palette(state.scene)
        shade = np.asarray(FACE_SHADE, dtype=np.float32)[axis]
        floor = part == 0
        if floor.any():
            tf = depth[floor]
            px = ox + tf * dx[floor]
            pz = oz + tf * dz[floor]
            dark = ((np.floor(px / FLOOR_TILE) + np.floor(pz / FLOOR_TILE)) % 2) == 1
            shade[floor] = np.where(dark, f32(FLOOR_DARK), f32(1.0))
        shade *= f32(1.0) / (f32(1.0) + f32(0.03) * depth)
        rgb = albedo[part]
        rgb *= shade[:, None]
        if not maps:
            return rgb.astype(np.uint8), depth, id_palette[part]
        # The face a ray meets faces it (every face is one-sided): its normal is along the face's axis, against the
        # ray's direction on that axis, for the room's surfaces (seen from inside) and the boxes' faces alike.
        along = np.where(axis == 0, dx, np.where(axis == 1, dy, dz))
        face = axis.astype(np.uint8) * np.uint8(2) + (along < 0).astype(np.uint8)
        if background.any():
            face[background] = BACKGROUND_FACE
        classes = self._class_palettes.get(state.scene)
        if classes is None:
            classes = self._class_palettes[state.scene] = class_palette(state.scene)
        return (rgb.astype(np.uint8), depth, id_palette[part], normal_colors(state.yaw, state.pitch)[face],
                classes[part])


def make_renderer(name: str = "numpy", *, device_index: int | None = None) -> Renderer:
    """A renderer by name: ``numpy`` or ``gl``. Raises ValueError for another name, ImportError if ``gl``
    is not available."""
    if name == "numpy":
        return NumpyRenderer(device_index=device_index)
    if name == "gl":
        from renderd.player.gl import GLRenderer  # written separately; needs an OpenGL context

        return GLRenderer(device_index=device_index)
    raise ValueError(f"unknown renderer {name!r} (expected one of {', '.join(RENDERERS)})")
