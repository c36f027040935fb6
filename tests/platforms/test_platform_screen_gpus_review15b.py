"""Platforms: a display named with a screen, and gpus that put players on other screens, are refused.

``gpus`` choose each player's screen on a display (screen ``k`` for GPU ``k``). An ``x_display`` (or a
``DISPLAY`` in the request's env) with a screen in it named one screen explicitly; the screen was silently
replaced by the GPUs' screens, so a player asked for on ``:N.1`` rendered on ``:N.0``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from renderd.platforms import PlatformRequest
from renderd.platforms.linux64 import Linux64

pytestmark = pytest.mark.xvfb

#: Deadline for one `renderd doctor` run (it probes displays and Vulkan with their own deadlines, 10 s and 20 s).
DOCTOR_DEADLINE = 120.0


@pytest.fixture
def two_screens(xvfb, monkeypatch):
    # As on a machine without NVIDIA GPUs (this one): gpus are then X screen numbers.
    monkeypatch.setattr("renderd.platforms.gpus.nvidia_survey", lambda env: ([], None))
    return xvfb("-screen", "0", "64x48x24", "-screen", "1", "64x48x24", "+extension", "GLX")


def test_x_display_with_a_screen_the_gpus_do_not_use_is_refused(two_screens):
    name = f"{two_screens.name}.1"
    report = Linux64().check(PlatformRequest(x_display=name, gpus=(0,), width=64, height=48))
    assert not report.valid, report.details  # (was valid, with display :N.0: the named screen 1 dropped)
    [reason] = report.reasons
    assert f"x_display={name!r} names screen 1, but gpus=[0] put players on screen(s) 0 of {two_screens.name}" in reason
    assert f"fix: name the display without a screen ({two_screens.name!r})" in reason
    assert report.instructions == ""  # a setting to change, nothing to install


def test_display_in_env_with_a_screen_the_gpus_do_not_use_is_refused(two_screens):
    name = f"{two_screens.name}.0"
    report = Linux64().check(PlatformRequest(env={"DISPLAY": name}, gpus=(0, 1), width=64, height=48))
    assert not report.valid, report.details
    [reason] = report.reasons
    assert f"DISPLAY={name!r} in env names screen 0, but gpus=[0, 1] put players on screen(s) 0, 1" in reason


def test_doctor_reports_the_conflict(two_screens):
    name = f"{two_screens.name}.1"
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    done = subprocess.run(
        [sys.executable, "-m", "renderd", "doctor", "--json", "--platform", "Linux64", "--width", "64",
         "--height", "48", "--x-display", name, "--gpus", "0"],
        capture_output=True, text=True, env=env, timeout=DOCTOR_DEADLINE,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    result = json.loads(done.stdout)
    assert result["ok"] is False and result["selected"] is None
    [linux] = [p for p in result["platforms"] if p["name"] == "Linux64"]
    assert any(f"x_display={name!r} names screen 1" in r for r in linux["reasons"]), linux["reasons"]
    assert f"x_display={name!r} names screen 1" in result["error"]


def test_a_screen_the_gpus_agree_with_is_used(two_screens):
    # guard: a name whose screen is the one the gpus pick, and a name without a screen, still work
    report = Linux64().check(PlatformRequest(x_display=f"{two_screens.name}.1", gpus=(1,), width=64, height=48))
    assert report.valid, report.reasons
    assert report.details["display"] == f"{two_screens.name}.1"
    report = Linux64().check(PlatformRequest(x_display=two_screens.name, gpus=(0, 1), width=64, height=48))
    assert report.valid, report.reasons
    assert report.details["screens"] == [0, 1]
    report = Linux64().check(PlatformRequest(x_display=f"{two_screens.name}.1", width=64, height=48))
    assert report.valid, report.reasons
    assert report.details["display"] == f"{two_screens.name}.1"
