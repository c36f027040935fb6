"""A managed Xvfb killed under a running player (``x_display="managed"``, ``--renderer gl``): closing
the session leaves nothing (no player, no Xvfb, no zombie, no descriptor, no pipe), and the next launch
gets a new display.

What the client sees between the display's death and close is listed in docs/reliability.md: the
reference player renders into an off-screen framebuffer and does not notice (a Unity player, which
processes X events every frame, dies of an X I/O error).
"""

from __future__ import annotations

import shutil

import psutil
import pytest

import renderd

from .conftest import wait_for

pytest.importorskip("moderngl")
pytestmark = [
    pytest.mark.xvfb,
    pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed"),
]

GL_PLAYER = ["renderd-player", "--renderer", "gl"]
START = 20.0
STEP = 5.0


def xvfb_children() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.name() == "Xvfb":
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def launch_gl(**kwargs):
    return renderd.launch(GL_PLAYER, platform="Linux64", x_display="managed", width=64, height=48,
                          start_timeout=START, step_timeout=STEP, **kwargs)


def test_managed_xvfb_killed_under_a_running_player(nothing_left) -> None:
    with launch_gl() as session:
        assert session.step("MoveAhead").frame.shape == (48, 64, 3)
        (xvfb,) = xvfb_children()
        xvfb.kill()
        wait_for(lambda: xvfb.status() == psutil.STATUS_ZOMBIE if xvfb.is_running() else True, 5,
                 "the Xvfb to die")
        player = psutil.Process(session.pid)
    # Closed: the player is stopped and reaped, the dead Xvfb is reaped, pipes and descriptors are gone
    # (nothing_left), whatever the player made of losing its display.
    assert not player.is_running()
    assert not xvfb_children()
    with launch_gl() as session:  # the display manager starts a new Xvfb for the next player
        (again,) = xvfb_children()
        assert again.pid != xvfb.pid
        assert session.step("Pass")
    assert not xvfb_children()
