"""The reference player's OpenGL renderer (``renderd-player --renderer gl``, extra ``renderd[gl]``).

It draws the same scene as :class:`renderd.player.renderer.NumpyRenderer` (same parts, colours, face
shading, floor checker, camera and field of view) with moderngl, so a player really renders through
the platform it was launched under, as a Unity build does:

* ``RENDERD_PLATFORM=Linux64``: an OpenGL context through GLX on ``$DISPLAY`` (the X server renderd
  chose or started). Without a usable display the renderer cannot start.
* anything else (CloudRendering, unset): an EGL context with no display; ``-force-device-index N``
  picks EGL device ``N`` (EGL's own enumeration, which on a multi-GPU machine need not be Vulkan's).

A context that cannot be created raises :class:`GLUnavailable` (a ``RuntimeError``) naming the
platform, the display and the driver's message; the player turns it into a non-zero exit with the
reason in its log, the way a Unity player fails on a bad display.

Losing the X server: a GLX context that renders into a framebuffer object through Mesa's direct
rendering never talks to the X server per frame, so it would go on rendering after the server died (a
Unity player, which processes X events every frame, dies of the X I/O error). Under GLX the renderer
therefore keeps a second, idle connection to ``$DISPLAY`` (python-xlib) and polls it before each frame
(one ``poll`` with no timeout, no round trip): the server's death closes it, and :meth:`GLRenderer.check`
(called by :meth:`GLRenderer.render`, and by the player before every answer, rendered or not) logs the
loss and raises :class:`GLDisplayLost`, which ends the player with a non-zero exit code and the reason
in its log.

Faces are one-sided as in the numpy renderer (back faces culled), nothing is clipped by a near or far
plane (``GL_DEPTH_CLAMP``; the depth test compares the eye depth the fragment shader writes), and the
framebuffer is cleared to the background (all zero: black, ids ``(0, 0, 0)``, depth 0).

One frame is three colour attachments of one framebuffer, read back with ``glReadPixels`` (bottom row
first, returned as top-row-first views)::

    location 0  RGB8   albedo x shade, truncated to integers as the numpy renderer does
    location 1  RGB8   the part's id_color, exact
    location 2  R32F   eye depth in metres (distance along the camera's forward axis)

:meth:`GLRenderer.render_maps` draws the same frame with a second program (compiled the first time it is
asked for) into a framebuffer with two more attachments, so the normals and class segmentation images
come from the same draw as the three above (which it keeps, as :meth:`GLRenderer.render` does)::

    location 3  RGB8   the face's normal in the camera's frame, encoded as the numpy renderer encodes it
                       (``normal_colors``: the six face directions' colours, exact, as uniforms)
    location 4  RGB8   the part's type's class colour (``class_palette``), exact

:meth:`GLRenderer.render` alone never draws them.
"""

from __future__ import annotations

import logging
import math
import os
import select
import socket

import numpy as np

from renderd.player.renderer import (
    FACE_SHADE, FLOOR_DARK, FLOOR_TILE, RenderState, camera_basis, class_palette, normal_colors,
)
from renderd.player.scene import Scene

log = logging.getLogger(__name__)

__all__ = ["GLRenderer", "GLUnavailable", "GLDisplayLost", "DEPTH_FALLOFF"]

#: Light falls off with depth as ``1 / (1 + DEPTH_FALLOFF * depth)`` (the numpy renderer's constant).
DEPTH_FALLOFF = 0.03
#: Planes of the projection's clip-space z, in metres. They cut nothing off (DEPTH_CLAMP is on, and the
#: depth test uses the eye depth the fragment shader writes), so a surface nearer than NEAR_PLANE (a wide
#: frame's edge, a wide field of view) or farther than FAR_PLANE is drawn, as the numpy renderer draws it.
NEAR_PLANE = 0.01
FAR_PLANE = 200.0
#: GL_DEPTH_CLAMP (core since 3.2): no near or far clipping; the depth test uses gl_FragDepth.
GL_DEPTH_CLAMP = 0x864F
#: The winding of a triangle's visible side in window coordinates (see _scene_vertices).
FRONT_FACE = "cw"
#: The OpenGL version the shaders need (3.3 core).
GL_VERSION = 330

