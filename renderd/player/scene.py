"""The reference player's world: small deterministic rooms made of axis-aligned boxes.

Coordinates follow Unity: metres, ``y`` up, ``x`` right, ``z`` forward; a yaw of 0 degrees looks along
``+z`` and 90 degrees along ``+x``. A room spans ``x`` in ``[-sx/2, sx/2]``, ``z`` in ``[-sz/2, sz/2]``
and ``y`` in ``[0, sy]``; it has six surfaces (floor, ceiling, four walls) and a few coloured boxes
standing on the floor.

Every surface and box is a :class:`Part` with an ``object_id`` in AI2-THOR's ``Type|+x.xx|+y.yy|+z.zz``
style, an albedo ``color`` and a unique instance-segmentation ``id_color``. :meth:`Scene.parts` lists
them in a fixed order (surfaces first, in :data:`SURFACES` order, then boxes); renderers index that list
(see :mod:`renderd.player.renderer`).

Scenes are immutable and hashable, so a renderer may cache frames keyed by them.
"""

from __future__ import annotations

import hashlib
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Iterator, Sequence

__all__ = [
    "AGENT_RADIUS",
    "PATH_STEP",
    "CAMERA_HEIGHT",
    "AGENT_Y",
    "SURFACES",
    "Part",
    "Box",
    "Pose",
    "Scene",
    "TooManySteps",
    "OutOfBounds",
    "SCENES",
    "DEFAULT_SCENE",
    "scene_by_name",
    "scene_names",
]

#: Radius of the agent's footprint (a vertical cylinder), for collisions.
AGENT_RADIUS = 0.2
#: A path is checked for collisions at least this often (metres), so a long move cannot jump through a box.
PATH_STEP = 0.05
#: Height of the agent's reported position above the floor (as AI2-THOR's default agent reports it).
AGENT_Y = 0.9
#: Height of the camera above the agent's reported position.
CAMERA_HEIGHT = 0.675

#: The six room surfaces, in the order :meth:`Scene.parts` lists them.
SURFACES = ("Floor", "Ceiling", "WallWest", "WallEast", "WallSouth", "WallNorth")


def format_object_id(object_type: str, center: tuple[float, float, float]) -> str:
    """An AI2-THOR style object id: ``Type|+00.00|+00.90|+01.00``."""
    return "|".join([object_type] + [f"{v:+06.2f}" for v in center])


def _id_color(object_id: str, taken: set[tuple[int, int, int]]) -> tuple[int, int, int]:
    # Deterministic per object id; a collision (practically never) is resolved by rehashing.
    seed = object_id
    while True:
        digest = hashlib.sha1(seed.encode("utf-8")).digest()
        color = (digest[0], digest[1], digest[2])
        if color not in taken and color != (0, 0, 0):
            taken.add(color)
            return color
        seed += "'"


@dataclass(frozen=True)
class Part:
    """One thing the camera can see: a room surface or a box."""

    object_id: str
    object_type: str
    color: tuple[int, int, int]
    id_color: tuple[int, int, int]
    center: tuple[float, float, float]
    size: tuple[float, float, float]

    @property
    def lo(self) -> tuple[float, float, float]:
        return tuple(c - s / 2 for c, s in zip(self.center, self.size))  # type: ignore[return-value]

    @property
    def hi(self) -> tuple[float, float, float]:
        return tuple(c + s / 2 for c, s in zip(self.center, self.size))  # type: ignore[return-value]


@dataclass(frozen=True)
class Box:
    """A box standing in a room, as written in a scene definition."""

    object_type: str
    center: tuple[float, float, float]
    size: tuple[float, float, float]
    color: tuple[int, int, int]


@dataclass(frozen=True)
class Pose:
    """Where the agent stands: position on the floor plane, yaw and camera horizon (degrees)."""

    x: float
    z: float
    yaw: float = 0.0
    horizon: float = 0.0


