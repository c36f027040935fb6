"""Health checks of idle players (``health_interval``): an idle player is sent ``Pass`` now and then and must
answer within ``step_timeout``; one that does not (stopped, wedged) is replaced before any client gets it."""

from __future__ import annotations

import dataclasses
import os
import signal

import pytest

import renderd
from renderd.daemon.supervisor import State, Supervisor
from renderd.errors import LeaseError
from tests.daemon.conftest import fast_config, wait_for
from tests.daemon.supervisor_helpers import send_slow_action
from tests.helpers.health_review14e import DEADLINE, _config, _player, _step


def FAST_TICKS(now: float) -> float:
    """An ``on_tick`` that has the loop pass every 0.05 s, not once a second when idle: a READY player's
    first check goes out after health_interval, not up to a second later."""
    return 0.05


def _ready(sup: Supervisor):
    def ready():
        p = _player(sup)
        return p if p is not None and p.state == State.READY else None

    return wait_for(ready, DEADLINE, "the demo player READY")


def test_a_healthy_idle_player_answers_its_checks_and_serves_its_next_client(supervisor_with):
    sup = supervisor_with(_config(interval=0.1), on_tick=FAST_TICKS)
    p = _ready(sup)
    pid = p.pid
    wait_for(lambda: p.checks >= 3 and p.check_deadline is None, DEADLINE, "three health checks answered")
    assert p.state == State.READY and p.pid == pid and p.restarts == 0 and p.reason == ""
    lease, answer = sup.acquire("demo", client_pid=os.getpid(), timeout=DEADLINE)
    try:
        # The client's own first step is answered with its own sequenceId: the checks left nothing behind.
        assert _step(answer, 1) == 1
    finally:
        sup.release(lease.id)
    assert p.pid == pid and p.state == State.READY  # a clean release: nothing was left in the pipes


def test_a_player_that_hangs_while_idle_is_replaced(supervisor_with):
    sup = supervisor_with(_config(interval=0.1, step_timeout=1.0), on_tick=FAST_TICKS)
    p = _ready(sup)
    pid = p.pid
    os.kill(pid, signal.SIGSTOP)  # alive, never answering
    # (the reason stays until the new player is READY; the restart counts once its process has started)
    reason = wait_for(lambda: "health check" in p.reason and p.reason, DEADLINE, "the hung player stopped")
    assert "did not answer a health check (Pass) within step_timeout (1 s): hung" in reason
    new = wait_for(lambda: (q := _ready(sup)).pid != pid and q, DEADLINE, "the hung player replaced")
    assert new.restarts == 1
    assert 'renderd_player_idle_failures_total{environment="demo",how="health_check"} 1.0' in sup.metrics.render().decode()


def test_a_lease_request_waits_for_a_check_under_way(supervisor_with):
    sup = supervisor_with(_config(interval=0.1, step_timeout=10.0), on_tick=FAST_TICKS)
    p = _ready(sup)
    os.kill(p.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: p.check_deadline is not None, DEADLINE, "a health check under way")
        with pytest.raises(LeaseError, match=r"no ready player .*READY: 1, 1 READY under a health check"):
            sup.acquire("demo", client_pid=os.getpid(), timeout=0.3)
    finally:
        os.kill(p.pid, signal.SIGCONT)
    lease, _ = sup.acquire("demo", client_pid=os.getpid(), timeout=DEADLINE)
    assert lease.player is p and p.check_deadline is None
    sup.release(lease.id)


def test_checks_are_off_by_default(supervisor_with):
    sup = supervisor_with(fast_config())
    p = _ready(sup)
    assert sup.environments["demo"].config.health_interval == 0
    with sup.lock:
        sup._tick()
    assert p.checks == 0 and p.check_due is None