PLATFORM_ENV_VAR = "RENDERD_PLATFORM"
GLX_PLATFORMS = frozenset({"Linux64"})

#: The shaders' first line; :func:`_shader` adds ``#define MAPS`` after it for the program of render_maps().
_GLSL_VERSION = "#version 330\n"

_VERTEX_SHADER = _GLSL_VERSION + """
uniform vec3 eye;
uniform vec3 right;
uniform vec3 up;
uniform vec3 fwd;
uniform vec2 scale;
uniform vec2 depth_map;
in vec3 in_pos;
in vec3 in_color;
in vec3 in_id;
in float in_shade;
in float in_floor;
#ifdef MAPS
in vec3 in_class;
in float in_face;
flat out vec3 v_class;
flat out float v_face;
#endif
out vec3 v_world;
out float v_depth;
flat out vec3 v_color;
flat out vec3 v_id;
flat out float v_shade;
flat out float v_floor;
void main() {
#ifdef MAPS
    v_class = in_class;
    v_face = in_face;
#endif
    vec3 d = in_pos - eye;
    float z = dot(d, fwd);
    v_world = in_pos;
    v_depth = z;
    v_color = in_color;
    v_id = in_id;
    v_shade = in_shade;
    v_floor = in_floor;
    gl_Position = vec4(dot(d, right) * scale.x, dot(d, up) * scale.y, z * depth_map.x + depth_map.y, z);
}
"""

_FRAGMENT_SHADER = _GLSL_VERSION + """
uniform float tile;
uniform float floor_dark;
uniform float falloff;
in vec3 v_world;
in float v_depth;
flat in vec3 v_color;
flat in vec3 v_id;
flat in float v_shade;
flat in float v_floor;
layout(location = 0) out vec4 out_rgb;
layout(location = 1) out vec4 out_id;
layout(location = 2) out float out_depth;
#ifdef MAPS
// The normals image's colour (0..255) of each face direction (2 * axis + 1 for +axis), as the numpy renderer's
// normal_colors() gives it for this camera: exact, whatever the GPU's float precision.
uniform vec3 face_colors[6];
flat in vec3 v_class;
flat in float v_face;
layout(location = 3) out vec4 out_normal;
layout(location = 4) out vec4 out_class;
#endif
void main() {
    float shade = v_shade;
    if (v_floor > 0.5) {
        float parity = mod(floor(v_world.x / tile) + floor(v_world.z / tile), 2.0);
        shade = parity == 1.0 ? floor_dark : 1.0;
    }
    shade *= 1.0 / (1.0 + falloff * v_depth);
    out_rgb = vec4(floor(v_color * shade) / 255.0, 1.0);
    out_id = vec4(v_id / 255.0, 1.0);
    out_depth = v_depth;
#ifdef MAPS
    out_normal = vec4(face_colors[int(v_face + 0.5)] / 255.0, 1.0);
    out_class = vec4(v_class / 255.0, 1.0);
#endif
    // The depth test compares eye depth itself, mapped monotonically onto [0, 1): no near or far plane
    // (DEPTH_CLAMP is on) cuts off a surface however close or far it is, as the numpy renderer's rays.
    gl_FragDepth = v_depth / (v_depth + 1.0);
}
"""


class GLUnavailable(RuntimeError):
    """No OpenGL context can be created under this platform (the reason is in the message)."""


class GLDisplayLost(RuntimeError):
    """The X server the GLX context renders on has gone away; the player cannot render any more."""


_HANGUP = select.POLLHUP | select.POLLERR | select.POLLNVAL
#: How long :meth:`GLRenderer.close` waits for the X server to answer before it leaves the GL context to the
#: process's exit (a stopped or hung server would keep the release waiting for ever).
X_ANSWER_TIMEOUT = 1.0


