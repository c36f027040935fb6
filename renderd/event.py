"""Events: what a client sees of one player message, and the (I/O-free) assembly of messages into them.

:class:`FrameAssembler` keeps the state a stream needs across messages (the previous metadata and images,
for METADATA_PATCH) and turns each decoded :class:`~renderd.protocol.Message` into an :class:`Event`.
Image arrays are numpy views of the bodies the decoder produced: nothing is copied, and rows are flipped
with a negative stride (players send them bottom-up).

Metadata is decoded lazily by :meth:`FrameAssembler.event`: building an event reads only what it needs
(screen sizes, depth format, sequence id, active agent, ``lastActionSuccess`` ...) with a msgpack scan that
skips everything else without building it; ``event.metadata`` decodes the whole map on first access. With
100 objects in the metadata that scan costs about 5% of a full decode. The scan checks the whole body's
msgpack structure, so malformed framing is still a :class:`ProtocolError` from ``event()``; only what a
structural scan cannot see (invalid UTF-8 inside a string, a timestamp extension, type -1, of the wrong
length or nanoseconds, a map or array used as a map key) surfaces as a :class:`ProtocolError` on first
access of ``event.metadata`` (finding it at the step would take a full decode), naming the METADATA field
and its offset and saying that the event's images and summary fields are valid and the session is not
broken; a later METADATA_PATCH, merged into that metadata, raises it too. Other extension types are not
errors: they come out as ``msgpack.ExtType``.

Depth is converted to metres from the agent's ``depthFormat`` as AI2-THOR's ``Event`` converts it (with
``Normalized`` scaled by the agent's ``cameraFarPlane - cameraNearPlane``, 20 - 0.1 when the metadata has
none; AI2-THOR takes the planes from ``Initialize``'s answer, with the same defaults). A legacy 3-byte
depth pixel ``(r, g, b)`` is ``(r + g/256 + b/256^2) / 256`` of the unit, as AI2-THOR reads it. Without
``depthFormat`` AI2-THOR assumes ``Normalized``, which is what the old builds that send no depthFormat send
(3-byte depth); renderd does so for 3-byte depth, but takes float32 depth without ``depthFormat`` as metres,
what players other than AI2-THOR builds send.

An :class:`Event` gives what AI2-THOR's ``ai2thor.server.Event`` gives for the same message (same shapes,
dtypes and values), plus ``instance_masks``, ``class_masks``, ``instance_detections2D``,
``class_detections2D``, their third-party lists, ``cv2img``, ``get_object``, ``objects_by_type``, ``pose``
and ``pose_discrete``, all computed on first use. Where AI2-THOR is inconsistent renderd keeps to one rule:
every colour image is (H, W, 3), where AI2-THOR leaves third-party RGB and normals at the 4 bytes per pixel
of CloudRendering; a flow image is ``flow_frame`` (AI2-THOR's Event declares it but stores the image in
``flows_frame``, which renderd's gives too), and ``third_party_flows_frames`` is the same list as
``third_party_flow_frames`` (AI2-THOR's FIFO reader never fills its own); AI2-THOR's deprecated
``class_segmentation_frame``, ``cv2image()`` and ``image_data`` warn and answer as its do; ``cls in event.class_detections2D`` asks about that type (AI2-THOR's asks
``instance_masks``); masks and float32 depth of a 1-pixel-high or -wide image keep their (H, W) shape
(AI2-THOR squeezes them to one dimension). ``metadata`` is an
:class:`AgentMetadata`, a dict that, like AI2-THOR's ``MetadataWrapper``, answers the deprecated keys
``reachablePositions`` and ``hand`` (only when the player did not send them itself).
"""

from __future__ import annotations

import copy
from abc import abstractmethod
import math
import numbers
import warnings
import weakref
from collections.abc import Mapping
from typing import Any, Iterator

import msgpack
import numpy as np

from renderd.errors import ProtocolError
from renderd.protocol import (
    IMAGE_FIELDS,
    FieldType,
    Message,
    decode_metadata,
    metadata_container_limit,
    metadata_may_exceed,
)

__all__ = [
    "AgentMetadata",
    "ClassDetections2D",
    "ClassMasks",
    "Event",
    "FrameAssembler",
    "InstanceDetections2D",
    "InstanceMasks",
    "build_events",
]

# Depth units a player may declare, in metres per unit ("Normalized" is scaled by the far-near range).
_DEPTH_SCALE = {"Meters": 1.0, "Millimeters": 0.001}
# A legacy 3-byte depth pixel (r, g, b) is (r + g/256 + b/256^2) / 256 of its format's unit, as AI2-THOR
# reads it; builds that sent it sent no depthFormat, and their depth is Normalized (AI2-THOR's default).
_LEGACY_DEPTH_SCALE = np.float32(1 / 256)


#: Agent keys read when an event is built (by :func:`build_events` and ``Event.__bool__``/``__repr__``).
_SUMMARY_AGENT_KEYS = frozenset(
    {
        "screenWidth",
        "screenHeight",
        "lastAction",
        "lastActionSuccess",
        "errorMessage",
        "depthFormat",
        "cameraNearPlane",
        "cameraFarPlane",
        "thirdPartyCameras",
    }
)
#: Top-level keys read when an event is built.
_SUMMARY_TOP_KEYS = frozenset({"sequenceId", "activeAgentId", "thirdPartyCameras"})


class _LazyMetadata:
    """A METADATA body, decoded in full on first use (and then only once)."""

    __slots__ = ("_body", "_offset", "_ftype", "_value")

    def __init__(self, body: Any, offset: int | None, ftype: FieldType) -> None:
        self._body = body
        self._offset = offset
        self._ftype = ftype
        self._value: dict[str, Any] | None = None

    def value(self) -> dict[str, Any]:
        if self._value is None:
            self._value = decode_metadata(self._body, offset=self._offset, ftype=self._ftype)
            self._body = None
        return self._value


