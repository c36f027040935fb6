"""Leases granted at the same moment as the loop handles something of the same player: what an idle player
wrote (or the end of file it gave) before a lease request took it must never reach that request's client."""

from __future__ import annotations

import os
import signal
import time

import pytest

from renderd.daemon.supervisor import State, _pending_bytes
from renderd.errors import LeaseError
from tests.daemon.conftest import PLAYER, fast_config, wait_for
from tests.daemon.supervisor_helpers import only_player as _player
from tests.daemon.supervisor_helpers import ready_pid

DEADLINE = 20.0
#: A player run by a shell that ignores SIGTERM (the player sets its own handler and exits of it; the shell then
#: waits in a sleep that ignores it too): stopping it takes the whole stop_grace, then SIGKILL.
SLOW_TO_STOP = f"""["/bin/sh", "-c", 'trap "" TERM; "$0" "$@"; exec sleep 30', "{PLAYER}", "--static-frame"]"""


def test_a_lease_request_never_takes_an_idle_player_whose_unasked_output_the_loop_has_not_read(supervisor_with):
    # (the loop passes every 0.05 s, not once a second when idle: it watches the released player again at once)
    sup = supervisor_with(fast_config(), on_tick=lambda now: 0.05)
    pid = ready_pid(sup, watched=True)
    lease, _ = sup.acquire("demo", os.getpid(), DEADLINE)
    sup.release(lease.id)
    assert ready_pid(sup, watched=True) == pid
    with sup.lock:  # the loop cannot handle the bytes before the request below looks at the player
        p = _player(sup)
        fd = os.open(p.pair.server_path, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(fd, b"an answer nobody waited for")
        finally:
            os.close(fd)
        lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)
        try:
            # The old player is recycled first; the lease is of a new one, whose pipe holds nothing.
            assert answer["pid"] != pid
            assert _pending_bytes(lease.player.holder.fileno()) == 0
        finally:
            sup.release(lease.id)


def test_the_loop_does_not_spin_during_a_stop_while_a_player_waits_in_backoff(supervisor_with):
    # One player is in BACKOFF when the stop begins, another takes stop_grace to stop (its process ignores
    # SIGTERM once the player in it has exited, so the stop waits for its grace). Once the backoff's restart
    # time passes (no restart: the daemon is stopping), the loop must go on sleeping until something happens,
    # not run flat out until the stop ends.
    ticks: list[float] = []
    config = fast_config(instances=2, executable=SLOW_TO_STOP).replace("backoff_initial = 0.05", "backoff_initial = 0.2")
    sup = supervisor_with(config, on_tick=lambda now: ticks.append(now))

    def pids() -> list[int] | None:
        with sup.lock:
            players = sup.environments["demo"].players
            ok = len(players) == 2 and all(p.state == State.READY for p in players)
            return [p.pid for p in players] if ok else None

    _, second = wait_for(pids, DEADLINE, "two READY players")
    os.kill(second, signal.SIGABRT)
    wait_for(lambda: sup.environments["demo"].players[1].state == State.BACKOFF, DEADLINE,
             "the crashed one in BACKOFF")
    sup.request_stop()
    start = time.monotonic()
    wait_for(lambda: time.monotonic() - start > 0.5, DEADLINE, "the backoff's restart time passed")
    count = len(ticks)
    wait_for(lambda: time.monotonic() - start > 1.0, DEADLINE, "0.5 s more")
    assert sup.environments["demo"].players[0].state == State.STOPPING  # (the stop is still under way)
    assert len(ticks) - count < 50, f"{len(ticks) - count} loop passes in 0.5 s"


def test_a_lease_request_for_an_environment_whose_players_all_failed_is_refused_at_once(supervisor_with):
    # FAILED slots are retried only by a reload or PUT: waiting the request's whole timeout for them helps
    # nobody (renderd.connect waited 30 s by default before being told every player failed).
    sup = supervisor_with(fast_config(instances=2, executable='["/bin/false"]'))
    wait_for(lambda: [p.state for p in sup.environments["demo"].players] == [State.FAILED] * 2, DEADLINE,
             "both slots FAILED")
    started = time.monotonic()
    with pytest.raises(LeaseError, match=r"every player failed to start and is not retried .*exit code 1"):
        sup.acquire("demo", os.getpid(), 60.0)
    assert time.monotonic() - started < 30.0  # (at once; before, the whole 60 s)
