"""Supervisor edge cases: a lease request for an environment that wants no player. Real players, real FIFOs: an
in-process Supervisor (tests/daemon/conftest.py's ``supervisor_with``)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from renderd.errors import LeaseError
from tests.daemon.conftest import fast_config, wait_for
from tests.daemon.supervisor_helpers import DEADLINE, ready_pid
from tests.helpers.reload_review14e import SLOW_TO_STOP, _config, _demo


# -- 1. instances = 0 -------------------------------------------------------------------------------------------
def test_a_lease_request_for_an_environment_of_0_instances_is_refused_at_once(supervisor_with):
    # It waited its whole timeout, then said "the environment wants 0 instances": nothing starts a player for it
    # before a PUT or a reload raises `instances`.
    sup = supervisor_with(fast_config(instances=0))
    started = time.monotonic()
    with pytest.raises(LeaseError) as caught:
        sup.acquire("demo", os.getpid(), 5.0)
    assert time.monotonic() - started < 1.0
    message = str(caught.value)
    assert "'demo'" in message and "wants 0 instances" in message and "instances" in message, message
    assert "PUT" in message and "reload" in message, message
    with sup.lock:
        assert not sup.environments["demo"].waiters


def test_a_request_waiting_when_instances_becomes_0_is_refused_at_once(supervisor_with):
    # Its only player leased, a request waits; a PUT of instances = 0 leaves it nothing to wait for.
    text = fast_config()
    sup = supervisor_with(text)
    ready_pid(sup)
    lease, _ = sup.acquire("demo", os.getpid(), DEADLINE)
    outcome: list[BaseException | float] = []

    def wait() -> None:
        try:
            sup.acquire("demo", os.getpid(), 4.0)
        except LeaseError as exc:
            outcome.append(exc)
        outcome.append(time.monotonic())

    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        wait_for(lambda: len(sup.environments["demo"].waiters) == 1, DEADLINE, "the request waiting")
        scaled = time.monotonic()
        sup.put_environment(_demo(text.replace("instances = 1", "instances = 0")))
        waiter.join(DEADLINE)
        assert not waiter.is_alive()
        error, ended = outcome
        assert isinstance(error, LeaseError) and "wants 0 instances" in str(error), error
        assert ended - scaled < 1.0
    finally:
        waiter.join(DEADLINE)
        sup.release(lease.id)


# -- 2. a lowered max_boot_failures -----------------------------------------------------------------------------
def test_a_lowered_max_boot_failures_fails_a_player_waiting_to_restart_at_once(supervisor_with):
    # A player that failed to boot and waits 30 s for its next start: a reload lowering max_boot_failures to what it
    # has failed already gave it one more start (and its failure) before it was FAILED.
    text = (fast_config(executable='["/bin/sh", "-c", "echo bad build; exit 3"]')
            .replace("backoff_initial = 0.05", "backoff_initial = 30.0").replace("backoff_max = 0.2", "backoff_max = 60.0")
            .replace("max_boot_failures = 3", "max_boot_failures = 5"))
    sup = supervisor_with(text)

    def slot():
        with sup.lock:
            players = sup.environments["demo"].players
            assert len(players) <= 1, players
            p = players[0] if players else None
            return (p.state.value, p.boot_failures, p.spawns, p.reason) if p else (None, 0, 0, "")

    wait_for(lambda: slot()[:2] == ("BACKOFF", 1), DEADLINE, "the first boot failure")
    reason = slot()[3]
    assert "exit code 3" in reason, reason
    # Lowered, but above what it has failed: it waits on for its restart.
    assert sup.reload(_config(text.replace("max_boot_failures = 5", "max_boot_failures = 2")))
    assert slot() == ("BACKOFF", 1, 1, reason)
    assert sup.reload(_config(text.replace("max_boot_failures = 5", "max_boot_failures = 1")))
    assert slot() == ("FAILED", 1, 1, reason)
    with sup.lock:
        assert sup.environments["demo"].players[0].deadline is None
    with pytest.raises(LeaseError, match="every player failed to start"):
        sup.acquire("demo", os.getpid(), 5.0)
    # A reload retries it, as every reload retries a FAILED player, under the limit it sets.
    assert sup.reload(_config(text.replace("max_boot_failures = 5", "max_boot_failures = 1")
                              .replace("backoff_initial = 30.0", "backoff_initial = 0.05")))
    wait_for(lambda: slot()[:3] == ("FAILED", 1, 2), DEADLINE, "the retried player FAILED after one more start")


# -- 3. indices of slots that share a moment --------------------------------------------------------------------
def _slots(sup, name: str = "demo") -> list[tuple[int, str, bool, str | None]]:
    with sup.lock:
        return [(p.index, p.state.value, p.retire, p.log_path) for p in sup.environments[name].players]


def test_a_renumbered_slot_never_takes_the_index_of_a_retired_leased_player_that_comes_back(supervisor_with):
    # A leased player that a scale-down retired is kept (unretired) when a later PUT wants it again. A slot renumbered
    # meanwhile (its index was >= instances) took its index: two wanted players at index 0 for good, each one's
    # restarts moving the other's log file aside.
    text = fast_config(instances=2)
    wide = text.replace("instances = 2", "instances = 2\n    width = 64")
    sup = supervisor_with(text)
    wait_for(lambda: [s for _, s, _, _ in _slots(sup)] == ["READY", "READY"], DEADLINE, "two players READY")
    first, _ = sup.acquire("demo", os.getpid(), DEADLINE)
    second, _ = sup.acquire("demo", os.getpid(), DEADLINE)
    assert (first.player_index, second.player_index) == (0, 1)
    sup.put_environment(_demo(wide))  # both leased: the rollout waits for a free player
    sup.release(second.id)  # player 1 replaced by one of the new configuration
    wait_for(lambda: [(i, s) for i, s, _, _ in _slots(sup)] == [(0, "LEASED"), (1, "READY")]
             and not sup.environments["demo"].players[1].outdated, DEADLINE, "player 1 of the new configuration")
    again, _ = sup.acquire("demo", os.getpid(), DEADLINE)
    assert again.player_index == 1
    sup.put_environment(_demo(wide.replace("instances = 2", "instances = 1")))  # retires player 0 (outdated)
    wait_for(lambda: [(i, r) for i, _, r, _ in _slots(sup)] == [(0, True), (1, False)], DEADLINE, "player 0 retired")
    sup.release(again.id, clean=False)  # player 1 recycled: it starts again, renumbered if it can be
    wait_for(lambda: [s for _, s, _, _ in _slots(sup)] == ["LEASED", "READY"], DEADLINE, "player 1 back")
    sup.put_environment(_demo(wide))  # player 0, still leased, is wanted again
    wait_for(lambda: [r for _, _, r, _ in _slots(sup)] == [False, False], DEADLINE, "player 0 wanted again")
    slots = _slots(sup)
    assert sorted(i for i, *_ in slots) == [0, 1], slots
    assert len({log for *_, log in slots}) == 2, slots
    sup.release(first.id)


def test_a_retiring_players_log_is_kept_when_the_new_player_of_its_index_restarts(supervisor_with, tmp_path):
    # The new player of a redeclared environment shares index 0 with the retired one still stopping, whose log was
    # moved to demo.0.log.1. The new player's restart moved its own log there, over the retiring player's, which
    # went on writing in a file that no name reached any more, while its status named the new player's old log.
    text = fast_config(executable=SLOW_TO_STOP).replace("stop_grace = 2.0", "stop_grace = 30.0")
    sup = supervisor_with(text)
    old = ready_pid(sup)
    with sup.lock:
        sup.delete_environment("demo")
        sup.put_environment(_demo(fast_config()))
    wait_for(lambda: [(i, s, r) for i, s, r, _ in _slots(sup)] == [(0, "STOPPING", True), (0, "READY", False)],
             DEADLINE, "the new player READY beside the old one stopping")
    with sup.lock:
        new = sup.environments["demo"].players[1].pid
    try:
        os.kill(new, signal.SIGKILL)  # it restarts (after 0.05 s) while the old one still stops
        wait_for(lambda: [(i, s) for i, s, _, _ in _slots(sup)] == [(0, "STOPPING"), (0, "READY")]
                 and sup.environments["demo"].players[1].pid != new, DEADLINE, "the new player restarted")
        (_, _, _, kept), (_, _, _, current) = _slots(sup)
        logs = tmp_path / "logs"
        assert current == str(logs / "demo.0.log")
        # The file the retiring player writes in is the one its status names.
        written = os.readlink(f"/proc/{old}/fd/1")
        assert written == kept and os.path.exists(kept), (written, kept)
        assert os.path.samestat(os.stat(f"/proc/{old}/fd/1"), os.stat(kept))
        with sup.lock:
            assert sup.environments["demo"].players[0].proc.log_path == kept
        # The new player's previous log is kept too, as demo.0.log.1.
        assert (logs / "demo.0.log.1").exists() and str(logs / "demo.0.log.1") != kept
    finally:
        os.kill(old, signal.SIGKILL)  # (rather than wait out its stop_grace)
    wait_for(lambda: [(i, s) for i, s, _, _ in _slots(sup)] == [(0, "READY")], DEADLINE, "only the new player left")
