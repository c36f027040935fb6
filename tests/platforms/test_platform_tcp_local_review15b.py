"""Platforms: ``localhost:N`` for a local X server that does not listen on TCP.

A display name with a host (``localhost:1``, ``127.0.0.1:1``) is reached over TCP, and X servers (Xvfb
included) listen only on their local socket by default. The fix given was to start an X server on display
N with ``-listen tcp``, which fails while the running one holds the display; it now says to use ``:N``.
"""

from __future__ import annotations

import os
import socket

import pytest

from renderd.platforms import PlatformRequest
from renderd.platforms import x11
from renderd.platforms.linux64 import Linux64

pytestmark = pytest.mark.xvfb


def _only_reason(name: str) -> str:
    report = Linux64().check(PlatformRequest(x_display=name, width=64, height=48))
    assert not report.valid, report.details
    [reason] = report.reasons
    return reason


def test_localhost_name_of_a_local_server_says_to_use_its_socket(xvfb):
    server = xvfb("-screen", "0", "64x48x24", "+extension", "GLX")  # (the fixture adds -nolisten tcp)
    reason = _only_reason(f"localhost:{server.number}")
    assert f"X display localhost:{server.number} is not reachable" in reason
    assert f"an X server runs on this machine's display {server.name}" in reason, reason
    assert f"use {server.name!r} to reach it through its socket, or restart it with -listen tcp" in reason
    assert "start an X server there" not in reason  # (that would fail: the display is taken)
    # guard: the display itself, through its socket, serves the request
    assert Linux64().check(PlatformRequest(x_display=server.name, width=64, height=48)).valid


def test_the_screen_named_is_kept(xvfb):
    server = xvfb("-screen", "0", "64x48x24", "-screen", "1", "64x48x24", "+extension", "GLX")
    reason = _only_reason(f"127.0.0.1:{server.number}.1")
    assert f"use '{server.name}.1' to reach it through its socket" in reason, reason


def _free_display_number() -> int:
    for number in range(400, 1000):
        if not os.path.lexists(os.path.join(x11.X11_SOCKET_DIR, f"X{number}")) and not os.path.lexists(
            x11.X_LOCK_FILE.format(number=number)
        ):
            return number
    raise AssertionError("no free display number in 400..999")


def test_a_stale_socket_is_no_server():
    # guard: a socket file nobody listens on (a server that died) gets the fix to start a server there
    number = _free_display_number()
    path = os.path.join(x11.X11_SOCKET_DIR, f"X{number}")
    os.makedirs(x11.X11_SOCKET_DIR, exist_ok=True)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        stale.bind(path)
        stale.close()
        reason = _only_reason(f"localhost:{number}")
        assert "an X server runs on this machine" not in reason, reason
        assert f"start an X server there (on localhost, listening on TCP: Xvfb :{number} -listen tcp" in reason
    finally:
        stale.close()
        os.unlink(path)
