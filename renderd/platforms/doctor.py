"""``renderd doctor``: which platforms can serve a request here, why the others cannot, what to install.

It checks declaratively (probes run in child processes; nothing is started, no Xvfb either) and prints
one entry per platform, then what ``select`` would choose. Exit status 0 when the request can be
served, 1 when not. ``--json`` prints the same information for programs.
"""

from __future__ import annotations

import json
import platform as _platform
import sys
from typing import Any

import click

from renderd.config import parse_gpus, resolve_executable, x_display_problem
from renderd.errors import ConfigError
from renderd.platforms.request import PLATFORM_NAMES, PlatformRequest
from renderd.platforms.selection import check, decide, describe_request
from renderd.protocol import MAX_RESOLUTION

EXIT_SERVED = 0
EXIT_NOT_SERVED = 1


def _parse_gpus(value: str | None) -> tuple[int, ...]:
    """``--gpus``, checked as the configuration's ``gpus`` key is."""
    if value is None:
        return ()
    try:
        return tuple(parse_gpus(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--gpus") from None


def diagnose(request: PlatformRequest) -> dict[str, Any]:
    """Everything doctor reports, as a JSON-ready dict: the request, one report per platform, the
    platform selection would choose (``selected``, None if none) with its details (``selected_details``,
    None if none) and, when none, the error message (``error``, None when one is selected). Every key is
    always present."""
    reports = check(request)
    decision = decide(request, {r.name: r for r in reports})
    result: dict[str, Any] = {
        "request": {
            "platform": request.platform,
            "system": request.system,
            "width": request.width,
            "height": request.height,
            "x_display": request.x_display,
            "headless": request.headless,
            "gpus": list(request.gpus),
            "executable": request.executable,
        },
        "platforms": [r.to_dict() for r in reports],
        "selected": decision.chosen.name if decision.chosen else None,
        "ok": decision.chosen is not None,
        "selected_details": dict(decision.chosen.details) if decision.chosen is not None else None,
        "error": None if decision.chosen is not None else str(decision.error(request)),
    }
    return result


@click.command("doctor")
@click.option("--width", type=click.IntRange(1, MAX_RESOLUTION), default=300, show_default=True,
              help="Player width in pixels.")
@click.option("--height", type=click.IntRange(1, MAX_RESOLUTION), default=300, show_default=True,
              help="Player height in pixels.")
@click.option("--platform", "platform_name", type=click.Choice(PLATFORM_NAMES), default="auto", show_default=True,
              help="Platform to check for (auto walks the candidates).")
@click.option("--x-display", default=None, metavar="D",
              help='X display to use: a name such as ":0.0", "auto", or "managed" (renderd starts Xvfb).')
@click.option("--gpus", default=None, metavar="LIST", help="GPU indices to spread instances over, e.g. 0,1.")
@click.option("--headless", is_flag=True, help="No images wanted (-batchmode -nographics).")
@click.option("--executable", default=None, metavar="PATH", help="The player (inspected on macOS: the .app bundle).")
@click.option("--system", default=None, hidden=True, help="Pretend to run on this system (for testing).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def doctor_command(
    width: int,
    height: int,
    platform_name: str,
    x_display: str | None,
    gpus: str | None,
    headless: bool,
    executable: str | None,
    system: str | None,
    as_json: bool,
) -> None:
    """Check which platforms can render here and what is missing (exit 0: the request can be served)."""
    if x_display not in (None, "auto") and platform_name not in ("auto", "Linux64"):
        # (as the configuration and launch() refuse it: the display would not be checked)
        raise click.UsageError(
            f"--x-display {x_display} is an X display for Linux64, and --platform {platform_name} uses none: "
            "pass --platform Linux64 (or auto), or leave --x-display out"
        )
    if x_display is not None:
        problem = x_display_problem(x_display)
        if problem:  # (a name no platform could use: the command line's mistake, not a finding)
            raise click.BadParameter(problem, param_hint="--x-display")
    if executable is not None:
        try:
            executable = resolve_executable(executable)
        except ValueError as exc:
            why = str(exc) if repr(executable) in str(exc) else f"{executable!r}: {exc}"
            raise click.BadParameter(why, param_hint="--executable") from None
    try:
        request = PlatformRequest(
            platform=platform_name,
            system=system or _platform.system(),
            width=width,
            height=height,
            x_display=x_display,
            headless=headless,
            gpus=_parse_gpus(gpus),
            executable=executable,
        )
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    result = diagnose(request)
    if as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        click.echo(_format(request, result))
    sys.exit(EXIT_SERVED if result["ok"] else EXIT_NOT_SERVED)


def _format(request: PlatformRequest, result: dict[str, Any]) -> str:
    lines = [f"renderd doctor: {describe_request(request)}", ""]
    for item in result["platforms"]:
        verdict = "valid" if item["valid"] else "NOT VALID"
        lines.append(f"{item['name']:<15} {verdict}")
        for key in ("display", "devices", "executable", "note"):
            value = item["details"].get(key)
            if value:
                if isinstance(value, list):
                    value = "; ".join(str(v) for v in value)
                lines.append(f"    {key}: {value}")
        for note in item["details"].get("notes", []):
            lines.append(f"    note: {note}")
        for slot in item["details"].get("gpu_slots", []):
            lines.append(f"    {slot}")
        for reason in item["reasons"]:
            lines.append(f"    - {reason}")
        if not item["valid"] and item["instructions"]:
            lines.append(f"    to use it: {item['instructions']}")
        passed = item["details"].get("passed_over")
        if passed:
            lines.append("    existing displays passed over:")
            lines.extend(f"      - {reason}" for reason in passed)
    lines.append("")
    if result["ok"]:
        chosen = result["selected"]
        where = (result["selected_details"] or {}).get("display")
        where = f" ({where})" if where else ""
        lines.append(f"=> {chosen}{where} serves this request (platform={request.platform!r}).")
    else:
        if request.platform != "auto":
            lines.append(f"=> the requested platform {request.platform} cannot serve this request.")
        else:
            lines.append("=> no platform can serve this request.")
        error = result["error"] or ""
        notes = ("x_display=", "headless was", "Other platforms", "No other platform", "renderd knows")
        lines.extend(line for line in error.splitlines()[1:] if line.startswith(notes))
    return "\n".join(lines)
