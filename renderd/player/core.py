"""The reference player's state machine, independent of any transport.

Stable API (the FIFO link here and the HTTP link in ``renderd/player/http_link.py`` both use it)::

    from renderd.player.core import Player

    player = Player(width=300, height=300, platform="Linux64", headless=False, renderer=None,
                    static_frame=False, metadata_objects=0, logger=None)
    metadata, images = player.first_message()    # the readiness message, sequenceId 0
    metadata, images = player.handle(action)     # one answer per action dict
    answer = player.answer(action)               # the same as an Answer: answer.metadata(), answer.images,
    body = answer.packed_metadata()              # and the metadata packed (== encode_metadata(answer.metadata()))
    text = answer.json_metadata()                # or as compact JSON (for HTTP form parts)

* ``platform``: ``"CloudRendering"`` makes RGB images 4 bytes per pixel (RGBA, alpha 255), as Unity does
  there; anything else (``"Linux64"``, ``"headless"``, ``None``) gives 3 bytes per pixel.
* ``headless``: no image fields at all, metadata only: Unity's ``-nographics``, or a build's
  ``AI2THOR_SERVER_SIDE_SCREENSHOT`` not true (the player's command line passes either).
* ``renderer``: any object with the :mod:`renderd.player.renderer` interface (``None``: a NumpyRenderer).
* ``static_frame``: skip rendering: every step sends the same precomputed frame (the scene's start
  view); metadata still follows the actions.
* ``metadata_objects``: add that many synthetic objects (about 1 KB of msgpack each) to ``objects``.
* ``logger``: a :class:`logging.Logger` (default: this module's).

A link calls ``player.limit_answer_size(limit)`` with the largest message its transport carries (and
``player.limit_metadata_size(limit)`` with its largest metadata field); the player then refuses
(``InvalidArgument``) a ChangeResolution, AddThirdPartyCamera, Initialize of several agents or
GetReachablePositions whose largest possible answer would not fit, instead of sending a message the client must
reject.

Agents, as a build has them: the player starts with one, and a Reset leaves one (agent 0 answers it);
``Initialize`` with ``agentCount`` N (taken into 1..:data:`MAX_AGENTS`, as a build does) makes N, placed as a
build's AgentManager places them (:meth:`Player._initial_agents`), each reporting that Initialize; an action's
``agentId`` (0 by default) names the agent that acts, and one that names none is answered by agent 0 as a
failure. Every answer lists
every agent's metadata in agent order (its own pose, objects and last action's fields, and its ``agentId``, as
a build's AgentManager sets every map's) with ``activeAgentId`` the acting one, and every agent's images. Agents block each
other's moves (:meth:`Scene.collision`'s ``others``), not teleports, as in a build; they are not drawn in each other's
view.

``metadata`` is a dict ready for :func:`renderd.protocol.encode_metadata`. ``images`` is a list of
``(FieldType, ndarray)`` in wire order (third-party camera images first, then each agent's RGB, DEPTH, IDS,
in agent order), each array C-contiguous and already in wire layout: rows bottom-up; RGB ``(H, W, 3|4)
uint8``; depth ``(H, W) float32`` little-endian metres; ids ``(H, W, 4) uint8`` RGBA with alpha 255. Pass them to
``renderd.protocol.encode_message([(FieldType.METADATA, encode_metadata(metadata)), *images])`` or take
their bytes for HTTP form parts. Arrays (and the list itself, while the view does not change) are shared
between calls: treat them as read-only.

Metadata is cached per agent and player state (scene, the agent's pose, resolution, field of view,
visibility distance, third-party cameras, whether the answer has images and segmentation images, which decide
its ``thirdPartyCameras`` and ``colors``; :data:`VIEW_CACHE_SIZE` states, one more per further agent): an
action that changes none of them (``Pass``, a blocked move) costs no visibility render, no object list and
no pack of the large parts, nor does an agent that did not act; only the per-action fields
(``lastAction``, ``lastActionSuccess``, ``errorMessage``, ``errorCode``, ``actionReturn``, ``sequenceId``,
``activeAgentId``) are new, and only the acting agent's are packed. Each call returns a new top-level dict,
but its nested parts (objects, colors, cameras...) are shared between answers: treat them as read-only too.

``handle`` never raises for a bad action: an unknown action or a bad argument is answered with
``lastActionSuccess: False``, an ``errorMessage`` and an ``errorCode`` (``InvalidAction``,
``InvalidArgument``, ``MissingArguments``). An argument an action does not take fails ``InvalidArgument`` as a
build's ActionDispatcher fails it (:data:`ACTION_ARGUMENTS`, one ``takes`` table next to each action; the keys of
:data:`STEP_KEYS` are taken by every action, and an action a build hands a whole ServerAction takes any key). A
``RenderdFault`` action is validated and answered as a no-op here: the transport link carries out the fault itself
(see :mod:`renderd.player.faults`), because most faults need the pipe or the process. Renderer failures propagate
(the player should crash then).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import math
import re
import struct
import time
from collections import OrderedDict
from typing import Any, Callable

import msgpack
import numpy as np

from renderd.player import faults
from renderd.player.renderer import NumpyRenderer, RenderState, Renderer, trim_cache
from renderd.player.scene import (
    AGENT_RADIUS,
    AGENT_Y,
    CAMERA_HEIGHT,
    DEFAULT_SCENE,
    Pose,
    Scene,
    OutOfBounds,
    TooManySteps,
    scene_by_name,
    scene_names,
)
from renderd.protocol import MAX_RESOLUTION, FieldType

__all__ = [
    "Player",
    "Answer",
    "Images",
    "ActionFailed",
    "ACTIONS",
    "ACTION_ARGUMENTS",
    "ANY_ARGUMENTS",
    "STEP_KEYS",
    "RGBA_PLATFORMS",
    "MAX_RESOLUTION",
    "MAX_AGENTS",
    "MAX_ERROR_MESSAGE",
    "MAX_ECHOED_NAME",
    "ANSWER_METADATA_ALLOWANCE",
    "CAMERA_NEAR_PLANE",
    "CAMERA_FAR_PLANE",
]

Images = list[tuple[FieldType, np.ndarray]]

#: Platforms whose RGB images are RGBA (4 bytes per pixel).
RGBA_PLATFORMS = frozenset({"CloudRendering"})
CAMERA_NEAR_PLANE = 0.1
CAMERA_FAR_PLANE = 20.0
DEFAULT_GRID_SIZE = 0.25
DEFAULT_ROTATE_DEGREES = 90.0
DEFAULT_LOOK_DEGREES = 30.0
DEFAULT_FOV = 90.0
DEFAULT_VISIBILITY_DISTANCE = 1.5
#: Initialize's gridSize: a build's limit (above 0, at most 5) and the player's own lower one (the free positions of a
#: finer grid, GetReachablePositions' answer, would take minutes to find and be too large to send).
MAX_GRID_SIZE = 5.0
MIN_GRID_SIZE = 0.01
#: The field of view (degrees) the player renders: a build takes anything above 0 and below 180.
MIN_FOV = 1.0
MAX_FOV = 179.0
#: Initialize's settings (Player attributes) when a scene is loaded, and each one an Initialize is not given.
#: ``snap_to_grid`` is a build's agent's snapToGrid field: false until an Initialize sets it (true unless sent false),
#: as a freshly loaded scene's agent controller has it; AI2-THOR's controller sends Initialize after every Reset.
_DEFAULT_SETTINGS = {"grid_size": DEFAULT_GRID_SIZE, "rotate_step": DEFAULT_ROTATE_DEGREES, "fov": DEFAULT_FOV,
                     "visibility_distance": DEFAULT_VISIBILITY_DISTANCE, "render_depth": False, "render_ids": False,
                     "render_normals": False, "render_classes": False, "snap_to_grid": False}
#: cameraHorizon limits: looking up is negative, down positive (AI2-THOR's defaults).
MAX_LOOK_UP = 30.0
MAX_LOOK_DOWN = 60.0
#: A Teleport with forceAction takes a horizon past those limits (as a build's physics agent does) up to straight
#: up or down, and a spot this far (metres, along x and along z) from the room's centre: the player's own limits
#: (past them a build's camera turns over, and this player's renderer would lose its precision).
MAX_FORCED_HORIZON = 90.0
MAX_FORCED_DISTANCE = 100.0
MAX_THIRD_PARTY_CAMERAS = 8
#: The object types whose parts are receptacles (metadata ``receptacle``; things can stand on or in them in a build).
RECEPTACLE_TYPES = frozenset({"Table", "Shelf", "Dresser", "Cabinet", "Floor"})
#: Longer side of the small ids render used to decide which objects are visible (the frame's shape kept).
VISIBILITY_RENDER_SIZE = 64
#: How many wire-layout frames (keyed by camera state) a Player keeps, so an unchanged view costs nothing.
WIRE_CACHE_SIZE = 4
#: At most this many bytes of them (the latest is always kept; a 4096 x 4096 frame is 176 MiB).
WIRE_CACHE_BYTES = 128 << 20
#: How many metadata views (keyed by everything but the action's own fields) a Player keeps: an action that
#: changes nothing (Pass, a failed move) reuses the objects, the visibility result and the packed bytes. (With
#: several agents, one more per agent; with third-party cameras, the wire frames likewise.)
VIEW_CACHE_SIZE = 4
#: The actions a build's AgentManager carries out itself (its agentManagerActions) rather than handing them to the
#: acting agent: a step's renderInstanceSegmentation does not switch segmentation on for them.
_AGENT_MANAGER_ACTIONS = frozenset({"Reset", "Initialize", "AddThirdPartyCamera", "UpdateThirdPartyCamera",
                                    "ChangeResolution"})
#: Most agents an Initialize makes (``agentCount``): as many as a build's AgentManager has agent colours.
MAX_AGENTS = 6
#: The point of the flood of free positions (:meth:`Scene.flood`) agent 1 is placed on; agent ``i`` on the
#: next ones, as a build's AgentManager places agent ``i`` on its reachable position ``i + 4``.
FIRST_AGENT_SPOT = 5
#: What :meth:`Player.limit_metadata_size` counts for one agent's metadata besides synthetic objects and a list
#: actionReturn (:data:`RETURN_ITEM_SIZE`): the room's objects, a few KB, and a small actionReturn; and per
#: synthetic object (one is about 940 bytes of msgpack and 1,040 of JSON).
AGENT_METADATA_BASE = 256 * 1024
SYNTHETIC_OBJECT_SIZE = 1100
#: What one item of a list actionReturn takes at most, beyond :data:`AGENT_METADATA_BASE`: a position of
#: GetReachablePositions is 34 bytes of msgpack and at most 36 of JSON (its coordinates rounded to 4 decimals, the
#: rooms under 10 m). Every agent keeps its last actionReturn, so several that ran GetReachablePositions at a
#: fine grid (about 230,000 positions at 0.01 m) could make a metadata field larger than the transport carries.
RETURN_ITEM_SIZE = 40
_EPS = 1e-6
#: Bytes set aside for the metadata and the framing when checking that the largest answer fits the
#: transport (:meth:`Player.limit_answer_size`): far more than this player's metadata (a few KB, ~1 KB per
#: ``--metadata-objects`` object).
ANSWER_METADATA_ALLOWANCE = 16 * 1024 * 1024
#: Longest ``errorMessage`` (characters); longer ones are cut (see :class:`ActionFailed`).
MAX_ERROR_MESSAGE = 500
#: Longest action name echoed whole as ``lastAction`` (characters). Every action this player knows has a
#: short name; an unknown one up to an action's size would make the answer's metadata larger than an HTTP
#: metadata part may be (JSON escapes a non-ASCII character as up to 6 bytes), so it is echoed cut.
MAX_ECHOED_NAME = 1000


def _sequence_id_ok(seq: Any) -> bool:
    """A sequenceId the player adopts and echoes: an integer msgpack can pack (64 bits)."""
    return isinstance(seq, int) and not isinstance(seq, bool) and -(2**63) <= seq < 2**64


def _count_on(seq: int) -> int:
    """The sequenceId after ``seq``, for an action that brings none the player can use: ``seq + 1``, from 0
    again after 2**64 - 1 (the largest it adopts), so the id it echoes can always be packed."""
    seq += 1
    return seq if seq < 2**64 else 0


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _flag(value: Any, default: bool) -> bool:
    """A per-step or Initialize switch (``renderImage``, ``renderDepthImage``, ...) as a Unity build reads it:
    Json.NET converts the value to bool as ``Convert.ToBoolean`` does, so a number is true unless it is 0
    and a string ``"true"``/``"false"`` (any case) is that value. ``None`` (JSON null) is taken as not
    given: ``default``. Anything else counts as Python's truth value."""
    if value is None:
        return default
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("true", "false"):
            return text == "true"
    return bool(value)


def _yaw(degrees: float) -> float:
    """``degrees`` as a yaw in [0, 360), rounded to 4 decimals: 359.99999 rounds up to 360.0, which is 0."""
    return round(degrees % 360.0, 4) % 360.0


def _clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters (marked with "..." when cut)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ActionFailed(Exception):
    """An action could not be carried out: answered with lastActionSuccess false.

    The message is cut to :data:`MAX_ERROR_MESSAGE` characters here, once for every failure: many quote
    the client's own values, which may be up to an action's size (16 MiB), and the answer must stay
    small enough for every transport (an HTTP metadata part is limited to 32 MiB).

    ``code`` is the answer's ``errorCode``: ``None`` (msgpack nil, JSON null) unless the failure has one of a
    build's ServerActionErrorCode names. A build sends null for a successful action and for every failure that
    sets no code (a blocked move, an action that throws), as its metadata's errorCode is a string set only when
    the code is not Undefined; AI2-THOR's controller raises ValueError for the codes InvalidAction,
    MissingArguments, AmbiguousAction and InvalidArgument, so the difference shows.
    """

    def __init__(self, message: str, code: str | None = None) -> None:
        message = _clip(message, MAX_ERROR_MESSAGE)
        super().__init__(message)
        self.message = message
        self.code = code


#: Action name -> Player method name. Filled by the @_action decorator below.
ACTIONS: dict[str, str] = {}
#: Action name -> the arguments it takes, as a build's ActionDispatcher sees its method: one tuple of parameter names
#: per overload (in the order a build tries them, the one it keeps on a tie first), or ``None`` for an action a build
#: hands a whole ServerAction, which takes any key. Filled by the @_action decorator below, from the ``takes`` table
#: next to each action.
ACTION_ARGUMENTS: dict[str, tuple[tuple[str, ...], ...] | None] = {}
#: ``takes`` of an action a build dispatches with a whole ServerAction: any key is accepted.
ANY_ARGUMENTS = None
#: The keys an action may carry whatever it takes, never an invalid argument: ``action`` itself and what a build's
#: AgentManager reads on every step (its DynamicServerAction.AllowedExtraneousParameters: sequenceId, agentId,
#: renderImage and the per-step image switches), and ``renderDepthImage``, this player's own per-step depth switch.
#: A step's own normals and class segmentation switches (see Player._maps_on).
_MAP_SWITCHES = frozenset({"renderNormalsImage", "renderClassImage", "renderSemanticSegmentation"})
STEP_KEYS = frozenset({"action", "sequenceId", "agentId", "renderImage", "renderInstanceSegmentation",
                       "renderObjectImage", "renderClassImage", "renderNormalsImage", "renderDepthImage"})
