"""Gymnasium environments over renderd players (the only module that imports gymnasium).

Importing this module registers ``renderd/Unity-v0``::

    import gymnasium
    import renderd.gym  # noqa: F401  (or: gymnasium.make("renderd.gym:renderd/Unity-v0"))

    env = gymnasium.make("renderd/Unity-v0", width=128, height=128, scene=["FloorPlan1", "FloorPlan2"])
    envs = gymnasium.make_vec("renderd/Unity-v0", num_envs=4, width=128, height=128)  # RenderdVectorEnv

:class:`RenderdEnv` is one player (launched with :func:`renderd.launch` at the first ``reset``);
:class:`RenderdVectorEnv` is a ``gymnasium.vector.VectorEnv`` over a :class:`renderd.VectorSession`
(players launched, or leased from the daemon, concurrently; next-step autoreset; crashed players
replaced). Both observe ``Dict(rgb=Box(0, 255, (H, W, 3), uint8))`` plus ``depth=Box(0, max_depth,
(H, W), float32)`` when ``depth=True``, and ``normals``, ``instance_segmentation``, ``semantic_segmentation``
(each ``Box(0, 255, (H, W, 3), uint8)``) when the argument of that name is true, act through
``Discrete(len(actions))`` over a configurable action list, and compute rewards and termination with
caller-supplied functions of the :class:`renderd.Event`. docs/vector.md describes every argument.
"""

from __future__ import annotations

import decimal
import logging
import math
import numbers
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

try:
    import gymnasium
    from gymnasium import spaces
    from gymnasium.utils import seeding
    from gymnasium.vector import AutoresetMode, VectorEnv
    from gymnasium.vector.utils import batch_space
except ImportError as exc:  # say what to install, not only which module is missing
    raise ImportError(
        f"renderd.gym needs gymnasium 1.1 or newer, renderd's gym extra ({exc}): pip install 'gymnasium>=1.1', or "
        "pip install '.[gym]' in renderd's checkout"
    ) from exc
import numpy as np

from renderd.config import check_seconds
from renderd.errors import CallOrderError, RenderdError
from renderd.event import Event
from renderd.protocol import encode_action

__all__ = [
    "DEFAULT_ACTIONS",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_EPISODE_STEPS",
    "ENV_ID",
    "FAILED_ACTION_REWARD",
    "STEP_REWARD",
    "RenderdEnv",
    "RenderdVectorEnv",
    "default_reward",
    "never_terminated",
    "register",
    "rgb_copy",
]

log = logging.getLogger(__name__)

ENV_ID = "renderd/Unity-v0"
#: The discrete actions when none are given: AI2-THOR navigation.
DEFAULT_ACTIONS: tuple[str, ...] = ("MoveAhead", "RotateLeft", "RotateRight", "LookUp", "LookDown")
#: Steps after which an episode is truncated.
DEFAULT_MAX_EPISODE_STEPS = 500


class _Default:
    """The type of :data:`_DEFAULT_LIMIT`: ``max_episode_steps`` not given."""

    def __repr__(self) -> str:
        return f"<default: {DEFAULT_MAX_EPISODE_STEPS}>"


_DEFAULT_LIMIT = _Default()
#: Upper bound of the depth observation, metres (the reference player's far clipping plane, which is
#: also AI2-THOR's default); depth beyond it is clipped. Gymnasium's checker rejects an infinite bound.
DEFAULT_MAX_DEPTH = 20.0
#: The default reward: this much every step...
STEP_REWARD = -0.01
#: ...plus this much when the action failed (``lastActionSuccess`` false: blocked, out of range...).
FAILED_ACTION_REWARD = -0.1
RENDER_FPS = 30
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FLOAT32_TINY = float(np.finfo(np.float32).smallest_subnormal)


class _ColourImage(NamedTuple):
    """An image observation offered besides RGB and depth: ``(H, W, 3)`` uint8, as the event holds it."""

    key: str  # the env's argument and the observation's key
    attr: str  # the Event attribute
    switch: str  # the Initialize switch that asks the player for it
    old_switch: str | None  # the switch's older name, whose value renderd's client sends under ``switch`` too
    what: str  # how a message names it


#: The colour image observations, in the order a player sends them (after RGB and depth).
_COLOUR_IMAGES: tuple[_ColourImage, ...] = (
    _ColourImage("normals", "normals_frame", "renderNormalsImage", None, "normals image"),
    _ColourImage("instance_segmentation", "instance_segmentation_frame", "renderInstanceSegmentation",
                 "renderObjectImage", "instance segmentation image"),
    _ColourImage("semantic_segmentation", "semantic_segmentation_frame", "renderSemanticSegmentation",
                 "renderClassImage", "semantic (class) segmentation image"),
)


def default_reward(event: Event) -> float:
    """``STEP_REWARD`` (-0.01) every step, plus ``FAILED_ACTION_REWARD`` (-0.1) when the action failed."""
    return STEP_REWARD + (0.0 if event else FAILED_ACTION_REWARD)


def never_terminated(event: Event) -> bool:
    """The default termination predicate: episodes end only by truncation."""
    return False


