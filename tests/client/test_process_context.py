"""A session in an unusual process context: inherited over fork, with SIGCHLD ignored or handled.
Real processes and real FIFOs; nothing is left behind (``no_leaks``)."""

from __future__ import annotations

import os
import signal

import pytest

import renderd

from .conftest import START, peer_argv

pytestmark = pytest.mark.usefixtures("no_leaks")


def _in_child(fn) -> int:
    """Run ``fn`` in a forked child; its exit status (0 when ``fn`` returns, 1 when it raises)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            fn()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_session_inherited_over_fork_is_left_to_the_parent():
    # A child forked after launch (a helper process, a data loader worker) holds a copy of the session; its
    # close() (or garbage collection at its exit) must not stop the parent's player, remove its pipes, or
    # give back its lease.
    session = renderd.launch(peer_argv(), start_timeout=START)
    try:
        session.step("Pass")
        directory = os.path.dirname(session.channel.server_path)
        assert _in_child(session.close) == 0
        assert os.path.isdir(directory), "the child removed the parent's pipe directory"
        assert session.process.poll() is None, "the child stopped the parent's player"
        assert session.step("Pass").sequence_id == 2
    finally:
        session.close()
    assert session.process.poll() is not None and not os.path.exists(directory)


def test_a_player_process_inherited_over_fork_is_not_stopped_by_the_child():
    from renderd.process import PlayerProcess

    proc = PlayerProcess.spawn(["sleep", "30"], None, None)
    try:
        assert _in_child(proc.stop) == 0
        assert proc.wait(0.2) is None, "the child stopped the parent's player"
    finally:
        proc.stop(0.5)
    assert proc.returncode == -signal.SIGTERM
