"""A changed configuration rolled out over running players (a reload, a PUT): one player at a time, held while the
new configuration does not come up; a reload leaves alone the players of environments it does not change; an
HTTP player's end never makes the supervisor wait on its FIFO pump with its lock held. Real players, real FIFOs,
an in-process Supervisor (tests/daemon/conftest.py's ``supervisor_with``)."""

from __future__ import annotations

import logging
import os
import signal
import textwrap
import threading

import pytest

from renderd.config import loads
from renderd.daemon.service import _HttpPlayers
from renderd.daemon.supervisor import State
from tests.daemon.conftest import PLAYER, fast_config, wait_for
from tests.daemon.supervisor_helpers import DEADLINE, only_player, ready_pid
from tests.helpers.leaks import pid_gone

#: An executable that exits at once, before any first frame: a build that does not come up.
EXITS_AT_START = '["/bin/sh", "-c", "echo cannot load the scene >&2; exit 3"]'
#: How long a control request may take while the supervisor ends an HTTP player (it should not wait at all).
ANSWER_BOUND = 2.0


def _config(text: str):
    return loads(textwrap.dedent(text))


def _states(sup) -> list[tuple[str, int | None, bool]]:
    with sup.lock:
        return [(p.state.value, p.pid, p.outdated) for p in sup.environments["demo"].players]


def _ticks(sup_ticks: list[float], n: int, sup=None) -> None:
    """Wait until the loop has run ``n`` more passes (woken at each poll when ``sup`` is given, so the passes
    come at once instead of at the loop's own pace)."""
    start = len(sup_ticks)

    def passed() -> bool:
        if sup is not None:
            sup.wake()
        return len(sup_ticks) >= start + n

    wait_for(passed, DEADLINE, f"{n} passes of the supervisor's loop")


# -- 1. a rollout to a configuration that does not come up is held --------------------------------------------
@pytest.mark.parametrize("how", ["put", "reload"])
def test_a_rollout_to_an_executable_that_exits_at_start_keeps_the_old_players_serving(supervisor_with, caplog, how):
    caplog.set_level(logging.INFO, logger="renderd.daemon.supervisor")
    statuses: list[str] = []
    sup = supervisor_with(fast_config(instances=3), on_status=statuses.append)
    wait_for(lambda: [s for s, _, _ in _states(sup)] == ["READY"] * 3, DEADLINE, "three READY players")
    old = {pid for _, pid, _ in _states(sup)}
    bad = _config(fast_config(instances=3, executable=EXITS_AT_START))
    if how == "put":
        sup.put_environment(bad.environments["demo"], source="file")
    else:
        assert sup.reload(bad)

    def one_failed():
        states = _states(sup)
        return states if any(s == "FAILED" for s, _, _ in states) else None

    states = wait_for(one_failed, DEADLINE, "the first replaced player FAILED")
    # The first replaced slot never became READY: the other two still run the previous configuration.
    assert sorted(s for s, _, _ in states) == ["FAILED", "READY", "READY"], states
    assert {pid for s, pid, outdated in states if s == "READY" and outdated} <= old
    assert len([1 for s, _, outdated in states if s == "READY" and outdated]) == 2, states
    lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)  # and they are leased
    try:
        assert answer["pid"] in old and (answer["width"], answer["height"]) == (300, 300), answer
    finally:
        sup.release(lease.id)

    def held() -> bool:
        return any("rollout of the new configuration stopped: demo[0] of it FAILED" in m and "exit code 3" in m
                   and "2 player(s) of the previous configuration keep serving" in m
                   for m in [r.getMessage() for r in caplog.records])

    wait_for(held, DEADLINE, "the log to say the rollout stopped")
    # Declaring it again retries the failed slot: the rollout stays held meanwhile, the old players serve on.
    sup.put_environment(bad.environments["demo"], source="file")

    def stopped_twice() -> bool:
        messages = [r.getMessage() for r in caplog.records]
        return (any("held while demo[0] of it is retried" in m for m in messages)
                and sum("rollout of the new configuration stopped: demo[0]" in m for m in messages) == 2)

    wait_for(stopped_twice, DEADLINE, "the retried slot FAILED again")
    states = _states(sup)
    assert sorted(s for s, _, _ in states) == ["FAILED", "READY", "READY"], states
    assert len([1 for s, pid, outdated in states if s == "READY" and outdated and pid in old]) == 2, states
    wait_for(lambda: any("rollout" in s and "exit code 3" in s for s in statuses), DEADLINE,
             f"the status line to say the rollout is held: {statuses}")
    # A later PUT of a configuration that comes up goes on with the rollout, one player at a time.
    good = _config(fast_config(instances=3, extra="width = 64\n    height = 48"))
    sup.put_environment(good.environments["demo"], source="file")
    seen: list[int] = []

    def replaced():
        states = _states(sup)
        seen.append(sum(1 for s, _, _ in states if s == "READY"))
        return (all(s == "READY" and not outdated for s, _, outdated in states) and len(states) == 3
                and not old & {pid for _, pid, _ in states})

    wait_for(replaced, DEADLINE, "the players replaced by the fixed configuration")
    assert min(seen) >= 1, seen
    wait_for(lambda: "rollout" not in statuses[-1], DEADLINE, f"the status line without the hold: {statuses}")