class _EnvSpec:
    """What the single and the vector environment share: spaces, actions, observations, scene choice."""

    def __init__(
        self,
        *,
        width: int,
        height: int,
        actions: Sequence[str | Mapping[str, Any]] | None,
        depth: bool,
        max_depth: float,
        scene: str | Sequence[str] | None,
        max_episode_steps: int | None,
        reward_fn: Callable[[Event], float] | None,
        terminated_fn: Callable[[Event], bool] | None,
        init_params: Mapping[str, Any] | None,
        images: Mapping[str, Any] | None = None,
    ) -> None:
        acts = list(DEFAULT_ACTIONS if actions is None else actions)
        if not acts:
            raise ValueError("actions must list at least one action")
        for k, a in enumerate(acts):
            name = a if isinstance(a, str) else (a.get("action") if isinstance(a, Mapping) else None)
            if not isinstance(name, str) or not name:
                raise TypeError(f"each action must be a name or a dict with an 'action' name, got {a!r}")
            try:  # now, not when a policy first picks it
                encode_action({"action": a} if isinstance(a, str) else dict(a))
            except ValueError as exc:
                raise ValueError(f"actions[{k}] ({name!r}) cannot be sent: {exc}") from None
        self.actions: list[str | dict[str, Any]] = [a if isinstance(a, str) else dict(a) for a in acts]
        if isinstance(scene, str) or scene is None:
            self.scenes: list[str] | None = None
            self.scene = scene
        else:
            try:
                if isinstance(scene, (Mapping, bytes, bytearray)):
                    raise TypeError
                names = list(scene)
            except TypeError:
                what = _scene_type(scene)
                raise TypeError(f"scene must be a scene name, a list of names, or None, not {what}") from None
            for name in names:
                if not isinstance(name, str):
                    raise TypeError(f"scene lists names, not {_scene_type(name)}: {names!r}")
            self.scenes = [str(name) for name in names]
            if not self.scenes:
                raise ValueError("scene must be a name, a non-empty list of names, or None")
            self.scene = None
        if max_episode_steps is not None and (
            isinstance(max_episode_steps, (bool, np.bool_))
            or not isinstance(max_episode_steps, numbers.Integral)
            or max_episode_steps < 1
        ):
            raise ValueError(f"max_episode_steps must be a positive integer or None, got {max_episode_steps!r}")
        self.max_episode_steps = None if max_episode_steps is None else int(max_episode_steps)
        for name, fn in (("reward_fn", reward_fn), ("terminated_fn", terminated_fn)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be None or a callable {name}(event), not {type(fn).__name__}")
        self.reward_fn = reward_fn if reward_fn is not None else default_reward
        self.terminated_fn = terminated_fn if terminated_fn is not None else never_terminated
        for flag, value in (("depth", depth), *sorted((images or {}).items())):
            if not isinstance(value, (bool, np.bool_)):  # (bool("false") is True: a string from a file or a CLI)
                raise TypeError(f"{flag} must be True or False, got {value!r} (a {type(value).__name__})")
        self.depth = bool(depth)
        if isinstance(max_depth, (bool, np.bool_)):  # (float(True) is 1.0: a flag given where the bound goes)
            raise TypeError(f"max_depth must be a positive finite number of metres, not a bool: got {max_depth!r}")
        if not isinstance(max_depth, (numbers.Real, decimal.Decimal)):
            # (float() took the string "5" as 5.0 m: a number read from a file or the command line, not converted.)
            raise _NotANumberError(
                f"max_depth must be a positive finite number of metres, got {max_depth!r}: a "
                f"{_type_name(max_depth)}, not a real number"
            )
        try:
            self.max_depth = float(max_depth)
        except (TypeError, ValueError, OverflowError):
            self.max_depth = math.nan
        if not (self.max_depth > 0 and np.isfinite(self.max_depth)):
            raise ValueError(f"max_depth must be a positive finite number of metres, got {max_depth!r}")
        # (The depth space is float32: a bound float32 cannot hold made Box raise, not naming max_depth; one that
        # rounds to 0 made the space a single value.)
        if not (self.max_depth <= _FLOAT32_MAX and np.float32(self.max_depth) > 0):
            raise ValueError(
                f"max_depth must be a positive finite number of metres, got {max_depth!r}: the depth space is float32, "
                f"whose positive numbers are {_FLOAT32_TINY:.4g} to {_FLOAT32_MAX:.4g}"
            )
        if init_params is not None and not isinstance(init_params, Mapping):
            raise TypeError(
                f"init_params must be a dict of Initialize parameters (gridSize, fieldOfView...), not "
                f"{type(init_params).__name__}"
            )
        self.init_params = dict(init_params or {})
        if self.depth:
            self.init_params["renderDepthImage"] = True
        wanted = dict(images or {})
        #: The colour image observations asked for (``normals=True``...), in wire order.
        self.images: tuple[_ColourImage, ...] = tuple(image for image in _COLOUR_IMAGES if wanted.get(image.key))
        for image in self.images:
            self.init_params[image.switch] = True
            if image.old_switch is not None and image.old_switch in self.init_params:
                # (renderd's client sends the older name's value under the new one: a False there turned it off.)
                self.init_params[image.old_switch] = True
        try:
            encode_action({"action": "Initialize", **self.init_params})
        except ValueError as exc:
            raise ValueError(f"init_params cannot be sent: {exc}") from None
        self.width, self.height = _dimension(width, "width"), _dimension(height, "height")
        obs: dict[str, spaces.Space] = {"rgb": spaces.Box(0, 255, (self.height, self.width, 3), np.uint8)}
        if self.depth:
            obs["depth"] = spaces.Box(0.0, self.max_depth, (self.height, self.width), np.float32)
        for image in self.images:
            obs[image.key] = spaces.Box(0, 255, (self.height, self.width, 3), np.uint8)
        self.observation_space = spaces.Dict(obs)
        self.action_space = spaces.Discrete(len(self.actions))

    def action(self, index: Any) -> str | dict[str, Any]:
        # (A numpy scalar, as a batch of actions holds, is shown as the number it is, not as np.int64(9).)
        shown = repr(index.item() if isinstance(index, np.generic) else index)
        if isinstance(index, (bool, np.bool_)):
            raise ValueError(f"invalid action {shown}: expected an integer in 0..{len(self.actions) - 1}")
        try:
            i = int(index)
        except (TypeError, ValueError):
            raise ValueError(f"invalid action {shown}: expected an integer in 0..{len(self.actions) - 1}") from None
        if not 0 <= i < len(self.actions) or i != index:
            raise ValueError(f"invalid action {shown}: expected an integer in 0..{len(self.actions) - 1}")
        return self.actions[i]

    def choose_scene(self, rng: np.random.Generator, options: Mapping[str, Any] | None) -> str | None:
        """``options["scene"]`` if given, else the configured scene, else one drawn from the list with
        ``rng`` (so a seeded reset picks the same scene), else None (the player's current scene)."""
        if options and options.get("scene") is not None:
            scene = options["scene"]
            if not isinstance(scene, str):
                raise TypeError(f"options['scene'] is a scene name, not {_scene_type(scene)}; nothing was sent")
            return scene
        if self.scenes is not None:
            return self.scenes[int(rng.integers(len(self.scenes)))]
        return self.scene

    def check(self, event: Event, where: Callable[[], str] | None = None) -> None:
        """Raise :class:`RenderdError` if ``event`` does not fit the observation space; ``where()`` (called then
        only: ``"sub-environment 1 (player pid 123): "``) begins its message."""
        frame = event.frame
        if frame is None:
            why = "the player sent no RGB image (is it running with -nographics, or on the headless platform?)"
        elif frame.shape != (self.height, self.width, 3):
            why = (
                f"the player sent a {frame.shape[1]} x {frame.shape[0]} frame; the observation space is "
                f"{self.width} x {self.height} (pass width/height matching the player)"
            )
        elif self.depth and event.depth_frame is None:
            why = "depth=True, but the player sent no depth image"
        elif self.depth and event.depth_frame.shape != frame.shape[:2]:
            why = f"the player sent a depth image of shape {event.depth_frame.shape}, its RGB frame {frame.shape[:2]}"
        else:
            for image in self.images:
                got = getattr(event, image.attr)
                if got is None:
                    why = (
                        f"{image.key}=True, but the player sent no {image.what} (Initialize asks for it with "
                        f"{image.switch}; a player whose renderer cannot draw it refuses that Initialize)"
                    )
                    break
                if got.shape != frame.shape:
                    why = f"the player sent a {image.what} of shape {got.shape}, its RGB frame {frame.shape}"
                    break
            else:
                return
        raise RenderdError(f"{where() if where is not None else ''}{why}")

    def observation(self, event: Event) -> dict[str, np.ndarray]:
        """New arrays every call (the event's arrays are views of the received bytes)."""
        self.check(event)
        obs = {"rgb": rgb_copy(event.frame)}  # type: ignore[arg-type]
        if self.depth:
            obs["depth"] = _depth(event.depth_frame, self.max_depth)  # type: ignore[arg-type]
        for image in self.images:
            obs[image.key] = rgb_copy(getattr(event, image.attr))
        return obs

    def new_batch(self, n: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Uninitialised batched observation arrays for ``n`` sub-environments, and the flat buffers behind
        ``obs["rgb"]`` and each colour image's (by key, with the spare byte :func:`_copy_rgb` needs)."""
        h, w = self.height, self.width
        flats: dict[str, np.ndarray] = {}
        obs: dict[str, np.ndarray] = {}
        for key in ("rgb", *(image.key for image in self.images)):
            flats[key] = np.empty(n * h * w * 3 + 1, dtype=np.uint8)
            obs[key] = flats[key][: n * h * w * 3].reshape(n, h, w, 3)
            if key == "rgb" and self.depth:
                obs["depth"] = np.empty((n, h, w), dtype=np.float32)
        return flats, obs

    def fill(self, flats: dict[str, np.ndarray], obs: dict[str, np.ndarray], i: int, event: Event) -> None:
        """Copy ``event``'s observation into row ``i`` of a batch from :meth:`new_batch`."""
        offset = i * self.height * self.width * 3
        _copy_rgb(event.frame, flats["rgb"], offset)  # type: ignore[arg-type]
        if self.depth:
            _depth(event.depth_frame, self.max_depth, obs["depth"][i])  # type: ignore[arg-type]
        for image in self.images:
            _copy_rgb(getattr(event, image.attr), flats[image.key], offset)

    def batch(self, events: Sequence[Event]) -> dict[str, np.ndarray]:
        """New batched arrays for ``events`` (one per sub-environment), one copy of each frame."""
        flat, obs = self.new_batch(len(events))
        for i, event in enumerate(events):
            self.fill(flat, obs, i, event)
        return obs

    @staticmethod
    def info(event: Event) -> dict[str, Any]:
        # From the event's summary: a full metadata decode here cost about 30 us per sub-environment step.
        return {"last_action_success": bool(event), "error_message": event.error_message}


def _depth(depth: np.ndarray, max_depth: float, out: np.ndarray | None = None) -> np.ndarray:
    """``depth`` (metres) in the depth space ``[0, max_depth]``, as float32 (into ``out`` when given): clipped, and a
    pixel with no number (NaN, which np.clip keeps: the observation would be outside its space) taken as beyond
    ``max_depth``, as an infinite one is."""
    if out is None:
        out = np.empty(depth.shape, dtype=np.float32)
    np.fmin(depth, max_depth, out=out)  # (fmin takes the number where one side is NaN)
    np.maximum(out, 0.0, out=out)
    return out


class _NotANumberError(TypeError, ValueError):
    """A number argument given something that is no number (``max_depth="5"``): a TypeError, and a ValueError
    too, as such a value raised before (an ``except ValueError`` written for that still catches it)."""


def _type_name(value: Any) -> str:
    """``str``, ``list``, ``numpy.ndarray``: the type of a value refused, as a message names it."""
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _dimension(value: Any, name: str) -> int:
    """``width``/``height``: an integer 1..MAX_RESOLUTION (:class:`~renderd.config.ArgumentError`, a ValueError,
    naming it otherwise), checked before the observation space is made of it."""
    from renderd.config import ArgumentError, ConfigError
    from renderd.process import check_size

    try:
        return check_size(value, name)
    except ConfigError as exc:
        raise ArgumentError(exc.reason, key=name) from None


def _check_options(options: Any) -> Mapping[str, Any] | None:
    """``reset``'s ``options``: a dict (Gymnasium's ``dict | None``) or None; else ``TypeError`` before anything is
    seeded or sent (a string or a list of pairs was taken apart, or failed with an AttributeError of ours)."""
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(
            f"reset(options=...) takes a dict such as {{'scene': 'FloorPlan1'}}, or None, not "
            f"{_type_name(options)}; nothing was reset"
        )
    return options


def _scene_type(value: Any) -> str:
    """How a scene that is not a name is described in the TypeError refusing it."""
    if isinstance(value, Mapping):
        return f"{type(value).__name__} (a procedural house is loaded with the CreateHouse action after a reset)"
    return type(value).__name__


def _rgba_pixels(frame: np.ndarray) -> np.ndarray | None:
    """The ``(H, W)`` uint32 view of the RGBA pixels behind ``frame`` when it is an event's view of an
    RGBA body (rows possibly flipped, alpha dropped), else None."""
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3 or frame.strides[1:] != (4, 1):
        return None
    h, w = frame.shape[:2]
    if abs(frame.strides[0]) != w * 4:
        return None
    root = frame
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root.ndim != 1 or root.dtype != np.uint8 or root.nbytes != h * w * 4 or not root.flags.c_contiguous:
        return None
    start = root.__array_interface__["data"][0]
    if start % 4 or frame.__array_interface__["data"][0] != start + (0 if frame.strides[0] > 0 else (h - 1) * w * 4):
        return None
    pixels = root.view("<u4").reshape(h, w)
    return pixels[::-1] if frame.strides[0] < 0 else pixels


def _copy_rgb(frame: np.ndarray, out: np.ndarray, offset: int) -> None:
    """Copy an ``(H, W, 3)`` frame into the flat uint8 buffer ``out`` at ``offset`` (C order).

    ``out`` must have one spare byte after the frame's ``H * W * 3``: a frame received as RGBA (4 bytes
    per pixel, as CloudRendering players send it) is a strided view that numpy copies byte by byte
    (about 0.5 ms at 300x300). Here each pixel is copied as one 4-byte word into overlapping 3-byte
    slots, in increasing address order, so each pixel's alpha byte is overwritten by the next pixel's
    red one and the last lands in the spare byte (whose value is kept, so frames sharing a buffer may
    be copied in any order): about 15x faster. Any other frame is copied by numpy.
    """
    h, w = frame.shape[:2]
    pixels = _rgba_pixels(frame)
    if pixels is None:
        out[offset : offset + h * w * 3].reshape(h, w, 3)[...] = frame
        return
    end = offset + h * w * 3
    spare = out[end]  # the next frame's first byte when frames share a buffer: keep it
    slots = np.ndarray((h, w), dtype="<u4", buffer=out, offset=offset, strides=(w * 3, 3))
    slots[...] = pixels
    out[end] = spare


def rgb_copy(frame: np.ndarray) -> np.ndarray:
    """A new C-contiguous ``(H, W, 3) uint8`` copy of an event's ``frame`` (fast for RGBA bodies)."""
    h, w = frame.shape[:2]
    out = np.empty(h * w * 3 + 1, dtype=np.uint8)
    _copy_rgb(frame, out, 0)
    return out[: h * w * 3].reshape(h, w, 3)


def _score(spec: _EnvSpec, event: Event) -> tuple[float, bool]:
    """``reward_fn(event)`` and ``terminated_fn(event)``, as a float and a bool. What either raises (or ``float()``
    of what ``reward_fn`` returned) goes on as it is, with a note naming the function that raised it: the exception
    is the caller's own, so ``except KeyError`` in the caller's code still catches it."""
    name = "reward_fn"
    try:
        reward = float(spec.reward_fn(event))
        name = "terminated_fn"
        terminated = bool(spec.terminated_fn(event))
    except Exception as exc:
        exc.add_note(f"raised by {name}(event)")
        try:
            exc.renderd_callback = name  # type: ignore[attr-defined]  # (which one, for the env's own note)
        except (AttributeError, TypeError):  # (an exception class with __slots__)
            pass
        raise
    return reward, terminated


def _reset_failed(event: Event, what: str) -> None:
    if not event:
        raise ValueError(f"{what} failed: {event.error_message or 'lastActionSuccess is false'}")


#: RenderdEnv's own keyword arguments (the rest go to renderd.launch).
_OWN_ARGUMENTS = ("actions", "depth", "max_depth", "normals", "instance_segmentation", "semantic_segmentation",
                  "scene", "max_episode_steps", "reward_fn", "terminated_fn", "init_params", "render_mode")


def _check_launch_kwargs(owner: str, launch_kwargs: Mapping[str, Any], own: Sequence[str]) -> None:
    """A TypeError now for a keyword argument neither ``owner`` nor :func:`renderd.launch` takes (it would
    otherwise be found only when the first player is launched), naming the closest one it may have meant."""
    import difflib
    import inspect

    from renderd.client import launch

    known = [*own, *(name for name in inspect.signature(launch).parameters if name != "executable"), "executable"]
    for name in launch_kwargs:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}{hint} (it takes its own "
                            f"arguments and renderd.launch's)")


class RenderdEnv(gymnasium.Env):
    """One renderd player as a ``gymnasium.Env`` (registered as ``renderd/Unity-v0``).

    ``actions``: the discrete action list (names or action dicts; default :data:`DEFAULT_ACTIONS`).
    ``depth``: add a ``depth`` observation (metres, clipped to ``max_depth``). ``normals``,
    ``instance_segmentation``, ``semantic_segmentation``: add that observation (the player's normals, instance or
    class segmentation image, ``(H, W, 3)`` uint8; Initialize asks for it). ``scene``: a scene name,
    a list to draw from at each reset (with the env's seeded ``np_random``), or None for the player's
    current scene; ``reset(options={"scene": ...})`` overrides it. ``max_episode_steps``: truncation
    (None: never) when the env is built directly; ``gymnasium.make`` truncates with its ``TimeLimit``
    wrapper instead, at :data:`DEFAULT_MAX_EPISODE_STEPS` or ``make(..., max_episode_steps=N)`` (-1: never);
    a limit given explicitly (also in a registration's ``kwargs``) always holds. ``reward_fn(event) -> float`` (default :func:`default_reward`) and
    ``terminated_fn(event) -> bool`` (default: never). ``init_params``: extra ``Initialize`` arguments
    (``gridSize``, ``fieldOfView``...). Other keyword arguments go to :func:`renderd.launch`
    (``width``, ``height``, ``executable``, ``args``, ``platform``...). The player is launched at the first
    ``reset`` and stopped by ``close``.

    ``reset`` and ``step`` raise what :meth:`renderd.Session.step` raises (a crashed player is a
    :class:`renderd.PlayerCrashed`), ``ValueError`` for a reset the player refuses (an unknown scene)
    or an action outside the action space. A ``reset`` after the player failed launches a new one. What
    ``reward_fn`` or ``terminated_fn`` raises, ``step`` raises, with notes naming the function and saying that
    the step is counted and the episode ends (call ``reset``).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": RENDER_FPS}

    def __init__(
        self,
        actions: Sequence[str | Mapping[str, Any]] | None = None,
        *,
        depth: bool = False,
        max_depth: float = DEFAULT_MAX_DEPTH,
        normals: bool = False,
        instance_segmentation: bool = False,
        semantic_segmentation: bool = False,
        scene: str | Sequence[str] | None = None,
        max_episode_steps: int | None | _Default = _DEFAULT_LIMIT,
        reward_fn: Callable[[Event], float] | None = None,
        terminated_fn: Callable[[Event], bool] | None = None,
        init_params: Mapping[str, Any] | None = None,
        render_mode: str | None = None,
        **launch_kwargs: Any,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.render_mode = render_mode
        # Given explicitly (as an argument, or in a registration's kwargs), the limit holds however the env
        # was made; the default holds only for an env built directly (see _episode_limit).
        self._limit_given = not isinstance(max_episode_steps, _Default)
        if not self._limit_given:
            max_episode_steps = DEFAULT_MAX_EPISODE_STEPS
        _check_launch_kwargs("RenderdEnv", launch_kwargs, _OWN_ARGUMENTS)
        self._launch_kwargs = dict(launch_kwargs)
        self._launch_kwargs.setdefault("width", 300)
        self._launch_kwargs.setdefault("height", 300)
        self._spec = _EnvSpec(
            width=self._launch_kwargs["width"],
            height=self._launch_kwargs["height"],
            actions=actions,
            depth=depth,
            max_depth=max_depth,
            scene=scene,
            max_episode_steps=max_episode_steps,
            reward_fn=reward_fn,
            terminated_fn=terminated_fn,
            init_params=init_params,
            images={"normals": normals, "instance_segmentation": instance_segmentation,
                    "semantic_segmentation": semantic_segmentation},
        )
        self.observation_space = self._spec.observation_space
        self.action_space = self._spec.action_space
        self.actions = self._spec.actions
        self.session: Any = None
        self.last_event: Event | None = None
        self._elapsed = 0
        # Why step() may not run now (None: an episode is under way): before the first reset, after
        # close(), or after a reset that failed (its episode never began; the old one must not go on).
        self._no_episode: str | None = "step() before reset(): call reset() first"
        self._closes = 0  # close() calls: one made while reset() works (a signal handler's) ends that reset
        # The players this env launches carry this tag (renderd.vector.TAG_VARIABLE) in their environment, so that a
        # close() while reset() waits for a new one's first frame can stop it; the thread launching one, if any.
        self._tag = secrets.token_hex(8)
        self._launching: int | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        options = _check_options(options)
        if isinstance(seed, np.integer):  # (as the vector env takes it: Gymnasium's seeding wants a Python int)
            seed = int(seed)
        super().reset(seed=seed)
        scene = self._spec.choose_scene(self.np_random, options)
        self._no_episode = "step() after a reset() that failed: call reset() again"
        if self.session is not None and (self.session.closed or self.session.error is not None):
            # The player failed (crashed, timed out, sent malformed bytes): this episode gets a new one.
            broken, self.session, self.last_event = self.session, None, None
            broken.close()
        closes = self._closes
        session = self.session
        if session is None:
            from renderd.client import launch
            from renderd.vector import TAG_VARIABLE

            kwargs = dict(self._launch_kwargs)
            kwargs["env"] = {**(kwargs.get("env") or {}), TAG_VARIABLE: self._tag}
            self._launching = threading.get_ident()
            try:
                session = launch(**kwargs)
            except RenderdError as exc:
                if self._closes != closes:  # (close() stopped the player while it booted)
                    raise self._closed_meanwhile("started its player") from exc
                raise
            finally:
                self._launching = None
            if self._closes != closes:  # (close() found no player to stop: this one is not kept)
                session.close()
                raise self._closed_meanwhile("started its player")
            self.session = session
        reset: dict[str, Any] = {"action": "Reset", "sequenceId": 0}
        if scene is not None:
            reset["sceneName"] = scene
        try:
            # (On the session at hand: a close() meanwhile, which stops its player, makes its step raise.)
            _reset_failed(session.step(reset), f"Reset to scene {scene!r}")
            event = session.step({"action": "Initialize", **self._spec.init_params})
            _reset_failed(event, "Initialize")
        finally:
            if self._closes != closes and self.session is session:
                # (A close() just before the new player was kept found none to stop: it is not kept.)
                self.session = None
                session.close()
        if self._closes != closes:
            raise self._closed_meanwhile("reset its player")
        self.last_event = event
        # (Before the episode begins: a frame that does not fit the observation space fails the reset, and step()
        # then refuses, as after any reset that failed; it went on stepping an episode whose reset had raised.)
        obs = self._spec.observation(event)
        self._elapsed = 0
        self._no_episode = None
        return obs, self._spec.info(event)

    def _closed_meanwhile(self, doing: str) -> CallOrderError:
        return CallOrderError(
            f"reset(): the env was closed (by a signal handler, or another thread) while it {doing}; call reset() "
            "to start a new player"
        )

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self._no_episode is not None or self.session is None:
            raise CallOrderError(self._no_episode or "step() before reset(): call reset() first")
        session = self.session
        if session.error is not None:  # (the player failed in an earlier step: the session's own error says "launch")
            raise CallOrderError(
                f"step() after the player failed ({type(session.error).__name__}): call reset(), which starts a new "
                "player"
            ) from session.error
        try:
            event = session.step(self._spec.action(action))
        except BaseException as exc:
            if session.error is not None:  # (broken: a crash, a timeout, malformed bytes, an interrupted step)
                exc.add_note("the episode ended with its player: call reset(), which starts a new player")
            raise
        self.last_event = event
        self._elapsed += 1
        spec = self._spec
        try:
            # Before reward_fn and terminated_fn: an answer that does not fit the observation space (no image asked
            # for, another size) cannot be returned, and the episode cannot go on without the caller seeing it.
            spec.check(event)
        except RenderdError as exc:
            self._no_episode = "step() after a step whose frame did not fit the observation space: call reset()"
            exc.add_note(
                f"the step was counted (step {self._elapsed} of the episode) and the episode ended: call reset()"
            )
            raise
        try:
            reward, terminated = _score(spec, event)
        except Exception as exc:
            # The step is counted (the player took the action) but cannot be returned; whether the episode ended is
            # not known: it ends here.
            name = getattr(exc, "renderd_callback", "reward_fn")
            self._no_episode = f"step() after {name} raised: call reset() to start a new episode"
            exc.add_note(f"the step was counted (step {self._elapsed} of the episode) and the episode ended: call reset()")
            raise
        limit = self._episode_limit()
        truncated = limit is not None and self._elapsed >= limit
        return spec.observation(event), reward, terminated, truncated, spec.info(event)

    def _episode_limit(self) -> int | None:
        # Made by gymnasium.make (which gives the env a spec) with the default limit: its TimeLimit wrapper
        # truncates, at the registered DEFAULT_MAX_EPISODE_STEPS or make's max_episode_steps; the default
        # here must not cut the episode short before it (make takes max_episode_steps for itself).
        if self.spec is not None and not self._limit_given:
            return None
        return self._spec.max_episode_steps

    def render(self) -> np.ndarray | None:
        """The last RGB frame (a copy) with ``render_mode="rgb_array"``; None otherwise or before reset."""
        if self.render_mode != "rgb_array" or self.last_event is None or self.last_event.frame is None:
            return None
        return rgb_copy(self.last_event.frame)

    def close(self) -> None:
        """Stop the player. Idempotent. A reset() it interrupts (from a signal handler or another thread) raises
        CallOrderError; a player that reset() is starting is stopped at once, not left to boot."""
        self._closes += 1
        session, self.session = self.session, None
        self.last_event = None
        self._no_episode = "step() after close(): call reset() to start a new player"
        if self._launching is not None:
            self._stop_launch(session)
        if session is not None:
            session.close()

    def _stop_launch(self, kept: Any) -> None:
        """Kill the player that reset() is starting (still waiting for its first frame): its launch then fails at
        once, and reset() raises CallOrderError. From another thread, again until that launch has ended
        (:data:`renderd.client.CLOSE_WAITER_TIMEOUT` at most: the player may not have been spawned yet); from a
        signal handler in the thread that launches, once (the launch resumes only after it)."""
        from renderd.client import CLOSE_WAITER_TIMEOUT
        from renderd.vector import CANCEL_POLL, _kill_tagged

        here = self._launching == threading.get_ident()
        deadline = time.monotonic() + CLOSE_WAITER_TIMEOUT
        while True:
            try:
                _kill_tagged(self._tag, {getattr(kept, "pid", None)})
            except Exception as exc:  # noqa: BLE001 - (psutil at interpreter exit...): the launch times out instead
                log.debug("stopping the player reset() starts: %s", exc)
                return
            if here or self._launching is None or time.monotonic() > deadline:
                return
            time.sleep(CANCEL_POLL)


class RenderdVectorEnv(VectorEnv):
    """``num_envs`` renderd players as a ``gymnasium.vector.VectorEnv`` over a :class:`renderd.VectorSession`.

    Arguments as :class:`RenderdEnv`, plus: ``environment`` (lease players of that daemon environment
    with :func:`renderd.connect_many`, ``socket``, ``timeout`` and ``step_timeout`` as there; no other
    launch argument applies) instead of launching them,
    or ``vector_session`` (an open :class:`renderd.VectorSession` to use and close; if the constructor
    raises, it is left open: it is still the caller's). ``replace_on_crash``
    (default True): a crashed player is replaced and its episode ends with ``truncated=True`` and the
    error in ``infos["error"]``. ``max_episode_steps=-1`` means never, as for ``gymnasium.make``
    (``make_vec`` passes its ``max_episode_steps`` here). ``autoreset_mode``: ``AutoresetMode.NEXT_STEP``
    (or ``"NextStep"``), the only one; any other raises ``ValueError`` before a player is started. Players are
    started in the constructor.

    Autoreset is ``NEXT_STEP`` (Gymnasium's default): the step after a sub-environment terminates or
    truncates resets it (its action is ignored; reward 0, not terminated, not truncated) while the others
    step, all concurrently. ``reset(options={"reset_mask": mask})`` resets only the masked ones.
    Observations are new arrays every call.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": RENDER_FPS, "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        num_envs: int | None = None,
        actions: Sequence[str | Mapping[str, Any]] | None = None,
        *,
        depth: bool = False,
        max_depth: float = DEFAULT_MAX_DEPTH,
        normals: bool = False,
        instance_segmentation: bool = False,
        semantic_segmentation: bool = False,
        scene: str | Sequence[str] | None = None,
        max_episode_steps: int | None = DEFAULT_MAX_EPISODE_STEPS,
        reward_fn: Callable[[Event], float] | None = None,
        terminated_fn: Callable[[Event], bool] | None = None,
        init_params: Mapping[str, Any] | None = None,
        render_mode: str | None = None,
        replace_on_crash: bool = True,
        environment: str | None = None,
        socket: str | None = None,
        timeout: float | None = None,
        vector_session: Any = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        **launch_kwargs: Any,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        try:
            mode = AutoresetMode(autoreset_mode)
        except (ValueError, TypeError):
            mode = None
        if mode is not AutoresetMode.NEXT_STEP:
            raise ValueError(
                f"autoreset_mode={autoreset_mode!r}: RenderdVectorEnv has only AutoresetMode.NEXT_STEP (a "
                "sub-environment that terminated or truncated is reset in the next step, while the others step)"
            )
        self.render_mode = render_mode
        if max_episode_steps == -1 and not isinstance(max_episode_steps, bool):
            max_episode_steps = None  # gymnasium's "never", which make_vec hands on unchanged
        from renderd.vector import VectorSession, _check_n, connect_many, launch_many

        if num_envs is not None:  # (named as the caller knows it; a numpy integer is an integer)
            num_envs = _check_n(num_envs, "num_envs")

        def spec(width: Any, height: Any) -> _EnvSpec:
            return _EnvSpec(
                width=width,
                height=height,
                actions=actions,
                depth=depth,
                max_depth=max_depth,
                scene=scene,
                max_episode_steps=max_episode_steps,
                reward_fn=reward_fn,
                terminated_fn=terminated_fn,
                init_params=init_params,
                images={"normals": normals, "instance_segmentation": instance_segmentation,
                        "semantic_segmentation": semantic_segmentation},
            )

        # Every argument is checked before a player is started or a passed-in vector session is taken
        # over: a constructor that raises leaves the caller's vector session open (it is still theirs).
        if vector_session is not None:
            if not isinstance(vector_session, VectorSession):
                raise TypeError(
                    "vector_session must be a renderd.VectorSession (from launch_many or connect_many), not "
                    f"{type(vector_session).__name__}"
                )
            if vector_session.closed or vector_session.error is not None:
                why = "closed" if vector_session.closed else f"broken ({type(vector_session.error).__name__})"
                raise ValueError(f"vector_session is {why}: pass an open one (launch_many or connect_many a new one)")
            if num_envs is not None and num_envs != len(vector_session):
                raise ValueError(f"num_envs={num_envs}, but the vector session has {len(vector_session)} slots")
            if environment is not None or launch_kwargs:
                raise ValueError("pass either vector_session, or environment / launch arguments, not both")
            first = vector_session.sessions[0]
            if first is None or not first.width or not first.height:
                raise RenderdError("cannot tell the players' screen size (slot 0 has no player now)")
            self._spec = spec(first.width, first.height)
            vs = vector_session
        elif environment is not None:
            step_timeout = launch_kwargs.pop("step_timeout", None)
            if launch_kwargs:
                raise ValueError(f"launch arguments {sorted(launch_kwargs)} do not apply to leased players")
            if step_timeout is not None:
                step_timeout = check_seconds(step_timeout, "step_timeout")
            spec(1, 1)  # the other arguments, before anything is leased
            vs = connect_many(environment, 1 if num_envs is None else num_envs, replace_on_crash=replace_on_crash,
                              socket=socket, timeout=timeout, step_timeout=step_timeout)
            try:
                first = vs.sessions[0]
                if not first.width or not first.height:
                    raise RenderdError("cannot tell the leased players' screen size")
                self._spec = spec(first.width, first.height)
            except BaseException:
                vs.close()
                raise
        else:
            launch_kwargs.setdefault("width", 300)
            launch_kwargs.setdefault("height", 300)
            self._spec = spec(launch_kwargs["width"], launch_kwargs["height"])
            vs = launch_many(1 if num_envs is None else num_envs, replace_on_crash=replace_on_crash, **launch_kwargs)
        self.vector_session = vs
        self.num_envs = len(vs)
        self.actions = self._spec.actions
        self.single_observation_space = self._spec.observation_space
        self.single_action_space = self._spec.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        n = self.num_envs
        self._rngs: list[np.random.Generator] = [seeding.np_random()[0] for _ in range(n)]
        self._events: list[Event | None] = [None] * n  # what each sub-environment observes now
        self._elapsed = np.zeros(n, dtype=np.int64)
        self._autoreset = np.zeros(n, dtype=np.bool_)
        self._was_reset = False

    # -- helpers ---------------------------------------------------------------------------------------
    def _batch(self) -> dict[str, np.ndarray]:
        return self._spec.batch(self._events)  # type: ignore[arg-type]

    def _where(self, i: int) -> str:
        """How an error about sub-environment ``i`` begins: which one, and its player."""
        pids = self.vector_session.pids
        pid = pids[i] if i < len(pids) else None
        return f"sub-environment {i}: " if pid is None else f"sub-environment {i} (player pid {pid}): "

    # -- the VectorEnv API -------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset all sub-environments (or those in ``options["reset_mask"]``), concurrently.

        ``seed``: an int (sub-environment i gets ``seed + i``), a list of per-environment seeds, or None.
        ``options["scene"]``: the scene for every reset one. Raises :class:`CallOrderError` for a mask that
        leaves out a sub-environment never reset (nothing is sent), ``TypeError`` for ``options`` that is not a dict
        or a mask that is not boolean,
        ``ValueError`` for one of another shape or with no True value (as Gymnasium's vector envs raise) or a
        reset the players refuse (after every other sub-environment was reset; the refused ones are reset
        again at the next step), and what :meth:`renderd.VectorSession.reset` raises.
        """
        n = self.num_envs
        options = _check_options(options)
        if isinstance(seed, numbers.Integral) and not isinstance(seed, (bool, np.bool_)):
            seed = int(seed)
            if seed < 0:
                raise ValueError(f"seed must be an integer 0 or more, or None, got {seed}; nothing was reset")
            super().reset(seed=seed)
            seeds: list[int | None] = [seed + i for i in range(n)]
        elif seed is None:
            seeds = [None] * n
        else:
            if isinstance(seed, (str, bytes, Mapping)) or not isinstance(seed, (Sequence, np.ndarray)):
                raise TypeError(
                    f"seed must be an integer 0 or more, a list of them (one per sub-environment, None for "
                    f"unseeded), or None, not {type(seed).__name__}; nothing was reset"
                )
            seeds = []
            for i, one in enumerate(seed):
                if one is not None and (
                    not isinstance(one, numbers.Integral) or isinstance(one, (bool, np.bool_)) or one < 0
                ):
                    raise ValueError(
                        f"seed[{i}] (sub-environment {i}) must be an integer 0 or more, or None, got {one!r}; "
                        "nothing was reset"
                    )
                seeds.append(None if one is None else int(one))
            if len(seeds) != n:
                raise ValueError(f"got {len(seeds)} seeds for {n} sub-environments; nothing was reset")
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if mask is None:
            slots = list(range(n))
        else:
            mask = np.asarray(mask)
            if mask.dtype != np.bool_:  # (a TypeError, as Gymnasium's SyncVectorEnv and AsyncVectorEnv raise)
                raise TypeError(
                    f"options['reset_mask'] must be a bool array of shape ({n},) with a True value, not of dtype "
                    f"{mask.dtype}; nothing was reset"
                )
            if mask.shape != (n,) or not mask.any():
                raise ValueError(
                    f"options['reset_mask'] must be a bool array of shape ({n},) with a True value, got {mask!r}; "
                    "nothing was reset"
                )
            slots = [int(i) for i in np.flatnonzero(mask)]
            unset = [i for i in range(n) if self._events[i] is None and i not in slots]
            if unset:  # (their observations would be missing from the batch)
                raise CallOrderError(
                    f"reset(options={{'reset_mask': ...}}) leaves out sub-environment {unset[0]}, which was never "
                    "reset: call reset() without a mask first; nothing was reset"
                )
        for i in slots:
            if seeds[i] is not None:
                self._rngs[i] = seeding.np_random(seeds[i])[0]
        scenes = [self._spec.choose_scene(self._rngs[i], options) for i in slots]
        result = self.vector_session.reset(slots, scenes, **self._spec.init_params)
        try:
            # Every observation is checked before any is booked: a reset that raises here began no episode in the
            # sub-environments it reset (step() refuses until they are reset again; it stepped on, each of them in
            # the episode before, or with a frame that broke the vector session).
            for i in slots:
                event = result.observations[i]
                if event is None:
                    raise RenderdError(f"{self._where(i)}the reset produced no observation")
                self._spec.check(event, lambda: self._where(i))
        except RenderdError:
            for i in slots:
                self._events[i] = None
            raise
        infos: dict[str, Any] = {}
        refused: dict[int, str] = {}
        for i in slots:
            event, info = result.observations[i], result.infos[i]
            if info.get("reset_error"):
                refused[i] = info["reset_error"]
            self._events[i] = event
            infos = self._add_info(infos, self._info(event, info), i)
        self._elapsed[slots] = 0
        self._autoreset[slots] = False
        self._was_reset = True
        self._raise_refused(refused)
        return self._batch(), infos

    def _raise_refused(self, refused: Mapping[int, str]) -> None:
        """ValueError for resets the players refused (an unknown scene), once every sub-environment's
        bookkeeping is done; the refused ones are reset again (a new scene drawn) at the next step."""
        if not refused:
            return
        self._autoreset[list(refused)] = True
        raise ValueError("; ".join(f"sub-environment {i}: reset failed: {why}" for i, why in refused.items()))

    def _raise_callback_failed(self, failed: Sequence[tuple[int, Exception]], refused: Mapping[int, str]) -> None:
        """Raise what the first sub-environment's ``reward_fn`` or ``terminated_fn`` raised (the caller's own
        exception, notes added), once the step is booked for every sub-environment: the episodes of those whose
        function raised end (whether they did is not known), so they are reset at the next step, as are those the
        step ended and those whose autoreset the players refused (each said in a note)."""
        ended = [i for i, _ in failed]
        self._autoreset[ended] = True
        self._autoreset[list(refused)] = True
        first_index, first = failed[0]
        first.add_note(f"in {self._where(first_index).rstrip(': ')}")
        for i, exc in failed[1:]:
            name = getattr(exc, "renderd_callback", "reward_fn")
            first.add_note(f"{self._where(i)}{name}(event) raised {type(exc).__name__}: {exc} as well")
        names = ", ".join(str(i) for i in ended)
        which = (
            f"sub-environment {names}'s episode ended: it is" if len(ended) == 1
            else f"sub-environments {names}' episodes ended: they are"
        )
        first.add_note(f"the step was booked for every sub-environment (its results are not returned): {which} reset "
                       "at the next step")
        for i, why in refused.items():
            first.add_note(f"sub-environment {i}: reset failed: {why} (it is reset again at the next step)")
        raise first

    def _info(self, event: Event | None, vinfo: Mapping[str, Any]) -> dict[str, Any]:
        info = self._spec.info(event) if event is not None else {}
        for key in ("error", "error_type", "replaced"):
            if key in vinfo:
                info[key] = vinfo[key]
        if "error" in vinfo:
            # The step's action failed with the player; ``event`` (if any) is its replacement's first frame.
            info["last_action_success"] = False
            info["error_message"] = str(vinfo["error"])
        return info

    def step(
        self, actions: Any
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-environment (autoresetting those that ended in the previous step).

        Raises :class:`CallOrderError` before the first reset, ``ValueError`` for actions outside the
        action space or for an autoreset a player refused (an unknown scene: raised once every
        sub-environment's step is booked, so those that ended are reset at the next step, and so is the
        refused one, with a new scene drawn), what ``reward_fn`` or ``terminated_fn`` raises, notes added (also
        once every sub-environment's step is booked: the sub-environments whose function raised are reset at the
        next step), and what :meth:`renderd.VectorSession.step` raises.
        """
        if not self._was_reset:
            raise CallOrderError("step() before reset(): call reset() first")
        unset = [i for i, event in enumerate(self._events) if event is None]
        if unset:
            raise CallOrderError(
                f"step() after a reset() that failed (sub-environment {unset[0]} has no observation): call reset() "
                "again; nothing was sent"
            )
        # (A closed or broken vector session: said of step(), not of the reset_async() an autoreset makes first.)
        self.vector_session._check_open("step()")
        acts = np.asarray(actions)
        n = self.num_envs
        if acts.shape != (n,):
            raise ValueError(f"actions must have shape ({n},), got {acts.shape}")
        spec = self._spec
        messages = []
        for i, a in enumerate(acts):
            try:
                messages.append(spec.action(a))
            except ValueError as exc:
                raise ValueError(f"actions[{i}] (sub-environment {i}): {exc}; nothing was sent") from None
        vs = self.vector_session
        autoreset = self._autoreset.copy()
        reset_slots = [int(i) for i in np.flatnonzero(autoreset)]
        if reset_slots:
            scenes = [self._spec.choose_scene(self._rngs[i], None) for i in reset_slots]
            vs.reset_async(reset_slots, scenes, **self._spec.init_params)
        # Copy each frame into the batch the moment it arrives, while the other players still work.
        flat, batch = spec.new_batch(n)
        filled = np.zeros(n, dtype=np.bool_)

        previous = vs.on_event  # a callback of the caller's (on a vector session it passed in) still runs

        def on_event(i: int, event: Event) -> None:
            spec.check(event, lambda: self._where(i))
            spec.fill(flat, batch, i, event)
            filled[i] = True
            if previous is not None:
                previous(i, event)

        vs.on_event = on_event
        try:
            result = vs.step(messages, wait_resets=True)
        finally:
            vs.on_event = previous
        rewards = np.zeros(n, dtype=np.float64)
        terminated = np.zeros(n, dtype=np.bool_)
        truncated = np.zeros(n, dtype=np.bool_)
        infos: dict[str, Any] = {}
        refused: dict[int, str] = {}
        failed: list[tuple[int, Exception]] = []  # sub-environments whose reward_fn or terminated_fn raised
        for i in range(n):
            event, vinfo = result.observations[i], result.infos[i]
            if autoreset[i] or (vinfo.get("reset_complete") and "error" not in vinfo):
                # A reset step: the new episode's first observation.
                if event is None:
                    raise RenderdError(f"sub-environment {i}: the reset produced no observation")
                if vinfo.get("reset_error"):
                    refused[i] = vinfo["reset_error"]
                self._events[i] = event  # checked by on_event
                self._elapsed[i] = 0
            elif "error" in vinfo:
                # The player failed and was replaced: the episode is cut short; keep its last observation.
                truncated[i] = True
                filled[i] = False
            else:
                assert event is not None
                self._events[i] = event  # checked by on_event
                self._elapsed[i] += 1
                try:
                    rewards[i], terminated[i] = _score(spec, event)
                except Exception as exc:
                    failed.append((i, exc))  # (booked like the others; its episode ends, below)
                truncated[i] = spec.max_episode_steps is not None and self._elapsed[i] >= spec.max_episode_steps
            infos = self._add_info(infos, self._info(event, vinfo), i)
        self._autoreset = terminated | truncated
        if failed:
            self._raise_callback_failed(failed, refused)
        self._raise_refused(refused)
        for i in np.flatnonzero(~filled):
            spec.fill(flat, batch, int(i), self._events[i])  # type: ignore[arg-type]
        return batch, rewards, terminated, truncated, infos

    def render(self) -> tuple[np.ndarray, ...] | None:
        """Each sub-environment's last RGB frame (copies) with ``render_mode="rgb_array"``."""
        if self.render_mode != "rgb_array" or not self._was_reset:
            return None
        return tuple(rgb_copy(ev.frame) for ev in self._events if ev is not None)  # type: ignore[arg-type]

    def close_extras(self, **kwargs: Any) -> None:
        """Close the vector session: every player stopped (or lease released)."""
        self.vector_session.close()


def register() -> None:
    """Register ``renderd/Unity-v0`` with Gymnasium (done when this module is imported; idempotent)."""
    if ENV_ID in gymnasium.registry:
        return
    gymnasium.register(
        id=ENV_ID,
        entry_point="renderd.gym:RenderdEnv",
        vector_entry_point="renderd.gym:RenderdVectorEnv",
        nondeterministic=False,
        max_episode_steps=DEFAULT_MAX_EPISODE_STEPS,
    )


register()