#: Action name -> each overload's accepted keys (its parameters and :data:`STEP_KEYS`), for the per-step check.
_ACCEPTED: dict[str, tuple[frozenset[str], ...] | None] = {}
#: At most this many invalid argument names are quoted in an errorMessage, each cut to this many characters.
_SHOWN_INVALID = 5
_SHOWN_NAME = 40


#: Unity's quality levels, by the names AI2-THOR's ``QUALITY_SETTINGS`` gives them (``renderd.config.QUALITIES``
#: and Unity's placeholder level 0), as ``ChangeQuality`` takes them.
QUALITY_NAMES = ("Very Low", "Low", "Medium", "MediumCloseFitShadows", "High", "Very High", "Ultra", "High WebGL",
                 "DONOTUSE")


def _action(*names: str, takes: tuple[tuple[str, ...], ...] | None) -> Callable:
    """Register the decorated method as the actions ``names``, taking the arguments ``takes`` (see
    :data:`ACTION_ARGUMENTS`; :data:`ANY_ARGUMENTS` for an action that takes any key)."""
    def register(fn: Callable) -> Callable:
        for name in names:
            ACTIONS[name] = fn.__name__
            ACTION_ARGUMENTS[name] = takes
            _ACCEPTED[name] = None if takes is None else tuple(frozenset(o) | STEP_KEYS for o in takes)
        return fn

    return register


def _overload(keys: Any, accepted: tuple[frozenset[str], ...]) -> int:
    """Which overload a build's ActionDispatcher dispatches an action with these ``keys`` to: the one with the most
    parameters the action names, the first on a tie."""
    best, index = -1, 0
    for i, names in enumerate(accepted):
        count = len(names & keys)
        if count > best:
            best, index = count, i
    return index


def _check_arguments(name: str, action: dict) -> int:
    """The overload of ``name`` the action is dispatched to (0 for an action that takes any key). Raises ActionFailed
    (``InvalidArgument``), as a build's ActionDispatcher fails an action whose arguments name no parameter of the
    overload it chose, naming the invalid argument(s) and what the action takes."""
    accepted = _ACCEPTED[name]
    if accepted is None:  # a whole ServerAction: any key, read by Json.NET's serializer (one that cannot be: raises)
        _read_server_action(action)
        return 0
    if not action.keys() - accepted[0]:  # (the usual case: every key taken by the first)
        return 0
    index = _overload(action.keys() - STEP_KEYS, accepted) if len(accepted) > 1 else 0
    invalid = sorted(action.keys() - accepted[index], key=repr)
    if not invalid:
        return index
    shown = ", ".join(_clip(repr(k), _SHOWN_NAME) for k in invalid[:_SHOWN_INVALID])
    if len(invalid) > _SHOWN_INVALID:
        shown += f" and {len(invalid) - _SHOWN_INVALID} more"
    takes = " or ".join(f"({', '.join(o)})" if o else "no arguments" for o in ACTION_ARGUMENTS[name] or ())
    it = "them" if len(invalid) > 1 else "it"
    why = ("this player's own action: a misspelt parameter would run the fault with its default" if name == "RenderdFault"
           else f"a build refuses {it} too")
    raise ActionFailed(
        f"{name} called with invalid argument{'s' if len(invalid) > 1 else ''} {shown} ({why}): "
        f"leave {it} out or correct the name. {name} takes {takes}; any action may also carry sequenceId, agentId, "
        f"renderImage and the per-step image switches", "InvalidArgument")


def _finite(value: Any) -> bool:
    """A finite real number (not a bool); an integer too large for a float is not one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


#: A string .NET's ``Single.Parse`` (``NumberStyles.Float | NumberStyles.AllowThousands``, the invariant culture) takes,
#: as Json.NET's conversion of a string to a float or double parameter parses it (``Convert.ToSingle``): white space
#: around it, a sign, digits with ``,`` group separators before the decimal point, a fraction, an exponent.
_NET_FLOAT = re.compile(
    r"[\t\n\v\f\r ]*([+-]?(?:[0-9][0-9,]*(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[\t\n\v\f\r ]*\Z")
#: What ``Int32.Parse`` (``NumberStyles.Integer``) takes, for an int parameter: white space around it, a sign, digits.
_NET_INT = re.compile(r"[\t\n\v\f\r ]*([+-]?[0-9]+)[\t\n\v\f\r ]*\Z")
#: The invariant culture's names of the values that are not finite, which ``Single.Parse`` also takes.
_NET_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _shown(value: Any) -> str:
    """``value`` as a build quotes an argument it cannot convert (its JToken's ToString(): a string bare, null empty, a
    bool ``True``/``False``), cut to 100 characters."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (dict, list)):
        try:
            return _clip(json.dumps(value), 100)
        except (TypeError, ValueError):
            pass
    return _clip(value if isinstance(value, str) else repr(value), 100)


def _unconvertible(action: dict, key: str, value: Any, kind: str) -> ActionFailed:
    """The failure of an argument Json.NET cannot convert to the parameter's type, worded as a build's ActionDispatcher
    words it (InvalidArgument)."""
    return ActionFailed(f"action: {action.get('action')} has an invalid argument: {key} (=={_shown(value)}). "
                        f"Cannot convert to: {kind}", "InvalidArgument")


#: What a build answers when .NET's parse of an argument string throws (``Single.Parse`` or ``Int32.Parse`` of ``"abc"``):
#: a FormatException, which its ActionDispatcher does not catch as a conversion (an ArgumentException, InvalidArgument),
#: so its agent answers it as any exception: lastActionSuccess false, errorCode null, the exception's text (a build
#: follows it with its stack trace).
FORMAT_EXCEPTION = "System.FormatException: Input string was not in a correct format."
#: The same for an int argument beyond 32 bits (``Convert.ToInt32`` of ``3e9``, ``Int32.Parse`` of ``"99999999999"``).
INT32_OVERFLOW = "System.OverflowException: Value was either too large or too small for an Int32."


def _int_argument(action: dict, key: str, value: Any, *, whole_action: bool = False) -> int:
    """``value`` as Json.NET converts it to a build's int parameter (``(int)JToken``: ``Convert.ToInt32``): an integer
    as it is, a bool 1 or 0, a float rounded to the nearest integer, a tie to the even one (``2.5`` is 2, ``3.5`` 4,
    as Python's ``round``), a string of digits and a sign (``Int32.Parse``) as its number. Raises ActionFailed as a
    build answers what it cannot convert: null, an object or an array ``InvalidArgument`` (an ArgumentException, in its
    words); a string that is not such a number :data:`FORMAT_EXCEPTION`; a value beyond 32 bits
    :data:`INT32_OVERFLOW` (both with errorCode null). ``whole_action``: the field of an action a build reads into a
    whole ServerAction (Initialize's ``agentCount``), whose Json.NET reader rounds a float alike: what it cannot read
    has been answered before the action runs (:func:`_read_server_action`), so the ``InvalidArgument`` here is only a
    fallback."""
    if type(value) is int:
        number = value
    elif isinstance(value, bool):
        return int(value)
    elif isinstance(value, float):
        # Convert.ToInt32(double): -2147483648.5 <= value < 2147483647.5, else an OverflowException (NaN too).
        if not -2147483648.5 <= value < 2147483647.5:
            if whole_action:
                raise _unconvertible(action, key, value, "int")
            raise ActionFailed(INT32_OVERFLOW)
        return round(value)
    elif isinstance(value, str):
        match = _NET_INT.match(value)
        if match is None:
            if whole_action:
                raise _unconvertible(action, key, value, "int")
            raise ActionFailed(FORMAT_EXCEPTION)
        number = int(match.group(1)) if len(match.group(1)) <= 20 else 2**64  # (beyond 32 bits either way)
    else:
        raise _unconvertible(action, key, value, "int")
    if not -(2**31) <= number < 2**31:
        if whole_action:
            raise _unconvertible(action, key, value, "int")
        raise ActionFailed(INT32_OVERFLOW)
    return number


#: The first line of what a build answers when Json.NET's serializer cannot read a value into a field of a whole
#: ServerAction (Initialize, Reset, LookUp, LookDown), or into an axis of a Vector3 argument (every action's
#: ``position`` and ``rotation``): its ActionDispatcher's ``ToObject`` throws a JsonReaderException or a
#: JsonSerializationException, which is not an ArgumentException, so its agent's catch-all answers it,
#: lastActionSuccess false, errorCode null, the exception's ``ToString()`` (a build follows this line with the stack
#: trace). The message ends with the value's JSON path and no line or position: a build's action JObject comes from
#: ``JsonConvert.DeserializeObject<JObject>``, whose JTokenWriter keeps no line information.
_JSON_READER = "Newtonsoft.Json.JsonReaderException: "
_JSON_SERIALIZATION = "Newtonsoft.Json.JsonSerializationException: "
#: A null read into a value type: Convert.ChangeType's exception, the inner one of Json.NET's (on the same line).
_NULL_CAST = " ---> System.InvalidCastException: Null object cannot be converted to a value type."
#: The .NET names of the field types a value is read into, for Json.NET's messages.
_NET_TYPES = {"int": "System.Int32", "float": "System.Single", "bool": "System.Boolean"}
#: What Json.NET's reader names a JSON value's token in "Unexpected token" (the kinds no field type here takes).
_TOKEN_NAMES = {bool: "Boolean", dict: "StartObject", list: "StartArray"}
#: The reader method's word for each field type, in "Error reading <word>. Unexpected token: ...".
_READ_WORDS = {"int": "integer", "float": "double", "float?": "double", "bool": "boolean", "string": "string"}


def _net_general(value: float) -> str:
    """``value`` as .NET writes a double (``ToString()``, 15 significant digits): ``3000000000``, ``1E+20``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return f"{value:.15G}"


def _json_net_read(kind: str, value: Any, path: str) -> None:
    """Raise ActionFailed as a build answers Json.NET's serializer reading ``value`` into a field of type ``kind``
    (``int``, ``float``, ``float?`` (nullable), ``bool``, ``string``) at the JSON path ``path``, when it cannot
    (JsonReader's ReadAsInt32, ReadAsDouble, ReadAsBoolean, ReadAsString, then the serializer's conversion); return
    when it can (the value is then converted where the action reads it)."""
    if value is None or value == "":  # (a reader reads an empty string as null)
        if kind in ("int", "float", "bool"):
            raise ActionFailed(f"{_JSON_SERIALIZATION}Error converting value {{null}} to type '{_NET_TYPES[kind]}'. "
                               f"Path '{path}'.{_NULL_CAST}")
        return
    if type(value) is bool:
        if kind in ("bool", "string"):
            return
    elif isinstance(value, (int, float)):
        if kind != "int":
            return
        if isinstance(value, int) and not -(2**63) <= value < 2**63:  # a BigInteger: its (int) cast overflows
            raise ActionFailed(INT32_OVERFLOW)
        if not -2147483648.5 <= value < 2147483647.5:  # Convert.ToInt32 of a long or a double (NaN too) overflows
            shown = str(value) if isinstance(value, int) else _net_general(value)
            raise ActionFailed(f"{_JSON_READER}Could not convert to integer: {shown}. Path '{path}'. ---> "
                               f"{INT32_OVERFLOW}")
        return
    elif isinstance(value, str):
        if kind == "string":
            return
        if kind == "int":
            match = _NET_INT.match(value)
            if match is not None and len(match.group(1)) <= 12 and -(2**31) <= int(match.group(1)) < 2**31:
                return
            raise ActionFailed(f"{_JSON_READER}Could not convert string to integer: {value}. Path '{path}'.")
        if kind == "bool":
            if value.strip(" \t\n\v\f\r\0").lower() in ("true", "false"):
                return
            raise ActionFailed(f"{_JSON_READER}Could not convert string to boolean: {value}. Path '{path}'.")
        if _NET_FLOAT.match(value) is not None or value.strip() in _NET_SPECIAL:
            return
        raise ActionFailed(f"{_JSON_READER}Could not convert string to double: {value}. Path '{path}'.")
    token = _TOKEN_NAMES.get(type(value))
    if token is None:
        return  # (nothing else comes out of JSON)
    raise ActionFailed(f"{_JSON_READER}Error reading {_READ_WORDS[kind]}. Unexpected token: {token}. Path '{path}'.")


def _field_kinds(fields: str) -> dict[str, str]:
    """``kind: name name ... kind: name ...`` as {name: kind}."""
    kinds: dict[str, str] = {}
    kind = ""
    for word in fields.split():
        if word.endswith(":"):
            kind = word[:-1]
        else:
            kinds[word] = kind
    return kinds


#: The fields of an AI2-THOR 5 build's ServerAction that Json.NET reads as a number, a bool, a string or a Vector3 (its
#: x, y and z), by name: what a whole-ServerAction action's keys are read into. Fields of other types (arrays, objects)
#: and keys that name no field are not read here (Json.NET ignores a key that names no field). Left out: what a build's
#: AgentManager reads from every action before it dispatches it (action, sequenceId, renderImage,
#: renderInstanceSegmentation; see docs/player.md for what the player does with them).
_SERVER_ACTION_FIELDS = _field_kinds("""
int: agentCount targetFrameRate objectVariation agentId thirdPartyCameraId horizon randomSeed numPlacementAttempts
     maxStepCount
float: timeScale dronePositionRandomNoiseSigma gridSize y fieldOfView x z pushAngle handDistance movementGaussianMu
       movementGaussianSigma rotateGaussianMu rotateGaussianSigma maxAgentsDistance moveMagnitude startAgentsRotatedBy
       visibilityDistance cameraY TimeUntilRoomTemp timeStep mass drag angularDrag minDistance maxDistance noise
       agentRadius rotateStepDegrees degrees r g b TimeToWaitForObjectsToComeToRest scale speed radius
float?: fixedDeltaTime massThreshold
bool: makeAgentsVisible allowAgentsToIntersect standing forceAction applyActionNoise forceKinematic
      alwaysReturnVisibleRange snapToGrid rotateOnTeleport forceVisible anywhere randomizeOpen autoSimulation
      simplifyPhysics uniquePickupableObjectTypes randomizeObjectAppearance renderDepthImage renderSemanticSegmentation
      renderNormalsImage renderFlowImage placeStationary allowDecayTemperature topView orthographic grid manualInteract
      fastActionEmit returnToStart handCameraSpace stopArmMovementOnContact disableRendering restrictMovement
string: quality objectType receptacleObjectType receptacleObjectId objectId skyboxColor sceneName fillLiquid StateChange
        agentControllerType agentMode visibilityScheme coordinateSpace