@dataclass(frozen=True)
class Scene:
    """A room: its extents ``(sx, sy, sz)``, its boxes, surface colours and the agent's start pose."""

    name: str
    size: tuple[float, float, float]
    boxes: tuple[Box, ...]
    start: Pose
    surface_colors: tuple[tuple[int, int, int], ...]
    _parts: tuple[Part, ...] = field(default=(), compare=False, repr=False)
    _names: dict[str, str] | None = field(default=None, compare=False, repr=False)
    _class_colors: dict[str, tuple[int, int, int]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        sx, sy, sz = self.size
        taken: set[tuple[int, int, int]] = set()
        parts: list[Part] = []
        # (center, size) of each surface as a thin slab on the room's boundary.
        slabs = {
            "Floor": ((0.0, 0.0, 0.0), (sx, 0.0, sz)),
            "Ceiling": ((0.0, sy, 0.0), (sx, 0.0, sz)),
            "WallWest": ((-sx / 2, sy / 2, 0.0), (0.0, sy, sz)),
            "WallEast": ((sx / 2, sy / 2, 0.0), (0.0, sy, sz)),
            "WallSouth": ((0.0, sy / 2, -sz / 2), (sx, sy, 0.0)),
            "WallNorth": ((0.0, sy / 2, sz / 2), (sx, sy, 0.0)),
        }
        for name, color in zip(SURFACES, self.surface_colors):
            center, size = slabs[name]
            object_type = "Wall" if name.startswith("Wall") else name
            oid = format_object_id(object_type, center)
            parts.append(Part(oid, object_type, color, _id_color(self.name + oid, taken), center, size))
        for box in self.boxes:
            oid = format_object_id(box.object_type, box.center)
            parts.append(Part(oid, box.object_type, box.color, _id_color(self.name + oid, taken), box.center, box.size))
        object.__setattr__(self, "_parts", tuple(parts))
        # One class (semantic) segmentation colour per object type, as a build's ImageSynthesis colours each object by
        # its type's tag: from the type alone, unlike every instance colour of the room and (0, 0, 0).
        classes: dict[str, tuple[int, int, int]] = {}
        for part in parts:
            if part.object_type not in classes:
                classes[part.object_type] = _id_color(part.object_type, taken)
        object.__setattr__(self, "_class_colors", classes)

    def parts(self) -> tuple[Part, ...]:
        """Surfaces (in :data:`SURFACES` order) then boxes, each with a unique ``id_color``."""
        return self._parts

    def class_colors(self) -> dict[str, tuple[int, int, int]]:
        """Each object type's class segmentation colour (``Floor``, ``Ceiling``, ``Wall``, then the boxes' types, in
        the order :meth:`parts` first shows them): unique, and unlike every part's ``id_color`` and ``(0, 0, 0)``.
        Treat as read-only."""
        return self._class_colors

    def box_parts(self) -> tuple[Part, ...]:
        return self._parts[len(SURFACES) :]

    def collision(self, x: float, z: float, radius: float = AGENT_RADIUS,
                  others: Sequence[tuple[float, float, str]] = ()) -> str | None:
        """The object id the agent would hit standing at ``(x, z)``, or ``None`` if the spot is free.

        ``others`` are other agents standing in the room, ``(x, z, name)``, each a footprint of the same
        ``radius``, checked after the room's parts (walls, then boxes): the one the agent would overlap is
        named when no part is hit."""
        sx, _, sz = self.size
        parts = self._parts
        if x - radius < -sx / 2:
            return parts[2].object_id
        if x + radius > sx / 2:
            return parts[3].object_id
        if z - radius < -sz / 2:
            return parts[4].object_id
        if z + radius > sz / 2:
            return parts[5].object_id
        for part in self.box_parts():
            (lx, _, lz), (hx, _, hz) = part.lo, part.hi
            # Distance from the point to the box's footprint rectangle.
            dx = max(lx - x, 0.0, x - hx)
            dz = max(lz - z, 0.0, z - hz)
            if dx * dx + dz * dz < radius * radius:
                return part.object_id
        for ox, oz, name in others:
            if (x - ox) ** 2 + (z - oz) ** 2 < 4 * radius * radius:
                return name
        return None

    def path_collision(self, x0: float, z0: float, x1: float, z1: float, length: float | None = None,
                       others: Sequence[tuple[float, float, str]] = ()) -> str | None:
        """What the agent would hit going straight from ``(x0, z0)`` to ``(x1, z1)`` (see :meth:`collision`), or
        ``None``: the path is checked in steps of at most :data:`PATH_STEP`, ``length`` (default: the distance)
        deciding how many."""
        if length is None:
            length = math.hypot(x1 - x0, z1 - z0)
        steps = max(1, math.ceil(length / PATH_STEP))
        for i in range(1, steps + 1):
            f = i / steps
            hit = self.collision(x0 + (x1 - x0) * f, z0 + (z1 - z0) * f, others=others)
            if hit is not None:
                return hit
        return None

    def flood(self, x: float, z: float, spacing: float) -> Iterator[tuple[float, float]]:
        """The points reachable from ``(x, z)`` in straight steps of ``spacing`` along ``x`` and ``z`` whose
        paths are free, breadth first (``(x, z)`` itself first; from each point the steps towards ``+x``,
        ``+z``, ``-x``, ``-z``, in that order), each once, rounded to 4 decimals: the order in which a build's
        ``getReachablePositions`` finds them, from which its AgentManager places the agents it adds."""
        seen = {(0, 0)}
        queue = deque([(0, 0)])
        while queue:
            i, k = queue.popleft()
            px, pz = round(x + i * spacing, 4), round(z + k * spacing, 4)
            yield px, pz
            for di, dk in ((1, 0), (0, 1), (-1, 0), (0, -1)):
                step = (i + di, k + dk)
                if step in seen:
                    continue
                seen.add(step)
                nx, nz = round(x + step[0] * spacing, 4), round(z + step[1] * spacing, 4)
                if self.path_collision(px, pz, nx, nz) is None:
                    queue.append(step)

    def surface_ids(self) -> frozenset[str]:
        """The object ids of the room's surfaces (floor, ceiling, walls): structure, not objects of the metadata's
        ``objects`` (the floor aside)."""
        return frozenset(p.object_id for p in self._parts[: len(SURFACES)])

    def object_name(self, object_id: str) -> str:
        """The name of the part with ``object_id``, as a build names the GameObject that blocks a move: a box's is its
        metadata ``name`` (``Fridge_1``: its type and its index in the metadata's ``objects``, the floor being 0), a
        wall's its surface's (``WallWest``...); an id of no part is returned as it is."""
        names = self._names
        if names is None:
            names = {}
            parts = self._parts
            for surface, part in zip(SURFACES, parts):
                names[part.object_id] = surface
            names[parts[0].object_id] = f"{parts[0].object_type}_0"
            for index, part in enumerate(self.box_parts(), start=1):
                names[part.object_id] = f"{part.object_type}_{index}"
            object.__setattr__(self, "_names", names)
        return names.get(object_id, object_id)

    def _free(self, x, z):
        """Whether the agent may stand at each ``(x, z)`` (numpy arrays that broadcast together): exactly where
        :meth:`collision` (with no other agent) is ``None``, with the same arithmetic, on whole arrays at once."""
        import numpy as np  # (this module is imported where numpy is not wanted yet)

        sx, _, sz = self.size
        radius = AGENT_RADIUS
        free = (~((x - radius < -sx / 2) | (x + radius > sx / 2))) & (~((z - radius < -sz / 2) | (z + radius > sz / 2)))
        free = np.broadcast_to(free, np.broadcast_shapes(np.shape(x), np.shape(z))).copy()
        for part in self.box_parts():
            (lx, _, lz), (hx, _, hz) = part.lo, part.hi
            dx = np.maximum(np.maximum(lx - x, 0.0), x - hx)
            dz = np.maximum(np.maximum(lz - z, 0.0), z - hz)
            free &= ~(dx * dx + dz * dz < radius * radius)
        return free

    def reachable(self, grid_size: float, origin: tuple[float, float] | None = None,
                  max_steps: int | None = None, yaw: float | None = None) -> tuple[list[tuple[float, float]], int]:
        """The grid points (spacing ``grid_size``, aligned with ``origin``, ``(x, z)``: where the agent stands, default
        the start pose) the agent can walk to from ``origin`` in straight steps of ``grid_size`` along ``x`` and ``z``,
        ``origin`` itself included, ``x``-major; and the steps the search took. As a build's ``getReachablePositions``:
        breadth first from ``origin``, each point's steps towards ``+x``, ``+z``, ``-x``, ``-z`` in that order, a step
        taken when its path is free (as :meth:`path_collision` checks it, other agents not counted: a build's sweep
        leaves them out), a point looked at from its first neighbour only (a build marks it seen before it checks the
        path), and a step counted for every point taken off the queue (``origin`` twice when a neighbour steps back to
        it). With ``max_steps``, a search that takes more steps raises :class:`TooManySteps` as soon as it does; from
        outside the room (a forced teleport) it raises :class:`OutOfBounds`, as a build's search throws for a step that
        leaves the scene's bounds.

        With ``yaw`` (a build's ``directionsRelativeAgent``: the agent's yaw, degrees) the search steps along the
        agent's right and forward instead of ``+x`` and ``+z``: each point's steps towards its right, forward, left,
        back, in that order, on the grid those directions make through ``origin`` (turned by the yaw; the same points as
        the default's for a yaw that is a multiple of 90, found in another order). The points are still listed
        ``x``-major.

        The points' free spots are found on whole rows and columns at once (a 1 cm grid has a few hundred thousand
        points); the search then walks them."""
        import numpy as np  # (this module is imported where numpy is not wanted yet)

        ox, oz = (self.start.x, self.start.z) if origin is None else origin
        ox, oz = round(ox, 4) + 0.0, round(oz, 4) + 0.0
        sx, _, sz = self.size
        # The search's right and forward, (x, z) each: the world's +x and +z, or the agent's (Unity's transform.right
        # and transform.forward at that yaw).
        turned = yaw is not None and yaw % 360.0 != 0.0
        if turned:
            a = math.radians(yaw)
            right, forward = (math.cos(a), -math.sin(a)), (math.sin(a), math.cos(a))
        else:
            right, forward = (1.0, 0.0), (0.0, 1.0)
        if not (-sx / 2 <= ox <= sx / 2 and -sz / 2 <= oz <= sz / 2):
            # Outside the room (a forced teleport): a build's search finds a step that leads out of the scene's bounds
            # and throws; the first step (right, forward, left, back) that does not lead towards the room, here.
            for di, dk in ((1, 0), (0, 1), (-1, 0), (0, -1)):
                nx_ = ox + (di * right[0] + dk * forward[0]) * grid_size
                nz_ = oz + (di * right[1] + dk * forward[1]) * grid_size
                if abs(nx_) >= abs(ox) - 1e-9 and abs(nz_) >= abs(oz) - 1e-9:
                    raise OutOfBounds((round(nx_, 4) + 0.0, round(nz_, 4) + 0.0))  # (one of the four always does)
        if turned:
            return self._reachable_turned(grid_size, ox, oz, right, forward, max_steps)
        i_lo = min(0, math.ceil((-sx / 2 - ox) / grid_size))
        i_hi = max(0, math.floor((sx / 2 - ox) / grid_size))
        k_lo = min(0, math.ceil((-sz / 2 - oz) / grid_size))
        k_hi = max(0, math.floor((sz / 2 - oz) / grid_size))
        xs = np.array([round(ox + i * grid_size, 4) + 0.0 for i in range(i_lo, i_hi + 1)])  # (+ 0.0: no -0.0)
        zs = np.array([round(oz + k * grid_size, 4) + 0.0 for k in range(k_lo, k_hi + 1)])
        nx, nz = len(xs), len(zs)
        free = self._free(xs[:, None], zs[None, :])
        # A step's path is checked as path_collision checks it: at each PATH_STEP or less along it, its end included.
        steps = max(1, math.ceil(grid_size / PATH_STEP))
        x_ok = np.ones((max(nx - 1, 0), nz), dtype=bool)  # the inner points of the step from column i to i + 1 are free
        z_ok = np.ones((nx, max(nz - 1, 0)), dtype=bool)
        for j in range(1, steps):
            f = j / steps
            x_ok &= self._free((xs[:-1] + (xs[1:] - xs[:-1]) * f)[:, None], zs[None, :])
            z_ok &= self._free(xs[:, None], (zs[:-1] + (zs[1:] - zs[:-1]) * f)[None, :])
        # Per point (flat index i * nz + k): may it step to its +x, +z, -x, -z neighbour (path and neighbour free).
        plus_x = np.zeros((nx, nz), dtype=bool)
        plus_x[:-1] = x_ok & free[1:]
        minus_x = np.zeros((nx, nz), dtype=bool)
        minus_x[1:] = x_ok & free[:-1]
        plus_z = np.zeros((nx, nz), dtype=bool)
        plus_z[:, :-1] = z_ok & free[:, 1:]
        minus_z = np.zeros((nx, nz), dtype=bool)
        minus_z[:, 1:] = z_ok & free[:, :-1]
        px, pz, mx, mz = (a.ravel().tolist() for a in (plus_x, plus_z, minus_x, minus_z))
        start = -i_lo * nz - k_lo
        seen = bytearray(nx * nz)
        good = bytearray(nx * nz)
        queue = [start]
        taken = 0
        limit = max_steps
        for index in queue:
            taken += 1
            if not good[index]:
                good[index] = 1
                k = index % nz
                # +x, +z, -x, -z, as a build's rightForwardOffsets; a neighbour off the grid is outside the room.
                if index + nz < nx * nz and not seen[index + nz]:
                    seen[index + nz] = 1
                    if px[index]:
                        queue.append(index + nz)
                if k + 1 < nz and not seen[index + 1]:
                    seen[index + 1] = 1
                    if pz[index]:
                        queue.append(index + 1)
                if index >= nz and not seen[index - nz]:
                    seen[index - nz] = 1
                    if mx[index]:
                        queue.append(index - nz)
                if k > 0 and not seen[index - 1]:
                    seen[index - 1] = 1
                    if mz[index]:
                        queue.append(index - 1)
            if limit is not None and taken > limit:
                raise TooManySteps(taken)
        flat = np.flatnonzero(np.frombuffer(bytes(good), dtype=np.uint8))  # ascending: x-major, z ascending
        rows, cols = np.divmod(flat, nz)
        return list(zip(xs[rows].tolist(), zs[cols].tolist())), taken

    def _reachable_turned(self, grid_size: float, ox: float, oz: float, right: tuple[float, float],
                          forward: tuple[float, float], max_steps: int | None) -> tuple[list[tuple[float, float]], int]:
        """:meth:`reachable` on the grid through ``(ox, oz)`` along ``right`` and ``forward`` (unit vectors, (x, z)),
        stepping right, forward, left, back: point ``(i, k)`` is ``origin + grid_size * (i * right + k * forward)``."""
        import numpy as np  # (this module is imported where numpy is not wanted yet)

        sx, _, sz = self.size
        corners = [(cx - ox, cz - oz) for cx in (-sx / 2, sx / 2) for cz in (-sz / 2, sz / 2)]
        along_r = [cx * right[0] + cz * right[1] for cx, cz in corners]
        along_f = [cx * forward[0] + cz * forward[1] for cx, cz in corners]
        i_lo, i_hi = min(0, math.ceil(min(along_r) / grid_size)), max(0, math.floor(max(along_r) / grid_size))
        k_lo, k_hi = min(0, math.ceil(min(along_f) / grid_size)), max(0, math.floor(max(along_f) / grid_size))
        i = np.arange(i_lo, i_hi + 1, dtype=float)[:, None]
        k = np.arange(k_lo, k_hi + 1, dtype=float)[None, :]
        xs = np.round(ox + grid_size * (i * right[0] + k * forward[0]), 4) + 0.0  # (+ 0.0: no -0.0)
        zs = np.round(oz + grid_size * (i * right[1] + k * forward[1]), 4) + 0.0
        ni, nk = xs.shape
        free = self._free(xs, zs)
        steps = max(1, math.ceil(grid_size / PATH_STEP))
        r_ok = np.ones((max(ni - 1, 0), nk), dtype=bool)  # the inner points of the step from (i, k) to (i + 1, k) free
        f_ok = np.ones((ni, max(nk - 1, 0)), dtype=bool)
        for j in range(1, steps):
            t = j / steps
            r_ok &= self._free(xs[:-1] + (xs[1:] - xs[:-1]) * t, zs[:-1] + (zs[1:] - zs[:-1]) * t)
            f_ok &= self._free(xs[:, :-1] + (xs[:, 1:] - xs[:, :-1]) * t, zs[:, :-1] + (zs[:, 1:] - zs[:, :-1]) * t)
        plus_r = np.zeros((ni, nk), dtype=bool)
        plus_r[:-1] = r_ok & free[1:]
        minus_r = np.zeros((ni, nk), dtype=bool)
        minus_r[1:] = r_ok & free[:-1]
        plus_f = np.zeros((ni, nk), dtype=bool)
        plus_f[:, :-1] = f_ok & free[:, 1:]
        minus_f = np.zeros((ni, nk), dtype=bool)
        minus_f[:, 1:] = f_ok & free[:, :-1]
        pr, pf, mr, mf = (a.ravel().tolist() for a in (plus_r, plus_f, minus_r, minus_f))
        seen = bytearray(ni * nk)
        good = bytearray(ni * nk)
        queue = [-i_lo * nk - k_lo]
        taken = 0
        for index in queue:
            taken += 1
            if not good[index]:
                good[index] = 1
                kk = index % nk
                # Right, forward, left, back, as a build's rightForwardOffsets along the agent's own directions.
                for neighbour, inside, ok in ((index + nk, index + nk < ni * nk, pr), (index + 1, kk + 1 < nk, pf),
                                              (index - nk, index >= nk, mr), (index - 1, kk > 0, mf)):
                    if inside and not seen[neighbour]:
                        seen[neighbour] = 1
                        if ok[index]:
                            queue.append(neighbour)
            if max_steps is not None and taken > max_steps:
                raise TooManySteps(taken)
        flat = np.flatnonzero(np.frombuffer(bytes(good), dtype=np.uint8))
        px, pz = xs.ravel()[flat], zs.ravel()[flat]
        order = np.lexsort((pz, px))  # x-major, z ascending, as the default search lists them
        return list(zip(px[order].tolist(), pz[order].tolist())), taken

    def reachable_positions(self, grid_size: float,
                            origin: tuple[float, float] | None = None) -> list[tuple[float, float]]:
        """:meth:`reachable`'s points alone."""
        return self.reachable(grid_size, origin)[0]


class OutOfBounds(Exception):
    """:meth:`Scene.reachable` found a step that leads out of the room (``position``, ``(x, z)``, where it leads)."""

    def __init__(self, position: tuple[float, float]) -> None:
        super().__init__(f"a step leads out of the room, to {position}")
        self.position = position


class TooManySteps(Exception):
    """:meth:`Scene.reachable` took more steps than it was allowed (``steps``: how many it had taken)."""

    def __init__(self, steps: int) -> None:
        super().__init__(f"the search took {steps} steps")
        self.steps = steps


def _scene(name, size, boxes, start, surface_colors) -> Scene:
    return Scene(name, size, tuple(Box(*b) for b in boxes), start, surface_colors)


# Surface colours: floor, ceiling, west, east, south, north wall.
_WARM = ((150, 110, 70), (235, 235, 230), (200, 190, 160), (170, 185, 200), (190, 200, 170), (215, 205, 190))
_COOL = ((110, 110, 120), (240, 240, 240), (160, 190, 210), (210, 170, 160), (180, 180, 200), (200, 215, 200))
_PALE = ((120, 95, 80), (230, 230, 235), (220, 210, 190), (190, 210, 220), (210, 200, 220), (225, 225, 200))

#: The scenes the player knows, by name. FloorPlan1 starts facing a tall red box 2.5 m ahead.
SCENES: dict[str, Scene] = {
    s.name: s
    for s in (
        _scene(
            "FloorPlan1",
            (6.0, 2.5, 6.0),
            [
                ("Fridge", (0.0, 0.9, 1.0), (1.0, 1.8, 1.0), (220, 30, 30)),
                ("Cabinet", (-2.0, 0.5, 0.0), (1.0, 1.0, 1.5), (30, 60, 220)),
                ("Sofa", (2.0, 0.4, 0.5), (1.0, 0.8, 2.0), (30, 180, 60)),
                ("Shelf", (2.25, 1.0, -2.4), (0.5, 2.0, 0.5), (230, 210, 40)),
            ],
            Pose(0.0, -2.0, 0.0, 0.0),
            _WARM,
        ),
        _scene(
            "FloorPlan2",
            (8.0, 2.5, 5.0),
            [
                ("Table", (0.0, 0.4, 0.5), (1.6, 0.8, 0.9), (140, 80, 40)),
                ("Television", (0.0, 1.2, 2.3), (1.5, 0.9, 0.2), (20, 20, 20)),
                ("Bed", (-3.0, 0.3, 1.0), (1.8, 0.6, 2.0), (200, 60, 160)),
                ("Dresser", (3.3, 0.6, -1.5), (1.0, 1.2, 1.5), (60, 200, 200)),
                ("Plant", (3.5, 0.5, 2.0), (0.4, 1.0, 0.4), (40, 150, 40)),
            ],
            Pose(0.0, -1.5, 0.0, 0.0),
            _COOL,
        ),
        _scene(
            "FloorPlan3",
            (4.0, 3.0, 9.0),
            [
                ("Crate", (-1.2, 0.3, -1.0), (0.6, 0.6, 0.6), (180, 120, 60)),
                ("Crate", (1.2, 0.3, 0.5), (0.6, 0.6, 0.6), (180, 120, 60)),
                ("Locker", (-1.5, 1.0, 2.5), (0.8, 2.0, 0.6), (120, 120, 220)),
                ("Barrel", (1.4, 0.5, 3.0), (0.6, 1.0, 0.6), (240, 120, 20)),
                ("Door", (0.0, 1.1, 4.45), (1.0, 2.2, 0.1), (90, 50, 30)),
                ("Bench", (0.0, 0.25, -3.5), (1.4, 0.5, 0.5), (100, 100, 100)),
            ],
            Pose(0.0, -2.5, 0.0, 0.0),
            _PALE,
        ),
    )
}

DEFAULT_SCENE = "FloorPlan1"
#: AI2-THOR's controller asks for ``FloorPlanN_physics``; both spellings name the same scene.
_SUFFIX = "_physics"


def scene_by_name(name: str) -> Scene | None:
    """The scene called ``name`` (``FloorPlan1`` or ``FloorPlan1_physics``), or ``None``."""
    if name in SCENES:
        return SCENES[name]
    if name.endswith(_SUFFIX):
        return SCENES.get(name[: -len(_SUFFIX)])
    return None


def scene_names() -> list[str]:
    """Every name Reset accepts: each scene plain and with the ``_physics`` suffix."""
    names = []
    for name in SCENES:
        names += [name, name + _SUFFIX]
    return names