def _close_sockets(exc: BaseException) -> None:
    """Close the sockets left in the frames ``exc`` (and the exceptions it was raised from) went through, as
    local variables or as the ``socket`` of one: python-xlib leaves the socket of a failed connection attempt,
    or of a connection the server refused, to the garbage collector."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        tb = error.__traceback__
        while tb is not None:
            for value in tb.tb_frame.f_locals.values():
                for candidate in (value, getattr(value, "__dict__", {}).get("socket")):
                    if isinstance(candidate, socket.socket):
                        candidate.close()
            tb = tb.tb_next
        error = error.__cause__ or error.__context__


class _XServerWatch:
    """An idle python-xlib connection to the X server of the GLX context, polled before each frame.

    It asks the server for nothing, so :meth:`check` costs one ``poll`` with a zero timeout; the server's
    death closes the connection (hang-up, or end of file on reading).
    """

    def __init__(self, display_name: str) -> None:
        from Xlib import display as xdisplay
        from Xlib import error as xerror

        self.name = display_name
        self._closed_error = xerror.ConnectionClosedError
        try:
            self._display = xdisplay.Display(display_name)
        except Exception as exc:  # python-xlib raises DisplayError, ConnectionClosedError, OSError...
            _close_sockets(exc)
            said = getattr(exc, "msg", None)
            if isinstance(said, bytes):  # the server's own answer to the connection setup: it turned us away
                reason = said.decode("utf-8", "replace").strip() or "no reason given"
                why = f"the X server refused the connection ({reason})"
            else:
                why = str(exc)
            raise GLUnavailable(f"cannot connect to the X display {display_name}: {why}") from exc
        self._poller = select.poll()
        self._poller.register(self._display.fileno(), select.POLLIN | _HANGUP)
        self.lost: str | None = None

    def check(self) -> None:
        """Raise :class:`GLDisplayLost` if the X server has gone away (and keep saying so)."""
        self.poll()
        if self.lost is not None:
            raise GLDisplayLost(self.lost)

    def poll(self) -> str | None:
        """Why the X server is gone (also kept in :attr:`lost`), or ``None`` while it is there. Never raises."""
        if self.lost is None:
            events = self._poller.poll(0)
            if events:
                self.lost = self._why_lost(events[0][1])
        return self.lost

    def _why_lost(self, revents: int) -> str | None:
        if revents & _HANGUP:
            return f"lost the X display {self.name}: the X server closed the connection"
        try:  # readable: an event the server sent anyway (MappingNotify...), or end of file
            while self._display.pending_events():
                self._display.next_event()
        except self._closed_error as exc:
            return f"lost the X display {self.name}: {exc}"
        except OSError as exc:
            return f"lost the X display {self.name}: {exc}"
        return None

    def answers(self, timeout: float) -> bool:
        """Whether the X server answers a new connection within ``timeout`` seconds (its reply to the
        connection setup, whatever it says). False for a server that is stopped or hung: the kernel
        completes the connection from its listen backlog, but no answer comes. True when it cannot be told
        (the server is gone, which :meth:`poll` reports). This connection is not used, so python-xlib's
        state stays as it is."""
        from renderd.platforms._x11probe import setup_answered

        try:
            with socket.socket(fileno=os.dup(self._display.fileno())) as ours:
                family, address = ours.family, ours.getpeername()
        except OSError:
            return True
        return setup_answered(family, address, timeout)

    def close(self) -> None:
        if self.poll() is None:  # (it may have gone since the last frame: then its connection is not touched)
            try:
                self._display.close()
            except (OSError, self._closed_error) as exc:  # the server went away meanwhile
                log.debug("closing the X connection to %s: %s", self.name, exc)


def _unavailable(where: str, platform: str | None, why: object) -> GLUnavailable:
    return GLUnavailable(
        f"cannot create an OpenGL {GL_VERSION // 100}.{GL_VERSION // 10 % 10} context through {where} "
        f"(platform {platform or 'unset'}): {why}"
    )


def _create_context(platform: str | None, device_index: int | None):  # -> moderngl.Context
    try:
        import moderngl
    except ImportError as exc:
        raise GLUnavailable(
            "the gl renderer needs moderngl, renderd's gl extra (pip install moderngl, or pip install '.[gl]' in "
            f"renderd's checkout): {exc}"
        ) from exc
    display = os.environ.get("DISPLAY")
    if platform in GLX_PLATFORMS:
        if not display:
            raise GLUnavailable(
                f"{PLATFORM_ENV_VAR}={platform} renders through GLX on an X display, but DISPLAY is not set "
                "(renderd sets it for Linux64; check the platform selection)"
            )
        where = f"GLX on DISPLAY={display}"
        kwargs: dict[str, object] = {}
    else:
        where = "EGL (no display)" + (f", device {device_index}" if device_index is not None else "")
        kwargs = {"backend": "egl"}
        if device_index is not None:
            kwargs["device_index"] = device_index
    try:
        ctx = moderngl.create_standalone_context(require=GL_VERSION, **kwargs)
    except Exception as exc:  # moderngl raises bare Exception for every context failure
        raise _unavailable(where, platform, exc) from exc
    return ctx, where


def _shader(source: str, maps: bool) -> str:
    """``source``, with ``#define MAPS`` (the normals and class outputs) for the program of render_maps()."""
    if not maps:
        return source
    assert source.startswith(_GLSL_VERSION)
    return _GLSL_VERSION + "#define MAPS 1\n" + source[len(_GLSL_VERSION):]