class _CopiedMetadata:
    """A metadata map the :class:`FrameAssembler` keeps (to merge the next METADATA_PATCH into), given to
    events as a deep copy made on first use, so what a user does to ``event.metadata`` stays in that event."""

    __slots__ = ("_source", "_value")

    def __init__(self, source: dict[str, Any]) -> None:
        self._source: dict[str, Any] | None = source
        self._value: dict[str, Any] | None = None

    def value(self) -> dict[str, Any]:
        if self._value is None:
            self._value = _copy_metadata(self._source)  # type: ignore[arg-type]
            self._source = None
        return self._value  # type: ignore[return-value]


def _copy_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of decoded metadata, made by packing and unpacking it: it holds only what msgpack
    decodes, which comes back equal, and this costs about a full decode where ``copy.deepcopy`` costs
    several (a step that reads ``event.metadata`` after a METADATA_PATCH pays it). Anything msgpack cannot
    pack as the exact type it decodes to (set by hand through :attr:`FrameAssembler.metadata`: a tuple, a
    dict subclass) is copied with ``copy.deepcopy``."""
    try:
        packed = msgpack.packb(metadata, strict_types=True)
    except (TypeError, ValueError, OverflowError):
        return copy.deepcopy(metadata)
    return decode_metadata(packed, limit_containers=False)  # decoded (and counted) once already


def _malformed_after_all(exc: ProtocolError, context: str) -> ProtocolError:
    """``exc`` (about a METADATA body the event scan took) with ``context``: when and where it surfaced."""
    text = exc.message
    if exc.offset is not None and text.endswith(f" (at byte offset {exc.offset})"):
        text = text[: -len(f" (at byte offset {exc.offset})")]
    return ProtocolError(f"{text}; {context}", offset=exc.offset, field_type=exc.field_type)


def _scan_metadata(body: Any) -> dict[str, Any] | None:
    """The part of a metadata map that building events needs, or ``None`` if the body is not the
    regular shape (a map whose ``agents`` is a list of maps, nothing after it) or, over
    ``METADATA_UNCOUNTED_SIZE``, may hold more maps and arrays than ``METADATA_BYTES_PER_CONTAINER``
    allows: the caller then decodes it in full, which names the exact problem."""
    view = memoryview(body)
    limit = metadata_container_limit(view.nbytes)
    if limit is not None and metadata_may_exceed(body, limit):
        return None  # maybe too many maps and arrays: the full decode counts them (and names the limit)
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(view.nbytes, 1))
    try:
        unpacker.feed(view)
        summary: dict[str, Any] = {}
        for _ in range(unpacker.read_map_header()):
            key = unpacker.unpack()
            if key == "agents":
                agents = []
                for _ in range(unpacker.read_array_header()):
                    agent: dict[str, Any] = {}
                    for _ in range(unpacker.read_map_header()):
                        agent_key = unpacker.unpack()
                        if agent_key in _SUMMARY_AGENT_KEYS:
                            agent[agent_key] = unpacker.unpack()
                        else:
                            unpacker.skip()
                    agents.append(agent)
                summary["agents"] = agents
            elif key in _SUMMARY_TOP_KEYS:
                summary[key] = unpacker.unpack()
            else:
                unpacker.skip()
        if unpacker.tell() != view.nbytes:
            return None
    except Exception:  # msgpack raises several unrelated types for malformed input; decode in full instead
        return None
    return summary


class _NoReachablePositions(KeyError, IndexError):
    """``reachablePositions`` asked for after another action: a KeyError, and the IndexError AI2-THOR raises."""


class AgentMetadata(dict):
    """An agent's metadata map as ``event.metadata`` gives it: a plain dict, plus AI2-THOR's aliases of two
    deprecated keys, looked up only when the key is missing (a present key costs nothing extra):
    ``reachablePositions`` is ``actionReturn`` after ``GetReachablePositions`` (or ``GetSceneBounds``), and
    ``hand`` is ``heldObjectPose``; each warns as AI2-THOR does."""

    __slots__ = ()

    def __missing__(self, key: Any) -> Any:
        if key == "reachablePositions":
            if self.get("lastAction") in ("GetReachablePositions", "GetSceneBounds"):
                warnings.warn(
                    'The key event.metadata["reachablePositions"] is deprecated and has been remapped to '
                    'event.metadata["actionReturn"].',
                    stacklevel=2,
                )
                return self._stand_in(key, "actionReturn")
            raise _NoReachablePositions(
                "event.metadata['reachablePositions'] is there only after step(action='GetReachablePositions'); "
                "the key is deprecated in favor of event.metadata['actionReturn']"
            )
        if key == "hand":
            warnings.warn(
                'The key event.metadata["hand"] is deprecated and has been remapped to event.metadata["heldObjectPose"].',
                stacklevel=2,
            )
            return self._stand_in(key, "heldObjectPose")
        raise KeyError(key)

    def _stand_in(self, key: str, stand_in: str) -> Any:
        """The value of the key that the deprecated ``key`` stands for; a KeyError naming both without it."""
        try:
            return self[stand_in]
        except KeyError:
            raise KeyError(
                f"event.metadata[{key!r}] (deprecated) stands for event.metadata[{stand_in!r}], "
                "which the player did not send"
            ) from None


def _clip(value: Any, limit: int = 100) -> str:
    """``repr(value)``, cut to ``limit`` characters (``...`` added), for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _color_key(color: Any, alpha: int) -> int | None:
    """The 32-bit key of an RGB colour with ``alpha``, as an instance segmentation pixel's bytes read as a
    little-endian uint32; ``None`` for a colour that is not three integers 0 to 255 (no pixel has it)."""
    try:
        if len(color) != 3:
            return None
        key = alpha << 24
        for shift, value in zip((0, 8, 16), color):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if not isinstance(value, numbers.Integral) or not 0 <= value <= 255:
                return None
            key |= int(value) << shift
    except TypeError:
        return None
    return key


