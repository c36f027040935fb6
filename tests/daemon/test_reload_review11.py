"""How configuration changes reach running players: keys a running player never sees (``start_timeout``, the daemon's
``stop_grace``) change without replacing any player and are used from then on; an environment declared again while
its removal is under way (DELETE, a reload that dropped it) gets players of its own, and none of the removed
declaration serves it; a changed backoff re-times the restarts being waited for. Real players, real FIFOs: an
in-process Supervisor (tests/daemon/conftest.py's ``supervisor_with``) where the loop's passes are counted,
a real ``renderd start`` where the reload and the API are."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import textwrap
import threading
import time
from pathlib import Path

import pytest

from renderd.config import IN_PLACE_KEYS, EnvironmentConfig, settings
from renderd.daemon.client import connect
from renderd.daemon.leases import LeaseEnd
from renderd.daemon.supervisor import State
from renderd.errors import LeaseError, PlayerCrashed
from tests.daemon.conftest import PLAYER, fast_config, wait_for
from tests.daemon.supervisor_helpers import DEADLINE, only_player, ready_pid
from tests.helpers.leaks import pid_gone
from tests.helpers.reload_review14e import SLOW_TO_STOP, _config, _counting, _demo, _ticks


def _players(sup, name: str = "demo") -> list[tuple[int, str, int | None]]:
    with sup.lock:
        env = sup.environments.get(name)
        return [] if env is None else [(p.index, p.state.value, p.pid) for p in env.players]


# -- 1. keys a running player never sees ------------------------------------------------------------------------
def test_only_the_keys_a_player_is_started_with_need_new_players():
    base = EnvironmentConfig(name="demo", executable="/bin/true")
    for key, value in [("start_timeout", 1.0), ("step_timeout", 1.0), ("health_interval", 1.0), ("instances", 2),
                       ("restart", "never")]:
        assert not dataclasses.replace(base, **{key: value}).replaces_players(base), key
    process_keys = {f.name for f in settings(EnvironmentConfig)} - IN_PLACE_KEYS
    assert process_keys == {"executable", "width", "height", "quality", "platform", "x_display", "gpus", "transport",
                            "env"}


@pytest.mark.parametrize("how", ["put", "reload"])
def test_a_new_start_timeout_replaces_no_ready_player(supervisor_with, how):
    ticks, tick = _counting()
    text = fast_config(instances=2)
    sup = supervisor_with(text, on_tick=tick)
    wait_for(lambda: [s for _, s, _ in _players(sup)] == ["READY"] * 2, DEADLINE, "two READY players")
    before = _players(sup)
    changed = text.replace("start_timeout = 20.0", "start_timeout = 45.0")
    answer = None
    if how == "put":
        answer = sup.put_environment(_demo(changed), source="file")
    else:
        assert sup.reload(_config(changed))
    _ticks(ticks, 5, sup)
    assert _players(sup) == before, "the players were replaced for a key they never see"
    if answer is not None:
        assert [p["outdated"] for p in answer["players"]] == [False, False], answer
        assert answer["declared"] == "changed"
    with sup.lock:
        assert all(p.config.start_timeout == 45.0 for p in sup.environments["demo"].players)
    # A key the player is started with still replaces it.
    sup.put_environment(_demo(changed.replace("step_timeout = 20.0", "step_timeout = 20.0\n    width = 64")))
    wait_for(lambda: not {pid for _, _, pid in before} & {pid for _, _, pid in _players(sup)}, DEADLINE,
             "the players replaced by a new width")


def test_a_player_starting_gets_a_raised_start_timeout_from_its_start(supervisor_with, caplog):
    # A build that needs 1.5 s to send its first frame, declared with 1 s: raised while it starts, it comes up as it
    # is (the same process, no boot failure) instead of failing, or being replaced once up.
    text = fast_config(executable=f'["{PLAYER}", "--static-frame", "--start-delay", "1.5"]').replace(
        "start_timeout = 20.0", "start_timeout = 1.0")
    sup = supervisor_with(text)
    wait_for(lambda: [s for _, s, _ in _players(sup)] == ["STARTING"], DEADLINE, "the player STARTING")
    (_index, _state, pid), = _players(sup)
    answer = sup.put_environment(_demo(text.replace("start_timeout = 1.0", "start_timeout = 20.0")), source="file")
    assert ready_pid(sup) == pid
    p = only_player(sup)
    assert (p.boot_failures, p.restarts, p.spawns) == (0, 0, 1)
    assert "failed to boot" not in caplog.text
    assert answer["declared"] == "changed" and answer["players"][0]["outdated"] is False, answer


def test_a_lowered_start_timeout_ends_a_start_that_took_longer_already(supervisor_with):
    # Counted from the player's start: one starting for longer than the new value has failed to boot, at once.
    text = fast_config(executable=f'["{PLAYER}", "--static-frame", "--start-delay", "60"]').replace(
        "max_boot_failures = 3", "max_boot_failures = 1")
    sup = supervisor_with(text)
    wait_for(lambda: [s for _, s, _ in _players(sup)] == ["STARTING"], DEADLINE, "the player STARTING")
    (_index, _state, pid), = _players(sup)
    started = only_player(sup).started_at
    wait_for(lambda: time.monotonic() - started > 0.3, DEADLINE, "the player starting for longer than 0.2 s")
    asked = time.monotonic()
    sup.put_environment(_demo(text.replace("start_timeout = 20.0", "start_timeout = 0.2")), source="file")
    wait_for(lambda: only_player(sup).state == State.FAILED, DEADLINE, "the start to fail")
    assert time.monotonic() - asked < 10.0
    assert "no first frame within start_timeout (0.2 s)" in only_player(sup).reason, only_player(sup).reason
    assert pid_gone(pid)


def test_a_reload_of_stop_grace_replaces_no_player_and_the_next_stop_uses_it(supervisor_with):
    ticks, tick = _counting()
    text = fast_config(instances=2, executable=SLOW_TO_STOP).replace("stop_grace = 2.0", "stop_grace = 60.0")
    sup = supervisor_with(text, on_tick=tick)
    wait_for(lambda: [s for _, s, _ in _players(sup)] == ["READY"] * 2, DEADLINE, "two READY players")
    before = _players(sup)
    assert sup.reload(_config(text.replace("stop_grace = 60.0", "stop_grace = 0.5")))
    _ticks(ticks, 5, sup)
    assert _players(sup) == before, "a new stop_grace replaced the players"
    # A stop from now on waits 0.5 s for the process that ignores SIGTERM, not 60.
    lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)
    began = time.monotonic()
    sup.release(lease.id, clean=False)
    wait_for(lambda: pid_gone(answer["pid"]), 10.0, "the recycled player gone after the new stop_grace")
    assert time.monotonic() - began < 10.0


def test_a_reload_of_start_timeout_keeps_the_players_and_says_so(daemon):
    d = daemon(fast_config(instances=2))
    before = sorted(p["pid"] for p in d.players())
    Path(d.config_path).write_text(Path(d.config_path).read_text().replace("start_timeout = 20.0",
                                                                           "start_timeout = 45.0"))
    d.signal(signal.SIGHUP)
    wait_for(lambda: "reload: environments.demo.start_timeout 20.0 -> 45.0 (players kept" in d.output(), DEADLINE,
             "the reload's log line")
    # Passes of the loop go by while another environment comes up; the players of demo stay as they were.
    status, _ = d.client.request("PUT", "/v1/environments/other",
                                 {"executable": [PLAYER, "--static-frame"], "platform": "headless"})
    assert status == 201
    d.wait_players(lambda ps: [p["state"] for p in ps] == ["READY"], name="other", what="the other player READY")
    players = d.players()
    assert sorted(p["pid"] for p in players) == before and [p["state"] for p in players] == ["READY"] * 2
    assert "replacing player" not in d.output()
    assert d.client.get("/v1/environments/demo")["config"]["start_timeout"] == 45.0


# -- 2. an environment declared again while its removal is under way -------------------------------------------------
@pytest.mark.parametrize("same", [True, False], ids=["same-configuration", "new-configuration"])
def test_a_put_that_comes_before_the_loop_took_up_a_delete_ends_its_leases_and_its_players(supervisor_with, same):
    text = fast_config(instances=2)
    sup = supervisor_with(text)
    wait_for(lambda: [s for _, s, _ in _players(sup)] == ["READY"] * 2, DEADLINE, "two READY players")
    old = {pid for _, _, pid in _players(sup)}
    lease, _answer = sup.acquire("demo", os.getpid(), DEADLINE)
    new = _demo(text if same else text.replace("step_timeout = 20.0", "step_timeout = 20.0\n    width = 64"))
    with sup.lock:  # (the loop cannot run between the two: the DELETE is not taken up before the PUT)
        sup.delete_environment("demo")
        answer = sup.put_environment(new)
    # The DELETE's leases end, as its answer said they would.
    assert lease.ended == LeaseEnd.STOPPED and lease.ended_reason == "environment removed"
    assert sup.lease_status(lease.id)["ended"] == "stopped"
    assert [(p["state"], p["retiring"]) for p in answer["players"]] == [("STOPPING", True)] * 2, answer
    assert answer["declared"] == "redeclared" and not answer["removing"] and answer["wanted"] == 2, answer

    def replaced():
        players = _players(sup)
        return (len(players) == 2 and all(s == "READY" for _, s, _ in players)
                and not old & {pid for _, _, pid in players})

    wait_for(replaced, DEADLINE, "two new players of the new declaration")
    assert all(pid_gone(pid) for pid in old)
    with sup.lock:
        assert all(p.config == new and not p.retire for p in sup.environments["demo"].players)
    lease2, answer2 = sup.acquire("demo", os.getpid(), DEADLINE)
    sup.release(lease2.id)
    assert answer2["pid"] not in old and answer2["width"] == new.width


def test_a_put_while_a_delete_stops_the_players_gets_players_of_its_own(daemon):
    d = daemon(fast_config(instances=2, executable=SLOW_TO_STOP).replace("stop_grace = 2.0", "stop_grace = 30.0"))
    session = connect("demo", socket=d.socket, timeout=DEADLINE)
    try:
        session.step("Pass")
        old = {p["pid"] for p in d.players()}
        assert d.client.request("DELETE", "/v1/environments/demo")[0] == 202
        d.wait_players(lambda ps: [p["state"] for p in ps] == ["STOPPING"] * 2, what="the players stopping")
        body = {"executable": [PLAYER, "--static-frame"], "platform": "headless", "instances": 2, "width": 64,
                "height": 48}
        status, answer = d.client.request("PUT", "/v1/environments/demo", body)
        assert status == 201 and answer["declared"] == "redeclared", (status, answer)
        assert not answer["removing"] and answer["wanted"] == 2
        assert {p["pid"] for p in answer["players"] if p["retiring"]} == old, answer
        # Leases go to players of the new declaration only, from the start (the old ones are still stopping).
        lease = d.client.lease("demo", timeout=DEADLINE)
        try:
            assert lease["pid"] not in old and (lease["width"], lease["height"]) == (64, 48), lease
        finally:
            d.client.release(lease["lease"])
        with pytest.raises(PlayerCrashed):  # (its player was stopped: the DELETE ended the lease)
            session.step("Pass")
    finally:
        session.close()
    for pid in old:  # (rather than wait out their stop_grace)
        os.kill(pid, signal.SIGKILL)
    d.wait_players(lambda ps: len(ps) == 2 and all(p["state"] == "READY" and p["width"] == 64 for p in ps),
                   what="only the new players left")
    assert all(pid_gone(pid) for pid in old)
    metrics = d.client.request("GET", "/metrics")[1]
    assert 'renderd_players_wanted{environment="demo"} 2.0' in metrics
    assert 'renderd_players{environment="demo",state="READY"} 2.0' in metrics
    assert 'renderd_players{environment="demo",state="STOPPING"} 0.0' in metrics
    assert 'renderd_lease_ends_total{environment="demo",how="stopped"} 1.0' in metrics
    assert "declared again while being removed" in d.output()


def test_a_lease_request_waiting_through_a_removal_is_refused_even_if_the_environment_is_back(supervisor_with):
    text = fast_config()
    sup = supervisor_with(text)
    ready_pid(sup)
    held, _answer = sup.acquire("demo", os.getpid(), DEADLINE)
    outcome: list[BaseException | tuple] = []

    def wait_for_a_player() -> None:
        try:
            outcome.append(sup.acquire("demo", os.getpid(), DEADLINE))
        except BaseException as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=wait_for_a_player)
    waiter.start()
    wait_for(lambda: sup.describe("demo")["waiting_clients"] == 1, DEADLINE, "the request to wait")
    with sup.lock:
        sup.delete_environment("demo")
        sup.put_environment(_demo(text))
    waiter.join(DEADLINE)
    assert not waiter.is_alive()
    (result,) = outcome
    assert isinstance(result, LeaseError) and "was removed" in str(result), result
    assert held.ended == LeaseEnd.STOPPED


def test_a_put_drops_the_failed_and_exited_slots_of_the_removed_declaration(supervisor_with):
    text = fast_config(instances=2, executable='["/bin/sh", "-c", "exit 3"]').replace(
        "max_boot_failures = 3", "max_boot_failures = 1")
    sup = supervisor_with(text)
    wait_for(lambda: [s for _, s, _ in _players(sup)] == ["FAILED"] * 2, DEADLINE, "two FAILED players")
    good = fast_config(instances=1)
    with sup.lock:
        sup.delete_environment("demo")
        answer = sup.put_environment(_demo(good))
    assert answer["players"] == [], answer
    assert answer["declared"] == "redeclared"
    wait_for(lambda: [s for _, s, _ in _players(sup)] == ["READY"], DEADLINE, "one player of the new declaration")


def test_a_reload_that_brings_back_an_environment_it_dropped_says_so(daemon):
    text = fast_config()
    slow = text.replace("stop_grace = 2.0", "stop_grace = 30.0").replace(f'["{PLAYER}", "--static-frame"]',
                                                                        SLOW_TO_STOP)
    d = daemon(slow)
    old = d.players()[0]["pid"]
    other = f"""
    [environments.other]
    executable = ["{PLAYER}", "--static-frame"]
    platform = "headless"
    instances = 0
    """
    Path(d.config_path).write_text(textwrap.dedent(slow.split("[environments.demo]")[0] + other))
    d.signal(signal.SIGHUP)
    d.wait_players(lambda ps: [p["state"] for p in ps] == ["STOPPING"], what="demo's player stopping")
    Path(d.config_path).write_text(textwrap.dedent(text + other))  # (back, with a player that stops at once)
    d.signal(signal.SIGHUP)
    wait_for(lambda: "environments.demo declared again while being removed (1 new instance(s)" in d.output(),
             DEADLINE, "the second reload's log line")
    os.kill(old, signal.SIGKILL)  # (rather than wait out its stop_grace)
    d.wait_players(lambda ps: len(ps) == 1 and ps[0]["state"] == "READY" and ps[0]["pid"] != old,
                   what="a new player of demo")
    env = d.client.get("/v1/environments/demo")
    assert env["source"] == "file" and not env["removing"]
    assert pid_gone(old)


# -- 3. the backoff of a restart being waited for ---------------------------------------------------------------
def test_a_reload_of_the_backoff_retimes_a_restart_being_waited_for(supervisor_with, caplog):
    # A player that crashed waits backoff_initial (30 s) before its restart; a reload that lowers the backoff gives
    # that wait the new length, from when it began: the player is back at once, not 30 s later.
    caplog.set_level(logging.INFO, logger="renderd.daemon.supervisor")
    text = fast_config().replace("backoff_initial = 0.05", "backoff_initial = 30.0").replace(
        "backoff_max = 0.2", "backoff_max = 60.0")
    sup = supervisor_with(text)
    pid = ready_pid(sup)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: only_player(sup).state == State.BACKOFF, DEADLINE, "the crashed player waiting to restart")
    assert only_player(sup).deadline - time.monotonic() > 20.0
    asked = time.monotonic()
    assert sup.reload(_config(fast_config()))
    again = ready_pid(sup)
    assert again != pid and time.monotonic() - asked < 10.0
    assert "s (the backoff changed)" in caplog.text
