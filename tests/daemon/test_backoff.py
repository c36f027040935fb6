"""Restart backoff: a player that exits soon after every start, before serving anybody, is a crash loop and its
restarts slow down however quickly it becomes ready; a player that ran (it served a lease, or stayed up as long as
the longest wait) starts a new series at ``backoff_initial``. Real players, killed from outside."""

from __future__ import annotations

import os
import signal
import time

from renderd.daemon.supervisor import State, Supervisor
from tests.daemon.conftest import fast_config, wait_for
from tests.daemon.supervisor_helpers import only_player as _player
from tests.daemon.supervisor_helpers import ready_pid as _ready_pid

DEADLINE = 20.0


def _crash_and_measure(sup: Supervisor, pid: int) -> float:
    """SIGABRT the player ``pid``; return the wait before its restart, as the supervisor scheduled it."""
    os.kill(pid, signal.SIGABRT)

    def scheduled() -> float | None:
        with sup.lock:
            p = _player(sup)
            if p.state == State.BACKOFF and p.returncode is not None:
                return p.backoff_delay
            return None

    return wait_for(scheduled, DEADLINE, f"player pid {pid}'s restart to be scheduled")


def _config(backoff_max: float) -> str:
    return fast_config().replace("backoff_max = 0.2", f"backoff_max = {backoff_max}")


def test_a_player_that_crashes_soon_after_every_start_is_restarted_ever_more_slowly(supervisor_with):
    sup = supervisor_with(_config(backoff_max=5.0))  # backoff_initial = 0.05
    delays = [_crash_and_measure(sup, _ready_pid(sup)) for _ in range(4)]
    assert delays == [0.05, 0.1, 0.2, 0.4], delays
    _ready_pid(sup)  # (a restart counts once its process has started)
    assert _player(sup).restarts == 4


def test_a_player_that_ran_long_enough_starts_a_new_series(supervisor_with):
    sup = supervisor_with(_config(backoff_max=0.6))
    delays = [_crash_and_measure(sup, _ready_pid(sup)) for _ in range(3)]
    assert delays == [0.05, 0.1, 0.2], delays
    pid = _ready_pid(sup)
    wait_for(lambda: time.monotonic() - _player(sup).ready_at > 0.7, DEADLINE, "the player up for backoff_max")
    assert _crash_and_measure(sup, pid) == 0.05


def test_a_player_that_served_a_lease_starts_a_new_series(supervisor_with):
    sup = supervisor_with(_config(backoff_max=60.0))
    delays = [_crash_and_measure(sup, _ready_pid(sup)) for _ in range(2)]
    assert delays == [0.05, 0.1], delays
    pid = _ready_pid(sup)
    lease, _ = sup.acquire("demo", client_pid=os.getpid(), timeout=DEADLINE)
    sup.release(lease.id)
    wait_for(lambda: _player(sup).state == State.READY, DEADLINE, "the released player READY again")
    assert _crash_and_measure(sup, pid) == 0.05
    # A crash while leased is its holder's to see; the restart after it starts a new series too.
    pid = _ready_pid(sup)
    sup.acquire("demo", client_pid=os.getpid(), timeout=DEADLINE)
    assert _crash_and_measure(sup, pid) == 0.05


def test_a_player_recycled_after_serving_a_lease_ends_the_series(supervisor_with):
    # The player served a lease: the series ends there, even though the process that served it was recycled
    # (an unclean release) and the crash that follows is its replacement's, before any lease of its own.
    sup = supervisor_with(_config(backoff_max=60.0))
    delays = [_crash_and_measure(sup, _ready_pid(sup)) for _ in range(2)]
    assert delays == [0.05, 0.1], delays
    pid = _ready_pid(sup)
    lease, _ = sup.acquire("demo", client_pid=os.getpid(), timeout=DEADLINE)
    sup.release(lease.id, clean=False)
    new_pid = wait_for(lambda: _ready_pid(sup) != pid and _ready_pid(sup), DEADLINE, "the recycled player READY")
    assert _crash_and_measure(sup, new_pid) == 0.05
