"""A session's player is watched through its pidfd alone, never polled: renderd's noter thread notes the helpers
it starts outside its process group (a daemonised one, ``setsid``), so that ``close()`` stops them even after the
player exited on its own and they were orphaned. Before, nothing noted them in a session, and every such helper
was left running."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

import renderd
from renderd.errors import PlayerCrashed
from tests.helpers import helper_player_review15p as helper_player
from tests.helpers.leaks import pid_gone, wait_for

NOTER = "renderd-player-noter"


def _noter_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == NOTER and t.is_alive()]


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def test_close_stops_the_daemonised_helper_of_a_player_that_exited_on_its_own(tmp_path, nothing_left):
    pidfile, trigger = tmp_path / "helper.pid", tmp_path / "exit-now"
    helper = None
    session = renderd.launch(helper_player.argv(str(pidfile), str(trigger)), width=32, height=32,
                             start_timeout=15, step_timeout=10)
    try:
        helper = wait_for(lambda: _read_pid(pidfile), 10, "the player's helper to write its pid")
        assert os.getsid(helper) != os.getsid(session.pid)  # (in a session of its own: the group's signals miss it)
        wait_for(lambda: helper in session.process.noted_descendants(), 10,
                 f"helper pid {helper} to be noted while nobody polls the player (close() could not find it after "
                 "the player's exit)")
        trigger.touch()  # the player exits 0 on its own; its helper is orphaned
        assert session.process.wait_exit(10)
        with pytest.raises(PlayerCrashed, match=r"exit code 0"):
            session.step("MoveAhead")
        assert not pid_gone(helper)  # (still running: only close() ends it)
    finally:
        session.close()
        try:
            if helper is not None:
                wait_for(lambda: pid_gone(helper), 10, f"the player's orphaned helper pid {helper} to be stopped")
        finally:
            if helper is not None and not pid_gone(helper):
                os.kill(helper, signal.SIGKILL)
    wait_for(lambda: not _noter_threads(), 5, "the noter thread to end")


def test_noter_thread_ends_with_the_last_session(tmp_path, nothing_left):
    # (guard) the thread runs while a session's player runs, and is gone once it is closed: it outlives no session.
    pidfile, trigger = tmp_path / "helper.pid", tmp_path / "exit-now"
    session = renderd.launch(helper_player.argv(str(pidfile), str(trigger)), width=32, height=32,
                             start_timeout=15, step_timeout=10)
    helper = None
    try:
        helper = wait_for(lambda: _read_pid(pidfile), 10, "the player's helper to write its pid")
        assert session.step("MoveAhead").metadata["lastActionSuccess"]
        assert _noter_threads()
    finally:
        session.close()
        try:
            if helper is not None:
                wait_for(lambda: pid_gone(helper), 10, f"the running player's helper pid {helper} to be stopped")
        finally:
            if helper is not None and not pid_gone(helper):
                os.kill(helper, signal.SIGKILL)
    wait_for(lambda: not _noter_threads(), 5, "the noter thread to end after the last session closed")