Vector3: rotation position direction
""")
#: The same by lower-case name: Json.NET matches a key to a field by its exact name, else ignoring case.
_SERVER_ACTION_FIELDS_ANY_CASE = {name.lower(): kind for name, kind in _SERVER_ACTION_FIELDS.items()}


def _read_server_action(action: dict) -> None:
    """Raise ActionFailed as a build answers an action it reads into a whole ServerAction (Initialize, Reset, LookUp,
    LookDown) when Json.NET's serializer cannot read one of its values into the field it names: the keys in the
    action's order, the first that fails answered (see :func:`_json_net_read`). Run for those actions only."""
    for key, value in action.items():
        kind = _SERVER_ACTION_FIELDS.get(key)
        if kind is None:
            kind = _SERVER_ACTION_FIELDS_ANY_CASE.get(key.lower()) if isinstance(key, str) else None
            if kind is None:
                continue
        if kind == "Vector3":
            if isinstance(value, dict):
                for axis, v in value.items():
                    if isinstance(axis, str) and axis.lower() in ("x", "y", "z"):
                        _json_net_read("float", v, f"{key}.{axis}")
            continue  # (another value: the action's own conversion answers it)
        _json_net_read(kind, value, key)


def _json_number(value: Any) -> Any:
    """``value`` as Json.NET converts it to a build's float parameter, when it is a bool or a string: a bool is 1 or 0,
    a string is parsed as .NET parses it (``"30"``, ``" 1,000.5 "``, ``"1e3"``). Returns ``None`` for a string that is
    not such a number (``"abc"``, ``"1_0"``, ``"0x10"``: .NET refuses them), and anything else (a number, null, an
    object) unchanged. (An int parameter's: :func:`_int_argument`.)"""
    if isinstance(value, bool):
        return int(value)
    if not isinstance(value, str):
        return value
    match = _NET_FLOAT.match(value)
    if match is None:
        return _NET_SPECIAL.get(value.strip())
    try:
        return float(match.group(1).replace(",", ""))
    except (ValueError, OverflowError):  # (more digits than float() takes: not a number this player can use)
        return None


