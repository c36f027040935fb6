"""A session in an unusual process context: inherited over fork, with SIGCHLD ignored or handled.
Real processes and real FIFOs; nothing is left behind (``no_leaks``)."""

from __future__ import annotations

import os
import signal
import time

import pytest

import renderd

from tests.helpers.fork_review14c import in_child

from .conftest import START, peer_argv

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_a_session_inherited_over_fork_is_left_to_the_parent():
    # A child forked after launch (a helper process, a data loader worker) holds a copy of the session; its
    # close() (or garbage collection at its exit) must not stop the parent's player, remove its pipes, or
    # give back its lease.
    session = renderd.launch(peer_argv(), start_timeout=START)
    try:
        session.step("Pass")
        directory = os.path.dirname(session.channel.server_path)
        assert in_child(session.close, START) == 0
        assert os.path.isdir(directory), "the child removed the parent's pipe directory"
        assert session.process.poll() is None, "the child stopped the parent's player"
        assert session.step("Pass").sequence_id == 2
    finally:
        session.close()
    assert session.process.poll() is not None and not os.path.exists(directory)


def test_a_session_inherited_over_fork_cannot_step_the_parents_player():
    # The copy shares the parent's pipes: an action written from the child would interleave with the parent's
    # own, and either process could read the other's answer. The child's step is refused, naming the fork.
    session = renderd.launch(peer_argv(), start_timeout=START)
    try:
        session.step("Pass")

        def child_steps() -> None:
            with pytest.raises(renderd.CallOrderError, match="inherited over fork from process"):
                session.step("Pass")
            session.close()

        assert in_child(child_steps, START) == 0
        assert session.step("Pass").sequence_id == 2 and session.step("Pass").sequence_id == 3
    finally:
        session.close()


def test_a_player_process_inherited_over_fork_is_not_stopped_by_the_child():
    from renderd.process import PlayerProcess

    proc = PlayerProcess.spawn(["sleep", "30"], None, None)
    try:
        assert in_child(proc.stop, START) == 0
        assert proc.wait(0.2) is None, "the child stopped the parent's player"
    finally:
        proc.stop(0.5)
    assert proc.returncode == -signal.SIGTERM


def _reap_all(*_):
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _exists(pid: int) -> bool:
    """Whether ``pid`` is still a process (a zombie whose status nobody took yet is)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("disposition", [signal.SIG_IGN, _reap_all], ids=["ignored", "handler-reaps"])
def test_a_crash_is_not_reported_as_exit_code_0_when_this_process_reaps_its_children(disposition):
    # With SIGCHLD ignored (or a handler that reaps every child) the kernel or the handler takes the player's
    # exit status before renderd can read it: the crash must say the status is unknown, not "exit code 0".
    previous = signal.signal(signal.SIGCHLD, disposition)
    try:
        with renderd.launch(peer_argv(), start_timeout=START) as session:
            session.step("Pass")
            os.kill(session.pid, signal.SIGKILL)
            # A Python handler runs only between this thread's bytecodes: renderd's own waitpid could take the status
            # first (and rightly report -9). Wait until the kernel or the handler has taken it, which is the case
            # checked; polling runs bytecodes, so the handler gets its turn.
            deadline = time.monotonic() + 10.0
            while _exists(session.pid):
                assert time.monotonic() < deadline, "the killed player was not reaped by the kernel or the handler"
                time.sleep(0.01)
            with pytest.raises(renderd.PlayerCrashed) as info:
                session.step("Pass")
    finally:
        signal.signal(signal.SIGCHLD, previous)
    assert info.value.returncode is None
    assert "exit code 0" not in str(info.value)
    assert "exit status is unknown" in str(info.value) and "SIGCHLD" in str(info.value)


def test_a_player_killed_because_its_launching_thread_exited_says_so():
    # The player is set to die with the thread that started it (PR_SET_PDEATHSIG): launched from a thread that
    # then ends, it is SIGKILLed, which on its own reads as the out-of-memory killer's doing.
    import threading

    box = {}
    thread = threading.Thread(target=lambda: box.update(s=renderd.launch(peer_argv(), start_timeout=START)),
                              name="setup-thread")
    thread.start()
    thread.join()
    with box["s"] as session:
        # join() returns once the thread's Python side is done; the kernel's signal follows its real exit.
        assert session.process.wait(5.0) == -signal.SIGKILL
        with pytest.raises(renderd.PlayerCrashed) as info:
            session.step("Pass")
    assert info.value.returncode == -signal.SIGKILL
    assert "('setup-thread') has exited" in str(info.value) and "PR_SET_PDEATHSIG" in str(info.value)


def test_relative_paths_in_a_removed_working_directory_are_config_errors(tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with pytest.raises(renderd.ConfigError) as info:
        renderd.launch(peer_argv(), log_path="player.log", start_timeout=START)
    assert info.value.key == "log_path" and "'player.log' is relative" in str(info.value)
    with pytest.raises(renderd.ConfigError) as info:
        renderd.launch("./player", start_timeout=START)
    assert info.value.key == "executable" and "'./player' is relative" in str(info.value)


def _ignored_signals(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigIgn:"):
                return int(line.split()[1], 16)
    raise AssertionError("no SigIgn line")


def test_a_player_does_not_inherit_an_ignored_sigchld():
    # An ignored signal stays ignored across exec: a player started by an agent that ignores SIGCHLD would
    # lose its own children's exit statuses (waitpid fails with ECHILD).
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        with renderd.launch(peer_argv(), start_timeout=START) as session:
            ignored = _ignored_signals(session.pid)
    finally:
        signal.signal(signal.SIGCHLD, previous)
    assert not ignored & (1 << (signal.SIGCHLD - 1))
