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
"""

from __future__ import annotations

import logging
import math
import os
import select
import socket

import numpy as np

from renderd.player.renderer import FACE_SHADE, FLOOR_DARK, FLOOR_TILE, RenderState, camera_basis
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

_VERTEX_SHADER = """
#version 330
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
out vec3 v_world;
out float v_depth;
flat out vec3 v_color;
flat out vec3 v_id;
flat out float v_shade;
flat out float v_floor;
void main() {
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

_FRAGMENT_SHADER = """
#version 330
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


def _scene_vertices(scene: Scene) -> np.ndarray:
    """Two triangles per visible face, interleaved: position(3), colour(3), id colour(3), shade, floor.

    Every face is one-sided, as in the numpy renderer: a room surface is seen only from inside the room,
    a box face only from outside the box. Each triangle is wound so that its front (FRONT_FACE) is the
    side it is seen from, and back faces are culled.
    """
    rows: list[list[float]] = []
    room_middle = (0.0, scene.size[1] / 2, 0.0)
    for index, part in enumerate(scene.parts()):
        lo, hi = part.lo, part.hi
        color = [float(c) for c in part.color]
        id_color = [float(c) for c in part.id_color]
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
            for k in order:
                rows.append(corners[k] + color + id_color + [FACE_SHADE[axis], is_floor])
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
        self.program = self.ctx.program(vertex_shader=_VERTEX_SHADER, fragment_shader=_FRAGMENT_SHADER)
        self.program["tile"].value = FLOOR_TILE
        self.program["floor_dark"].value = FLOOR_DARK
        self.program["falloff"].value = DEPTH_FALLOFF
        self._scenes: dict[Scene, object] = {}
        self._fbo = None
        self._fbo_size: tuple[int, int] | None = None
        self._attachments: list[object] = []
        self._last: tuple[RenderState, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    @property
    def gl_renderer(self) -> str:
        """The driver's GL_RENDERER string (``llvmpipe ...`` for Mesa's software rasteriser)."""
        return str(self.ctx.info.get("GL_RENDERER"))

    def _vao(self, scene: Scene):
        vao = self._scenes.get(scene)
        if vao is None:
            vbo = self.ctx.buffer(_scene_vertices(scene).tobytes())
            vao = self.ctx.vertex_array(
                self.program,
                [(vbo, "3f 3f 3f 1f 1f", "in_pos", "in_color", "in_id", "in_shade", "in_floor")],
            )
            self._scenes[scene] = vao
        return vao

    def _framebuffer(self, width: int, height: int):
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
        return self._fbo

    def _release_fbo(self) -> None:
        if self._fbo is not None:
            self._fbo.release()
        for attachment in self._attachments:
            attachment.release()
        self._fbo = None
        self._attachments = []
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
        if state.width <= 0 or state.height <= 0:
            raise ValueError(f"cannot render a {state.width} x {state.height} image")
        self.check()
        if self._last is not None and self._last[0] == state:
            return self._last[1]
        w, h = state.width, state.height
        fbo = self._framebuffer(w, h)
        fbo.use()
        self.ctx.viewport = (0, 0, w, h)
        self.ctx.enable_only(self.ctx.DEPTH_TEST | self.ctx.CULL_FACE)
        self.ctx.enable_direct(GL_DEPTH_CLAMP)
        self.ctx.front_face = FRONT_FACE
        self.ctx.cull_face = "back"
        fbo.clear(0.0, 0.0, 0.0, 0.0, depth=1.0)
        right, up, forward = camera_basis(state.yaw, state.pitch)
        tan_half = math.tan(math.radians(state.fov) / 2)
        p = self.program
        p["eye"].value = tuple(float(c) for c in state.position)
        p["right"].value = tuple(float(c) for c in right)
        p["up"].value = tuple(float(c) for c in up)
        p["fwd"].value = tuple(float(c) for c in forward)
        p["scale"].value = (1.0 / (tan_half * w / h), 1.0 / tan_half)
        n, f = NEAR_PLANE, FAR_PLANE
        p["depth_map"].value = ((f + n) / (f - n), -2.0 * f * n / (f - n))
        self._vao(state.scene).render()
        rgb = np.frombuffer(fbo.read(components=3, attachment=0, alignment=1), dtype=np.uint8).reshape(h, w, 3)
        ids = np.frombuffer(fbo.read(components=3, attachment=1, alignment=1), dtype=np.uint8).reshape(h, w, 3)
        depth_bytes = fbo.read(components=1, attachment=2, alignment=1, dtype="f4")
        depth = np.frombuffer(depth_bytes, dtype=np.float32).reshape(h, w)
        frame = (rgb[::-1], depth[::-1], ids[::-1])  # GL rows are bottom-up; frombuffer views are read-only
        self._last = (state, frame)
        return frame

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
                self._last = None
                return
        self._release_fbo()
        for vao in self._scenes.values():
            vao.release()
        self._scenes.clear()
        self.program.release()
        self.ctx.release()
        self.ctx = None
        self._last = None