def test_http_players_are_checked_through_the_bridge(daemon):
    d = daemon(fast_config(extra='transport = "http"\nhealth_interval = 0.1', daemon='http = "127.0.0.1:0"')
               .replace("step_timeout = 20.0", "step_timeout = 1.0"), args=("--log-level", "debug"))
    (player,) = d.players()
    wait_for(lambda: "answered health check 3" in d.output(), DEADLINE, "three health checks answered")
    (same,) = d.players()
    assert same["pid"] == player["pid"] and same["restarts"] == 0 and same["state"] == "READY", same
    with renderd.connect("demo", socket=d.socket) as session:
        assert session.step("MoveAhead").sequence_id == 1
    os.kill(player["pid"], signal.SIGSTOP)
    wait_for(lambda: "did not answer a health check (Pass) within step_timeout (1 s): hung" in d.output(), DEADLINE,
             "the hung HTTP player noticed")
    d.wait_players(lambda ps: ps[0]["state"] == "READY" and ps[0]["pid"] != player["pid"], what="a new player")


def test_a_shorter_health_interval_applies_at_once(supervisor_with):
    # A reload or PUT that shortens health_interval (or turns checks on after a long one) must not wait out the
    # time the previous interval set for the next check.
    sup = supervisor_with(_config(interval=3600.0))
    p = _ready(sup)
    wait_for(lambda: p.check_due is not None, DEADLINE, "the first check scheduled an hour away")
    config = dataclasses.replace(sup.environments["demo"].config, health_interval=0.1)
    sup.put_environment(config, source="file")
    wait_for(lambda: p.checks >= 2 and p.check_deadline is None, 5.0, "checks at the new interval")
    assert p.state == State.READY and p.restarts == 0


def test_a_late_answer_read_during_a_check_gets_the_player_recycled_not_failed(supervisor_with):
    # A client sent an action and released the lease cleanly without reading the answer; the player answers
    # after its next health check was sent, so the daemon reads that answer first. It is an answer nobody
    # waited for, as when no check is under way: the player is recycled (no failure, no backoff).
    sup = supervisor_with(_config(interval=0.1), on_tick=FAST_TICKS)
    p = _ready(sup)
    pid = p.pid
    lease, answer = sup.acquire("demo", client_pid=os.getpid(), timeout=DEADLINE)
    send_slow_action(answer["client_pipe"], 0.5, 7)
    sup.release(lease.id)
    wait_for(lambda: p.check_deadline is not None, DEADLINE, "a health check under way")
    wait_for(lambda: p.pid != pid and p.state == State.READY, DEADLINE, "a new player READY")
    assert p.restarts == 0 and p.reason == "", (p.restarts, p.reason)
    metrics = sup.metrics.render().decode()
    assert 'renderd_player_recycles_total{environment="demo"} 1.0' in metrics
    assert "idle_failures_total{" not in metrics


def test_a_late_answer_with_the_next_checks_sequence_id_is_not_taken_for_its_answer(supervisor_with, caplog):
    # A client's actions are numbered 1, 2, 3...: a late answer to one of them must not pass for the answer to
    # a health check (the check's own answer, read next, would then be an answer nobody waited for, or the
    # next client's first answer). Checks carry sequenceIds a client does not use.
    sup = supervisor_with(_config(interval=0.1), on_tick=FAST_TICKS)
    p = _ready(sup)
    pid = p.pid
    lease, answer = sup.acquire("demo", client_pid=os.getpid(), timeout=DEADLINE)
    with sup.lock:
        seq = p.checks + 1  # (what the next check would carry, numbered as a client numbers its actions)
    send_slow_action(answer["client_pipe"], 0.5, seq)
    caplog.set_level("DEBUG", logger="renderd.daemon.supervisor")
    sup.release(lease.id)
    wait_for(lambda: p.check_deadline is not None, DEADLINE, "a health check under way")
    wait_for(lambda: p.pid != pid and p.state == State.READY, DEADLINE, "a new player READY")
    assert f"it answered sequenceId {seq} while health check" in caplog.text
    assert p.restarts == 0 and p.reason == "", (p.restarts, p.reason)
