"""NVIDIA_VISIBLE_DEVICES / NVIDIA_DRIVER_CAPABILITIES in an environment's env change nothing for Linux64 players
either (only a container runtime reads them): its report notes so, as CloudRendering's does. A real Xvfb."""

from __future__ import annotations

import shutil

import pytest

from renderd.platforms import PlatformRequest, gpus
from renderd.platforms.linux64 import Linux64

CONTAINER_ENV = {"NVIDIA_VISIBLE_DEVICES": "1", "NVIDIA_DRIVER_CAPABILITIES": "graphics"}


def notes(request: PlatformRequest) -> list[str]:
    report = Linux64().check(request)
    assert report.valid, report.reasons
    return report.details.get("notes", [])


def test_an_x_display_report_notes_the_container_variables(xvfb):
    server = xvfb("-screen", "0", "320x240x24", "+extension", "GLX")
    found = notes(PlatformRequest(system="Linux", x_display=server.name, width=320, height=240, env=CONTAINER_ENV))
    assert gpus.container_vars_note(CONTAINER_ENV) in found, found
    assert "NVIDIA_VISIBLE_DEVICES='1' and NVIDIA_DRIVER_CAPABILITIES='graphics' in env change nothing" in found[-1]


@pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed (apt-get install xvfb)")
def test_a_managed_display_report_notes_them_too():
    env = {"NVIDIA_VISIBLE_DEVICES": "0"}
    found = notes(PlatformRequest(system="Linux", x_display="managed", env=env))
    assert gpus.container_vars_note(env) in found, found


def test_no_note_without_them_or_when_headless(xvfb):
    server = xvfb("-screen", "0", "320x240x24", "+extension", "GLX")
    assert notes(PlatformRequest(system="Linux", x_display=server.name, width=320, height=240)) == []
    assert notes(PlatformRequest(system="Linux", headless=True, env=CONTAINER_ENV)) == []