def _color_entries(colors: Any) -> list[tuple[int, Any, str, Any]]:
    """``(index, entry, name, color)`` of each entry of an agent's metadata ``colors`` (none when it is
    missing or empty), for the colour maps and the masks alike: a :class:`ProtocolError` naming the first
    malformed one (``colors`` not a list, an entry without a string ``name`` and a list of numbers ``color``)."""
    if not colors:
        return []
    if not isinstance(colors, list):
        raise ProtocolError(
            f"metadata colors is {type(colors).__name__} {_clip(colors)}; expected a list of "
            "{name, color} maps (the player sent malformed metadata; the event's images are valid)",
            field_type=FieldType.METADATA,
        )
    entries = []
    for i, c in enumerate(colors):
        name = c.get("name") if isinstance(c, dict) else None
        color = c.get("color") if isinstance(c, dict) else None
        if (
            not isinstance(name, str)
            or not isinstance(color, (list, tuple))
            or not all(isinstance(v, numbers.Real) for v in color)
        ):
            raise ProtocolError(
                f"metadata colors[{i}] is {_clip(c)}; expected a map with a string 'name' and a list "
                "of numbers 'color' (the player sent malformed metadata; the event's images are valid)",
                field_type=FieldType.METADATA,
            )
        entries.append((i, c, name, color))
    return entries


def _mask_bounding_box(mask: np.ndarray) -> tuple[int, int, int, int] | None:
    rows = np.flatnonzero(mask.any(axis=1))
    if not len(rows):
        return None
    cols = np.flatnonzero(mask.any(axis=0))
    return int(cols[0]), int(rows[0]), int(cols[-1]), int(rows[-1])


class _LazyMasks(Mapping):
    """A mapping of names to masks computed on first use: ``mask(key)`` (``None`` when there is none) and
    ``_load_all()`` (compute every mask in view into ``_masks``), given by each kind."""

    _masks: dict[str, np.ndarray]

    @abstractmethod
    def mask(self, key: str, default: np.ndarray | None = None) -> np.ndarray | None:
        """The mask of ``key`` (computed now, then kept), or ``default`` when nothing in view has it."""

    @abstractmethod
    def _load_all(self) -> None:
        """Compute the mask of every key in view (once)."""

    def __contains__(self, key: object) -> bool:
        return self.mask(key) is not None  # type: ignore[arg-type]

    def __getitem__(self, key: str) -> np.ndarray:
        m = self.mask(key)
        if m is None:
            raise KeyError(key)
        return m

    def __iter__(self) -> Iterator[str]:
        self._load_all()
        return iter(self._masks)

    def __len__(self) -> int:
        self._load_all()
        return len(self._masks)


class InstanceMasks(_LazyMasks):
    """``event.instance_masks``: object id -> (H, W) bool mask of its pixels, for the objects the instance
    segmentation image shows (AI2-THOR's ``LazyInstanceSegmentationMasks``). Only ``colors`` entries whose
    name holds ``|`` (object ids) are instances. Masks are computed on first use of each key; iterating
    computes those of every object in view. ``colors`` is read when the masks are built (on first use of
    ``event.instance_masks``, ``class_masks`` or the detections): an entry the colour maps reject, or whose
    colour is not three integers 0 to 255, is a :class:`ProtocolError` naming it (``colors[i]``), never
    skipped (an object left without a mask would look out of view)."""

    def __init__(self, ids: np.ndarray, colors: Any) -> None:
        # ids: (H, W, 4) RGBA or (H, W, 3) RGB uint8, top row first. A 4-byte pixel matches a colour only
        # with alpha 255 (what Unity writes); a 3-byte one is read with alpha 0, as AI2-THOR reads it.
        self._ids = ids
        self._alpha = 255 if ids.shape[2] == 4 else 0
        self._keys: np.ndarray | None = None
        self._unique: set[int] | None = None
        self._masks: dict[str, np.ndarray] = {}
        self._loaded = False
        self.instance_colors: dict[str, Any] = {}
        self.class_colors: dict[str, list[Any]] = {}
        for i, entry, name, color in _color_entries(colors):
            if _color_key(color, 0) is None:
                raise ProtocolError(
                    f"metadata colors[{i}] is {_clip(entry)}; expected a 'color' of three integers 0 to 255, "
                    "[r, g, b]: no pixel of the instance segmentation image can have another (the player sent "
                    "malformed metadata; the event's images are valid)",
                    field_type=FieldType.METADATA,
                )
            cls = name
            if "|" in name:
                self.instance_colors[name] = color
                cls = name.split("|")[0]
            self.class_colors.setdefault(cls, []).append(color)

    @property
    def keys_image(self) -> np.ndarray:
        """(H, W) uint32: each pixel's bytes (RGBA, alpha as above) as a little-endian integer."""
        if self._keys is None:
            ids = self._ids
            if ids.shape[2] == 4:
                self._keys = ids.view("<u4")[..., 0]
            else:
                self._keys = ids[..., 0].astype("<u4") | ids[..., 1].astype("<u4") << 8 | ids[..., 2].astype("<u4") << 16
        return self._keys

    @property
    def unique_keys(self) -> set[int]:
        if self._unique is None:
            self._unique = {int(k) for k in np.unique(self.keys_image)}
        return self._unique

    def color_key(self, color: Any) -> int | None:
        return _color_key(color, self._alpha)

    def color_mask(self, color: Any) -> np.ndarray | None:
        key = self.color_key(color)
        return None if key is None else self.keys_image == np.uint32(key)

    def mask(self, key: str, default: np.ndarray | None = None) -> np.ndarray | None:
        if key in self._masks:
            return self._masks[key]
        color = self.instance_colors.get(key) if isinstance(key, str) else None
        if color is None:
            return default
        m = self.color_mask(color)
        if m is None or not m.any():
            return default
        self._masks[key] = m
        return m

    def _load_all(self) -> None:
        if not self._loaded:
            present = self.unique_keys
            for name, color in self.instance_colors.items():
                if self.color_key(color) in present:
                    self.mask(name)
            self._loaded = True


