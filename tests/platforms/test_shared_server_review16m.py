"""Platforms on a shared lab server: X servers other users run, and a socket directory this user cannot use."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import time

import pytest

from renderd.platforms.linux64 import Linux64
from renderd.platforms.request import PlatformRequest

from .conftest import XVFB_START_DEADLINE, XVFB_STOP_GRACE

#: A user id that is not this process's (the system's "nobody").
OTHER_UID = 65534


@pytest.fixture
def other_users_xvfb():
    """Start a real Xvfb as another user (``user=``: the conftest's servers run as this one); stopped by pid."""
    binary = shutil.which("Xvfb")
    if binary is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    if os.geteuid() != 0:
        pytest.skip("starting an X server as another user needs root")
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> str:
        read_fd, write_fd = os.pipe()
        proc = subprocess.Popen(
            [binary, "-displayfd", str(write_fd), "-nolisten", "tcp", "-noreset", *args],
            pass_fds=(write_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            process_group=0, user=OTHER_UID, group=OTHER_UID, extra_groups=[],
        )
        started.append(proc)
        os.close(write_fd)
        try:
            data = b""
            deadline = time.monotonic() + XVFB_START_DEADLINE
            while b"\n" not in data:
                remaining = deadline - time.monotonic()
                assert remaining > 0, "the other user's Xvfb did not announce its display"
                if select.select([read_fd], [], [], remaining)[0]:
                    chunk = os.read(read_fd, 64)
                    assert chunk, f"the other user's Xvfb exited: {proc.wait(XVFB_STOP_GRACE)}"
                    data += chunk
        finally:
            os.close(read_fd)
        return f":{int(data.strip())}"

    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(XVFB_STOP_GRACE)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(XVFB_STOP_GRACE)


@pytest.mark.xvfb
def test_discovery_passes_over_an_x_server_another_user_runs(other_users_xvfb, xvfb, monkeypatch):
    # On a shared server, /tmp/.X11-unix holds the sockets of every user's X servers. Discovery took the
    # first that passed the checks: another user's hand-started Xvfb, which goes away (with the players
    # on it) whenever that user stops it. It is passed over with a note; named explicitly, it is used.
    monkeypatch.delenv("DISPLAY", raising=False)
    foreign = other_users_xvfb("-screen", "0", "64x48x24", "+extension", "GLX")
    request = PlatformRequest(width=64, height=48)
    report = Linux64().check(request)
    assert report.valid
    assert report.details.get("display_base") != foreign, report.details
    notes = " ".join(report.details.get("notes", []))
    assert f"passed over {foreign} (" in notes and "another user" in notes, report.details
    # this user's own server is still found
    own = xvfb("-screen", "0", "64x48x24", "+extension", "GLX")
    report = Linux64().check(request)
    assert report.valid and report.details["display_base"] == own.name, report.details
    # and the other user's, named, is that display
    named = Linux64().check(PlatformRequest(width=64, height=48, x_display=foreign))
    assert named.valid and named.details["display_base"] == foreign, named.details
