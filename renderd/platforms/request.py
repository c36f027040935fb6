"""What a caller asks of a platform (:class:`PlatformRequest`) and what a platform answers (:class:`PlatformReport`)."""

from __future__ import annotations

import os
import platform as _platform
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from renderd.errors import ConfigError

#: Names a request may ask for; ``auto`` walks the candidates of the system (see ``selection``).
PLATFORM_NAMES = ("auto", "CloudRendering", "Linux64", "OSXIntel64", "headless")

#: Values of ``x_display`` that are not display names.
X_DISPLAY_AUTO = "auto"
X_DISPLAY_MANAGED = "managed"


@dataclass(frozen=True)
class PlatformRequest:
    """A declarative request: what should be rendered, where.

    ``platform``: one of :data:`PLATFORM_NAMES`. ``system``: the operating system name as
    ``platform.system()`` spells it. ``width``/``height``: the player's screen in pixels.
    ``x_display``: ``None`` or ``"auto"`` (an existing valid display, else a managed Xvfb when
    installed), ``"managed"`` (renderd starts and owns an Xvfb) or a display name such as ``":0.0"``.
    ``headless``: no images wanted (Unity's ``-batchmode -nographics``). ``gpus``: device indices to
    spread instances over (CUDA indices, see docs/platforms.md). ``executable``: the player, for
    platforms that inspect it (an ``.app`` bundle on macOS). ``env``: variables the player will get on
    top of this process's environment; probes run with the same environment (``VK_ICD_FILENAMES``,
    ``DISPLAY``, ``CUDA_VISIBLE_DEVICES`` ...).

    Raises :class:`renderd.errors.ConfigError` for a value that can never be right (an unknown
    platform, a non-positive size, ``gpus`` that is not a list of distinct non-negative integers: a
    negative index, a GPU listed twice, a string or a single number; ``None`` is no GPUs).
    """

    platform: str = "auto"
    system: str = field(default_factory=_platform.system)
    width: int = 300
    height: int = 300
    x_display: str | None = None
    headless: bool = False
    gpus: tuple[int, ...] = ()
    executable: str | None = None
    env: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.platform not in PLATFORM_NAMES:
            raise ConfigError(
                f"unknown platform {self.platform!r}; expected one of {', '.join(PLATFORM_NAMES)}",
                key="platform",
            )
        for key in ("width", "height"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"must be a positive integer, got {value!r}", key=key)
        if self.gpus is None:
            object.__setattr__(self, "gpus", ())
        if isinstance(self.gpus, str | bytes) or not isinstance(self.gpus, Iterable):
            # (a string would be taken apart character by character, and an int is not a list at all)
            raise ConfigError(f"must be a list of GPU indices such as [0, 1], got {self.gpus!r}", key="gpus")
        gpus = tuple(self.gpus)
        for gpu in gpus:
            if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0:
                raise ConfigError(
                    f"GPU indices must be non-negative integers, got {gpu!r} in {list(gpus)!r}", key="gpus"
                )
        twice = sorted({gpu for gpu in gpus if gpus.count(gpu) > 1})
        if twice:  # (as the configuration's gpus key and renderd doctor --gpus refuse it)
            raise ConfigError(f"{list(gpus)!r} lists GPU {twice[0]} twice; each device is listed once", key="gpus")
        object.__setattr__(self, "gpus", gpus)
        if self.x_display is not None and not isinstance(self.x_display, str):
            raise ConfigError(f"must be a string or None, got {self.x_display!r}", key="x_display")

    def environ(self) -> dict[str, str]:
        """The environment the player will see: this process's environment with ``env`` on top."""
        merged = dict(os.environ)
        if self.env:
            merged.update({str(k): str(v) for k, v in self.env.items()})
        return merged

    @property
    def display_given(self) -> bool:
        """True when ``x_display`` names a display or asks for a managed one (not left to discovery)."""
        return self.x_display not in (None, X_DISPLAY_AUTO)


@dataclass
class PlatformReport:
    """One platform's answer to a request.

    ``valid``: it can serve the request. ``reasons``: why not, one sentence each, each ending with its
    fix. ``instructions``: what to install or start for this platform in general; empty when the platform
    is installed and what is wrong is a setting (a variable naming no driver, a GPU index out of range), whose
    reasons say what to do. ``details``: what was
    found (device names, the display, the executable ...).
    """

    name: str
    valid: bool
    reasons: list[str] = field(default_factory=list)
    instructions: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (used by ``renderd doctor --json`` and the control API)."""
        return {
            "name": self.name,
            "valid": self.valid,
            "reasons": list(self.reasons),
            "instructions": self.instructions,
            "details": dict(self.details),
        }

    def describe(self) -> str:
        """A few lines for people: the verdict, each reason, and the instructions when invalid."""
        head = f"{self.name}: {'valid' if self.valid else 'not valid'}"
        found = _describe_details(self.details)
        if found:
            head += f" ({found})"
        lines = [head]
        lines.extend(f"  - {reason}" for reason in self.reasons)
        if not self.valid and self.instructions:
            lines.append(f"  To use {self.name}: {self.instructions}")
        return "\n".join(lines)


def _describe_details(details: Mapping[str, Any]) -> str:
    parts = []
    for key in ("display", "devices", "executable", "note"):
        value = details.get(key)
        if not value:
            continue
        if isinstance(value, list | tuple):
            value = ", ".join(str(v) for v in value)
        parts.append(f"{key}: {value}")
    return "; ".join(parts)