def _json_string(value: Any) -> Any:
    """``value`` as Json.NET converts it to a build's string parameter or field: a number or a bool becomes its text
    (``5`` is ``"5"``, ``0.5`` ``"0.5"``, true ``"True"``, as .NET writes them); anything else is returned unchanged."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(int(value)) if value == int(value) and abs(value) < 1e15 else repr(value)
    return value


def _number(action: dict, key: str, default: float | None = None, *, lo: float | None = None,
            hi: float | None = None, whole_action: bool = False) -> float:
    """The float argument ``key`` (``default`` when not given), converted as a build's Json.NET converts it, within
    ``lo``..``hi`` (this player's own limits). ``whole_action``: an action a build reads into a whole ServerAction
    (Initialize, LookUp, LookDown), whose Json.NET reader throws its own exceptions, answered before the action runs
    (:func:`_read_server_action`; the ``InvalidArgument`` here is only a fallback); an action dispatched by its
    method's signature converts each argument with ``(float)JToken``, whose parse of a string that is not a number
    throws a FormatException (:data:`FORMAT_EXCEPTION`, errorCode null)."""
    value = action.get(key, default)
    if type(value) is not float and type(value) is not int:  # (a number, the usual case, is taken as it is)
        # As a build's Json.NET: a bool or a numeric string is converted; null, an object or an array is not (an
        # ArgumentException: a build's InvalidArgument, in its words), nor a string that is not a number (see above).
        converted = _json_number(value)
        if converted is None and isinstance(value, str) and not whole_action:
            raise ActionFailed(FORMAT_EXCEPTION)
        if converted is None or isinstance(converted, (dict, list)):
            raise _unconvertible(action, key, value, "float")
        value = converted
    if not _finite(value):
        raise ActionFailed(f"{key} must be a finite number, got {value!r}", "InvalidArgument")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        if lo is not None and hi is not None:
            bounds = f"between {lo:g} and {hi:g}"
        else:
            bounds = f"at least {lo:g}" if lo is not None else f"at most {hi:g}"
        raise ActionFailed(f"{key} must be {bounds}, got {value!r}", "InvalidArgument")
    return float(value)


#: ``base`` for :func:`_vector` of an optional vector whose axes not given are filled in later (each ``None``).
KEEP_AXES: tuple[None, None, None] = (None, None, None)


def _vector(value: Any, key: str, base: tuple[Any, Any, Any] | None = None) -> tuple[Any, Any, Any]:
    """``value`` ({x, y, z}) as a tuple, read as a build's Json.NET reads it into a Vector3: its keys in their order,
    each naming an axis in any case (``X`` is x), an axis not given 0. With ``base`` (an optional vector, as
    UpdateThirdPartyCamera's OptionalVector3, whose axes are nullable floats) an axis not given or null is ``base``'s
    (``None`` with :data:`KEEP_AXES`). An axis Json.NET cannot read (null in a Vector3, ``"abc"``, a bool, an
    object) fails as a build answers the exception (:func:`_json_net_read`, errorCode null, the path ``key.axis``);
    one that is not finite is this player's own InvalidArgument, as is a ``value`` that is not an object."""
    if not isinstance(value, dict):
        raise ActionFailed(f"{key} must be an object with x, y and z, got {value!r}", "InvalidArgument")
    out: list[Any] = [0.0, 0.0, 0.0] if base is None else list(base)
    for axis, v in value.items():
        i = _AXES.get(axis.lower()) if isinstance(axis, str) else None
        if i is None:
            continue  # (a key that names no field: Json.NET ignores it)
        if type(v) is not float and type(v) is not int:
            if v is None and base is not None:
                continue  # a nullable axis: not given
            _json_net_read("float", v, f"{key}.{axis}")
            v = _json_number(v)  # (a string .NET parses, as Json.NET converts it)
        out[i] = v
    for i, v in enumerate(out):
        if v is not None and not _finite(v):
            raise ActionFailed(f"{key}.{'xyz'[i]} must be a finite number, got {v!r}", "InvalidArgument")
    return tuple(v if v is None else float(v) for v in out)  # type: ignore[return-value]


_AXES = {"x": 0, "y": 1, "z": 2}


def _bool_argument(name: str, key: str, value: Any) -> bool:
    """A bool parameter of an action dispatched by signature, as Json.NET converts the value: a bool, a number (true
    unless 0) or the string "true"/"false" (any case); anything else, null included, cannot be converted
    (``InvalidArgument``, a build's message)."""
    if type(value) is bool:
        return value
    if _finite(value):
        return value != 0
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    shown = "" if value is None else _clip(value if isinstance(value, str) else repr(value), 100)
    raise ActionFailed(f"action: {name} has an invalid argument: {key} (=={shown}). Cannot convert to: Boolean",
                       "InvalidArgument")


def _missing(name: str, keys: list[str]) -> ActionFailed:
    """The failure of an action dispatched by signature that was not given ``keys`` (parameters without a default), as a
    build's ActionDispatcher answers it: every missing one named, in the parameter order, ``MissingArguments``."""
    return ActionFailed(f"action: {name} is missing the following arguments: {','.join(keys)}", "MissingArguments")


def _cs_float(value: float) -> str:
    """``value`` as a build writes a float (a C# float's ToString(): 7 significant digits, the shortest form), e.g. in
    an errorMessage: ``-5``, ``-2.5``, ``0.35``, ``1E-05``."""
    single = struct.unpack("<f", struct.pack("<f", value))[0]
    return f"{single:.7g}".replace("e", "E")


def _f4(value: float) -> str:
    """``value`` as C#'s ``ToString("F4")`` writes it (4 decimals), a value that rounds to zero written ``0.0000``."""
    text = f"{value:.4f}"
    return "0.0000" if text == "-0.0000" else text


def _exception(kind: str, message: str) -> ActionFailed:
    """A failure a build's action reports by throwing: its ActionDispatcher answers ``<exception type>: <message>``,
    with no errorCode (null)."""
    return ActionFailed(f"{kind}: {message}")


def _xyz(x: float, y: float, z: float) -> dict[str, float]:
    return {"x": round(x, 4), "y": round(y, 4), "z": round(z, 4)}


def _bounds(lo: tuple[float, float, float], hi: tuple[float, float, float]) -> dict[str, Any]:
    """An axis-aligned box from its lowest and highest corners, as a build's metadata gives one (an object's
    ``axisAlignedBoundingBox``, the ``sceneBounds``): ``cornerPoints``, the eight corners, x-major, each axis's
    high value first (as a build's loops over ``center + size / 2`` then ``center - size / 2``); ``center``;
    ``size``."""
    (lx, ly, lz), (hx, hy, hz) = lo, hi
    return {
        "cornerPoints": [[round(a, 4), round(b, 4), round(c, 4)] for a in (hx, lx) for b in (hy, ly) for c in (hz, lz)],
        "center": _xyz((lx + hx) / 2, (ly + hy) / 2, (lz + hz) / 2),
        "size": _xyz(hx - lx, hy - ly, hz - lz),
    }


def _synthetic_objects(n: int) -> list[dict[str, Any]]:
    """``n`` deterministic objects shaped like AI2-THOR's object metadata (about 1 KB each packed)."""
    out = []
    for i in range(n):
        x, y, z = (i % 17) * 0.25 - 2.0, 0.5 + (i % 3) * 0.25, (i // 17) * 0.25 - 2.0
        corners = [
            [round(x + dx, 3), round(y + dy, 3), round(z + dz, 3)]
            for dx in (-0.1, 0.1)
            for dy in (-0.1, 0.1)
            for dz in (-0.1, 0.1)
        ]
        out.append(
            {
                "objectId": f"Synthetic|{x:+06.2f}|{y:+06.2f}|{z:+06.2f}|{i}",
                "objectType": "Synthetic",
                "name": f"Synthetic_{i:05d}",
                "position": _xyz(x, y, z),
                "rotation": _xyz(0.0, float((i * 37) % 360), 0.0),
                "visible": False,
                "isInteractable": False,
                "receptacle": False,
                "toggleable": False,
                "isToggled": False,
                "breakable": False,
                "isBroken": False,
                "canFillWithLiquid": False,
                "isFilledWithLiquid": False,
                "dirtyable": False,
                "isDirty": False,
                "cookable": False,
                "isCooked": False,
                "sliceable": False,
                "isSliced": False,
                "openable": False,
                "isOpen": False,
                "openness": 0.0,
                "pickupable": False,
                "isPickedUp": False,
                "moveable": False,
                "mass": 1.0,
                "salientMaterials": ["Plastic", "Wood"],
                "receptacleObjectIds": None,
                "distance": round(math.hypot(x, z), 4),
                "objectOrientedBoundingBox": None,
                "axisAlignedBoundingBox": {
                    "cornerPoints": corners,
                    "center": _xyz(x, y, z),
                    "size": _xyz(0.2, 0.2, 0.2),
                },
                "parentReceptacles": None,
                "isMoving": False,
                "assetId": f"Synthetic_Asset_{i % 50}",
            }
        )
    return out


def _euler_angles(x: float, y: float, z: float) -> tuple[float, float, float]:
    """A rotation of ``x`` (pitch), ``y`` (yaw), ``z`` (roll) degrees as a build's metadata reports it, from its
    Transform's ``eulerAngles``: each angle in [0, 360), and the pitch in [0, 90] or [270, 360), a pitch past straight
    down or up being the same orientation turned over (``180 - x``, ``y + 180``, ``z + 180``). Unity chooses another
    split of yaw and roll at a pitch of exactly 90 or 270, which this does not model."""
    x %= 360.0
    if 90.0 < x < 270.0:
        x, y, z = (180.0 - x) % 360.0, y + 180.0, z + 180.0
    return _yaw(x) + 0.0, _yaw(y) + 0.0, _yaw(z) + 0.0  # (+ 0.0: no -0.0)


#: Where a build's agent holds an object: its hand, a child of the agent's camera, this far below it (y) and ahead of
#: it (z) in the camera's frame (metres; an iTHOR agent's default hand position).
HAND_OFFSET = (0.0, -0.16, 0.38)
_HAND_LOCAL = {"localPosition": _xyz(*HAND_OFFSET), "localRotation": _xyz(0.0, 0.0, 0.0)}


def _hand_pose(agent: "_Agent") -> dict[str, Any]:
    """A build's ``heldObjectPose``: its agent's hand (:data:`HAND_OFFSET` from the camera, turned with it), world
    ``position`` and ``rotation`` (a Transform's ``eulerAngles``: the camera's pitch and the agent's yaw), then
    ``localPosition`` and ``localRotation`` (relative to the camera)."""
    cx, cy, cz = agent.camera_position()
    yaw, pitch = math.radians(agent.yaw), math.radians(agent.horizon)
    _, down, ahead = HAND_OFFSET
    # The camera's up and forward vectors (renderd.player.renderer.camera_basis), without numpy.
    up = (math.sin(yaw) * math.sin(pitch), math.cos(pitch), math.cos(yaw) * math.sin(pitch))
    forward = (math.sin(yaw) * math.cos(pitch), -math.sin(pitch), math.cos(yaw) * math.cos(pitch))
    position = _xyz(*(c + down * u + ahead * f + 0.0 for c, u, f in zip((cx, cy, cz), up, forward)))
    return {"position": position, "rotation": _xyz(*_euler_angles(agent.horizon, agent.yaw, 0.0)), **_HAND_LOCAL}


#: The return slots of a build's MetadataWrapper that only actions this player does not have fill, as a build sends
#: them after any other action (its agent empties them once each answer is made); ``visibleRange`` null as without
#: Initialize's ``alwaysReturnVisibleRange``.
_NO_EXTRA_RETURNS: dict[str, Any] = {
    "flatSurfacesOnGrid": [], "distances": [], "normals": [], "isOpenableGrid": [], "segmentedObjectIds": [],
    "objectIdsInBox": [], "actionIntReturn": 0, "actionFloatReturn": 0.0, "actionStringsReturn": [],
    "actionFloatsReturn": [], "actionVector3sReturn": [], "visibleRange": None,
}


class _Camera:
    """A third-party camera added with AddThirdPartyCamera."""

    __slots__ = ("position", "rotation", "fov")

    def __init__(self, position: tuple[float, float, float], rotation: tuple[float, float, float], fov: float):
        self.position = position
        self.rotation = rotation
        self.fov = fov

    def metadata(self, index: int) -> dict[str, Any]:
        return {
            "thirdPartyCameraId": index,
            "position": _xyz(*self.position),
            "rotation": _xyz(*_euler_angles(*self.rotation)),
            "fieldOfView": self.fov,
        }


#: The agent's per-action keys, in wire order; everything else in an agent's metadata is decided by the
#: player's state alone (:class:`_View`).
_ACTION_KEYS = ("lastAction", "lastActionSuccess", "errorMessage", "errorCode", "actionReturn")
#: Compact JSON, as the HTTP link sends metadata.
_dumps = json.JSONEncoder(separators=(",", ":")).encode
_pack = msgpack.Packer(use_bin_type=True).pack
_SEQUENCE_KEY = _pack("sequenceId")
#: The top-level ``"thirdPartyCameras"`` pair, packed and as JSON: always null, as a build's AgentManager sends it
#: (it lists the cameras in each agent's map only; its MultiAgentMetadata's own field is never set).
_PACKED_TOP_CAMERAS = _pack("thirdPartyCameras") + _pack(None)
_JSON_TOP_CAMERAS = b'"thirdPartyCameras":null'
#: ``"activeAgentId" N``, packed, by N.
_PACKED_ACTIVE = tuple(_pack("activeAgentId") + _pack(i) for i in range(MAX_AGENTS))


def _packed_pairs(d: dict[str, Any]) -> bytes:
    """The key-value pairs of ``d`` as a msgpack map holds them (without the map's header)."""
    return b"".join(_pack(k) + _pack(v) for k, v in d.items())


def _return_size(result: Any) -> int:
    """At most how many bytes an actionReturn takes (msgpack or JSON) beyond what :data:`AGENT_METADATA_BASE`
    counts: a list's items :data:`RETURN_ITEM_SIZE` bytes each (the player's lists hold positions or scene
    names), nothing for anything else (a dict of a few fields)."""
    return len(result) * RETURN_ITEM_SIZE if isinstance(result, list) else 0


class _Outcome:
    """What an agent's last action came to: its per-action metadata values (:data:`_ACTION_KEYS` order), also
    packed as msgpack pairs and as JSON pairs on first use, so an agent that did not act is not packed again."""

    __slots__ = ("values", "_packed", "_json", "return_size")

    def __init__(self, values: tuple) -> None:
        self.values = values
        self._packed: bytes | None = None
        self._json: bytes | None = None
        #: At most how many bytes the actionReturn takes beyond :data:`AGENT_METADATA_BASE` (:func:`_return_size`).
        self.return_size = _return_size(values[4])

    def packed(self) -> bytes:
        """The pairs packed. Raises TypeError if the action's return value cannot be packed (the player's never is)."""
        if self._packed is None:
            name, success, error, code, result = self.values
            fields = msgpack.packb(
                ("lastAction", name, "lastActionSuccess", success, "errorMessage", error, "errorCode", code,
                 "actionReturn", result),
                use_bin_type=True,
            )
            self._packed = fields[1:]  # a fixarray of the 10 items: its header byte, then the pairs as a map holds them
        return self._packed

    def json(self) -> bytes:
        """The pairs as compact JSON (no braces). Raises TypeError for a return value JSON cannot take."""
        if self._json is None:
            self._json = _dumps(dict(zip(_ACTION_KEYS, self.values)))[1:-1].encode("utf-8")
        return self._json


class _View:
    """What one agent's metadata holds apart from its action's own fields, for one player state.

    Built once per state (scene, the agent's pose, resolution, field of view, visibility distance, cameras
    or, for an answer without images, none) and reused while the state does not change, as both a dict's parts and packed msgpack. An answer's
    metadata is packed by hand around the per-action values::

        map(4) "agents" array(N)
          per agent:   packed_open     map(M) name.. screenWidth.. screenHeight..
                       (per action)    lastAction.. lastActionSuccess.. errorMessage.. errorCode.. actionReturn..
                       packed_close    sceneName.. ... sceneBounds..
        "sequenceId" (per action) "activeAgentId" (per action) "thirdPartyCameras" nil

    which is byte for byte what ``msgpack.packb`` makes of the dict (same keys in the same order). The same
    parts as compact JSON (``json_parts``, for the HTTP link) are made on first use.
    """

    __slots__ = ("agent_head", "agent_tail", "packed_open", "packed_close", "_json")

    def __init__(self, agent_head: dict[str, Any], agent_tail: dict[str, Any]) -> None:
        self.agent_head = agent_head
        self.agent_tail = agent_tail
        self.packed_open = msgpack.Packer().pack_map_header(len(agent_head) + len(_ACTION_KEYS) + len(agent_tail)) \
            + _packed_pairs(agent_head)
        self.packed_close = _packed_pairs(agent_tail)
        self._json: tuple[bytes, bytes] | None = None

    def json_parts(self) -> tuple[bytes, bytes]:
        """``{`` + the head pairs + ``,``; and ``,`` + the tail pairs + ``}``, as compact JSON."""
        if self._json is None:
            def pairs(d: dict[str, Any]) -> str:
                return _dumps(d)[1:-1]

            self._json = (
                ("{" + pairs(self.agent_head) + ",").encode("utf-8"),
                ("," + pairs(self.agent_tail) + "}").encode("utf-8"),
            )
        return self._json


@functools.lru_cache(maxsize=16)
def _packed_top(agents: int) -> bytes:
    """The start of an answer's metadata: a map of four keys, its first ``"agents"`` with ``agents`` maps."""
    packer = msgpack.Packer()
    return packer.pack_map_header(4) + _pack("agents") + packer.pack_array_header(agents)


class Answer:
    """One answer: the metadata (as a dict, or as msgpack) and the images, in wire order and layout.

    :meth:`metadata` builds a new top-level dict on each call whose nested parts (objects, colors,
    cameras...) are shared with other answers from the same player state: treat them as read-only, like
    the image arrays. :meth:`packed_metadata` is exactly ``encode_metadata(answer.metadata())``, assembled
    from bytes cached per player state with only the per-action values packed. ``active_agent`` is the
    answer's ``activeAgentId``, the agent that acted.
    """

    __slots__ = ("_views", "_outcomes", "active_agent", "sequence_id", "images")

    def __init__(self, views: list[_View], outcomes: list[_Outcome], active_agent: int, sequence_id: int,
                 images: Images) -> None:
        self._views = views
        self._outcomes = outcomes
        self.active_agent = active_agent
        self.sequence_id = sequence_id
        self.images = images

    @property
    def _view(self) -> _View:
        """The acting agent's view."""
        return self._views[self.active_agent]

    def metadata(self) -> dict[str, Any]:
        """The metadata dict (a fresh top level; nested parts shared, read-only)."""
        agents = []
        for view, outcome in zip(self._views, self._outcomes):
            agent = dict(view.agent_head)
            agent.update(zip(_ACTION_KEYS, outcome.values))
            agent.update(view.agent_tail)
            agents.append(agent)
        return {"agents": agents, "sequenceId": self.sequence_id, "activeAgentId": self.active_agent,
                "thirdPartyCameras": None}

    def packed_metadata(self) -> bytes:
        """The metadata packed with msgpack, as :func:`renderd.protocol.encode_metadata` packs it.

        Raises TypeError if an action's return value cannot be packed (the player's never is).
        """
        views = self._views
        parts = [_packed_top(len(views))]
        for view, outcome in zip(views, self._outcomes):
            parts += (view.packed_open, outcome.packed(), view.packed_close)
        parts += (_SEQUENCE_KEY, msgpack.packb(self.sequence_id), _PACKED_ACTIVE[self.active_agent],
                  _PACKED_TOP_CAMERAS)
        return b"".join(parts)

    def json_metadata(self) -> bytes:
        """The metadata as compact JSON, exactly ``json.dumps(answer.metadata(), separators=(",", ":"))``
        encoded as UTF-8, assembled from text cached per player state. Raises TypeError if an action's
        return value is not JSON-serialisable (the player's always is)."""
        parts = [b'{"agents":[']
        for i, (view, outcome) in enumerate(zip(self._views, self._outcomes)):
            head, tail = view.json_parts()
            parts += (b"," if i else b"", head, outcome.json(), tail)
        parts += (b'],"sequenceId":', _dumps(self.sequence_id).encode("ascii"), b',"activeAgentId":',
                  _dumps(self.active_agent).encode("ascii"), b",", _JSON_TOP_CAMERAS, b"}")
        return b"".join(parts)

    def as_tuple(self) -> tuple[dict[str, Any], Images]:
        """``(metadata(), images)``, what :meth:`Player.handle` returns."""
        return self.metadata(), self.images


class _Agent:
    """One agent: where it stands and looks, whether it stands or crouches (``standing``: a teleport's; a made agent
    stands), and what its last action came to (``None`` for an agent made by the action being answered, which it then
    reports, as a build's agents each run the Initialize that made them)."""

    __slots__ = ("x", "z", "yaw", "horizon", "standing", "outcome")

    def __init__(self, x: float, z: float, yaw: float, horizon: float) -> None:
        self.x, self.z, self.yaw, self.horizon = x, z, yaw, horizon
        self.standing = True
        self.outcome: _Outcome | None = None

    @property
    def pose(self) -> Pose:
        return Pose(self.x, self.z, self.yaw, self.horizon)

    def camera_position(self) -> tuple[float, float, float]:
        """Where the agent's camera is (metres): :data:`CAMERA_HEIGHT` above its position standing, at its position
        crouching (a build's physics agent lowers its camera by as much)."""
        return (self.x, AGENT_Y + CAMERA_HEIGHT if self.standing else AGENT_Y, self.z)


def _agent_index(value: Any, agents: int) -> int | None:
    """The agent an action's ``agentId`` names, or ``None`` if it names none of the ``agents``. Converted as a build's
    AgentManager converts it, ``(int)JToken`` (``Convert.ToInt32``): an integer as it is, a float rounded to the
    nearest integer, a tie to the even one (``1.5`` names agent 2), a bool 1 or 0 (``true`` names agent 1), a string
    of digits and a sign as ``Int32.Parse`` reads it (``"1"`` names agent 1). What it cannot convert (null, ``"1.5"``,
    ``"abc"``, an object, a value beyond 32 bits) names no agent: a build throws there, outside any action."""
    if type(value) is int:  # (the usual case, first)
        return value if 0 <= value < agents else None
    if isinstance(value, bool):
        index = int(value)
    elif isinstance(value, float):
        if not -2147483648.5 <= value < 2147483647.5:  # (Convert.ToInt32 overflows; NaN too)
            return None
        index = round(value)
    elif isinstance(value, str):
        match = _NET_INT.match(value)
        if match is None or len(match.group(1)) > 12:
            return None
        index = int(match.group(1))
    else:
        return None
    return index if 0 <= index < agents else None


class Player:
    """The agents in one scene: applies actions and produces (metadata, images). See the module docstring.

    ``agents`` lists the agents in agent order, ``active`` is the acting agent's index (the last answer's
    ``activeAgentId``); ``pose``, ``x``, ``z``, ``yaw`` and ``horizon`` are the acting agent's.
    """

    def __init__(
        self,
        width: int = 300,
        height: int = 300,
        platform: str | None = None,
        headless: bool = False,
        renderer: Renderer | None = None,
        static_frame: bool = False,
        metadata_objects: int = 0,
        logger: logging.Logger | None = None,
    ) -> None:
        if not (0 < width <= MAX_RESOLUTION and 0 < height <= MAX_RESOLUTION):
            raise ValueError(f"screen size {width} x {height} is outside 1..{MAX_RESOLUTION}")
        if metadata_objects < 0:
            raise ValueError("metadata_objects must be >= 0")
        self.width = width
        self.height = height
        self.platform = platform
        self.headless = headless
        self.renderer: Renderer = renderer if renderer is not None else NumpyRenderer()
        # Visibility always uses a small CPU render, whatever renders the frames.
        self._probe = self.renderer if isinstance(self.renderer, NumpyRenderer) else NumpyRenderer()
        # A renderer's optional check(): raises when it can no longer render (the GL renderer's X server is
        # gone). Called before every answer, as a Unity player dies of a lost display at its next frame,
        # even one this player sends from its caches without rendering.
        self._renderer_check: Callable[[], None] | None = getattr(self.renderer, "check", None)
        self.static_frame = static_frame
        self.log = logger or logging.getLogger(__name__)
        self.rgb_bytes_per_pixel = 4 if platform in RGBA_PLATFORMS else 3
        self._synthetic = _synthetic_objects(metadata_objects)
        self._wire_cache: OrderedDict[RenderState, tuple[np.ndarray, np.ndarray, np.ndarray]] = OrderedDict()
        self._static: dict[tuple[str, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        # The normals and class segmentation images (wire layout), kept as the frames above are; filled only by
        # answers that have them.
        self._maps_cache: OrderedDict[RenderState, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._static_maps: dict[tuple[str, int, int], tuple[np.ndarray, np.ndarray]] = {}
        #: Whether the action being answered had its per-step normals / class segmentation switches refused.
        self._maps_refused = False
        self._image_list_key: tuple | None = None  # what the last image list was built for
        self._image_list: Images = []
        self._views: OrderedDict[tuple, _View] = OrderedDict()
        self._default_settings()
        self.sequence_id = 0
        #: Largest answer the transport carries (bytes), None for no limit: see :meth:`limit_answer_size`.
        self.max_answer_size: int | None = None
        #: Largest metadata field the transport carries (bytes), None for no limit: :meth:`limit_metadata_size`.
        self.max_metadata_size: int | None = None
        self._load_scene(scene_by_name(DEFAULT_SCENE), DEFAULT_SCENE)

    # -- public API ----------------------------------------------------------------------------------
    def first_message(self) -> tuple[dict[str, Any], Images]:
        """The message a build sends once it is up: sequenceId 0, lastAction "", the start view."""
        return self.first_answer().as_tuple()

    def handle(self, action: dict[str, Any]) -> tuple[dict[str, Any], Images]:
        """Apply ``action`` and return its answer. Never raises for a bad action (see module docstring)."""
        return self.answer(action).as_tuple()

    def error_answer(self, action: dict[str, Any], message: str, code: str = "InvalidArgument") -> tuple[dict, Images]:
        """An answer to ``action`` reporting failure (for a link that rejects an action itself)."""
        return self.rejected_answer(action, message, code).as_tuple()

    def limit_answer_size(self, limit: int) -> None:
        """Refuse (``InvalidArgument``, changing nothing) a ChangeResolution, AddThirdPartyCamera or Initialize
        (of several agents) after which the largest possible answer would be over ``limit`` bytes: every image
        type (RGB, depth, instance segmentation, which any action may ask for) of every camera and agent, plus
        :data:`ANSWER_METADATA_ALLOWANCE` per agent. A link calls this with its transport's limit; the lowest
        limit given holds."""
        if self.max_answer_size is None or limit < self.max_answer_size:
            self.max_answer_size = limit

    def limit_metadata_size(self, limit: int) -> None:
        """Refuse (``InvalidArgument``, changing nothing) an Initialize of several agents whose metadata could be
        over ``limit`` bytes: :data:`AGENT_METADATA_BASE` per agent, and :data:`SYNTHETIC_OBJECT_SIZE` per
        agent and synthetic object; and a GetReachablePositions whose positions (:data:`RETURN_ITEM_SIZE` each),
        with the actionReturns the other agents keep, could make it larger. A link calls this with the largest
        metadata field (or form part) its transport carries; the lowest limit given holds. (One agent's metadata
        always fits: ``--metadata-objects`` is limited to that.)"""
        if self.max_metadata_size is None or limit < self.max_metadata_size:
            self.max_metadata_size = limit

    def largest_answer_size(self, width: int, height: int, cameras: int, agents: int | None = None,
                            maps: int | None = None) -> int:
        """The largest answer (bytes, see :meth:`limit_answer_size`) at ``width`` x ``height`` with
        ``cameras`` third-party cameras and ``agents`` agents (default: as many as the player has), and ``maps`` of
        the normals and class segmentation images (RGBA, 4 bytes per pixel each; default: as many as Initialize
        switched on)."""
        agents = len(self.agents) if agents is None else agents
        maps = self.render_normals + self.render_classes if maps is None else maps
        per_pixel = self.rgb_bytes_per_pixel + 4 + 4 + 4 * maps
        images = 0 if self.headless else (cameras + agents) * width * height * per_pixel
        return images + agents * ANSWER_METADATA_ALLOWANCE

    def _check_answer_size(self, what: str, width: int, height: int, cameras: int, agents: int | None = None,
                           maps: int | None = None) -> None:
        limit = self.max_answer_size
        if limit is None:
            return
        # An action that keeps the agents keeps their actionReturns too: what they take beyond the allowance counts.
        kept = self._kept_return_size() if agents is None else 0
        agents = len(self.agents) if agents is None else agents
        size = self.largest_answer_size(width, height, cameras, agents, maps) + kept
        if size > limit:
            with_agents = f" and {agents} agents" if agents > 1 else ""
            maps = self.render_normals + self.render_classes if maps is None else maps
            with_maps = " (normals and class segmentation included)" if maps == 2 else (
                " (its normals or class segmentation included)" if maps else "")
            raise ActionFailed(
                f"{what}: at {width} x {height} with {cameras} third-party camera(s){with_agents} an answer with every "
                f"image type{with_maps} would be up to {size} bytes, over the {limit} bytes this player's transport "
                f"carries", "InvalidArgument",
            )

    def first_answer(self) -> Answer:
        """:meth:`first_message` as an :class:`Answer`."""
        self.sequence_id = 0
        self.active = 0
        self._maps_refused = False
        return self._answer({}, "", True, "", None, None)

    def answer(self, action: dict[str, Any]) -> Answer:
        """:meth:`handle` as an :class:`Answer` (whose metadata can be had packed). Never raises for a bad action."""
        started = time.perf_counter()
        name = action.get("action")
        seq = action.get("sequenceId")
        seq_ok = _sequence_id_ok(seq)
        self.sequence_id = seq if seq_ok else _count_on(self.sequence_id)
        if isinstance(name, str) and not _encodable(name):
            name = name.encode("utf-8", "replace").decode("utf-8")  # echoed as lastAction: it must pack
            bad_name = True
        else:
            bad_name = False
        success, error, code, result = True, "", None, None
        self._maps_refused = True  # (until the action's switches are checked: an action that fails before has none)
        agent_id = action.get("agentId", 0)
        index = _agent_index(agent_id, len(self.agents))
        self.active = 0 if index is None else index  # agent 0 answers an action that names no agent
        try:
            if not isinstance(name, str) or not name:
                raise ActionFailed(f"the action has no 'action' name: {action!r}", "InvalidAction")
            if bad_name:
                raise ActionFailed(f"the action name {name!r} is not valid Unicode (a lone surrogate)", "InvalidAction")
            if seq is not None and not seq_ok:
                raise ActionFailed(f"sequenceId must be an integer of at most 64 bits, got {seq!r}",
                                   "InvalidArgument")
            if index is None:
                raise ActionFailed(f"agentId {agent_id!r} does not name one of the {len(self.agents)} agent(s) "
                                   f"(0..{len(self.agents) - 1})", "InvalidArgument")
            method = ACTIONS.get(name)
            if method is None:
                raise ActionFailed(f"Invalid action: {name!r} is not an action this player knows", "InvalidAction")
            _check_arguments(name, action)
            self._maps_refused = False
            if not _MAP_SWITCHES.isdisjoint(action):  # (a step without them, the usual case, checks nothing)
                self._check_step_maps(name, action)
            result = getattr(self, method)(action)
        except ActionFailed as exc:
            success, error, code = False, exc.message, exc.code
        except Exception as exc:  # a bug this action's arguments found: answered as a failure, never a crash
            self.log.exception("action %s failed unexpectedly", _clip(repr(name), MAX_ECHOED_NAME))
            success, error, code, result = False, _clip(f"{name}: internal error: {type(exc).__name__}: {exc}",
                                                        MAX_ERROR_MESSAGE), None, None
        echoed = _clip(name, MAX_ECHOED_NAME) if isinstance(name, str) else ""
        answer = self._answer(action, echoed, success, error, code, result)
        if self.log.isEnabledFor(logging.DEBUG):
            self.log.debug(
                "action %s seq=%s -> %s%s (%.1f ms)",
                _clip(str(name), MAX_ECHOED_NAME),
                self.sequence_id,
                "ok" if success else "failed",
                f": {error}" if error else "",
                (time.perf_counter() - started) * 1000,
            )
        return answer

    def rejected_answer(self, action: dict[str, Any], message: str, code: str = "InvalidArgument") -> Answer:
        """:meth:`error_answer` as an :class:`Answer`."""
        seq = action.get("sequenceId")
        self.sequence_id = seq if _sequence_id_ok(seq) else _count_on(self.sequence_id)
        name = action.get("action")
        name = _clip(name.encode("utf-8", "replace").decode("utf-8"), MAX_ECHOED_NAME) if isinstance(name, str) else ""
        index = _agent_index(action.get("agentId", 0), len(self.agents))
        self.active = 0 if index is None else index
        self._maps_refused = True  # a rejected action's per-step normals / class switches are not checked: not taken
        return self._answer(action, name, False, _clip(message, MAX_ERROR_MESSAGE), code, None)

    # The acting agent's pose (the last action's, agent 0 after a Reset), read-only: actions move agents.
    @property
    def pose(self) -> Pose:
        """Where the acting agent stands and looks."""
        return self._agent.pose

    @property
    def x(self) -> float:
        return self._agent.x

    @property
    def z(self) -> float:
        return self._agent.z

    @property
    def yaw(self) -> float:
        return self._agent.yaw

    @property
    def horizon(self) -> float:
        return self._agent.horizon

    @property
    def _agent(self) -> _Agent:
        """The agent the action being answered names (the acting agent)."""
        return self.agents[self.active]

    def _others(self) -> list[tuple[float, float, str]]:
        """The agents other than the acting one, as obstacles for :meth:`Scene.collision`, each named as a build names
        an agent in a blocked move's errorMessage (``Agent 1``)."""
        return [(a.x, a.z, f"Agent {i}") for i, a in enumerate(self.agents) if i != self.active]

    # -- actions -------------------------------------------------------------------------------------
    # A build's AgentManager.Initialize and its agent's Initialize take a whole ServerAction: any key.
    @_action("Initialize", takes=ANY_ARGUMENTS)
    def _initialize(self, action: dict) -> dict[str, float]:
        # As a build's Initialize, in its order. AgentManager's Initialize makes the agent controller anew (every
        # setting back to its default: a setting not sent takes its default, not an earlier Initialize's value)
        # and hands the action to it; BaseFPSAgentController's Initialize then sets the camera's field of view to
        # 90 (InitializeBody), reads a gridSize of 0 as 0.25, and checks and applies, stopping at the first
        # failure with what it applied so far kept: fieldOfView (0 not applied; below 0 or from 180 fails),
        # rotateStepDegrees (not above 0 fails; then applied, and with snapToGrid, true unless sent, anything
        # but 90, 180, 270 or a multiple of 360 fails; else snapToGrid is set), visibilityDistance (applied when
        # above 0), gridSize (not above 0 or above 5 fails). Whether that failed or not, AgentManager then sets the
        # depth and segmentation switches from the action and adds the other agents, each running the same Initialize.
        # A build's failures there set no errorCode (null). An action whose values Json.NET cannot read into the
        # ServerAction (a string that is not a number, null) has failed before this runs, as a build's does
        # (_read_server_action: errorCode null, nothing applied). What the player refuses for its own reasons (limits
        # a build does not have, where it would stop answering or the transport could not carry the answer) is
        # refused (InvalidArgument) with nothing applied.
        given = {}
        for key in ("gridSize", "rotateStepDegrees", "fieldOfView", "visibilityDistance"):
            if key in action:
                given[key] = _number(action, key, whole_action=True)
        snap = _flag(action.get("snapToGrid"), True)
        settings: dict[str, Any] = dict(_DEFAULT_SETTINGS)
        failure = None
        fov = given.get("fieldOfView", 0.0)
        if 0 < fov < 180:
            settings["fov"] = fov
        elif fov != 0:
            failure = f"Initialize: fieldOfView must be above 0 and below 180, got {fov:g}"
        if failure is None:
            rotate = given.get("rotateStepDegrees", DEFAULT_ROTATE_DEGREES)
            if rotate <= 0:
                failure = f"Initialize: rotateStepDegrees must be above 0, got {rotate:g}"
            else:
                settings["rotate_step"] = rotate
                if snap and rotate not in (90.0, 180.0, 270.0) and rotate % 360 != 0:
                    failure = (f"Initialize: rotateStepDegrees {rotate:g} needs snapToGrid false: with snapToGrid "
                               f"true (the default) it must be 90, 180, 270 or a multiple of 360")
                else:
                    # A build sets its agent's snapToGrid here, once the rotation step passed: an Initialize that failed
                    # before leaves the new agent's false.
                    settings["snap_to_grid"] = snap
        if failure is None:
            visibility = given.get("visibilityDistance", 0.0)
            if visibility > 0:
                settings["visibility_distance"] = visibility
            grid = given.get("gridSize", 0.0) or DEFAULT_GRID_SIZE
            if not 0 < grid <= MAX_GRID_SIZE:
                failure = f"Initialize: gridSize must be above 0 and at most {MAX_GRID_SIZE:g}, got {grid:g}"
            else:
                settings["grid_size"] = grid
        settings["render_depth"] = _flag(action.get("renderDepthImage"), False)
        settings["render_ids"] = _flag(action.get("renderInstanceSegmentation"), False)
        settings["render_normals"] = _flag(action.get("renderNormalsImage"), False)
        # renderSemanticSegmentation, or the name older builds (and AI2-THOR's controller before 3.0) gave it.
        settings["render_classes"] = (_flag(action.get("renderSemanticSegmentation"), False)
                                      or _flag(action.get("renderClassImage"), False))
        if settings["render_normals"] or settings["render_classes"]:
            self._check_maps_rendered("Initialize", settings["render_normals"], settings["render_classes"])
        # The player's own limits, on what the Initialize would leave.
        if settings["grid_size"] < MIN_GRID_SIZE:
            raise ActionFailed(f"Initialize: gridSize must be at least {MIN_GRID_SIZE:g} in this player (its free "
                               f"positions would take minutes to find), got {settings['grid_size']:g}",
                               "InvalidArgument")
        if not MIN_FOV <= settings["fov"] <= MAX_FOV:
            raise ActionFailed(f"Initialize: fieldOfView must be between {MIN_FOV:g} and {MAX_FOV:g} in this player, "
                               f"got {settings['fov']:g}", "InvalidArgument")
        agents = self._initial_agents(action, settings["grid_size"],
                                      settings["render_normals"] + settings["render_classes"])
        for attr, value in settings.items():
            setattr(self, attr, value)
        self.agents = agents
        if failure is not None:
            raise ActionFailed(failure)
        self._onto_grid()
        # What a build returns (its InitializeReturn): AI2-THOR's controller converts depth with these planes.
        return {"cameraNearPlane": CAMERA_NEAR_PLANE, "cameraFarPlane": CAMERA_FAR_PLANE}

    def _onto_grid(self) -> None:
        """Each agent onto the grid, as a build's Initialize ends once its gridSize is taken (its
        checkInitializeAgentLocationAction, whatever snapToGrid says): from the grid point below and behind it
        (``floor`` of each coordinate), the first of that point, the one a step along +z, along +x, and along both,
        that the agent can walk to straight (and stand on) is where it goes. An agent on the grid stays where it is.
        None reachable: the Initialize fails (no errorCode), its settings kept, as a build's."""
        grid = self.grid_size
        mult = 1.0 / grid
        for i, agent in enumerate(self.agents):
            fx = math.floor(agent.x * mult + 1e-6) / mult
            fz = math.floor(agent.z * mult + 1e-6) / mult
            others = [(a.x, a.z, f"agent {j}") for j, a in enumerate(self.agents) if j != i]
            for x, z in ((fx, fz), (fx, fz + grid), (fx + grid, fz), (fx + grid, fz + grid)):
                x, z = round(x, 4) + 0.0, round(z, 4) + 0.0
                if (x, z) == (agent.x, agent.z) or self.scene.path_collision(agent.x, agent.z, x, z,
                                                                             others=others) is None:
                    agent.x, agent.z = x, z
                    break
            else:
                raise ActionFailed(f"Initialize: agent {i} at ({agent.x:g}, {agent.z:g}) can reach none of the points "
                                   f"of the {grid:g} m grid around it, as a build's Initialize moves it onto the grid")

    def _on_grid(self, x: float, z: float) -> bool:
        """Whether ``(x, z)`` is a point of the ``gridSize`` grid (to the 4 decimals positions are given in)."""
        return abs(self._snap(x) - x) <= 1e-4 and abs(self._snap(z) - z) <= 1e-4

    def _initial_agents(self, action: dict, grid_size: float, maps: int = 0) -> list[_Agent]:
        """The agents an Initialize makes (``agentCount``, 1 by default), as a build's AgentManager makes them:
        agent 0 where it stands, each other one a copy of it (its yaw and horizon) standing on a point of the
        flood of free positions ``2 * gridSize`` apart from agent 0 (:meth:`Scene.flood`): agent ``i`` on point
        ``i + 4``, or (only a grid under 0.2 m needs it) the next one no agent placed before stands too close
        to. ``agentCount`` is taken into 1..:data:`MAX_AGENTS` as a build takes it. Raises ActionFailed for a count that
        is not an integer, one that leaves
        out the acting agent, a room with too few points, or answers too large for the transport."""
        # A ServerAction's int field: Json.NET reads a string of digits ("2") into it, and rounds a float (2.5 is 2).
        count = _int_argument(action, "agentCount", action.get("agentCount", 1), whole_action=True)
        # As a build's AgentManager (addAgents): one agent for an agentCount under 2, at most one per agent colour.
        count = min(max(count, 1), MAX_AGENTS)
        if self.active >= count:
            raise ActionFailed(f"Initialize: agentId {self.active} would name none of the {count} agent(s) "
                               f"agentCount makes", "InvalidArgument")
        if count > 1 or maps:  # (one agent's answer fits: resolution and cameras were checked, without the maps)
            self._check_answer_size("Initialize", self.width, self.height, len(self.cameras), count, maps)
        if count > 1:
            self._check_metadata_size(count)
        first = self.agents[0]
        agents = [_Agent(first.x, first.z, first.yaw, first.horizon)]
        taken = [(first.x, first.z)]
        spots = itertools.islice(self.scene.flood(first.x, first.z, 2 * grid_size), FIRST_AGENT_SPOT, None)
        while len(agents) < count:
            for x, z in spots:
                if all((x - tx) ** 2 + (z - tz) ** 2 >= (2 * AGENT_RADIUS) ** 2 for tx, tz in taken):
                    break
            else:
                raise ActionFailed(
                    f"Initialize: {self.scene_name} has room for only {len(agents)} of the {count} agents at "
                    f"gridSize {grid_size:g}: a build places agent i on point i + 4 of the free positions reachable "
                    f"from agent 0 in steps of 2 x gridSize ({2 * grid_size:g} m)", "InvalidArgument")
            agents.append(_Agent(x, z, first.yaw, first.horizon))
            taken.append((x, z))
        return agents

    def _kept_return_size(self, but: int | None = None) -> int:
        """What the agents' kept actionReturns take beyond the allowance (:attr:`_Outcome.return_size`), leaving
        out agent ``but``'s."""
        return sum(a.outcome.return_size for i, a in enumerate(self.agents) if i != but and a.outcome is not None)

    def _check_return_size(self, what: str, size: int) -> None:
        """Refuse (``InvalidArgument``) an actionReturn of up to ``size`` bytes for the acting agent that, with the
        other agents' kept ones, could make the metadata larger than a field the transport carries
        (:meth:`limit_metadata_size`) or the answer larger than a message (:meth:`limit_answer_size`)."""
        agents = len(self.agents)
        returns = self._kept_return_size(but=self.active) + size
        metadata = agents * (AGENT_METADATA_BASE + len(self._synthetic) * SYNTHETIC_OBJECT_SIZE) + returns
        limit = self.max_metadata_size
        if limit is not None and metadata > limit:
            raise ActionFailed(
                f"{what}: its actionReturn (up to {size} bytes) would make the metadata of the {agents} agent(s), each "
                f"keeping its last actionReturn, up to {metadata} bytes, over the {limit} bytes this player's "
                f"transport carries in one field", "InvalidArgument")
        limit = self.max_answer_size
        answer = self.largest_answer_size(self.width, self.height, len(self.cameras)) + returns
        if limit is not None and answer > limit:
            raise ActionFailed(
                f"{what}: its actionReturn (up to {size} bytes) would make an answer with every image type up to "
                f"{answer} bytes, over the {limit} bytes this player's transport carries", "InvalidArgument")

    def _check_metadata_size(self, agents: int) -> None:
        limit = self.max_metadata_size
        size = agents * (AGENT_METADATA_BASE + len(self._synthetic) * SYNTHETIC_OBJECT_SIZE)
        if limit is not None and size > limit:
            raise ActionFailed(
                f"Initialize: the metadata of {agents} agents with {len(self._synthetic)} synthetic objects each "
                f"could be up to {size} bytes, over the {limit} bytes this player's transport carries in one field",
                "InvalidArgument",
            )

    # A build's AgentManager.Reset takes a whole ServerAction: any key.
    @_action("Reset", takes=ANY_ARGUMENTS)
    def _reset(self, action: dict) -> None:
        name = _json_string(action.get("sceneName"))
        if name is None or name == "":
            # A build's Reset loads the active scene again when sceneName is null or empty (AgentManager's
            # ResetCoroutine), as when it is not sent.
            name = self.scene_name
        scene = scene_by_name(name) if isinstance(name, str) else None
        if scene is None:
            raise ActionFailed(
                f"Reset: no scene named {name!r} in this build (scenes: {', '.join(scene_names())})", "InvalidArgument"
            )
        # A build's Reset destroys the agents and loads the scene again, which has one agent (agent 0 answers)
        # and Initialize's settings gone (AI2-THOR's controller sends Initialize after every Reset). Kept, they
        # would reach the next client of a leased player.
        self._default_settings()
        self._load_scene(scene, name)

    def _default_settings(self) -> None:
        """Initialize's settings as a freshly loaded scene has them (:data:`_DEFAULT_SETTINGS`)."""
        for attr, value in _DEFAULT_SETTINGS.items():
            setattr(self, attr, value)

    # A build's GetScenesInBuild() takes no argument.
    @_action("GetScenesInBuild", takes=((),))
    def _get_scenes(self, action: dict) -> list[str]:
        return scene_names()

    # A build's Pass() and Done() take no argument.
    @_action("Pass", "Done", takes=((),))
    def _pass(self, action: dict) -> None:
        return None

    # This player's own: the fault's parameters (faults.parse_fault checks them, and the arguments, before a link
    # runs a fault).
    @_action(faults.FAULT_ACTION, takes=(faults.FAULT_ARGUMENTS,))
    def _fault(self, action: dict) -> None:
        try:
            faults.parse_fault(action)
        except faults.FaultError as exc:
            raise ActionFailed(str(exc), "InvalidArgument") from None

    # A build's physics agent's MoveAhead(moveMagnitude, ...) and the others, by signature; the player moves by
    # moveMagnitude alone (the others, which only matter with objects in hand or other agents, have no effect).
    @_action("MoveAhead", "MoveBack", "MoveLeft", "MoveRight",
             takes=(("moveMagnitude", "objectId", "maxAgentsDistance", "forceAction", "manualInteract",
                     "allowAgentsToIntersect", "speed", "fixedDeltaTime", "returnToStart", "disableRendering"),))
    def _move(self, action: dict) -> None:
        name = action["action"]
        agent = self._agent
        # A build's physics agent moves gridSize when moveMagnitude is not given (or null) and fails one not above 0
        # (an InvalidOperationException: no errorCode). Over 100 m is the player's own limit.
        magnitude = self.grid_size
        if action.get("moveMagnitude") is not None:
            magnitude = _number(action, "moveMagnitude", hi=100.0)
            if magnitude <= 0:
                raise _exception("InvalidOperationException", "moveMagnitude must be > 0")
        angle = math.radians(agent.yaw + {"MoveAhead": 0, "MoveRight": 90, "MoveBack": 180, "MoveLeft": 270}[name])
        dx, dz = magnitude * math.sin(angle), magnitude * math.cos(angle)
        x = round(agent.x + dx, 4)
        z = round(agent.z + dz, 4)
        others = self._others()
        hit = self.scene.path_collision(agent.x, agent.z, x, z, magnitude, others)
        if hit is not None:
            # As a build's CheckIfAgentCanMove words it: what blocks the agent (another agent, "Agent N"; a wall or box,
            # by its name), the acting agent's number, and the move's offset in world coordinates (x, y, z), F4.
            if not any(hit == other[2] for other in others):
                hit = self.scene.object_name(hit)
            raise ActionFailed(f"{hit} is blocking Agent {self.active} from moving by "
                               f"({_f4(dx)}, {_f4(0.0)}, {_f4(dz)}).")
        if self.snap_to_grid:
            # As a build's moveInDirection: the path is checked to where the move leads, and the agent then snapped to
            # the nearest point of the world's gridSize grid (a move of 0.1 m on a 0.25 m grid lands where it started,
            # a successful move; one at a yaw off the axes lands on a grid point).
            x, z = self._snap(x), self._snap(z)
        agent.x, agent.z = x, z

    def _snap(self, value: float) -> float:
        """``value`` on the nearest point of the ``gridSize`` grid, as a build's snapAgentToGrid rounds it (Math.Round:
        a tie to the even multiple, as Python's round), to 4 decimals."""
        mult = 1.0 / self.grid_size
        return round(round(value * mult) / mult, 4) + 0.0  # (+ 0.0: no -0.0)

    # A build's physics agent's RotateRight(degrees, ...), by signature; the others have no effect here.
    @_action("RotateLeft", "RotateRight",
             takes=(("degrees", "manualInteract", "forceAction", "speed", "waitForFixedUpdate", "returnToStart",
                     "disableRendering", "fixedDeltaTime"),))
    def _rotate(self, action: dict) -> None:
        # A build's physics agent turns by any degrees (rotateStepDegrees when not given or null), and fails a
        # turn of 0 it is given (once that turned by the default step), with no errorCode.
        degrees = self.rotate_step if action.get("degrees") is None else _number(action, "degrees")
        if degrees == 0:
            # (The build's text, its spelling included.)
            raise _exception("InvalidOperationException", "Cannot rotate by 0 degrees as this previously defaulted to "
                                                          "rotating by a diferent amount.")
        sign = -1.0 if action["action"] == "RotateLeft" else 1.0
        agent = self._agent
        agent.yaw = _yaw(agent.yaw + sign * degrees)

    # A build's physics agent's LookUp and LookDown take a whole ServerAction: any key.
    @_action("LookUp", "LookDown", takes=ANY_ARGUMENTS)
    def _look(self, action: dict) -> None:
        # As a build's physics agent (PhysicsRemoteFPSAgentController's LookUp and LookDown): degrees below 0, or
        # not a multiple of 0.1, fail (no errorCode); 0 (ServerAction's own default) looks 30 degrees; a look past
        # the limit fails with the errorCode LookDownCantExceedMin, up as well as down.
        degrees = _number(action, "degrees", DEFAULT_LOOK_DEGREES, whole_action=True)
        if degrees < 0:
            raise ActionFailed(f"{action['action']} action requires positive degree value. Invalid value used: "
                               f"{_cs_float(degrees)}")
        if abs(degrees * 10 - round(degrees * 10)) > 1e-4:
            raise ActionFailed(f"{action['action']} action requires degree value to be a multiple of 0.1f")
        degrees = round(degrees, 1) or DEFAULT_LOOK_DEGREES
        agent = self._agent
        if action["action"] == "LookUp":
            horizon = agent.horizon - degrees
            if horizon < -MAX_LOOK_UP - _EPS:
                raise ActionFailed(f"can't look up beyond {MAX_LOOK_UP:g} degrees above the forward horizon",
                                   "LookDownCantExceedMin")
        else:
            horizon = agent.horizon + degrees
            if horizon > MAX_LOOK_DOWN + _EPS:
                raise ActionFailed(f"can't look down beyond {MAX_LOOK_DOWN:g} degrees below the forward horizon",
                                   "LookDownCantExceedMin")
        agent.horizon = round(horizon, 4)

    # A build's physics agent's Teleport and TeleportFull, by signature, each in two overloads: with a position, and
    # (deprecated, still dispatched to) with x, y and z, which a build takes when the action names more of them than
    # it names position. TeleportFull's standing is a bool with no default (required); Teleport's a bool? (null, or not
    # given: the agent stays as it stands). False crouches the agent: its camera is lower, isStanding false.
    @_action("Teleport", "TeleportFull",
             takes=(("position", "rotation", "horizon", "standing", "forceAction"),
                    ("x", "y", "z", "rotation", "horizon", "standing", "forceAction")))
    def _teleport(self, action: dict) -> None:
        agent = self._agent
        x, z, yaw, horizon = agent.x, agent.z, agent.yaw, agent.horizon
        name = action["action"]
        full = name == "TeleportFull"
        # The overload a build dispatches to (answer() has checked the arguments against it): x, y and z (none of
        # them optional) in place of position when the action names more of them than it names position.
        by_xyz = _overload(action.keys() - STEP_KEYS, _ACCEPTED[name]) == 1
        where = ("x", "y", "z") if by_xyz else ("position",)
        # As a build's ActionDispatcher: first every argument given is converted to its parameter's type, in the
        # overload's order (one that cannot be: InvalidArgument), then the parameters without a default that were
        # not given are named (MissingArguments), and only then does the action run. Teleport's position, rotation,
        # horizon and standing are optional values (null: not given); TeleportFull's are not (null cannot convert).
        given: dict[str, Any] = {}
        for key in where + ("rotation", "horizon", "standing"):
            if key not in action or (action[key] is None and not full and key not in ("x", "y", "z")):
                continue
            value = action[key]
            if key == "position":
                given[key] = _vector(value, key)
            elif key == "rotation":
                given[key] = _vector(value, key) if isinstance(value, dict) else (0.0, _number(action, key), 0.0)
            elif key == "standing":
                given[key] = _bool_argument(name, key, value)
            else:
                given[key] = _number(action, key)
        required = where + ("rotation", "horizon", "standing") if full else where if by_xyz else ()
        missing = [k for k in required if k not in action]
        if missing:
            hint = (" (given x, y or z, it takes 'x', 'y' and 'z' in place of position, as a build does)" if by_xyz
                    else "")
            raise ActionFailed(f"action: {name} is missing the following arguments: {','.join(missing)}{hint}",
                               "MissingArguments")
        # A horizon outside the look limits fails (an ArgumentOutOfRangeException: no errorCode), as the blocked spot
        # does; with forceAction a build's physics agent checks neither (up to this player's own limits,
        # MAX_FORCED_HORIZON and MAX_FORCED_DISTANCE).
        force = _flag(action.get("forceAction"), False)
        if by_xyz or "position" in given:
            x, z = (given["x"], given["z"]) if by_xyz else given["position"][::2]
            if force and not (abs(x) <= MAX_FORCED_DISTANCE and abs(z) <= MAX_FORCED_DISTANCE):
                raise ActionFailed(f"{name}: with forceAction this player takes a position up to "
                                   f"{MAX_FORCED_DISTANCE:g} m from the room's centre along x and z, got "
                                   f"({x:g}, {z:g})", "InvalidArgument")
        if "rotation" in given:
            pitch, yaw, roll = given["rotation"]
            if not force and (abs(pitch) >= 1e-2 or abs(roll) >= 1e-2):
                raise ActionFailed(f"{name}: no agent can change in pitch or roll: rotation must be (x=0, y=yaw, z=0), "
                                   f"got ({pitch:g}, {yaw:g}, {roll:g}) (forceAction takes it, and keeps the yaw)")
        if "horizon" in given:
            horizon = given["horizon"]
            if force:
                if not -MAX_FORCED_HORIZON <= horizon <= MAX_FORCED_HORIZON:
                    raise ActionFailed(f"{name}: with forceAction this player takes a horizon between "
                                       f"{-MAX_FORCED_HORIZON:g} and {MAX_FORCED_HORIZON:g}, got {horizon:g}",
                                       "InvalidArgument")
            elif not -MAX_LOOK_UP <= horizon <= MAX_LOOK_DOWN:
                raise ActionFailed(f"{name}: horizon must be between {-MAX_LOOK_UP:g} and "
                                   f"{MAX_LOOK_DOWN:g}, got {horizon:g} (forceAction takes it)")
        if not force:
            # Then, as a build's teleportFull: with snapToGrid a spot off the gridSize grid fails; a spot taken fails;
            # and (its physics agent) one whose y is not where the agent stands on the floor (0.05 m either way).
            if self.snap_to_grid and not self._on_grid(x, z):
                raise ActionFailed(f"{name}: position ({x:g}, {z:g}) is not on the grid of size {self.grid_size:g} "
                                   f"(snapToGrid is on; forceAction takes it)")
            # A spot taken and a y off the floor are a build's InvalidOperationExceptions, worded as its: a spot names
            # what the agent would collide with (a box by its objectId, a wall by its name). Other agents are not
            # checked: a build's isAgentCapsuleColliding looks only at the scene's object layers, not the agents', so a
            # teleport onto (or into) another agent's spot is carried out.
            hit = self.scene.collision(x, z)
            if hit is not None:
                if hit in self.scene.surface_ids():
                    hit = self.scene.object_name(hit)
                raise _exception("InvalidOperationException", f"Collided with: {hit}.")
            y = given["y"] if by_xyz else given["position"][1] if "position" in given else AGENT_Y
            if abs(y - AGENT_Y) > 0.05:
                raise _exception("InvalidOperationException",
                                 f"After teleporting and adjusting agent position to floor, there was too large a "
                                 f"change({_cs_float(abs(y - AGENT_Y))} > 0.05) in the y component. Consider using "
                                 f"`forceAction=true` if you'd like to teleport anyway.")
        agent.x, agent.z, agent.yaw, agent.horizon = round(x, 4), round(z, 4), _yaw(yaw), round(horizon, 4)
        if "standing" in given:
            agent.standing = given["standing"]  # crouching, the camera is lower (see _Agent.camera_position)

    # A build's physics agent's Crouch() and Stand(), which take no argument: the camera 0.675 m lower (at the agent's
    # position) or back where it was; crouching when already crouching (or standing when standing) fails, errorCode
    # null, with a build's errorMessage. A teleport's standing does the same.
    @_action("Crouch", "Stand", takes=((),))
    def _crouch_or_stand(self, action: dict) -> None:
        agent = self._agent
        crouch = action["action"] == "Crouch"
        if crouch and not agent.standing:
            raise ActionFailed("Already crouching.")
        if not crouch and agent.standing:
            raise ActionFailed("Already standing.")
        agent.standing = not crouch

    # A build's AgentManager.ChangeResolution(x, y).
    @_action("ChangeResolution", takes=(("x", "y"),))
    def _change_resolution(self, action: dict) -> None:
        # As a build's ActionDispatcher: each argument given is converted first (null cannot be: an int has no null,
        # InvalidArgument in the build's words; "300" is 300, true 1, 300.5 is 300, as Json.NET converts them), then
        # every one not given is named (MissingArguments), then the sizes are checked.
        size = {}
        for key in ("x", "y"):
            if key in action:
                size[key] = _int_argument(action, key, action[key])
        missing = [key for key in ("x", "y") if key not in size]
        if missing:
            raise _missing("ChangeResolution", missing)
        w, h = size["x"], size["y"]
        for key, v in (("x", w), ("y", h)):
            if not 0 < v <= MAX_RESOLUTION:
                raise ActionFailed(f"ChangeResolution {key} must be an integer 1..{MAX_RESOLUTION}, got {v!r}",
                                   "InvalidArgument")
        self._check_answer_size("ChangeResolution", int(w), int(h), len(self.cameras))
        self.width, self.height = int(w), int(h)
        self.log.info("resolution changed to %d x %d", self.width, self.height)

    # A build's AgentManager.ChangeQuality(quality).
    @_action("ChangeQuality", takes=(("quality",),))
    def _change_quality(self, action: dict) -> None:
        # AI2-THOR's Controller sends it right after launch on CloudRendering, where -screen-quality is not
        # respected. The renderers here have one quality: the name is checked and logged, frames do not change.
        if "quality" not in action:
            raise _missing("ChangeQuality", ["quality"])
        quality = _json_string(action["quality"])
        if quality not in QUALITY_NAMES:
            raise ActionFailed(
                f"ChangeQuality: no quality level named {quality!r} (one of {', '.join(QUALITY_NAMES)})",
                "InvalidArgument",
            )
        self.log.info("quality level set to %s (frames do not change: the renderer has one quality)", quality)

    # An AI2-THOR 5.0.0 build's GetReachablePositions(maxStepCount, directionsRelativeAgent): directionsRelativeAgent
    # (a bool, false by default) steps along the acting agent's right and forward instead of x and z. That build's
    # method has no gridSize, so a gridSize given fails as an invalid argument; builds made after 5.0.0 (the main
    # branch's, run by commit_id) take a gridSize there, which this player does not model.
    @_action("GetReachablePositions", takes=(("maxStepCount", "directionsRelativeAgent"),))
    def _reachable(self, action: dict) -> list[dict[str, float]]:
        # As a build's getReachablePositions: maxStepCount (an int, 10000 when not given or null) allows
        # floor(maxStepCount / gridSize^2) steps of the search (in single precision, as a build's float arithmetic); one
        # more throws an InvalidOperationException (no errorCode, no actionReturn).
        steps = action.get("maxStepCount")
        # "100" is 100, 100.5 is 100, as Json.NET converts them (an int? parameter: null is not given).
        steps = 10000 if steps is None else _int_argument(action, "maxStepCount", steps)
        grid = struct.unpack("<f", struct.pack("<f", self.grid_size))[0]
        square = struct.unpack("<f", struct.pack("<f", grid * grid))[0]
        limit = math.floor(struct.unpack("<f", struct.pack("<f", int(steps) / square))[0])
        # The points are already rounded to 4 decimals, as _xyz would round them.
        y = round(AGENT_Y, 4)
        # As a build's, the search steps out from where the acting agent stands (on its grid, not the start's): only
        # the points it can walk to are found.
        agent = self._agent
        relative = "directionsRelativeAgent" in action and _bool_argument(
            "GetReachablePositions", "directionsRelativeAgent", action["directionsRelativeAgent"])
        try:
            points, _ = self.scene.reachable(self.grid_size, (agent.x, agent.z), max_steps=limit,
                                             yaw=agent.yaw if relative else None)
        except TooManySteps:
            raise _exception("InvalidOperationException", "Too many steps taken in GetReachablePositions.") from None
        except OutOfBounds as exc:
            # (The build's words; the position as Unity writes a Vector3, one decimal.)
            x, z = exc.position
            raise _exception("InvalidOperationException",
                             f"In {self.scene_name}, position ({x:.1f}, {AGENT_Y:.1f}, {z:.1f}) can be reached via "
                             f"capsule cast but is beyond the scene bounds.") from None
        # Refused before the (large) list is built when the answer could not be carried.
        self._check_return_size("GetReachablePositions", len(points) * RETURN_ITEM_SIZE)
        return [{"x": x, "y": y, "z": z} for x, z in points]

    @staticmethod
    def _camera_fov(fov: float) -> float:
        """A third-party camera's field of view, checked as a build's AgentManager checks it (above 0 and below
        180, else an ArgumentOutOfRangeException: a failure with no errorCode), then against what this player
        renders (:data:`MIN_FOV`..:data:`MAX_FOV`, ``InvalidArgument``)."""
        if not 0 < fov < 180:
            raise ActionFailed(f"fieldOfView must be above 0 and below 180, got {fov:g}")
        if not MIN_FOV <= fov <= MAX_FOV:
            raise ActionFailed(f"fieldOfView must be between {MIN_FOV:g} and {MAX_FOV:g} in this player, got {fov:g}",
                               "InvalidArgument")
        return fov

    # A build's AgentManager.AddThirdPartyCamera, by signature; skyboxColor and the rest have no effect here.
    @_action("AddThirdPartyCamera",
             takes=(("position", "rotation", "fieldOfView", "skyboxColor", "orthographic", "orthographicSize",
                     "nearClippingPlane", "farClippingPlane", "antiAliasing"),))
    def _add_camera(self, action: dict) -> None:
        # As a build's ActionDispatcher: the arguments given are converted first (one of the wrong kind:
        # InvalidArgument), then every one missing is named (MissingArguments); then the field of view is checked, then
        # the player's own limits.
        given = {key: _vector(action[key], key) for key in ("position", "rotation") if key in action}
        fov = _number(action, "fieldOfView", DEFAULT_FOV)  # Unity's default, not the agent's
        missing = [key for key in ("position", "rotation") if key not in given]
        if missing:
            raise _missing("AddThirdPartyCamera", missing)
        position, rotation = given["position"], given["rotation"]
        fov = self._camera_fov(fov)
        if len(self.cameras) >= MAX_THIRD_PARTY_CAMERAS:
            raise ActionFailed(f"at most {MAX_THIRD_PARTY_CAMERAS} third-party cameras", "InvalidArgument")
        camera = _Camera(position, rotation, fov)
        self._check_answer_size("AddThirdPartyCamera", self.width, self.height, len(self.cameras) + 1)
        self.cameras.append(camera)
        # A build's AgentManager finishes the camera actions with no actionReturn (null): the camera is in the
        # metadata's thirdPartyCameras.
        return None

    # A build's AgentManager.UpdateThirdPartyCamera, by signature; skyboxColor and the rest have no effect here.
    @_action("UpdateThirdPartyCamera",
             takes=(("thirdPartyCameraId", "position", "rotation", "fieldOfView", "skyboxColor", "orthographic",
                     "orthographicSize", "nearClippingPlane", "farClippingPlane"),))
    def _update_camera(self, action: dict) -> None:
        # Every argument is checked before any is applied: a failed update leaves the camera as it was. A
        # position or rotation, or an axis of one, or a field of view, that is not given (or null) keeps the
        # camera's value, as in a build, whose AgentManager.UpdateThirdPartyCamera takes them as optional values
        # filled in from the camera's own. As there, the field of view is checked first, then the camera's id
        # (one out of range: a failure with no errorCode; not an integer: InvalidArgument).
        # The arguments are converted first, in the parameters' order (thirdPartyCameraId, position, rotation,
        # fieldOfView), then the field of view is checked, then the id.
        index = action.get("thirdPartyCameraId", 0)
        if type(index) is not int:
            index = _int_argument(action, "thirdPartyCameraId", index)  # "1" is 1, 0.4 is 0, as Json.NET converts them
        given = {key: _vector(action[key], key, KEEP_AXES) for key in ("position", "rotation")
                 if action.get(key) is not None}
        fov = action.get("fieldOfView")
        if fov is not None:
            fov = self._camera_fov(_number(action, "fieldOfView"))
        if not 0 <= index < len(self.cameras):
            raise ActionFailed(f"thirdPartyCameraId {index!r} does not name one of the {len(self.cameras)} camera(s)")
        camera = self.cameras[index]
        position, rotation = camera.position, camera.rotation
        if "position" in given:
            position = tuple(c if v is None else v for v, c in zip(given["position"], position))
        if "rotation" in given:
            rotation = tuple(c if v is None else v for v, c in zip(given["rotation"], rotation))
        camera.position, camera.rotation, camera.fov = position, rotation, camera.fov if fov is None else fov
        return None

    # -- state -----------------------------------------------------------------------------------------
    def _load_scene(self, scene: Scene, name: str) -> None:
        """The scene as loaded: one agent at its start (the acting one), no third-party camera."""
        self.scene = scene
        self.scene_name = name
        start = scene.start
        #: The agents, in agent order (agentId).
        self.agents = [_Agent(start.x, start.z, start.yaw, start.horizon)]
        #: The acting agent's index: the last action's agentId (the answer's activeAgentId).
        self.active = 0
        self.cameras: list[_Camera] = []

    def _state(self, width: int, height: int, agent: _Agent | None = None) -> RenderState:
        """What ``agent``'s camera (the acting agent's by default) sees, at ``width`` x ``height``."""
        agent = self._agent if agent is None else agent
        return RenderState(self.scene, width, height, agent.camera_position(), agent.yaw, agent.horizon, self.fov)

    def _visible_ids(self, agent: _Agent) -> set[tuple[int, int, int]]:
        # Scaled by the longer side: a tall frame (1 x 4096) would otherwise give a 64 x 262144 render per view.
        side = VISIBILITY_RENDER_SIZE
        if self.width >= self.height:
            vw, vh = side, max(1, round(side * self.height / self.width))
        else:
            vw, vh = max(1, round(side * self.width / self.height)), side
        _, _, ids = self._probe.render(self._state(vw, vh, agent))
        packed = np.unique(
            (ids[..., 0].astype(np.uint32) << 16) | (ids[..., 1].astype(np.uint32) << 8) | ids[..., 2]
        )
        return {(int(v >> 16) & 255, int(v >> 8) & 255, int(v) & 255) for v in packed}

    # -- answers ---------------------------------------------------------------------------------------
    def _answer(self, action: dict, name: str, success: bool, error: str, code: str | None, result: Any) -> Answer:
        """The answer to ``action``: its outcome is the acting agent's, and every agent's the action made."""
        if self._renderer_check is not None:
            self._renderer_check()
        outcome = _Outcome((name, success, error, code, result))
        agents = self.agents
        self.agents[self.active].outcome = outcome
        cameras = tuple((c.position, c.rotation, c.fov) for c in self.cameras) if self.cameras else ()
        # As a build's AgentManager: an answer with images lists the cameras in each agent's map, one without lists
        # none (null), the cameras' state then not part of the view; and only one with the segmentation images
        # lists the segmentation colours.
        render = action.get("renderImage", True)
        render = not self.headless and (render is True or _flag(render, True))  # 0 and "false" too, as in Unity
        if render:
            listed = cameras
            normals_on, classes_on = self._maps_on(action)
            # As a build's AgentManager (addObjectImage): the class segmentation switch sends the instance
            # segmentation image and the colours too.
            ids_on = classes_on or self._ids_on(action)
            images = self._images(action, cameras, ids_on, normals_on, classes_on)
            colors = 2 if classes_on else 1 if ids_on else 0
        else:
            listed, colors, images = None, 0, []
        if len(agents) == 1:
            views = [self._view(agents[0], 0, listed, colors)]
        else:
            for agent in agents:
                if agent.outcome is None:
                    agent.outcome = outcome
            views = [self._view(agent, i, listed, colors) for i, agent in enumerate(agents)]
        return Answer(views, [a.outcome for a in agents], self.active, self.sequence_id, images)

    def _view(self, agent: _Agent, agent_id: int, cameras: tuple | None, colors: int) -> _View:
        """The agent's view of the player's state (``agent_id``: its index;
        ``cameras``: the third-party cameras' states, None for an answer without images, whose agent maps list
        no camera; ``colors``: 1 when the answer has the instance segmentation images, whose colours the maps list,
        2 when it also has the class segmentation images, whose colours they list too, else 0), from the cache when
        the state was seen lately."""
        # Everything the agent's metadata depends on apart from its action's own fields (see _build_view).
        key = (self.scene.name, self.scene_name, self.width, self.height, agent.x, agent.z, agent.yaw, agent.horizon,
               agent.standing, self.fov, self.visibility_distance, cameras, colors, agent_id)
        view = self._views.get(key)
        if view is None:
            view = self._build_view(agent, agent_id, cameras is not None, colors)
            self._views[key] = view
        else:
            self._views.move_to_end(key)
        # Room for every agent's view of this state, and a few revisited ones (fewer once there are fewer agents).
        while len(self._views) > VIEW_CACHE_SIZE - 1 + len(self.agents):
            self._views.popitem(last=False)
        return view

    def _objects(self, agent: _Agent) -> list[dict[str, Any]]:
        """The metadata's ``objects``: the floor and the boxes (a build's sim objects: the walls and the ceiling are
        structure, not objects), each with every key of a build's ObjectMetadata, in its order, valued as a build values
        them for a static object that cannot be picked up, moved, opened, toggled, broken, filled, dirtied, used up,
        cooked or sliced; then the synthetic objects (``--metadata-objects``)."""
        seen = self._visible_ids(agent)
        cx, cy, cz = agent.camera_position()
        objects = []
        parts = self.scene.parts()
        for part in (parts[0],) + self.scene.box_parts():
            (lx, ly, lz), (hx, hy, hz) = part.lo, part.hi
            # Distance from the camera to the nearest point of the part, for visibility.
            near = math.sqrt(
                max(lx - cx, 0.0, cx - hx) ** 2 + max(ly - cy, 0.0, cy - hy) ** 2 + max(lz - cz, 0.0, cz - hz) ** 2
            )
            visible = part.id_color in seen and near <= self.visibility_distance
            px, py, pz = part.center
            receptacle = part.object_type in RECEPTACLE_TYPES
            objects.append(
                {
                    "name": self.scene.object_name(part.object_id),
                    "position": _xyz(px, py, pz),
                    "rotation": _xyz(0.0, 0.0, 0.0),
                    "visible": visible,
                    "isInteractable": visible,
                    "receptacle": receptacle,
                    "toggleable": False,
                    "isToggled": False,
                    "breakable": False,
                    "isBroken": False,
                    "canFillWithLiquid": False,
                    "isFilledWithLiquid": False,
                    "fillLiquid": None,
                    "dirtyable": False,
                    "isDirty": False,
                    "canBeUsedUp": False,
                    "isUsedUp": False,
                    "cookable": False,
                    "isCooked": False,
                    "temperature": "RoomTemp",
                    "isHeatSource": False,
                    "isColdSource": False,
                    "sliceable": False,
                    "isSliced": False,
                    "openable": False,
                    "isOpen": False,
                    "openness": 0.0,
                    "pickupable": False,
                    "isPickedUp": False,
                    "moveable": False,
                    "mass": 0.0,
                    "salientMaterials": None,
                    # What a receptacle holds: a build lists the pickupable and moveable objects in it; here there are
                    # none (every part stands still). Null for an object that is no receptacle, as a build's.
                    "receptacleObjectIds": [] if receptacle else None,
                    # As a build's: from the agent's position (not its camera) to the object's, in three dimensions.
                    "distance": round(math.sqrt((px - agent.x) ** 2 + (py - AGENT_Y) ** 2 + (pz - agent.z) ** 2), 4),
                    "objectType": part.object_type,
                    "objectId": part.object_id,
                    "assetId": "",
                    "parentReceptacles": None,
                    "controlledObjects": None,
                    "isMoving": False,
                    "axisAlignedBoundingBox": _bounds(part.lo, part.hi),
                    # A build makes an object-oriented box for pickupable objects only: null for every other.
                    "objectOrientedBoundingBox": None,
                }
            )
        return objects + self._synthetic

    def _build_view(self, agent: _Agent, agent_id: int, list_cameras: bool, list_colors: int) -> _View:
        """An agent's metadata's state-decided parts. Reads only what :meth:`_view`'s key holds (and constants).
        ``agent_id``: the map's ``agentId``, the agent's index (a build's AgentManager sets every map's, one agent's
        too). ``list_cameras``: the map's ``thirdPartyCameras``
        lists the cameras (``[]`` with none), else it is null, as a build's map for an answer without images.
        ``list_colors``: ``colors`` lists every part's segmentation colour (1), and with 2 each object type's class
        segmentation colour after the first part of that type (named by the type, as a build's ImageSynthesis lists
        it, ``Fridge``); 0: it is null, as a build's map for an answer without the segmentation images (its
        AgentManager fills the list where it adds them)."""
        cameras = [c.metadata(i) for i, c in enumerate(self.cameras)] if list_cameras else None
        sx, sy, sz = self.scene.size
        head = {"name": "agent", "screenWidth": self.width, "screenHeight": self.height, "agentId": agent_id}
        tail = {
            "sceneName": self.scene_name,
            "depthFormat": "Meters",
            "cameraNearPlane": CAMERA_NEAR_PLANE,
            "cameraFarPlane": CAMERA_FAR_PLANE,
            "fov": self.fov,
            "cameraPosition": _xyz(*agent.camera_position()),
            # A build's camera is orthographic only for an action that asks (and reports its size then): else -1.
            "cameraOrthSize": -1.0,
            "agent": {
                "name": "agent",
                "position": _xyz(agent.x, AGENT_Y, agent.z),
                "rotation": _xyz(0.0, agent.yaw, 0.0),
                "cameraHorizon": agent.horizon,
                "isStanding": agent.standing,
                "inHighFrictionArea": False,
            },
            "heldObjectPose": _hand_pose(agent),
            "arm": None,  # (a build's default agent has no arm)
            "objects": self._objects(agent),
            "colors": self._colors(list_colors == 2) if list_colors else None,
            "thirdPartyCameras": cameras,
            # What the agent's capsule touched while it moved: a blocked move here stops before it touches anything.
            "collided": False,
            "collidedObjects": [],
            "isSceneAtRest": True,
            "inventoryObjects": [],
            "sceneBounds": _bounds((-sx / 2, 0.0, -sz / 2), (sx / 2, sy, sz / 2)),
            **_NO_EXTRA_RETURNS,
        }
        return _View(head, tail)

    def _colors(self, classes: bool) -> list[dict[str, Any]]:
        """The metadata's ``colors``: each part's instance colour named by its object id; with ``classes``, each object
        type's class colour named by the type, right after the first part of that type (where a build's
        ImageSynthesis, which adds an object's instance then its class colour, first lists it)."""
        out = []
        listed = set()
        class_colors = self.scene.class_colors()
        for p in self.scene.parts():
            out.append({"name": p.object_id, "color": list(p.id_color)})
            if classes and p.object_type not in listed:
                listed.add(p.object_type)
                out.append({"name": p.object_type, "color": list(class_colors[p.object_type])})
        return out

    def _maps_on(self, action: dict) -> tuple[bool, bool]:
        """Whether an answer to ``action`` with images has the normals image, and the class segmentation images:
        Initialize's ``renderNormalsImage`` and ``renderSemanticSegmentation`` (or ``renderClassImage``), or this
        player's own per-step switches of the same names, which, like a step's renderInstanceSegmentation, can only
        switch an image on, for that step, and not on the AgentManager's own actions (a build reads these two in
        Initialize only). A step whose switches were refused (:meth:`_check_step_maps`) has Initialize's."""
        normals, classes = self.render_normals, self.render_classes
        if normals and classes or self._maps_refused or _MAP_SWITCHES.isdisjoint(action):
            return normals, classes
        return self._step_maps(action, normals, classes)

    def _step_maps(self, action: dict, normals: bool, classes: bool) -> tuple[bool, bool]:
        """``(normals, classes)`` with ``action``'s per-step switches applied (see :meth:`_maps_on`)."""
        get = action.get
        step_normals, step_class, step_semantic = (get("renderNormalsImage"), get("renderClassImage"),
                                                   get("renderSemanticSegmentation"))
        if step_normals is None and step_class is None and step_semantic is None:  # (the usual case)
            return normals, classes
        name = get("action")
        if isinstance(name, str) and name in _AGENT_MANAGER_ACTIONS:
            return normals, classes
        return (normals or _flag(step_normals, False),
                classes or _flag(step_class, False) or _flag(step_semantic, False))

    def _check_maps_rendered(self, what: str, normals: bool, classes: bool) -> None:
        """Raise ActionFailed (``InvalidArgument``) when the renderer cannot draw the images asked for."""
        if self.headless or hasattr(self.renderer, "render_maps"):
            return
        which = " and ".join(n for n, on in (("normals", normals), ("class segmentation", classes)) if on)
        raise ActionFailed(
            f"{what}: this player's renderer ({getattr(self.renderer, 'name', type(self.renderer).__name__)}) does not "
            f"draw the {which} image(s) (it has no render_maps()): leave renderNormalsImage and "
            f"renderSemanticSegmentation out, or use the numpy or gl renderer", "InvalidArgument")

    def _check_step_maps(self, name: str, action: dict) -> None:
        """Refuse (ActionFailed, ``InvalidArgument``, the action not carried out) a step whose own normals or class
        segmentation switch asks for an image the renderer cannot draw, or that would make the answer larger than the
        transport carries (:meth:`limit_answer_size` counts those images only when Initialize switched them on)."""
        normals, classes = self.render_normals, self.render_classes
        if normals and classes or self.headless:
            return
        step_normals, step_classes = self._step_maps(action, normals, classes)
        if (step_normals, step_classes) == (normals, classes):
            return
        self._maps_refused = True
        self._check_maps_rendered(name, step_normals, step_classes)
        self._check_answer_size(name, self.width, self.height, len(self.cameras), None, step_normals + step_classes)
        self._maps_refused = False

    def _ids_on(self, action: dict) -> bool:
        """Whether an answer to ``action`` with images has the segmentation images."""
        # As a build's AgentManager.ProcessControlCommand: a step's renderInstanceSegmentation can only switch
        # segmentation on, for that step (false, or not sent, leaves Initialize's setting), and only on an action
        # its agent carries out: the AgentManager's own actions (Reset, Initialize, ChangeResolution, the
        # third-party camera actions) send Initialize's setting whatever the step says.
        if self.render_ids:
            return True
        name = action.get("action")
        return (_flag(action.get("renderInstanceSegmentation"), False)
                and not (isinstance(name, str) and name in _AGENT_MANAGER_ACTIONS))

    def _images(self, action: dict, cameras: tuple, ids_on: bool, normals_on: bool = False,
                classes_on: bool = False) -> Images:
        """The answer's images (:meth:`_answer` decides whether it has any, and the segmentation, normals and class
        segmentation ones)."""
        depth = action.get("renderDepthImage")
        depth_on = self.render_depth if depth is None else _flag(depth, self.render_depth)
        # The same list object while nothing it depends on changes, so a link can reuse its encoding.
        if self.static_frame:
            key: tuple = (self.scene.name, self.width, self.height, depth_on, ids_on, len(self.cameras),
                          len(self.agents), normals_on, classes_on)
        else:
            key = (self.scene.name, self.width, self.height, self.fov, cameras,
                   tuple((a.x, a.z, a.yaw, a.horizon, a.standing) for a in self.agents), depth_on, ids_on,
                   normals_on, classes_on)
        if key != self._image_list_key:
            self._image_list = self._build_images(depth_on, ids_on, normals_on, classes_on)
            self._image_list_key = key
        return self._image_list

    def _build_images(self, depth_on: bool, ids_on: bool, normals_on: bool = False, classes_on: bool = False) -> Images:
        """Each third-party camera's images, then each agent's (in agent order), in a build's order: RGB, depth,
        normals, instance segmentation, class segmentation."""
        out: Images = []
        maps_on = normals_on or classes_on
        views = [(FieldType.THIRD_PARTY_IMAGE, FieldType.THIRD_PARTY_DEPTH, FieldType.THIRD_PARTY_NORMALS,
                  FieldType.THIRD_PARTY_IMAGE_IDS, FieldType.THIRD_PARTY_CLASSES,
                  (camera.position, camera.rotation[1], camera.rotation[0], camera.fov)) for camera in self.cameras]
        views += [(FieldType.RGB_IMAGE, FieldType.DEPTH_IMAGE, FieldType.NORMALS_IMAGE, FieldType.IDS_IMAGE,
                   FieldType.CLASSES_IMAGE, (agent.camera_position(), agent.yaw, agent.horizon, self.fov))
                  for agent in self.agents]
        for rgb_type, depth_type, normals_type, ids_type, classes_type, camera in views:
            # The maps first: a renderer draws them with the frame and keeps that (the numpy and gl renderers do),
            # so the frame then costs no second draw.
            normals, classes = self._maps_frame(*camera) if maps_on else (None, None)
            rgb, depth, ids = self._frame(*camera)
            out.append((rgb_type, rgb))
            if depth_on:
                out.append((depth_type, depth))
            if normals_on:
                out.append((normals_type, normals))
            if ids_on:
                out.append((ids_type, ids))
            if classes_on:
                out.append((classes_type, classes))
        return out

    def _frame(self, position, yaw, pitch, fov) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Wire-layout (rgb, depth, ids) for one camera."""
        return self._cached(self._static, self._wire_cache, self._render_frame, position, yaw, pitch, fov)

    def _render_frame(self, state: RenderState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self._to_wire(*self.renderer.render(state))

    def _maps_frame(self, position, yaw, pitch, fov) -> tuple[np.ndarray, np.ndarray]:
        """Wire-layout (normals, classes) for one camera, cached as :meth:`_frame` caches the frames."""
        return self._cached(self._static_maps, self._maps_cache, self._render_maps, position, yaw, pitch, fov)

    def _render_maps(self, state: RenderState) -> tuple[np.ndarray, np.ndarray]:
        return self._maps_to_wire(*self.renderer.render_maps(state))

    def _cached(self, static: dict, cache: OrderedDict, render: Callable[[RenderState], Any], position, yaw, pitch,
                fov) -> Any:
        """``render``'s images for one camera: with ``--static-frame`` the scene's start view, kept in ``static`` (for
        the scene and size it was made for); else kept per view in ``cache``, with room for every image of an answer
        (each camera's and agent's) and a few revisited ones."""
        if self.static_frame:
            key = (self.scene.name, self.width, self.height)
            images = static.get(key)
            if images is None:
                images = render(self._static_state())
                static.clear()
                static[key] = images
            return images
        state = RenderState(self.scene, self.width, self.height, tuple(position), yaw, pitch, fov)
        images = cache.get(state)
        if images is None:
            images = render(state)
            cache[state] = images
            trim_cache(cache, WIRE_CACHE_SIZE - 1 + len(self.agents) + len(self.cameras), WIRE_CACHE_BYTES)
        else:
            cache.move_to_end(state)
        return images

    def _static_state(self) -> RenderState:
        """What ``--static-frame`` sends: the scene's start view."""
        start = self.scene.start
        return RenderState(self.scene, self.width, self.height, (start.x, AGENT_Y + CAMERA_HEIGHT, start.z),
                           start.yaw, start.horizon, DEFAULT_FOV)

    def _maps_to_wire(self, normals: np.ndarray, classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The normals and class segmentation images as the wire carries them: RGBA8, alpha 255, rows bottom-up (as
        the instance segmentation image: a build's ImageSynthesis encodes its passes alike)."""
        h, w = self.height, self.width
        if normals.shape[:2] != (h, w) or classes.shape[:2] != (h, w):
            raise RuntimeError(f"renderer returned normals and class images of {normals.shape}, {classes.shape} for a "
                               f"{w} x {h} frame")
        out = []
        for image in (normals, classes):
            wire = np.empty((h, w, 4), dtype=np.uint8)
            wire[..., :3] = image[::-1]
            wire[..., 3] = 255
            out.append(wire)
        return out[0], out[1]

    def _to_wire(self, rgb: np.ndarray, depth: np.ndarray, ids: np.ndarray):
        h, w = self.height, self.width
        if rgb.shape[:2] != (h, w) or depth.shape != (h, w) or ids.shape[:2] != (h, w):
            raise RuntimeError(
                f"renderer returned images of {rgb.shape}, {depth.shape}, {ids.shape} for a {w} x {h} frame"
            )
        rgb_up = rgb[::-1]
        if self.rgb_bytes_per_pixel == 4:
            rgb_wire = np.empty((h, w, 4), dtype=np.uint8)
            rgb_wire[..., :3] = rgb_up
            rgb_wire[..., 3] = 255
        else:
            rgb_wire = np.ascontiguousarray(rgb_up, dtype=np.uint8)
        depth_wire = np.ascontiguousarray(depth[::-1], dtype="<f4")
        ids_wire = np.empty((h, w, 4), dtype=np.uint8)
        ids_wire[..., :3] = ids[::-1]
        ids_wire[..., 3] = 255
        return rgb_wire, depth_wire, ids_wire