#: Each vertex's attributes, in :func:`_scene_vertices`' order: the frame's, then the normals and class images'.
_FRAME_ATTRIBUTES = ("in_pos", "in_color", "in_id", "in_shade", "in_floor")
_MAPS_ATTRIBUTES = ("in_class", "in_face")
_FRAME_FORMAT = "3f 3f 3f 1f 1f"
_MAPS_FORMAT = "3f 1f"
_MAPS_BYTES = 4 * 4  # what the frame's program skips of each vertex (its vertex array reads the same buffer)


def _scene_vertices(scene: Scene) -> np.ndarray:
    """Two triangles per visible face, interleaved: position(3), colour(3), id colour(3), shade, floor, class
    colour(3) (:func:`~renderd.player.renderer.class_palette`), face code (``2 * axis + 1`` if the face's normal
    points along +axis, else ``2 * axis``: :func:`~renderd.player.renderer.normal_colors`' index).

    Every face is one-sided, as in the numpy renderer: a room surface is seen only from inside the room,
    a box face only from outside the box. Each triangle is wound so that its front (FRONT_FACE) is the
    side it is seen from, and back faces are culled.
    """
    rows: list[list[float]] = []
    room_middle = (0.0, scene.size[1] / 2, 0.0)
    classes = class_palette(scene)
    for index, part in enumerate(scene.parts()):
        lo, hi = part.lo, part.hi
        color = [float(c) for c in part.color]
        id_color = [float(c) for c in part.id_color]
        class_color = [float(c) for c in classes[index]]
        is_floor = 1.0 if index == 0 else 0.0
        flat_axes = [a for a in range(3) if part.size[a] == 0.0]
        if flat_axes:  # a room surface: it faces the middle of the room
            faces = [(a, lo[a], 1.0 if lo[a] < room_middle[a] else -1.0) for a in flat_axes]
        else:  # a box: each face looks away from the box
            faces = [(a, c, sign) for a in range(3) for c, sign in ((lo[a], -1.0), (hi[a], 1.0))]
        for axis, value, sign in faces:
            b, d = [x for x in range(3) if x != axis]
            corners = []
            for cb, cd in ((lo[b], lo[d]), (hi[b], lo[d]), (hi[b], hi[d]), (lo[b], hi[d])):
                p = [0.0, 0.0, 0.0]
                p[axis], p[b], p[d] = value, cb, cd
                corners.append(p)
            normal = np.cross(np.subtract(corners[1], corners[0]), np.subtract(corners[2], corners[0]))
            order = (0, 1, 2, 0, 2, 3) if normal[axis] * sign > 0 else (0, 2, 1, 0, 3, 2)
            face = [float(2 * axis + (1 if sign > 0 else 0))]
            for k in order:
                rows.append(corners[k] + color + id_color + [FACE_SHADE[axis], is_floor] + class_color + face)
    return np.asarray(rows, dtype="f4")


