"""`renderd_player_restarts_total` counts the restarts that happened (a player started again after it exited),
not the restarts scheduled: one cancelled during its backoff (the environment removed, a new restart policy that
lets the exit go, the daemon's stop) is not counted. In-process supervisors, real players."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading

from renderd.daemon.supervisor import State, Supervisor
from tests.daemon.conftest import fast_config, wait_for
from tests.daemon.supervisor_helpers import DEADLINE, only_player, ready_pid


def _restarts_counted(sup: Supervisor) -> float:
    return sup.metrics.registry.get_sample_value("renderd_player_restarts_total", {"environment": "demo"})


def _crash_into_a_long_backoff(sup: Supervisor) -> None:
    os.kill(ready_pid(sup), signal.SIGABRT)

    def scheduled() -> bool:
        with sup.lock:
            p = only_player(sup)
            return p.state == State.BACKOFF and p.returncode is not None and p.deadline is not None

    wait_for(scheduled, DEADLINE, "the crashed player's restart to be scheduled")


def _long_backoff() -> str:
    return fast_config().replace("backoff_initial = 0.05", "backoff_initial = 60").replace(
        "backoff_max = 0.2", "backoff_max = 120")


def test_a_restart_is_counted_once_its_player_has_started(supervisor_with):
    sup = supervisor_with()  # (backoff_initial 0.05 s)
    pid = ready_pid(sup)
    assert _restarts_counted(sup) == 0
    os.kill(pid, signal.SIGABRT)
    wait_for(lambda: ready_pid(sup) != pid, DEADLINE, "the crashed player restarted and READY")
    assert _restarts_counted(sup) == 1
    assert only_player(sup).restarts == 1


def test_a_restart_of_a_removed_environment_is_not_counted(supervisor_with):
    sup = supervisor_with(_long_backoff())
    _crash_into_a_long_backoff(sup)
    sup.delete_environment("demo")
    wait_for(lambda: "demo" not in sup.environments, DEADLINE, "the removed environment gone")
    assert _restarts_counted(sup) == 0


def test_a_restart_its_new_restart_policy_cancels_is_not_counted(supervisor_with):
    sup = supervisor_with(_long_backoff())
    _crash_into_a_long_backoff(sup)
    with sup.lock:
        config = sup.environments["demo"].config
    sup.put_environment(dataclasses.replace(config, restart="never"), source="file")
    wait_for(lambda: only_player(sup).state == State.EXITED, DEADLINE, "the player let go (restart = never)")
    assert _restarts_counted(sup) == 0


def test_a_restart_the_daemon_stop_cancels_is_not_counted(supervisor_with):
    sup = supervisor_with(_long_backoff())
    _crash_into_a_long_backoff(sup)
    # (found before the stop is asked for: the loop may end before a look after it)
    (loop,) = [t for t in threading.enumerate() if t.name == "renderd-supervisor-test"]
    sup.request_stop()
    loop.join(DEADLINE)
    assert not loop.is_alive()
    assert _restarts_counted(sup) == 0
