"""A reference player launched with x_display="managed" and --renderer gl renders through GLX on the
Xvfb that renderd started, gives the numpy renderer's picture, and leaves no Xvfb behind."""

from __future__ import annotations

import re

import numpy as np
import pytest

import renderd

from .conftest import xvfb_children

pytest.importorskip("moderngl")
pytestmark = [pytest.mark.xvfb, pytest.mark.usefixtures("no_xvfb_left")]

MIN_AGREEMENT = 0.97
ACTIONS = [("Pass", {}), ("RotateRight", {"degrees": 30}), ("LookDown", {"degrees": 20})]


def frames(session) -> list[np.ndarray]:
    return [session.step(action, **kwargs).frame.copy() for action, kwargs in ACTIONS]


def test_managed_display_gl_player(xvfb, tmp_path):  # the xvfb fixture skips when Xvfb is missing
    log_path = tmp_path / "gl.log"
    with renderd.launch(
        ["renderd-player", "--renderer", "gl"], x_display="managed", width=200, height=150, log_path=str(log_path)
    ) as session:
        (server,) = xvfb_children()  # renderd started exactly one Xvfb for this player
        gl_frames = frames(session)
        log = log_path.read_text(encoding="utf-8")
        match = re.search(r"OpenGL through GLX on DISPLAY=:(\d+)\.0: ", log)
        assert match, log
        # The display the player rendered on is that Xvfb's: it listens on the display's socket.
        sockets = {c.laddr for c in server.net_connections(kind="unix")}
        assert f"/tmp/.X11-unix/X{match.group(1)}" in sockets, sockets
    assert not xvfb_children()

    with renderd.launch("renderd-player", width=200, height=150) as session:  # the numpy renderer
        numpy_frames = frames(session)
    for gl_frame, numpy_frame in zip(gl_frames, numpy_frames):
        agree = (np.abs(gl_frame.astype(np.int16) - numpy_frame.astype(np.int16)).max(axis=2) <= 2).mean()
        assert agree >= MIN_AGREEMENT, agree
