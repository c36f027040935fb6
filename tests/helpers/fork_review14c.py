"""Running a function in a forked child of the test process (a data loader worker, a helper process), with a
deadline: a child that hangs is killed rather than left to block the test."""

from __future__ import annotations

import os
import signal
import time

#: How long a forked child may take, by default, to do what it was asked.
CHILD_WITHIN = 5.0


def in_child(fn, within: float = CHILD_WITHIN) -> int | None:
    """Run ``fn`` in a forked child: its exit code (0 when ``fn`` returns, 1 when it raises), or None (the
    child is killed) if it is not done within ``within`` seconds."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            fn()
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None
