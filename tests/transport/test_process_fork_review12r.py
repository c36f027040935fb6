"""A PlayerProcess inherited over fork: its stop() (which in the child only closes what the copy holds) never
waits for a lock a thread of the parent held at the fork, a thread that does not exist in the child."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

from renderd.process import PlayerProcess

pytestmark = pytest.mark.usefixtures("no_leaks")


def _wait_child(pid: int, timeout: float) -> int | None:
    """The child's wait status, or None (it is killed and reaped) when it has not exited within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def test_stop_in_a_forked_child_while_a_parent_thread_notes_helpers(tmp_path):
    proc = PlayerProcess.spawn([sys.executable, "-c", "import time; time.sleep(60)"], None, None)
    noting, release = threading.Event(), threading.Event()

    def note_meanwhile() -> None:  # as poll() does every second: note_descendants holds the lock while it reads /proc
        with proc._noted_lock:
            noting.set()
            release.wait(10)

    thread = threading.Thread(target=note_meanwhile)
    thread.start()
    try:
        assert noting.wait(10)
        child = os.fork()
        if child == 0:  # (the child: no pytest from here on, only os._exit)
            code = 1
            try:
                signal.alarm(1)  # a stop() that waits for the lock is killed by SIGALRM
                proc.stop(1.0)
                proc.note_descendants()  # (nothing to note in a copy; must not wait either)
                code = 0 if proc.noted_descendants() == [] else 2
            finally:
                os._exit(code)
        status = _wait_child(child, 5.0)
        assert status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (
            f"the forked child's stop() did not return: {status!r} "
            f"({'killed by ' + signal.Signals(os.WTERMSIG(status)).name if status and os.WIFSIGNALED(status) else ''})"
        )
        assert proc.poll() is None  # the parent's player is left alone
    finally:
        release.set()
        thread.join(10)
        proc.stop(1.0)
