"""The GL player under GLX dies of a lost X server at its next answer, whatever that answer holds.

A Unity player processes X events every frame, so it dies of the X I/O error at its next step even when
that step changes nothing. The reference player keeps frames of poses it has seen (and ``--static-frame``
never renders again): its next answer must not depend on whether the view is new.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import time

import pytest

from tests.helpers.fifo_driver import PlayerExited

pytest.importorskip("moderngl")
pytest.importorskip("Xlib")

#: Deadline for the test Xvfb to announce its display, and for it to be gone after SIGKILL.
XVFB_DEADLINE = 10.0
FAST = ["-screen-width", "32", "-screen-height", "24", "--renderer", "gl"]


class _Xvfb:
    """An Xvfb with GLX started with -displayfd; ``kill()`` SIGKILLs and reaps it."""

    def __init__(self) -> None:
        binary = shutil.which("Xvfb")
        if binary is None:
            pytest.skip("Xvfb is not installed")
        read_fd, write_fd = os.pipe()
        self.proc = subprocess.Popen(
            [binary, "-displayfd", str(write_fd), "-nolisten", "tcp", "-noreset", "+extension", "GLX"],
            pass_fds=(write_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            process_group=0,
        )
        os.close(write_fd)
        try:
            data = b""
            deadline = time.monotonic() + XVFB_DEADLINE
            while b"\n" not in data:
                remaining = deadline - time.monotonic()
                assert remaining > 0, "the test Xvfb did not announce its display"
                if select.select([read_fd], [], [], remaining)[0]:
                    chunk = os.read(read_fd, 64)
                    assert chunk, f"the test Xvfb exited: {self.proc.wait(XVFB_DEADLINE)}"
                    data += chunk
        except BaseException:
            self.kill()
            raise
        finally:
            os.close(read_fd)
        self.name = f":{int(data.strip())}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(XVFB_DEADLINE)


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
