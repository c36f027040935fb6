"""The player process, review 12: helpers a player started outside its process group are still stopped
after the player itself has exited, when they were noted while it lived. Real child processes; nothing
may be left behind (``no_leaks``)."""

from __future__ import annotations

import os
import signal

import psutil
import pytest

import renderd.process as process_mod
from renderd.process import PlayerProcess

from tests.helpers.leaks import pid_gone

from .conftest import wait_until

pytestmark = pytest.mark.usefixtures("no_leaks")

# The player: a helper in a session of its own (which has a child of its own), one in the player's own
# group, then it waits for the test to let it exit.
PLAYER = """
setsid sh -c 'sleep 600 & exec sleep 600' &
outside=$!
sleep 600 &
inside=$!
while [ -z "$(cat /proc/$outside/task/*/children 2>/dev/null)" ]; do sleep 0.01; done
echo "pids $outside $inside $(cat /proc/$outside/task/*/children)"
while [ ! -e "$1" ]; do sleep 0.01; done
"""


def _start(tmp_path):
    log_path = tmp_path / "player.log"
    go = tmp_path / "go"
    proc = PlayerProcess.spawn(["sh", "-c", PLAYER, "player", str(go)], None, log_path)
    assert wait_until(lambda: "pids" in log_path.read_text(), 10), log_path.read_text()
    pids = [int(p) for p in log_path.read_text().split("pids ")[1].split()]
    helpers = [psutil.Process(pid) for pid in pids]  # (noted now: a kill below cannot hit a recycled pid)
    assert os.getpgid(pids[0]) != proc.pgid and os.getpgid(pids[1]) == proc.pgid
    return proc, go, helpers


def _clean(proc: PlayerProcess, helpers: list[psutil.Process]) -> None:
    proc.stop(1.0)
    for helper in helpers:
        try:
            helper.kill()
        except psutil.NoSuchProcess:
            pass


def _exit_player(proc: PlayerProcess, go, helpers) -> None:
    go.touch()
    assert proc.wait(10) is not None
    assert not any(pid_gone(h.pid) for h in helpers)  # the player is gone, its helpers are not


def test_helpers_noted_while_the_player_lived_are_stopped_after_it_exited(tmp_path):
    proc, go, helpers = _start(tmp_path)
    try:
        proc.note_descendants()
        _exit_player(proc, go, helpers)
        proc.stop(1.0)
        gone = wait_until(lambda: all(pid_gone(h.pid) for h in helpers), 5)
        assert gone, [h.pid for h in helpers if not pid_gone(h.pid)]
        assert not proc.escalated  # (they ended of the SIGTERM)
    finally:
        _clean(proc, helpers)


def test_poll_notes_the_helpers_on_its_own(tmp_path, monkeypatch):
    # The daemon polls each player on every pass of its loop: that is when helpers get noted, at most every
    # DESCENDANT_NOTE_INTERVAL seconds (0 here, so the first poll notes them).
    monkeypatch.setattr(process_mod, "DESCENDANT_NOTE_INTERVAL", 0.0, raising=False)
    proc, go, helpers = _start(tmp_path)
    try:
        assert proc.poll() is None
        _exit_player(proc, go, helpers)
        proc.stop(1.0)
        gone = wait_until(lambda: all(pid_gone(h.pid) for h in helpers), 5)
        assert gone, [h.pid for h in helpers if not pid_gone(h.pid)]
    finally:
        _clean(proc, helpers)


def test_a_noted_helper_that_exited_before_the_stop_is_let_go(tmp_path):
    # A noted helper that ends while the player runs is forgotten at the next note (its descriptor closed),
    # and one that ends later is not signalled: stop() never waits for it nor warns about it.
    proc, go, helpers = _start(tmp_path)
    try:
        proc.note_descendants()
        outside, inside, grandchild = helpers
        for helper in (outside, grandchild):
            os.kill(helper.pid, signal.SIGKILL)
        assert wait_until(lambda: pid_gone(outside.pid) and pid_gone(grandchild.pid), 5)
        proc.note_descendants()
        assert proc.noted_descendants() == []
        _exit_player(proc, go, [inside])
        proc.stop(1.0)
        assert wait_until(lambda: pid_gone(inside.pid), 5) and not proc.escalated
    finally:
        _clean(proc, helpers)
