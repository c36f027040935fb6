"""The GL player under GLX dies of a lost X server at its next answer, whatever that answer holds.

A Unity player processes X events every frame, so it dies of the X I/O error at its next step even when
that step changes nothing. The reference player keeps frames of poses it has seen (and ``--static-frame``
never renders again): its next answer must not depend on whether the view is new.
"""

from __future__ import annotations

import pytest

from tests.helpers.fifo_driver import PlayerExited
from tests.helpers.xvfb_review14e import _Xvfb

pytest.importorskip("moderngl")
pytest.importorskip("Xlib")

FAST = ["-screen-width", "32", "-screen-height", "24", "--renderer", "gl"]


@pytest.fixture
def display():
    server = _Xvfb()
    try:
        yield server
    finally:
        server.kill()


@pytest.mark.parametrize("static_frame", [False, True])
@pytest.mark.parametrize("action", ["Pass", "MoveBack"])
def test_a_lost_x_server_ends_the_player_at_its_next_answer(spawn, display, action, static_frame):
    args = [*FAST, "--static-frame"] if static_frame else FAST
    p = spawn(args, platform="Linux64", env={"DISPLAY": display.name})
    p.start_session()
    assert p.step("MoveAhead")
    display.kill()
    # Pass changes nothing; MoveBack returns to the start pose, whose frame the player already has.
    p.send(action)
    with pytest.raises(PlayerExited):
        p.recv_message()
    assert p.wait() == 3
    assert f"lost the X display {display.name}" in p.log_text()
