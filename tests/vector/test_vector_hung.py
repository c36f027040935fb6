"""Closing many players: those that do not answer and do not exit on SIGTERM (stopped with SIGSTOP here, as a
player stuck in a driver is) are stopped all together, so a call takes one stop grace, not one per slot; a
vector session left open is closed at interpreter exit and by the garbage collector (one slot after
another there); a Ctrl-C while players start closes every one of them."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

import renderd
from renderd.vector import _build
from tests.vector.conftest import (
    START_TIMEOUT,
    check_signal_while_players_hang_at_start,
    every_slot_times_out,
    player_kwargs,
    send_signal,
    signal_raising,
    wait_for,
)

N = 5
#: Each session's SIGTERM grace in these tests (the default is 5 s).
GRACE = 1.0
#: Stopping N hung players one after another takes N x GRACE; together, GRACE and some scheduling.
TOGETHER_WITHIN = GRACE + 2.0
#: How long a script that leaves two players running may take to exit.
EXIT_WITHIN = 30.0
#: Seconds the Ctrl-C test waits for each thing it waits for.
STEP = 20.0


def _stopped_players() -> renderd.VectorSession:
    vs = renderd.launch_many(N, **player_kwargs())
    vs.step(["Pass"] * N)  # every player has opened client.pipe: a send only writes
    for session in vs.sessions:
        session.stop_grace = GRACE
        os.kill(session.pid, signal.SIGSTOP)
    return vs


def test_close_stops_hung_players_together(no_leaks):
    vs = _stopped_players()
    try:
        started = time.monotonic()
        vs.close()
        took = time.monotonic() - started
    finally:
        vs.close()
    assert took < TOGETHER_WITHIN, f"close() took {took:.2f} s for {N} hung players"


def test_a_recv_timeout_stops_hung_players_together(no_leaks):
    vs = _stopped_players()
    try:
        _, took = every_slot_times_out(vs, ["Pass"] * N, timeout=0.2)
        assert all(s.closed for s in vs.sessions)
    finally:
        vs.close()
    assert took < 0.2 + TOGETHER_WITHIN, f"step(timeout=0.2) took {took:.2f} s for {N} hung players"


def test_a_vector_session_left_open_is_closed_at_interpreter_exit(no_leaks):
    # __del__ at interpreter exit closes the slots one after another: a thread started then never runs.
    script = (
        "import renderd\n"
        f"vs = renderd.launch_many(2, width=32, height=32, args=['--static-frame'], start_timeout={START_TIMEOUT})\n"
        "vs.step(['Pass', 'Pass'])\n"
        "print(*vs.pids, flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=EXIT_WITHIN)
    assert done.returncode == 0, done.stderr
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2, done.stdout

    def running(pid):
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    assert not any(running(p) for p in pids), pids


def test_ctrl_c_while_players_start_closes_every_one(no_leaks):
    # Ctrl-C while launch_many waits for slot 0: slot 1's player and slot 0's (started after the interrupt)
    # are closed too, not kept by the KeyboardInterrupt's traceback.
    entered, release = threading.Event(), threading.Event()
    made = []

    def factory(slot):
        if slot == 0:
            entered.set()
            release.wait(STEP)
        session = renderd.launch(**player_kwargs())
        made.append(session)
        return session

    handled: list[float] = []

    def interrupt():
        assert entered.wait(STEP)
        wait_for(lambda: len(made) == 1, STEP, "slot 1's player to start")
        send_signal(signal.SIGINT)
        wait_for(lambda: handled, STEP, "the SIGINT to be handled")
        release.set()

    helper = threading.Thread(target=interrupt)
    try:
        with signal_raising(signal.SIGINT, handled):
            helper.start()
            with pytest.raises(KeyboardInterrupt) as info:
                _build(2, factory, "started", replace_on_crash=False, reward_fn=None, done_fn=None)
    finally:
        release.set()
        helper.join()
    assert len(made) == 2 and all(s.closed for s in made), made
    del info


def test_a_vector_session_collected_as_garbage_closes_without_threads(no_leaks, monkeypatch):
    # __del__ runs wherever the garbage collector does (maybe inside threading's own locks): it starts no
    # thread, and still closes every slot.
    vs = renderd.launch_many(2, **player_kwargs())
    sessions = vs.sessions
    vs.cycle = vs  # only the cycle collector frees it
    started = []
    real_start = threading.Thread.start

    def start(thread):
        started.append(thread.name)
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.warns(ResourceWarning, match="unclosed renderd VectorSession of 2 players"):
        del vs
        gc.collect()
    monkeypatch.undo()
    assert started == [] and all(s.closed for s in sessions), (started, sessions)


def test_ctrl_c_while_players_hang_at_start_returns_at_once(no_leaks):
    # Players that never send their first frame (a build stuck loading): a Ctrl-C while launch_many waits for
    # them stops them, instead of waiting out their start_timeout before the KeyboardInterrupt is raised.
    check_signal_while_players_hang_at_start(signal.SIGINT, STEP, "Ctrl-C", start_timeout=8.0)