def test_a_held_rollout_replaces_no_more_players_while_the_new_one_backs_off(supervisor_with):
    # Before the replaced slot has failed for good (BACKOFF between its attempts), no other player is replaced.
    sup = supervisor_with(fast_config(instances=2, daemon="max_boot_failures = 1000").replace(
        "max_boot_failures = 3", ""))
    wait_for(lambda: [s for s, _, _ in _states(sup)] == ["READY"] * 2, DEADLINE, "two READY players")
    old = {pid for _, pid, _ in _states(sup)}
    sup.put_environment(_config(fast_config(instances=2, executable=EXITS_AT_START)).environments["demo"])
    wait_for(lambda: only_failures(sup) >= 3, DEADLINE, "three boot failures of the replaced player")
    states = _states(sup)
    assert [pid for s, pid, outdated in states if s == "READY" and outdated and pid in old], states


def only_failures(sup) -> int:
    with sup.lock:
        return max(p.boot_failures for p in sup.environments["demo"].players)


# -- 2. a reload restarts no player the restart policy let go, unless its environment changed ------------------
def test_an_unrelated_reload_does_not_restart_a_player_that_exited_under_restart_never(supervisor_with):
    ticks: list[float] = []

    def tick(now: float) -> None:
        ticks.append(now)

    text = fast_config(extra='restart = "never"') + f"""
    [environments.other]
    executable = ["{PLAYER}", "--static-frame"]
    platform = "headless"
    """
    sup = supervisor_with(text, on_tick=tick)
    pid = ready_pid(sup)
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: only_player(sup).state == State.EXITED, DEADLINE, "the player EXITED (restart = never)")
    assert pid_gone(pid)
    changed_other = _config(text.replace('platform = "headless"\n    """', 'platform = "headless"\n'
                                         '    instances = 2\n    """'))
    for apply in (lambda: sup.reload(_config(text)), lambda: sup.reload(changed_other),
                  lambda: sup.put_environment(_config(text).environments["demo"], source="file")):
        apply()
        assert only_player(sup).state == State.EXITED
        _ticks(ticks, 3, sup)
        assert only_player(sup).state == State.EXITED, "an unrelated reload restarted the player"
    # A changed environment does restart it (here: its restart policy).
    sup.reload(_config(text.replace('restart = "never"', 'restart = "always"')))
    wait_for(lambda: only_player(sup).state == State.READY, DEADLINE, "the player restarted by the change")


def test_a_reload_still_gives_a_failed_player_a_new_chance(supervisor_with):
    text = fast_config(executable=EXITS_AT_START)
    sup = supervisor_with(text)
    wait_for(lambda: only_player(sup) is not None and only_player(sup).state == State.FAILED, DEADLINE, "FAILED")
    restarts = only_player(sup).restarts
    sup.reload(_config(text))
    wait_for(lambda: only_player(sup).restarts > restarts or only_player(sup).state != State.FAILED, DEADLINE,
             "the failed player retried")


# -- 3. an HTTP player's pump is not waited for with the supervisor's lock held ---------------------------------
def test_ending_an_http_player_does_not_wait_for_its_pump_with_the_lock_held(supervisor_with):
    hp = _HttpPlayers("127.0.0.1:0", 4, "t" * 32)
    hp.start()
    try:
        sup = supervisor_with(fast_config(extra='transport = "http"', daemon='http = "127.0.0.1:0"'), http=hp)
        hp.supervisor = sup
        pid = ready_pid(sup)
        with sup.lock:
            pump = hp._pumps[id(only_player(sup))]
        # A pump slow to end (its thread still finishing when the supervisor closes the player's resources).
        entered, go = threading.Event(), threading.Event()
        on_done = pump.on_done

        def slow_on_done(error):
            entered.set()
            go.wait(DEADLINE)
            on_done(error)

        pump.on_done = slow_on_done
        lease, _answer = sup.acquire("demo", os.getpid(), DEADLINE)
        sup.release(lease.id, clean=False)  # recycled: the player is stopped, its pump ended
        try:
            assert entered.wait(DEADLINE), "the pump did not end"
            wait_for(pump._stop.is_set, DEADLINE, "the supervisor to stop the pump")
            answered = threading.Event()
            threading.Thread(target=lambda: (sup.describe(), answered.set()), daemon=True).start()
            assert answered.wait(ANSWER_BOUND), "a status request waited for the pump's thread"
        finally:
            go.set()
        wait_for(lambda: only_player(sup).state == State.READY and only_player(sup).pid != pid, DEADLINE,
                 "the recycled player READY")
        sup.request_stop()
        (loop,) = [t for t in threading.enumerate() if t.name == "renderd-supervisor-test"]
        loop.join(DEADLINE)
        assert not loop.is_alive()
    finally:
        hp.stop()
    assert not [t for t in threading.enumerate() if t.name.startswith("renderd-pump-")], "a pump thread left"


def test_a_sighup_to_an_executable_that_exits_at_start_leaves_the_daemon_serving(daemon):
    d = daemon(fast_config(instances=3))
    old = {p["pid"] for p in d.players()}
    with open(d.config_path, "w") as f:
        f.write(textwrap.dedent(fast_config(instances=3, executable=EXITS_AT_START)))
    d.signal(signal.SIGHUP)
    wait_for(lambda: "rollout of the new configuration stopped: demo[0] of it FAILED" in d.output(), DEADLINE,
             "the rollout stopped")
    players = d.players()
    assert [p["state"] for p in players] == ["FAILED", "READY", "READY"], players
    assert {p["pid"] for p in players[1:]} <= old and all(p["outdated"] for p in players[1:]), players
    lease = d.client.lease("demo", timeout=0)  # no waiting: an old player is there
    try:
        assert lease["pid"] in old, lease
    finally:
        d.client.release(lease["lease"])
