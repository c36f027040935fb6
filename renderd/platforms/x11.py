"""X displays: naming, discovery and the checks Unity's Linux64 player needs.

The facts come from :mod:`renderd.platforms._x11probe` run in a child process; this module turns them
into reasons. A screen is usable when the display answers, the screen number exists (python-xlib
silently falls back to another screen when asked for a missing one, so the number is compared with
``screen_count()``), the GLX extension is present, the screen is at least the requested size and its
root window has depth 24.
"""

from __future__ import annotations

import glob
import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from renderd.platforms.probe import run_probe

log = logging.getLogger(__name__)

#: Deadline for one probe run (all displays of one check together).
X11_PROBE_TIMEOUT = 10.0
#: Where X servers put their local sockets (``X<n>``).
X11_SOCKET_DIR = "/tmp/.X11-unix"
#: The root depth Unity's X11 player needs.
REQUIRED_DEPTH = 24

_PROBE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_x11probe.py")
_PROBE_MARKER = "RENDERD-X11-PROBE"
_NAME_RE = re.compile(r"^(?P<host>[^:]*):(?P<number>\d+)(?:\.(?P<screen>\d+))?$")

MANAGED_FIX = 'let renderd start an Xvfb (x_display="managed"; needs the xvfb package: apt-get install xvfb)'


@dataclass(frozen=True)
class DisplayName:
    """A parsed X display name ``[host]:number[.screen]``."""

    host: str
    number: int
    screen: int | None

    @property
    def base(self) -> str:
        """The name without its screen: ``:1`` for ``:1.2``."""
        return f"{self.host}:{self.number}"

    def with_screen(self, screen: int) -> str:
        return f"{self.base}.{screen}"

    def __str__(self) -> str:
        return self.base if self.screen is None else self.with_screen(self.screen)


def parse_display_name(name: str) -> DisplayName | None:
    """Parse ``:1``, ``:1.0``, ``unix:1.0`` or ``host:10.0``; ``None`` when it is not a display name."""
    match = _NAME_RE.match(name.strip())
    if match is None:
        return None
    screen = match.group("screen")
    return DisplayName(match.group("host"), int(match.group("number")), None if screen is None else int(screen))


def socket_displays(socket_dir: str = X11_SOCKET_DIR) -> list[str]:
    """Displays with a local socket in ``socket_dir``, lowest number first (``[":0", ":1"]``)."""
    numbers = []
    for path in glob.glob(os.path.join(socket_dir, "X*")):
        suffix = os.path.basename(path)[1:]
        if suffix.isdigit():
            numbers.append(int(suffix))
    return [f":{n}" for n in sorted(set(numbers))]


@dataclass
class DisplayFacts:
    """What the probe found on one display (``ok`` False: it could not be reached; see ``error``)."""

    name: str
    ok: bool
    error: str = ""
    error_kind: str = ""
    screen_count: int = 0
    glx: bool = False
    vendor: str = ""
    screens: list[dict[str, int]] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DisplayFacts:
        return cls(
            name=str(data.get("name", "")),
            ok=bool(data.get("ok")),
            error=str(data.get("error", "")),
            error_kind=str(data.get("error_kind", "")),
            screen_count=int(data.get("screen_count", 0)),
            glx=bool(data.get("glx")),
            vendor=str(data.get("vendor", "")),
            screens=[dict(s) for s in data.get("screens", [])],
        )


def probe_displays(
    names: Iterable[str], env: Mapping[str, str], timeout: float = X11_PROBE_TIMEOUT
) -> dict[str, DisplayFacts]:
    """Probe each display (by its base name, screens included) in one child; keyed by the given names.

    Never raises for a display's problems: an unreachable display, a hung server or a missing
    python-xlib come back as facts with ``ok=False`` and an ``error``.
    """
    names = list(dict.fromkeys(names))
    if not names:
        return {}
    # XAUTHORITY and HOME matter for authorisation; DISPLAY must not leak into the probe's choice.
    probe_env = {k: v for k, v in env.items() if k != "DISPLAY"}
    outcome = run_probe(_PROBE_SCRIPT, names, marker=_PROBE_MARKER, env=probe_env, timeout=timeout)
    if outcome.answer is None or "displays" not in outcome.answer:
        error = outcome.failure or str((outcome.answer or {}).get("error", "no answer"))
        if outcome.stderr:
            error += f": {outcome.stderr.splitlines()[-1]}"
        return {name: DisplayFacts(name, False, f"the X probe failed: {error}", "probe") for name in names}
    facts = {}
    for item in outcome.answer["displays"]:
        found = DisplayFacts.from_json(item)
        facts[found.name] = found
    silent = "the X probe said nothing about it"
    return {name: facts.get(name, DisplayFacts(name, False, silent, "probe")) for name in names}


def screen_reasons(facts: DisplayFacts, screen: int, width: int, height: int) -> list[str]:
    """Why screen ``screen`` of the probed display cannot serve a ``width`` x ``height`` player (empty: it can)."""
    parsed = parse_display_name(facts.name)
    base = parsed.base if parsed else facts.name
    label = parsed.with_screen(screen) if parsed else facts.name
    if not facts.ok:
        if facts.error_kind == "name":
            return [f"{facts.name!r} is {facts.error}; fix: use a name like ':0' or ':1.0', or {MANAGED_FIX}"]
        return [
            f"X display {facts.name} is not reachable: {facts.error}; fix: start an X server there "
            f"(Xvfb {base} -screen 0 {width}x{height}x24 +extension GLX &), check DISPLAY and XAUTHORITY, "
            f"or {MANAGED_FIX}"
        ]
    if screen >= facts.screen_count:
        plural = "s" if facts.screen_count != 1 else ""
        return [
            f"screen {screen} does not exist on X display {base} (it has {facts.screen_count} screen{plural}: "
            f"0..{facts.screen_count - 1}); fix: use a screen below {facts.screen_count}, or start the X server "
            f"with more screens (Xvfb {base} -screen 0 ... -screen {screen} {width}x{height}x24)"
        ]
    reasons = []
    if not facts.glx:
        reasons.append(
            f"X display {base} has no GLX extension (Unity needs GLX); fix: start the server with "
            f"+extension GLX and install its GL drivers (apt-get install libgl1-mesa-dri libglx-mesa0), "
            f"or {MANAGED_FIX}"
        )
    geometry = facts.screens[screen]
    if geometry["width"] < width or geometry["height"] < height:
        reasons.append(
            f"screen {label} is {geometry['width']}x{geometry['height']}, smaller than the requested "
            f"{width}x{height} (frames would be cut off); fix: start the X server with a larger screen "
            f"(-screen {screen} {width}x{height}x24), or {MANAGED_FIX}"
        )
    if geometry["depth"] != REQUIRED_DEPTH:
        reasons.append(
            f"screen {label} has colour depth {geometry['depth']}, Unity needs {REQUIRED_DEPTH}; fix: start "
            f"the X server with a 24-bit screen (-screen {screen} {width}x{height}x24), or {MANAGED_FIX}"
        )
    return reasons
