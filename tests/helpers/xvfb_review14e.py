"""A test Xvfb with GLX, for players rendering with ``--renderer gl`` on a display of their own."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import time

import pytest

#: Deadline for the test Xvfb to announce its display, and for it to be gone after SIGKILL.
XVFB_DEADLINE = 10.0


def read_displayfd(read_fd: int, proc: subprocess.Popen, what: str, deadline: float = XVFB_DEADLINE) -> str:
    """The display name (":N") an Xvfb started with ``-displayfd`` writes on ``read_fd``, within ``deadline``
    seconds; an AssertionError naming ``what`` when it exits or says nothing. Closes ``read_fd``."""
    try:
        data = b""
        until = time.monotonic() + deadline
        while b"\n" not in data:
            remaining = until - time.monotonic()
            assert remaining > 0, f"{what} did not announce its display"
            if select.select([read_fd], [], [], remaining)[0]:
                chunk = os.read(read_fd, 64)
                assert chunk, f"{what} exited: {proc.wait(deadline)}"
                data += chunk
    finally:
        os.close(read_fd)
    return f":{int(data.strip())}"


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
            self.name = read_displayfd(read_fd, self.proc, "the test Xvfb")
        except BaseException:
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(XVFB_DEADLINE)
