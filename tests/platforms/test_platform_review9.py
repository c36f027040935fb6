"""Platforms, ninth review: what an X display that turns renderd away is told to do."""

from __future__ import annotations

import os
import socket
import struct

import pytest

from renderd.platforms.linux64 import Linux64
from renderd.platforms.request import PlatformRequest

pytestmark = [pytest.mark.xvfb, pytest.mark.usefixtures("no_xvfb_left")]

#: Xauthority's family of local (Unix socket) entries, keyed by host name.
FAMILY_LOCAL = 256


def _xauthority(path, cookie: bytes) -> str:
    """An Xauthority file with one MIT-MAGIC-COOKIE-1 entry for this host, any display number."""

    def counted(data: bytes) -> bytes:
        return struct.pack(">H", len(data)) + data

    entry = struct.pack(">H", FAMILY_LOCAL) + counted(socket.gethostname().encode()) + counted(b"")
    entry += counted(b"MIT-MAGIC-COOKIE-1") + counted(cookie)
    path.write_bytes(entry)
    return str(path)


def test_a_display_that_refuses_renderd_is_not_told_to_be_started(xvfb, tmp_path):
    # An X server that requires a cookie renderd does not send answers the connection setup with a refusal
    # ("Authorization required ..."). The reason called the display not reachable and told to start an X
    # server there (Xvfb :N ...), which fails: one runs. The fix is the cookie (XAUTHORITY) or the server's
    # access control.
    auth = _xauthority(tmp_path / "Xauthority", os.urandom(16))
    server = xvfb("-auth", auth, "-screen", "0", "320x240x24", "+extension", "GLX")
    missing = str(tmp_path / "no-such-Xauthority")
    refused = Linux64().check(PlatformRequest(x_display=server.name, width=64, height=64, env={"XAUTHORITY": missing}))
    assert not refused.valid
    [reason] = refused.reasons
    head = f"X display {server.name} does not let renderd in: the X server refused the connection (Authorization"
    assert reason.startswith(head), reason
    assert "not reachable" not in reason and f"Xvfb {server.name} -screen" not in reason, reason
    fix = reason.split("; fix: ", 1)[1]
    assert "XAUTHORITY" in fix and "xhost" in fix, reason
    # what the fix says is what works
    allowed = Linux64().check(PlatformRequest(x_display=server.name, width=64, height=64, env={"XAUTHORITY": auth}))
    assert allowed.valid, allowed.reasons
