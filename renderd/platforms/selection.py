"""Choosing a platform: :func:`check` asks every platform, :func:`select` walks the candidates.

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

from renderd.errors import PlatformError
from renderd.platforms.base import Selection
from renderd.platforms.registry import PLATFORMS, get_platform
from renderd.platforms.request import PlatformReport, PlatformRequest

log = logging.getLogger(__name__)

HEADLESS_NOTE = (
    "headless was not tried: it renders no images; ask for platform='headless' (or headless=True) "
    "if none are wanted"
)


def check(request: PlatformRequest) -> list[PlatformReport]:
    """One report per registered platform (Linux64, CloudRendering, OSXIntel64, headless), each saying
    whether it can serve ``request``, why not, and what to install. Side-effect free: it may probe the
    machine (in child processes) but starts nothing. Never raises for what it finds."""
    return [get_platform(name).check(request) for name in PLATFORMS]


def select(request: PlatformRequest) -> Selection:
    """The platform that serves ``request``, prepared for launching (a managed display is acquired here
    and held until :meth:`Selection.release`).

    Raises :class:`PlatformError` (with ``.reports``) when no candidate can serve it; the message lists
    every candidate's reasons and what to install.
    """
    if request.platform != "auto":
        return _select_named(request)
    if request.headless:
        return _prepare(request, get_platform("headless").check(request))
    if request.system == "Darwin":
        report = get_platform("OSXIntel64").check(request)
        if report.valid:
            return _prepare(request, report)
        raise _error(request, [report], "")
    if request.system != "Linux":
        reports = check(request)
        raise _error(request, [r for r in reports if r.name != "headless"], f"renderd knows no platform for {request.system}.")

    linux = get_platform("Linux64").check(request)
    if linux.valid and not linux.details.get("managed"):
        return _prepare(request, linux)
    if request.display_given:
        if linux.valid:
            return _prepare(request, linux)
        raise _error(request, [linux], f"x_display={request.x_display!r} was given, so only Linux64 was considered.")
    cloud = get_platform("CloudRendering").check(request)
    if cloud.valid:
        return _prepare(request, cloud)
    if linux.valid:
        return _prepare(request, linux)
    raise _error(request, [linux, cloud], HEADLESS_NOTE)


def _select_named(request: PlatformRequest) -> Selection:
    report = get_platform(request.platform).check(request)
    if report.valid:
        return _prepare(request, report)
    others = [get_platform(name).check(request) for name in PLATFORMS if name not in (request.platform, "headless")]
    usable = [r for r in others if r.valid]
    hint = ""
    if usable:
        hint = "Platforms that can serve this request: " + ", ".join(
            f"{r.name}" + (f" ({r.details['display']})" if r.details.get("display") else "") for r in usable
        ) + " (or platform='auto')."
    raise _error(request, [report, *others], hint, shown=[report])


def _prepare(request: PlatformRequest, report: PlatformReport) -> Selection:
    try:
        selection = get_platform(report.name).prepare(request, report)
    except PlatformError as exc:
        failed = PlatformReport(report.name, False, [str(exc)], report.instructions, report.details)
        raise PlatformError(
            f"{report.name} was chosen for {_describe(request)} but could not be prepared: {exc}",
            reports=[failed],
        ) from exc
    log.info("platform %s selected for %s (%s)", selection.name, _describe(request), selection.env)
    return selection


def _describe(request: PlatformRequest) -> str:
    text = f"{request.width}x{request.height} on {request.system}, platform={request.platform!r}"
    if request.x_display is not None:
        text += f", x_display={request.x_display!r}"
    if request.gpus:
        text += f", gpus={list(request.gpus)}"
    if request.headless:
        text += ", headless"
    return text


def _error(
    request: PlatformRequest,
    reports: list[PlatformReport],
    note: str,
    *,
    shown: list[PlatformReport] | None = None,
) -> PlatformError:
    lines = [f"No platform can serve {_describe(request)}."]
    lines += [r.describe() for r in (shown if shown is not None else reports)]
    if note:
        lines.append(note)
    lines.append("Run `renderd doctor` to see every platform's state.")
    return PlatformError("\n".join(lines), reports=reports)