class ClassMasks(_LazyMasks):
    """``event.class_masks``: object type -> (H, W) bool mask (AI2-THOR's ``LazyClassSegmentationMasks``).
    A type is the part of an object id before its first ``|``, or a ``colors`` name without one. The key
    ``"background"`` masks the pixels of colours ``colors`` does not list; as in AI2-THOR's, it is listed
    when iterating (and counted by ``len``) only once it has been asked for."""

    def __init__(self, instance_masks: InstanceMasks) -> None:
        self.instance_masks = instance_masks
        self._masks: dict[str, np.ndarray] = {}
        self._loaded = False

    def mask(self, key: str, default: np.ndarray | None = None) -> np.ndarray | None:
        if key in self._masks:
            return self._masks[key]
        im = self.instance_masks
        if not isinstance(key, str):
            return default
        class_mask = None
        if key == "background":
            listed = {im.color_key(c) for colors in im.class_colors.values() for c in colors}
            for k in im.unique_keys - listed:
                m = im.keys_image == np.uint32(k)
                class_mask = m if class_mask is None else class_mask | m
        elif "|" not in key:
            for color in im.class_colors.get(key, ()):
                m = im.color_mask(color)
                if m is not None:
                    class_mask = m if class_mask is None else class_mask | m
        if class_mask is None or not class_mask.any():
            return default
        self._masks[key] = class_mask
        return class_mask

    def _load_all(self) -> None:
        if not self._loaded:
            im = self.instance_masks
            present = im.unique_keys
            for cls, colors in im.class_colors.items():
                if any(im.color_key(c) in present for c in colors):
                    self.mask(cls)
            self._loaded = True


class InstanceDetections2D(Mapping):
    """``event.instance_detections2D``: object id -> its pixels' bounding box ``(x_min, y_min, x_max,
    y_max)``, inclusive, for the objects in view."""

    def __init__(self, instance_masks: InstanceMasks) -> None:
        self.instance_masks = instance_masks
        self._boxes: dict[str, tuple[int, int, int, int] | None] = {}

    def __getitem__(self, key: str) -> tuple[int, int, int, int] | None:
        if key not in self._boxes:
            self._boxes[key] = _mask_bounding_box(self.instance_masks[key])
        return self._boxes[key]

    def __contains__(self, key: object) -> bool:
        return key in self.instance_masks

    def __iter__(self) -> Iterator[str]:
        return iter(self.instance_masks)

    def __len__(self) -> int:
        return len(self.instance_masks)


class ClassDetections2D(Mapping):
    """``event.class_detections2D``: object type -> a tuple of bounding boxes, one per instance colour of
    that type in view."""

    def __init__(self, instance_masks: InstanceMasks) -> None:
        self.instance_masks = instance_masks
        self._boxes: dict[str, tuple[tuple[int, int, int, int], ...]] = {}
        self._loaded = False

    def __getitem__(self, cls: str) -> tuple[tuple[int, int, int, int], ...]:
        if cls in self._boxes:
            return self._boxes[cls]
        im = self.instance_masks
        boxes = []
        for color in im.class_colors.get(cls, ()) if isinstance(cls, str) else ():
            m = im.color_mask(color)
            box = None if m is None else _mask_bounding_box(m)
            if box:
                boxes.append(box)
        if not boxes:
            raise KeyError(cls)
        self._boxes[cls] = tuple(boxes)
        return self._boxes[cls]

    def _load_all(self) -> None:
        if not self._loaded:
            im = self.instance_masks
            present = im.unique_keys
            for cls, colors in im.class_colors.items():
                if any(im.color_key(c) in present for c in colors):
                    self[cls]
            self._loaded = True

    def __iter__(self) -> Iterator[str]:
        self._load_all()
        return iter(self._boxes)

    def __len__(self) -> int:
        self._load_all()
        return len(self._boxes)


