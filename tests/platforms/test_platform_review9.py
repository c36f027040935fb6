"""Platforms, ninth review: what an X display that turns renderd away, or one a stale lock keeps from starting,
is told to do; a display is checked through the socket the player reaches it by."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys

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


def _free_display_number() -> int:
    """A display number far above those Xvfb -displayfd hands out, with no lock file and no socket."""
    for number in range(5900, 6000):
        if not os.path.lexists(f"/tmp/.X{number}-lock") and not os.path.lexists(f"/tmp/.X11-unix/X{number}"):
            return number
    pytest.skip("no free display number in 5900..5999")


def test_a_stale_lock_that_keeps_a_server_from_starting_is_named(xvfb):
    # A lock file /tmp/.XN-lock naming a live process that is no X server (a container restarted with its
    # /tmp kept: the pid is taken again) makes every X server refuse display N ("Server is already active").
    # The reason told to start one there, which fails, and said nothing of the lock.
    number = _free_display_number()
    lock = f"/tmp/.X{number}-lock"
    fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    try:
        os.write(fd, b"%10d\n" % os.getpid())
        os.close(fd)
        report = Linux64().check(PlatformRequest(x_display=f":{number}", width=64, height=64))
        [reason] = report.reasons
        assert reason.startswith(f"X display :{number} is not reachable"), reason
        assert f"{lock} names pid {os.getpid()}" in reason and f"remove {lock}" in reason, reason
        # a lock naming a process that is gone is no obstacle: an X server replaces it, nothing is said of it
        gone = subprocess.Popen(["true"])
        gone.wait()
        with open(lock, "w", encoding="ascii") as f:
            f.write("%10d\n" % gone.pid)
        [reason] = Linux64().check(PlatformRequest(x_display=f":{number}", width=64, height=64)).reasons
        assert "lock" not in reason, reason
        # a lock naming a running X server is no stale one (its socket is out of reach): it is not to be removed
        server = xvfb("-screen", "0", "64x64x24")
        with open(lock, "w", encoding="ascii") as f:
            f.write("%10d\n" % server.pid)
        [reason] = Linux64().check(PlatformRequest(x_display=f":{number}", width=64, height=64)).reasons
        assert f"{lock} names pid {server.pid} (Xvfb), an X server that runs" in reason, reason
        assert f"remove {lock}" not in reason and "start an X server there" not in reason, reason
    finally:
        os.unlink(lock)


_CHECK_WITHOUT_DAC = """
import json, socket, sys
from renderd.platforms.linux64 import Linux64
from renderd.platforms.request import PlatformRequest
name, path = sys.argv[1], sys.argv[2]
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    sock.connect(path)
    denied = False
except PermissionError:
    denied = True
finally:
    sock.close()
report = Linux64().check(PlatformRequest(x_display=name, width=64, height=64))
print(json.dumps({"denied": denied, "valid": report.valid, "reasons": report.reasons}))
"""


def test_a_display_whose_socket_file_is_closed_to_renderd_is_checked_as_the_player_reaches_it(xvfb):
    # An X client built on libxcb (libX11, so Unity's X11 player and GLX) connects to a local display through
    # its abstract socket first, and to /tmp/.X11-unix/XN only after. python-xlib tried the abstract socket
    # only when the file was missing: a file this user may not open (its mode, a security module denying
    # it) made the check call a display "not reachable" (and tell to start an X server there) that the
    # player reaches. Here the file is another user's, mode 0700, and the check runs without the capability
    # that lets root past file modes.
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    server = xvfb("-screen", "0", "64x64x24", "+extension", "GLX")
    path = f"/tmp/.X11-unix/X{server.number}"
    os.chown(path, 65534, 65534)
    os.chmod(path, 0o700)
    drop = "-dac_override,-dac_read_search"
    done = subprocess.run(
        [setpriv, f"--bounding-set={drop}", f"--inh-caps={drop}", sys.executable, "-c", _CHECK_WITHOUT_DAC,
         server.name, path],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    if not result["denied"]:
        pytest.skip("the socket file could not be closed to this process (file modes do not apply here)")
    assert result["valid"], result["reasons"]


def test_doctor_refuses_an_x_display_with_a_platform_that_uses_none():
    from click.testing import CliRunner

    from renderd.platforms.doctor import doctor_command

    result = CliRunner().invoke(doctor_command, ["--platform", "CloudRendering", "--x-display", ":0"])
    assert result.exit_code == 2, result.output
    assert "--x-display :0 is an X display for Linux64, and --platform CloudRendering uses none" in result.output
