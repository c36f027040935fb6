"""Platforms: what a display that cannot serve the screens `gpus` spread players over is told."""

from __future__ import annotations

import os

import pytest

from renderd.platforms.linux64 import Linux64
from renderd.platforms.request import PlatformRequest


def _free_display_number() -> int:
    """A display number far above those Xvfb -displayfd hands out, with no lock file and no socket."""
    for number in range(5800, 5900):
        if not os.path.lexists(f"/tmp/.X{number}-lock") and not os.path.lexists(f"/tmp/.X11-unix/X{number}"):
            return number
    pytest.skip("no free display number in 5800..5899")


def _no_nvidia(monkeypatch) -> None:
    """As on a machine without NVIDIA GPUs (this one): ``gpus`` are then X screen numbers."""
    monkeypatch.setattr("renderd.platforms.gpus.nvidia_survey", lambda env: ([], None))


def test_an_unreachable_display_for_two_screens_is_one_reason_that_starts_both(monkeypatch):
    # With gpus spreading players over screens 0 and 1, an unreachable display was reported once per
    # screen: two reasons for one problem, the first telling to start a server with screen 0 only (the
    # check then fails again: screen 1 does not exist). It is one reason, whose server has both screens.
    _no_nvidia(monkeypatch)
    name = f":{_free_display_number()}"
    report = Linux64().check(PlatformRequest(x_display=name, gpus=(0, 1), width=64, height=48))
    assert not report.valid
    assert len(report.reasons) == 1, report.reasons
    [reason] = report.reasons
    assert f"X display {name} is not reachable" in reason
    assert f"Xvfb {name} -screen 0 64x48x24 -screen 1 64x48x24 +extension GLX" in reason, reason


@pytest.mark.xvfb
def test_a_display_without_glx_for_two_screens_says_so_once(xvfb, monkeypatch):
    _no_nvidia(monkeypatch)
    server = xvfb("-screen", "0", "64x48x24", "-screen", "1", "64x48x24", "-extension", "GLX")
    report = Linux64().check(PlatformRequest(x_display=server.name, gpus=(0, 1), width=64, height=48))
    assert not report.valid
    assert len(report.reasons) == 1, report.reasons
    assert f"X display {server.name} has no GLX extension" in report.reasons[0]
