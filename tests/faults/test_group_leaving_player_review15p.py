"""A player that moves itself out of the process group renderd made for it (``setpgid`` into its parent's group,
which a process of the same session may join) is still stopped by ``close()``: signals go to the player itself
as well as to the group. Before, SIGTERM and SIGKILL went to the group alone, which no longer held the player:
``close()`` waited the grace and 5 s more, logged "survived SIGKILL (stuck in the kernel?)", and left the player
running."""

from __future__ import annotations

import logging
import os
import signal

import renderd
from tests.helpers import group_leaving_player_review15p as group_leaving
from tests.helpers.leaks import pid_gone, wait_for


def _launch(ignore_term: bool) -> renderd.Session:
    return renderd.launch(group_leaving.argv(ignore_term), width=32, height=32, start_timeout=15, step_timeout=10)


def _stop_left(pid: int) -> None:
    if not pid_gone(pid):
        os.kill(pid, signal.SIGKILL)


def test_close_stops_a_player_that_left_its_process_group(nothing_left, caplog):
    session = _launch(ignore_term=False)
    pid = session.pid
    try:
        assert os.getpgid(pid) == os.getpgrp()  # (it left its own group for ours)
        assert session.step("MoveAhead").metadata["lastActionSuccess"]
    finally:
        with caplog.at_level(logging.WARNING, logger="renderd.process"):
            session.close()
        try:
            wait_for(lambda: pid_gone(pid), 10, f"the player pid {pid} to be stopped by close()")
        finally:
            _stop_left(pid)
    assert session.process.ended_by_stop()
    assert not session.process.escalated  # (it got SIGTERM, and exited of it)
    assert "SIGKILL" not in caplog.text


def test_a_player_that_left_its_group_and_ignores_sigterm_is_sigkilled(nothing_left, caplog):
    session = _launch(ignore_term=True)
    pid = session.pid
    try:
        assert session.step("MoveAhead").metadata["lastActionSuccess"]
    finally:
        with caplog.at_level(logging.WARNING, logger="renderd.process"):
            session.close()
        try:
            wait_for(lambda: pid_gone(pid), 10, f"the player pid {pid} to be stopped by close()")
        finally:
            _stop_left(pid)
    assert session.process.returncode == -signal.SIGKILL
    assert session.process.escalated
    assert "survived SIGKILL" not in caplog.text
