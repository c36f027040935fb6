"""renderd.launch() on a machine where ``auto`` finds no platform (no display, no Vulkan device, no Xvfb): the
reference player, which renders with numpy anyway, runs without one and says why, as the daemon runs it; any
other player still gets the PlatformError with every platform's reasons."""

from __future__ import annotations

import logging
import sys

import pytest

import renderd
import renderd.platforms.x11 as x11
from renderd.errors import PlatformError

# Nothing to render with: no X display named, no Vulkan driver, no Xvfb on PATH (the player itself is resolved
# before the platform, by its absolute path).
NOTHING = {"DISPLAY": "", "VK_ICD_FILENAMES": "/nonexistent.json", "PATH": "/nonexistent"}


@pytest.fixture
def bare_machine(monkeypatch):
    # An X server running here (another test's Xvfb) would be found by its socket in /tmp/.X11-unix.
    monkeypatch.setattr(x11, "socket_displays", lambda *args, **kwargs: [])


def test_the_reference_player_runs_without_a_platform_and_says_why(bare_machine, caplog):
    caplog.set_level(logging.WARNING, logger="renderd.client")
    with renderd.launch(width=64, height=48, env=NOTHING, start_timeout=30) as session:
        event = session.step("MoveAhead")
        assert event.frame.shape == (48, 64, 3) and event.frame.any()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("the reference player runs without one" in w and "Linux64" in w for w in warnings), warnings


def test_another_player_still_gets_the_platform_error(bare_machine):
    with pytest.raises(PlatformError) as info:
        renderd.launch([sys.executable, "-m", "renderd.player"], width=64, height=48, env=NOTHING, start_timeout=30)
    assert "Linux64" in str(info.value) and "CloudRendering" in str(info.value)


def test_an_explicit_platform_is_never_replaced(bare_machine):
    with pytest.raises(PlatformError, match="CloudRendering"):
        renderd.launch(platform="CloudRendering", width=64, height=48, env=NOTHING, start_timeout=30)


def test_with_an_x_display_named_the_warning_says_which_platforms_were_considered(bare_machine, caplog):
    # (An x_display restricts auto to Linux64: the warning said "no platform is valid here" though CloudRendering
    # may well be; it names what auto considered, and the reason says why only Linux64.)
    caplog.set_level(logging.WARNING, logger="renderd.client")
    with renderd.launch(width=64, height=48, env=NOTHING, x_display="97", start_timeout=30) as session:
        assert session.step("Pass").frame.shape == (48, 64, 3)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith("no platform auto considered is valid here, so the reference player runs without one")
    assert "x_display='97' was given, so only Linux64 was considered" in warning, warning
