"""Platforms on a shared lab server: X servers other users run, and a socket directory this user cannot use."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from renderd.platforms.linux64 import Linux64
from renderd.platforms.request import PlatformRequest

from tests.helpers.xvfb_review14e import read_displayfd

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
        return read_displayfd(read_fd, proc, "the other user's Xvfb", XVFB_START_DEADLINE)

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


_CHILD = r"""
import json, sys
from renderd.errors import PlatformError
from renderd.platforms import x11, xvfb
from renderd.platforms.linux64 import Linux64
from renderd.platforms.request import PlatformRequest

x11.X11_SOCKET_DIR = sys.argv[1]
report = Linux64().check(PlatformRequest(width=64, height=48, x_display="managed"))
manager = xvfb.DisplayManager()
try:
    display = manager.acquire(64, 48)
    error = None
    display.release()
except PlatformError as exc:
    error = str(exc)
finally:
    manager.shutdown()
print(json.dumps({"valid": report.valid, "reasons": report.reasons, "error": error}))
"""


def _without_dac_override() -> None:
    """In the child before exec: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding set, so that
    root's program is held to file modes as any other user is (a root without them cannot write a directory of
    another user's with mode 0755)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            os._exit(99)


@pytest.mark.xvfb
def test_a_socket_directory_this_user_cannot_write_is_named_before_xvfb_is_started(tmp_path, no_xvfb_left):
    # /tmp/.X11-unix left with another owner and mode 0755 (a lab server's cleanup, a user's mkdir): Xvfb
    # -displayfd tried every display number (seconds, hundreds of thousands of lines of output) and failed
    # with "Failed to find a socket to listen on", which renderd quoted without saying what was wrong. The
    # check says it now, and no Xvfb is started.
    if os.geteuid() != 0:
        pytest.skip("making a directory of another user's needs root")
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    sockets = tmp_path / "x11-unix"
    sockets.mkdir(mode=0o755)
    os.chown(sockets, 1234, 1234)
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(sockets)], capture_output=True, text=True, timeout=60,
        preexec_fn=_without_dac_override,
    )
    assert child.returncode == 0, child.stderr
    answer = json.loads(child.stdout.splitlines()[-1])
    assert not answer["valid"], answer
    [reason] = answer["reasons"]
    assert f"{sockets} is not writable for this user" in reason and "mode 0755" in reason, reason
    assert f"chmod 1777 {sockets}" in reason, reason
    assert answer["error"] and f"{sockets} is not writable" in answer["error"], answer


@pytest.mark.xvfb
def test_a_hung_managed_display_is_not_shared_but_replaced(no_xvfb_left):
    # A managed Xvfb that runs but no longer answers (stopped, wedged) was handed to every new caller of the
    # same geometry: each player started on it hung connecting until its start timeout. It is killed and
    # replaced by a server that answers.
    from renderd.platforms.xvfb import DisplayManager

    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    manager = DisplayManager()
    manager.share_check_timeout = 1.0
    first = manager.acquire(64, 48)
    try:
        os.kill(first.pid, signal.SIGSTOP)
        second = manager.acquire(64, 48)
        assert second.pid != first.pid, "a hung managed display was shared"
        assert second.answers(5.0) and not first.alive()
        second.release()
        first.release()
    finally:
        if first.alive():  # (not reaped yet: its pid is still its own)
            os.kill(first.pid, signal.SIGCONT)
        manager.shutdown()