class Event:
    """One agent's view of one step.

    ``frame`` is (H, W, 3) uint8, top row first; ``depth_frame`` (H, W) float32 in metres;
    ``instance_segmentation_frame``, ``semantic_segmentation_frame``, ``normals_frame`` and
    ``flow_frame`` (H, W, 3) uint8. Any of them is ``None`` when the player did not send it.
    ``bool(event)`` is the agent's ``lastActionSuccess``. ``events`` lists every agent's event
    (``[self]`` with one agent). ``instance_masks`` and ``class_masks`` map object ids and types to
    (H, W) bool masks of the instance segmentation image, as AI2-THOR's do (see the module docstring).
    """

    __slots__ = (
        "_metadata",
        "_summary",
        "_lazy",
        "_index",
        "screen_width",
        "screen_height",
        "sequence_id",
        "frame",
        "depth_frame",
        "normals_frame",
        "flow_frame",
        "instance_segmentation_frame",
        "semantic_segmentation_frame",
        "third_party_camera_frames",
        "third_party_depth_frames",
        "third_party_normals_frames",
        "third_party_flow_frames",
        "third_party_instance_segmentation_frames",
        "third_party_semantic_segmentation_frames",
        "_ids",
        "_third_party_ids",
        "_derived",
        "_events",
        "__weakref__",
    )

    def __init__(self, metadata: dict[str, Any], sequence_id: int | None = None) -> None:
        self._metadata: dict[str, Any] | None = metadata
        # What bool() and repr() read: the metadata itself, or the scanned summary while it is undecoded.
        self._summary: dict[str, Any] = metadata
        self._lazy: _LazyMetadata | None = None
        self._index = 0
        self.screen_width = metadata.get("screenWidth")
        self.screen_height = metadata.get("screenHeight")
        self.sequence_id = sequence_id
        self.frame: np.ndarray | None = None
        self.depth_frame: np.ndarray | None = None
        self.normals_frame: np.ndarray | None = None
        self.flow_frame: np.ndarray | None = None
        self.instance_segmentation_frame: np.ndarray | None = None
        self.semantic_segmentation_frame: np.ndarray | None = None
        self.third_party_camera_frames: list[np.ndarray] = []
        self.third_party_depth_frames: list[np.ndarray] = []
        self.third_party_normals_frames: list[np.ndarray] = []
        self.third_party_flow_frames: list[np.ndarray] = []
        self.third_party_instance_segmentation_frames: list[np.ndarray] = []
        self.third_party_semantic_segmentation_frames: list[np.ndarray] = []
        # The instance segmentation images with all their channels (alpha included), for the masks.
        self._ids: np.ndarray | None = None
        self._third_party_ids: list[np.ndarray] = []
        # What is computed from the metadata and images on first use (colour maps, masks), by name.
        self._derived: dict[str, Any] | None = None
        # None stands for [self]: a single-agent event must not reference itself, or it (and the frame
        # buffers it holds) could only be freed by the cyclic garbage collector, long after the client
        # dropped it; at 1024x1024 that costs page faults on every step.
        self._events: list[Event] | None = None

    @property
    def metadata(self) -> dict[str, Any]:
        """This agent's metadata map (decoded on first access when the event came from a FrameAssembler).

        Raises :class:`ProtocolError` if a part of it that building the event did not need is malformed.
        """
        metadata = self._metadata
        if metadata is None:
            assert self._lazy is not None
            try:
                full = self._lazy.value()
            except ProtocolError as exc:
                raise _malformed_after_all(
                    exc,
                    "found on first access of event.metadata (building the event decodes only what it needs): "
                    "the event's images, sequence_id, last_action and error_message are valid and the session "
                    "is not broken by it, but a step answered with a METADATA_PATCH fails, as it merges into "
                    "this metadata",
                ) from exc.__cause__
            metadata = full["agents"][self._index]
            if type(metadata) is dict:
                metadata = AgentMetadata(metadata)
            self._metadata = self._summary = metadata
            self._lazy = None
        return metadata

    @metadata.setter
    def metadata(self, metadata: dict[str, Any]) -> None:
        self._metadata = self._summary = metadata
        self._lazy = None
        self._derived = None

    def _defer_metadata(self, lazy: _LazyMetadata, index: int) -> None:
        """Drop the summary-only metadata: the full map comes from ``lazy`` (agent ``index``) on first use."""
        self._metadata = None
        self._lazy = lazy
        self._index = index

    @property
    def events(self) -> list[Event]:
        """Every agent's event of this step, in agent order (``[self]`` with one agent)."""
        return [self] if self._events is None else self._events

    @events.setter
    def events(self, events: list[Event]) -> None:
        self._events = None if len(events) == 1 and events[0] is self else events

    def __bool__(self) -> bool:
        return bool(self._summary.get("lastActionSuccess", False))

    @property
    def last_action(self) -> str | None:
        """The agent's ``lastAction``, without decoding the whole metadata."""
        value = self._summary.get("lastAction")
        return value if isinstance(value, str) else None

    @property
    def error_message(self) -> str:
        """The agent's ``errorMessage`` (``""`` when there is none), without decoding the whole metadata."""
        value = self._summary.get("errorMessage")
        return value if isinstance(value, str) else ""

    def _get_derived(self, name: str) -> Any:
        derived = self._derived
        if derived is None:
            derived = self._derived = {}
        value = derived.get(name)
        if value is None:
            value = derived[name] = getattr(self, "_make" + name)()
        return value

    def _make_color_maps(self) -> tuple[dict[tuple[int, ...], str], dict[str, tuple[int, ...]]]:
        to_id: dict[tuple[int, ...], str] = {}
        to_color: dict[str, tuple[int, ...]] = {}
        for _, _, name, color in _color_entries(self.metadata.get("colors")):
            key = tuple(color)
            to_id[key] = name
            to_color[name] = key
        return to_id, to_color

    @property
    def color_to_object_id(self) -> dict[tuple[int, ...], str]:
        """Segmentation colour ``(r, g, b)`` -> the name ``colors`` gives it (an object id or a type);
        built once per event. A malformed ``colors`` is a :class:`ProtocolError` naming the entry."""
        return self._get_derived("_color_maps")[0]

    @property
    def object_id_to_color(self) -> dict[str, tuple[int, ...]]:
        """The reverse of :attr:`color_to_object_id`; built once per event."""
        return self._get_derived("_color_maps")[1]

    def _make_masks(self) -> tuple[Any, ...]:
        if self._ids is None:
            return {}, {}, None, {}
        instances = InstanceMasks(self._ids, self.metadata.get("colors"))
        return instances, ClassMasks(instances), InstanceDetections2D(instances), ClassDetections2D(instances)

    @property
    def instance_masks(self) -> InstanceMasks | dict:
        """Object id -> (H, W) bool mask, from the instance segmentation image (``{}`` without one)."""
        return self._get_derived("_masks")[0]

    @property
    def class_masks(self) -> ClassMasks | dict:
        """Object type -> (H, W) bool mask, from the instance segmentation image (``{}`` without one)."""
        return self._get_derived("_masks")[1]

    @property
    def instance_detections2D(self) -> InstanceDetections2D | None:  # noqa: N802 (AI2-THOR's name)
        """Object id -> bounding box ``(x_min, y_min, x_max, y_max)`` (``None`` without segmentation)."""
        return self._get_derived("_masks")[2]

    @property
    def class_detections2D(self) -> ClassDetections2D | dict:  # noqa: N802 (AI2-THOR's name)
        """Object type -> tuple of bounding boxes (``{}`` without segmentation)."""
        return self._get_derived("_masks")[3]

    def _make_third_party_masks(self) -> tuple[list[InstanceMasks], list[ClassMasks]]:
        colors = self.metadata.get("colors") if self._third_party_ids else None
        instances = [InstanceMasks(ids, colors) for ids in self._third_party_ids]
        return instances, [ClassMasks(m) for m in instances]

    @property
    def third_party_instance_masks(self) -> list[InstanceMasks]:
        """One :attr:`instance_masks` per third-party camera that sent a segmentation image."""
        return self._get_derived("_third_party_masks")[0]

    @property
    def third_party_class_masks(self) -> list[ClassMasks]:
        """One :attr:`class_masks` per third-party camera that sent a segmentation image."""
        return self._get_derived("_third_party_masks")[1]

    @property
    def third_party_flows_frames(self) -> list[np.ndarray]:
        """AI2-THOR's name for :attr:`third_party_flow_frames`."""
        return self.third_party_flow_frames

    @property
    def flows_frame(self) -> np.ndarray | None:
        """:attr:`flow_frame` under the name AI2-THOR's Event stores the flow image in."""
        return self.flow_frame

    @property
    def class_segmentation_frame(self) -> np.ndarray | None:
        """AI2-THOR's deprecated name for :attr:`semantic_segmentation_frame` (warns, as AI2-THOR's does)."""
        warnings.warn(
            "event.class_segmentation_frame is deprecated: use event.semantic_segmentation_frame",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.semantic_segmentation_frame

    def cv2image(self) -> np.ndarray | None:
        """AI2-THOR's deprecated method for :attr:`cv2img` (warns, as AI2-THOR's does)."""
        warnings.warn("event.cv2image() is deprecated: use event.cv2img", stacklevel=2)
        return self.cv2img

    @property
    def image_data(self) -> None:
        """Removed in AI2-THOR (it warns and gives None): the RGB image is :attr:`frame`."""
        warnings.warn("event.image_data was removed: the RGB image is event.frame", stacklevel=2)
        return None

    @property
    def cv2img(self) -> np.ndarray | None:
        """:attr:`frame` in BGR order, for OpenCV (a view, not a copy)."""
        return None if self.frame is None else self.frame[..., ::-1]

    def get_object(self, object_id: str) -> dict[str, Any] | None:
        """The ``objects`` entry with this ``objectId``, or ``None``."""
        for obj in self.metadata.get("objects") or ():
            if obj.get("objectId") == object_id:
                return obj
        return None

    def objects_by_type(self, object_type: str) -> list[dict[str, Any]]:
        """The ``objects`` entries of this ``objectType``."""
        return [obj for obj in self.metadata.get("objects") or () if obj.get("objectType") == object_type]

    @property
    def pose(self) -> tuple[int, int, int, int]:
        """The agent's ``(x, z, yaw, horizon)``, each in thousandths, rounded (as AI2-THOR's)."""
        agent = self.metadata["agent"]
        loc = agent["position"]
        return (
            round(loc["x"] * 1000),
            round(loc["z"] * 1000),
            round(agent["rotation"]["y"] * 1000),
            round(agent["cameraHorizon"] * 1000),
        )

    @property
    def pose_discrete(self) -> tuple[int, int, int, int]:
        """The agent's pose on a 0.25 m grid in 90-degree steps, as AI2-THOR's ``pose_discrete``."""
        agent = self.metadata["agent"]
        loc = agent["position"]
        step = 0.25
        return (
            int(loc["x"] / step),
            int(loc["z"] / step),
            int(agent["rotation"]["y"] / 90.0),
            int(round(agent["cameraHorizon"])),
        )

    def __repr__(self) -> str:
        md = self._summary
        return (
            f"<renderd.Event seq={self.sequence_id} lastAction={md.get('lastAction')!r} "
            f"success={md.get('lastActionSuccess')!r} {self.screen_width}x{self.screen_height}"
            + (f" error={md.get('errorMessage')!r}" if md.get("errorMessage") else "")
            + ">"
        )


def _image(
    body: Any, ftype: FieldType, width: int, height: int, offset: int, *, depth: bool = False, alpha: bool = False
) -> np.ndarray:
    """The field's image, top row first: depth as float32; colour as (H, W, 3) uint8, or with ``alpha``
    (H, W, 3|4) with all the channels the player sent."""
    arr = body if isinstance(body, np.ndarray) else np.frombuffer(body, dtype=np.uint8)
    pixels = width * height
    n = arr.nbytes
    if depth:
        if n == pixels * 4:
            return arr.view("<f4").reshape(height, width)[::-1]
        if n == pixels * 3:  # legacy 24-bit depth: a fraction of the full scale, 1/256 precision per byte
            a = arr.reshape(height, width, 3)[::-1].astype(np.float32)
            return (a[..., 0] + a[..., 1] / np.float32(256) + a[..., 2] / np.float32(256 * 256)) * _LEGACY_DEPTH_SCALE
        raise ProtocolError(
            f"{ftype.name} body is {n} bytes, but screenWidth x screenHeight = {width} x {height} "
            f"needs {pixels * 4} bytes (float32 per pixel)",
            offset=offset,
            field_type=ftype,
        )
    if n == pixels * 3:
        return arr.reshape(height, width, 3)[::-1]
    if n == pixels * 4:
        return arr.reshape(height, width, 4)[::-1] if alpha else arr.reshape(height, width, 4)[::-1, :, :3]
    raise ProtocolError(
        f"{ftype.name} body is {n} bytes, but screenWidth x screenHeight = {width} x {height} "
        f"needs {pixels * 3} (RGB) or {pixels * 4} (RGBA) bytes",
        offset=offset,
        field_type=ftype,
    )


def _depth(body: Any, ftype: FieldType, width: int, height: int, offset: int, agent: dict[str, Any]) -> np.ndarray:
    """A depth field's image in metres. Without ``depthFormat`` float32 depth is taken as metres, legacy
    3-byte depth as Normalized (see the module docstring)."""
    arr = body if isinstance(body, np.ndarray) else np.frombuffer(body, dtype=np.uint8)
    depth = _image(arr, ftype, width, height, offset, depth=True)
    fmt = agent.get("depthFormat")
    if fmt is None and arr.nbytes == width * height * 3:
        fmt = "Normalized"
    return _depth_to_metres(depth, fmt, agent, ftype, offset)


def _depth_to_metres(
    depth: np.ndarray, fmt: str | None, agent: dict[str, Any], ftype: FieldType, offset: int
) -> np.ndarray:
    if fmt is None or fmt == "Meters":
        return depth
    if fmt == "Normalized":
        planes = []
        for key, default in (("cameraNearPlane", 0.1), ("cameraFarPlane", 20.0)):
            value = agent.get(key, default)
            try:
                plane = float(value)
            except (TypeError, ValueError):
                plane = math.nan
            if not math.isfinite(plane):
                raise ProtocolError(
                    f"metadata {key} is {value!r}; a Normalized depth image needs a finite number",
                    offset=offset,
                    field_type=ftype,
                )
            planes.append(plane)
        near, far = planes
        return depth * np.float32(far - near)
    scale = _DEPTH_SCALE.get(fmt) if isinstance(fmt, str) else None
    if scale is None:
        raise ProtocolError(
            f"unknown depthFormat {fmt!r} (expected Meters, Millimeters or Normalized)", offset=offset, field_type=ftype
        )
    return depth * np.float32(scale)


_AGENT_SETTERS = {
    FieldType.RGB_IMAGE: "frame",
    FieldType.NORMALS_IMAGE: "normals_frame",
    FieldType.FLOWS_IMAGE: "flow_frame",
    FieldType.IDS_IMAGE: "instance_segmentation_frame",
    FieldType.CLASSES_IMAGE: "semantic_segmentation_frame",
}
_THIRD_PARTY_LISTS = {
    FieldType.THIRD_PARTY_IMAGE: "third_party_camera_frames",
    FieldType.THIRD_PARTY_NORMALS: "third_party_normals_frames",
    FieldType.THIRD_PARTY_FLOW: "third_party_flow_frames",
    FieldType.THIRD_PARTY_IMAGE_IDS: "third_party_instance_segmentation_frames",
    FieldType.THIRD_PARTY_CLASSES: "third_party_semantic_segmentation_frames",
}


def build_events(
    metadata: dict[str, Any],
    images: dict[FieldType, list[tuple[Any, int]]],
    sequence_id: int | None = None,
    *,
    offset: int | None = None,
    ftype: FieldType = FieldType.METADATA,
) -> Event:
    """Build the event of the active agent (its ``events`` lists all agents) from metadata and images.

    ``images`` maps each image field type to its ``(body, stream offset)`` pairs in wire order; ``offset``
    and ``ftype`` are the metadata field's, named by the :class:`ProtocolError` malformed metadata raises.
    """
    agents = metadata.get("agents")
    if not isinstance(agents, list) or not agents:
        raise ProtocolError(
            "metadata has no 'agents' list (every player message must describe its agents)",
            offset=offset,
            field_type=ftype,
        )
    events: list[Event] = []
    for i, agent in enumerate(agents):
        if not isinstance(agent, dict):
            raise ProtocolError(
                f"metadata agents[{i}] is {type(agent).__name__}, expected a map", offset=offset, field_type=ftype
            )
        try:
            width, height = int(agent["screenWidth"]), int(agent["screenHeight"])
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise ProtocolError(
                f"metadata agents[{i}] lacks a valid screenWidth/screenHeight: {exc}", offset=offset, field_type=ftype
            ) from exc
        if width <= 0 or height <= 0:
            raise ProtocolError(
                f"metadata agents[{i}] has screen size {width} x {height}", offset=offset, field_type=ftype
            )
        ev = Event(agent, sequence_id)
        cameras = None
        # Only the image types the message holds (usually one or two of the seventeen).
        for image_type, items in images.items():
            attr = _AGENT_SETTERS.get(image_type)
            if image_type == FieldType.IDS_IMAGE:
                if i < len(items):
                    body, off = items[i]
                    ids = ev._ids = _image(body, image_type, width, height, off, alpha=True)
                    ev.instance_segmentation_frame = ids[..., :3]
            elif attr is not None:
                if i < len(items):
                    body, off = items[i]
                    setattr(ev, attr, _image(body, image_type, width, height, off))
            elif image_type == FieldType.DEPTH_IMAGE:
                if i < len(items):
                    body, off = items[i]
                    ev.depth_frame = _depth(body, image_type, width, height, off, agent)
            else:  # a third-party camera's image
                if cameras is None:
                    cameras = agent.get("thirdPartyCameras") or metadata.get("thirdPartyCameras") or []
                    n_cameras = len(cameras) if isinstance(cameras, list) else 0
                count = min(len(items), n_cameras) if n_cameras else len(items)
                if image_type == FieldType.THIRD_PARTY_DEPTH:
                    frames = ev.third_party_depth_frames
                    for body, off in items[:count]:
                        frames.append(_depth(body, image_type, width, height, off, agent))
                elif image_type == FieldType.THIRD_PARTY_IMAGE_IDS:
                    frames = ev.third_party_instance_segmentation_frames
                    for body, off in items[:count]:
                        ids = _image(body, image_type, width, height, off, alpha=True)
                        ev._third_party_ids.append(ids)
                        frames.append(ids[..., :3])
                else:
                    frames = getattr(ev, _THIRD_PARTY_LISTS[image_type])
                    for body, off in items[:count]:
                        frames.append(_image(body, image_type, width, height, off))
        events.append(ev)
    active = metadata.get("activeAgentId", 0)
    if not isinstance(active, int) or not 0 <= active < len(events):
        raise ProtocolError(
            f"activeAgentId {active!r} does not name one of the {len(events)} agent(s)",
            offset=offset,
            field_type=ftype,
        )
    if len(events) == 1:
        return events[0]
    return _Agents(events).view(active)


class _Agents:
    """Every agent's event of one multi-agent step, held without a reference cycle.

    Each agent's state lives in a record (an :class:`Event` never handed out); what a user gets is a view of
    it (:class:`_AgentEvent`), whose every attribute reads and writes its record. Views refer to this object,
    this object to the records and (weakly) to the views, and nothing refers back: so a step's frames are
    freed when its last event is dropped, and the decoder's pool hands their buffers to the next step, where
    events that listed each other (a cycle) waited for the cyclic garbage collector, every step's buffers
    were new, and a 2-agent step cost several times a 1-agent one in page faults.
    """

    __slots__ = ("records", "_views")

    def __init__(self, records: list[Event]) -> None:
        self.records = records
        self._views: list[weakref.ref[_AgentEvent] | None] = [None] * len(records)

    def view(self, index: int) -> _AgentEvent:
        """Agent ``index``'s event: the same object as long as anything holds it."""
        ref = self._views[index]
        view = None if ref is None else ref()
        if view is None:
            view = _AgentEvent.__new__(_AgentEvent)
            view._record = self.records[index]
            view._agents = self
            view._agent = index
            self._views[index] = weakref.ref(view)
        return view

    def __reduce__(self) -> tuple[Any, ...]:
        return _Agents, (self.records,)


def _agent_event(agents: _Agents, index: int) -> _AgentEvent:
    return agents.view(index)


class _AgentEvent(Event):
    """One agent's event of a multi-agent step: a view of its record in :class:`_Agents` (see there)."""

    __slots__ = ("_record", "_agents", "_agent")

    @property
    def events(self) -> list[Event]:
        """Every agent's event of this step, in agent order."""
        agents = self._agents
        return [agents.view(i) for i in range(len(agents.records))]

    def __reduce__(self) -> tuple[Any, ...]:
        return _agent_event, (self._agents, self._agent)


def _delegate(name: str) -> property:
    def get(self: _AgentEvent) -> Any:
        return getattr(self._record, name)

    def set(self: _AgentEvent, value: Any) -> None:
        setattr(self._record, name, value)

    return property(get, set)


for _name in Event.__slots__:
    if _name not in ("__weakref__", "_events"):
        setattr(_AgentEvent, _name, _delegate(_name))
del _name


def _records(event: Event) -> list[Event]:
    """The records behind ``event.events`` (the events themselves with one agent)."""
    return event._agents.records if isinstance(event, _AgentEvent) else [event]


class FrameAssembler:
    """Turns a stream's decoded messages into events, carrying state for METADATA_PATCH.

    A patch is merged the way AI2-THOR merges it: shallow copies of the previous message's agents, the
    patch applied to agent ``agentId`` (which becomes the active agent), the previous message's
    third-party cameras, and the previous message's images reused.
    """

    def __init__(self) -> None:
        # The previous message's metadata (a dict, or undecoded) and images, for METADATA_PATCH.
        self._previous: dict[str, Any] | _LazyMetadata | None = None
        self.images: dict[FieldType, list[tuple[Any, int]]] = {}

    @property
    def metadata(self) -> dict[str, Any] | None:
        """The previous message's metadata (patches merged), decoded."""
        previous = self._previous
        if isinstance(previous, _LazyMetadata):
            previous = self._previous = previous.value()
        return previous

    @metadata.setter
    def metadata(self, metadata: dict[str, Any] | None) -> None:
        self._previous = metadata

    def _split(self, message: Message) -> tuple[tuple[FieldType, Any, int] | None, dict[FieldType, list[tuple[Any, int]]]]:
        """The metadata field ``(type, body, offset)`` and the images of ``message``; checks field types."""
        meta: tuple[FieldType, Any, int] | None = None
        images: dict[FieldType, list[tuple[Any, int]]] = {}
        offsets = message.offsets or [message.offset] * len(message.fields)
        for (ftype, body), offset in zip(message.fields, offsets):
            if ftype == FieldType.METADATA or ftype == FieldType.METADATA_PATCH:
                if meta is not None:
                    raise ProtocolError("message has two metadata fields", offset=offset, field_type=ftype)
                meta = (ftype, body, offset)
            elif ftype in IMAGE_FIELDS:
                images.setdefault(ftype, []).append((body, offset))
            else:
                raise ProtocolError(
                    f"unexpected {ftype.name} field in a player message (expected metadata and images)",
                    offset=offset,
                    field_type=ftype,
                )
        if meta is None:
            raise ProtocolError(
                "message has no METADATA or METADATA_PATCH field (a player message must start with metadata)",
                offset=message.offset,
            )
        return meta, images

    def assemble(self, message: Message, sequence_id: int | None = None) -> tuple[dict[str, Any], dict]:
        """Metadata (decoded, patches merged) and images of ``message``; raises ProtocolError if it has none."""
        (ftype, body, offset), images = self._split(message)
        if ftype == FieldType.METADATA:
            metadata = decode_metadata(body, offset=offset, ftype=ftype)
        else:
            patch = decode_metadata(body, offset=offset, ftype=ftype)
            metadata = self._apply_patch(patch, sequence_id, offset)
            images = self.images
        self._previous = metadata
        self.images = images
        return metadata, images

    def _apply_patch(self, patch: dict[str, Any], sequence_id: int | None, offset: int) -> dict[str, Any]:
        try:
            previous = self.metadata  # decodes the previous message in full if it was not yet
        except ProtocolError as exc:  # (what the scan of that message could not see)
            raise _malformed_after_all(
                exc,
                f"found when the METADATA_PATCH at byte offset {offset} was to be merged into it (the "
                "previous message's metadata, decoded in full only now)",
            ) from exc.__cause__
        if previous is None:
            raise ProtocolError(
                "METADATA_PATCH before any full METADATA (there is nothing to patch)",
                offset=offset,
                field_type=FieldType.METADATA_PATCH,
            )
        agent_id = patch.get("agentId")
        agents = previous.get("agents")
        if not isinstance(agents, list):  # (metadata set on the assembler by hand)
            agents = []
        if not isinstance(agent_id, int) or not 0 <= agent_id < len(agents):
            raise ProtocolError(
                f"METADATA_PATCH agentId {agent_id!r} does not name one of the {len(agents)} agent(s)",
                offset=offset,
                field_type=FieldType.METADATA_PATCH,
            )
        merged_agents = [dict(a) for a in agents]
        merged_agents[agent_id].update(patch)
        return {
            "agents": merged_agents,
            "thirdPartyCameras": previous.get("thirdPartyCameras"),
            "sequenceId": sequence_id if sequence_id is not None else previous.get("sequenceId"),
            "activeAgentId": agent_id,
        }

    def event(self, message: Message, sequence_id: int | None = None) -> Event:
        """Build the event of ``message`` (the active agent's; ``event.events`` lists every agent's).

        A full METADATA field is scanned, not decoded: each event's ``metadata`` is decoded on first
        access (see the module docstring). Raises :class:`ProtocolError` for anything malformed that the
        event itself needs.
        """
        (ftype, body, offset), images = self._split(message)
        if ftype == FieldType.METADATA:
            summary = _scan_metadata(body)
            if summary is not None:
                active = build_events(summary, images, summary.get("sequenceId"), offset=offset, ftype=ftype)
                # The events and the assembler decode the body each for themselves (the assembler only
                # when a patch follows): changes a user makes to an event's metadata reach no later event.
                # Kept only once the events are built: a rejected message is no base for a later patch.
                lazy = _LazyMetadata(body, offset, ftype)
                self._previous = _LazyMetadata(body, offset, ftype)
                self.images = images
                for index, ev in enumerate(_records(active)):
                    ev._defer_metadata(lazy, index)
                return active
        previous, previous_images = self._previous, self.images
        metadata, images = self.assemble(message, sequence_id)
        try:
            active = build_events(metadata, images, metadata.get("sequenceId"), offset=offset, ftype=ftype)
        except ProtocolError:
            self._previous, self.images = previous, previous_images  # a rejected message is no base for a patch
            raise
        copied = _CopiedMetadata(metadata)  # the assembler keeps ``metadata`` for the next patch
        for index, ev in enumerate(_records(active)):
            ev._defer_metadata(copied, index)
        return active
