"""Choosing a platform: :func:`check` asks every platform, :func:`decide` walks the candidates,
:func:`select` prepares the winner.

``platform="auto"`` on Linux (see docs/platforms.md)::

    headless requested?                        -> headless
    Linux64 on an existing valid X display     -> Linux64       (x_display given: Linux64 or nothing)
    a Vulkan device                            -> CloudRendering
    Xvfb installed                             -> Linux64 on a managed display
    otherwise                                  -> PlatformError listing every candidate's reasons

On macOS ``auto`` means OSXIntel64. ``headless`` is never a fallback: it renders no images.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from renderd.errors import PlatformError
from renderd.platforms.base import Selection
from renderd.platforms.registry import PLATFORMS, get_platform
from renderd.platforms.request import PlatformReport, PlatformRequest

log = logging.getLogger(__name__)

HEADLESS_NOTE = (
    "headless was not tried: it renders no images; ask for platform='headless' "
    "if none are wanted."
)


def check(request: PlatformRequest) -> list[PlatformReport]:
    """One report per registered platform (Linux64, CloudRendering, OSXIntel64, headless), each saying
    whether it can serve ``request``, why not, and what to install. Side-effect free: it may probe the
    machine (in child processes) but starts nothing. Never raises for what it finds."""
    return [get_platform(name).check(request) for name in PLATFORMS]


@dataclass
class Decision:
    """What selection decided without preparing anything: the chosen report (None: no platform can
    serve the request), the reports of the candidates considered, and a note for the error."""

    chosen: PlatformReport | None
    considered: list[PlatformReport]
    note: str = ""
    shown: list[PlatformReport] | None = None

    def error(self, request: PlatformRequest) -> PlatformError:
        """The :class:`PlatformError` for a decision without a winner: each candidate's reasons and fixes."""
        if request.platform != "auto":
            # (the others that could serve it, if any, are in the note: "no platform" would contradict it)
            lines = [f"The requested platform {request.platform} cannot serve {describe_request(request)}."]
        else:
            lines = [f"No platform can serve {describe_request(request)}."]
        lines += [r.describe() for r in (self.shown if self.shown is not None else self.considered)]
        if self.note:
            lines.append(self.note)
        lines.append("Run `renderd doctor` to see every platform's state.")
        return PlatformError("\n".join(lines), reports=self.considered)


def decide(request: PlatformRequest, reports: Mapping[str, PlatformReport] | None = None) -> Decision:
    """Walk the candidates for ``request`` (see the module docstring) without preparing anything.
    ``reports`` may hold checks already made for the same request (``renderd doctor`` passes them)."""
    known = dict(reports or {})

    def get(name: str) -> PlatformReport:
        if name not in known:
            known[name] = get_platform(name).check(request)
        return known[name]

    if request.platform != "auto":
        report = get(request.platform)
        if report.valid:
            return Decision(report, [report])
        others = [get(name) for name in PLATFORMS if name not in (request.platform, "headless")]
        usable = [r for r in others if r.valid]
        note = "No other platform that renders images can serve it either." + (
            "" if request.platform == "headless" else f" {HEADLESS_NOTE[0].upper()}{HEADLESS_NOTE[1:]}"
        )
        if usable:
            note = "Other platforms that can serve this request: " + ", ".join(
                r.name + (f" ({r.details['display']})" if r.details.get("display") else "") for r in usable
            ) + " (ask for one by name, or platform='auto')."
        return Decision(None, [report, *others], note, shown=[report])
    if request.headless:
        report = get("headless")
        return Decision(report, [report])
    if request.system == "Darwin":
        report = get("OSXIntel64")
        return Decision(report if report.valid else None, [report])
    if request.system != "Linux":
        considered = [get(name) for name in PLATFORMS if name != "headless"]
        return Decision(
            None, considered, f"renderd knows no platform for {request.system}. {HEADLESS_NOTE[0].upper()}{HEADLESS_NOTE[1:]}"
        )

    linux = get("Linux64")
    if linux.valid and not linux.details.get("managed"):
        return Decision(linux, [linux])
    if request.display_given:
        note = f"x_display={request.x_display!r} was given, so only Linux64 was considered."
        return Decision(linux if linux.valid else None, [linux], note)
    cloud = get("CloudRendering")
    if cloud.valid:
        return Decision(cloud, [linux, cloud])
    if linux.valid:
        return Decision(linux, [linux, cloud])
    return Decision(None, [linux, cloud], HEADLESS_NOTE)


def select(request: PlatformRequest) -> Selection:
    """The platform that serves ``request``, prepared for launching (a managed display is acquired here
    and held until :meth:`Selection.release`).

    Raises :class:`PlatformError` (with ``.reports``) when no candidate can serve it, or when the chosen
    platform cannot be prepared (a managed Xvfb that fails to start); the message lists every
    candidate's reasons and what to install.
    """
    decision = decide(request)
    if decision.chosen is None:
        raise decision.error(request)
    report = decision.chosen
    try:
        selection = get_platform(report.name).prepare(request, report)
    except PlatformError as exc:
        failed = PlatformReport(report.name, False, [str(exc)], report.instructions, report.details)
        raise PlatformError(
            f"{report.name} was chosen for {describe_request(request)} but could not be prepared: {exc}",
            reports=[failed],
        ) from exc
    log.info(
        "platform %s selected for %s (env %s, args %s)",
        selection.name, describe_request(request), selection.env, selection.args,
    )
    return selection


def describe_request(request: PlatformRequest) -> str:
    """The request in a few words, for messages."""
    text = f"{request.width}x{request.height} on {request.system}, platform={request.platform!r}"
    if request.x_display is not None:
        text += f", x_display={request.x_display!r}"
    if request.gpus:
        text += f", gpus={list(request.gpus)}"
    if request.headless:
        text += ", headless"
    return text