class GLRenderer:
    """Renders :class:`RenderState` frames with OpenGL; the same interface as ``NumpyRenderer``.

    Raises :class:`GLUnavailable` from the constructor when no context can be had under the platform
    (``platform`` defaults to ``$RENDERD_PLATFORM``).
    """

    name = "gl"

    def __init__(self, *, device_index: int | None = None, platform: str | None = None) -> None:
        self.device_index = device_index
        self.platform = platform if platform is not None else (os.environ.get(PLATFORM_ENV_VAR) or None)
        self._x_watch: _XServerWatch | None = None
        display = os.environ.get("DISPLAY")
        if self.platform in GLX_PLATFORMS and display:
            # The X server is reached from Python first: GLX's connection (XOpenDisplay, in C) waits for the
            # server's answer and retries a read a signal interrupts, so SIGTERM could not end a player whose
            # server accepts connections but never answers; python-xlib's wait ends with the signal.
            try:
                self._x_watch = _XServerWatch(display)
            except GLUnavailable as exc:
                raise _unavailable(f"GLX on DISPLAY={display}", self.platform, exc) from exc
        try:
            self.ctx, self.where = _create_context(self.platform, device_index)
        except BaseException:
            if self._x_watch is not None:
                self._x_watch.close()
            raise
        info = self.ctx.info
        log.info(
            "OpenGL through %s: %s, %s, %s",
            self.where, info.get("GL_RENDERER"), info.get("GL_VENDOR"), info.get("GL_VERSION"),
        )
        self.program = self._program(maps=False)
        #: The program of render_maps() (the frame's outputs and the normals and class ones), made when first used.
        self._maps_program = None
        #: Per scene: its vertex buffer, and the vertex arrays of the frame's program and of the maps program.
        self._scenes: dict[Scene, list] = {}
        self._fbo = None
        self._maps_fbo = None
        self._fbo_size: tuple[int, int] | None = None
        self._attachments: list[object] = []
        self._maps_attachments: list[object] = []
        self._last: tuple[RenderState, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None
        #: The last render_maps() answer (only it fills this), kept as the last frame is.
        self._last_maps: tuple[RenderState, tuple[np.ndarray, np.ndarray]] | None = None

    def _program(self, maps: bool):
        program = self.ctx.program(vertex_shader=_shader(_VERTEX_SHADER, maps),
                                   fragment_shader=_shader(_FRAGMENT_SHADER, maps))
        program["tile"].value = FLOOR_TILE
        program["floor_dark"].value = FLOOR_DARK
        program["falloff"].value = DEPTH_FALLOFF
        return program

    @property
    def gl_renderer(self) -> str:
        """The driver's GL_RENDERER string (``llvmpipe ...`` for Mesa's software rasteriser)."""
        return str(self.ctx.info.get("GL_RENDERER"))

    def _vao(self, scene: Scene, maps: bool = False):
        entry = self._scenes.get(scene)
        if entry is None:
            vbo = self.ctx.buffer(_scene_vertices(scene).tobytes())
            frame = self.ctx.vertex_array(
                self.program, [(vbo, f"{_FRAME_FORMAT} {_MAPS_BYTES}x", *_FRAME_ATTRIBUTES)],
            )
            entry = self._scenes[scene] = [vbo, frame, None]
        if not maps:
            return entry[1]
        if entry[2] is None:
            if self._maps_program is None:
                self._maps_program = self._program(maps=True)
            entry[2] = self.ctx.vertex_array(
                self._maps_program,
                [(entry[0], f"{_FRAME_FORMAT} {_MAPS_FORMAT}", *_FRAME_ATTRIBUTES, *_MAPS_ATTRIBUTES)],
            )
        return entry[2]

    def _framebuffer(self, width: int, height: int, maps: bool = False):
        """The frame's framebuffer (three attachments) or, with ``maps``, one that also has the normals and class
        attachments (made when first asked for at this size; it shares the frame's three)."""
        if self._fbo_size != (width, height):
            self._release_fbo()
            size = (width, height)
            rgb = self.ctx.renderbuffer(size, components=4)
            ids = self.ctx.renderbuffer(size, components=4)
            depth = self.ctx.renderbuffer(size, components=1, dtype="f4")
            zbuffer = self.ctx.depth_renderbuffer(size)
            self._attachments = [rgb, ids, depth, zbuffer]
            self._fbo = self.ctx.framebuffer(color_attachments=[rgb, ids, depth], depth_attachment=zbuffer)
            self._fbo_size = size
        if not maps:
            return self._fbo
        if self._maps_fbo is None:
            rgb, ids, depth, zbuffer = self._attachments
            normals = self.ctx.renderbuffer(self._fbo_size, components=4)
            classes = self.ctx.renderbuffer(self._fbo_size, components=4)
            self._maps_attachments = [normals, classes]
            self._maps_fbo = self.ctx.framebuffer(color_attachments=[rgb, ids, depth, normals, classes],
                                                  depth_attachment=zbuffer)
        return self._maps_fbo

    def _release_fbo(self) -> None:
        for fbo in (self._maps_fbo, self._fbo):
            if fbo is not None:
                fbo.release()
        for attachment in self._maps_attachments + self._attachments:
            attachment.release()
        self._fbo = self._maps_fbo = None
        self._attachments = []
        self._maps_attachments = []
        self._fbo_size = None

    def check(self) -> None:
        """Raise :class:`GLDisplayLost` (logged as an error) once the X server of a GLX context has gone
        away. :meth:`render` calls it first; the player also calls it before every answer, since it sends
        frames it already has (an unchanged or revisited view, ``--static-frame``) without rendering."""
        if self._x_watch is not None:
            try:
                self._x_watch.check()
            except GLDisplayLost as exc:
                log.error("%s; the player cannot render any more and exits", exc)
                raise

    def render(self, state: RenderState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Render ``state``: (rgb, depth, ids), top row first, read-only. Raises ValueError on a bad size,
        :class:`GLDisplayLost` once the X server of a GLX context has gone away (logged as an error)."""
        self._check_state(state)
        if self._last is not None and self._last[0] == state:
            return self._last[1]
        fbo = self._draw(state, maps=False)
        self._last = (state, self._read_frame(fbo, state))
        return self._last[1]

    def render_maps(self, state: RenderState) -> tuple[np.ndarray, np.ndarray]:
        """The (normals, classes) images of ``state`` (see :mod:`renderd.player.renderer`), top row first,
        read-only, as the numpy renderer's: drawn with the frame, which is kept for :meth:`render` too, only when
        asked for (:meth:`render` alone never draws them). The last ones are kept, as the last frame is. Raises as
        :meth:`render`."""
        self._check_state(state)
        if self._last_maps is not None and self._last_maps[0] == state:
            return self._last_maps[1]
        fbo = self._draw(state, maps=True)
        h, w = state.height, state.width
        normals = np.frombuffer(fbo.read(components=3, attachment=3, alignment=1), dtype=np.uint8).reshape(h, w, 3)
        classes = np.frombuffer(fbo.read(components=3, attachment=4, alignment=1), dtype=np.uint8).reshape(h, w, 3)
        if self._last is None or self._last[0] != state:
            self._last = (state, self._read_frame(fbo, state))
        self._last_maps = (state, (normals[::-1], classes[::-1]))
        return self._last_maps[1]

    def _check_state(self, state: RenderState) -> None:
        if state.width <= 0 or state.height <= 0:
            raise ValueError(f"cannot render a {state.width} x {state.height} image")
        self.check()

    def _draw(self, state: RenderState, maps: bool):
        """Draw ``state`` into the frame's framebuffer, or with ``maps`` the one with the normals and class
        attachments too; return that framebuffer."""
        w, h = state.width, state.height
        fbo = self._framebuffer(w, h, maps)
        vao = self._vao(state.scene, maps)  # (the maps program is made here, the first time)
        fbo.use()
        self.ctx.viewport = (0, 0, w, h)
        self.ctx.enable_only(self.ctx.DEPTH_TEST | self.ctx.CULL_FACE)
        self.ctx.enable_direct(GL_DEPTH_CLAMP)
        self.ctx.front_face = FRONT_FACE
        self.ctx.cull_face = "back"
        fbo.clear(0.0, 0.0, 0.0, 0.0, depth=1.0)
        right, up, forward = camera_basis(state.yaw, state.pitch)
        tan_half = math.tan(math.radians(state.fov) / 2)
        p = self._maps_program if maps else self.program
        p["eye"].value = tuple(float(c) for c in state.position)
        p["right"].value = tuple(float(c) for c in right)
        p["up"].value = tuple(float(c) for c in up)
        p["fwd"].value = tuple(float(c) for c in forward)
        p["scale"].value = (1.0 / (tan_half * w / h), 1.0 / tan_half)
        n, f = NEAR_PLANE, FAR_PLANE
        p["depth_map"].value = ((f + n) / (f - n), -2.0 * f * n / (f - n))
        if maps:  # the six face directions' colours (the background's, the seventh, is the cleared 0)
            colors = normal_colors(state.yaw, state.pitch)[:6]
            p["face_colors"].value = [tuple(float(c) for c in color) for color in colors]
        vao.render()
        return fbo

    @staticmethod
    def _read_frame(fbo, state: RenderState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        h, w = state.height, state.width
        rgb = np.frombuffer(fbo.read(components=3, attachment=0, alignment=1), dtype=np.uint8).reshape(h, w, 3)
        ids = np.frombuffer(fbo.read(components=3, attachment=1, alignment=1), dtype=np.uint8).reshape(h, w, 3)
        depth_bytes = fbo.read(components=1, attachment=2, alignment=1, dtype="f4")
        depth = np.frombuffer(depth_bytes, dtype=np.float32).reshape(h, w)
        return rgb[::-1], depth[::-1], ids[::-1]  # GL rows are bottom-up; frombuffer views are read-only

    def close(self) -> None:
        """Release the GL objects and the context. Idempotent. After the X server was lost nothing is
        released (Xlib would end the process in its I/O error handler, exit 1): the process is exiting
        anyway. The loss is looked for here too, since the server may have died after the last frame.
        Nor is anything released when the server does not answer within :data:`X_ANSWER_TIMEOUT` (stopped
        or hung): the release would wait for it for ever."""
        if self.ctx is None:
            return
        watch, self._x_watch = self._x_watch, None
        if watch is not None:
            frozen = watch.poll() is None and not watch.answers(X_ANSWER_TIMEOUT)
            watch.close()
            if watch.lost is not None or frozen:
                why = watch.lost or (
                    f"the X display {watch.name} does not answer within {X_ANSWER_TIMEOUT:g} s (its server is stopped "
                    "or hung)"
                )
                log.info("%s: the GL context is left to the process's exit", why)
                self.ctx = None
                self._last = self._last_maps = None
                return
        self._release_fbo()
        for entry in self._scenes.values():
            for gl_object in reversed(entry):  # the vertex arrays, then their buffer
                if gl_object is not None:
                    gl_object.release()
        self._scenes.clear()
        for program in (self.program, self._maps_program):
            if program is not None:
                program.release()
        self._maps_program = None
        self.ctx.release()
        self.ctx = None
        self._last = self._last_maps = None
