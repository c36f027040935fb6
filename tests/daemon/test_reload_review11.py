"""How configuration changes reach running players: keys a running player never sees (``start_timeout``, the daemon's
``stop_grace``) change without replacing any player and are used from then on. Real players, real FIFOs: an
in-process Supervisor (tests/daemon/test_robustness.py's ``supervisor_with``) where the loop's passes are counted,
a real ``renderd start`` where the reload and the API are."""

from __future__ import annotations

import dataclasses
import os
import signal
import textwrap
import time
from pathlib import Path

import pytest

from renderd.config import EnvironmentConfig, loads, settings
from renderd.daemon.supervisor import State
from tests.daemon.conftest import PLAYER, fast_config, wait_for
from tests.daemon.supervisor_helpers import DEADLINE, only_player, ready_pid
from tests.daemon.test_robustness import supervisor_with  # noqa: F401  (a fixture)
from tests.helpers.leaks import pid_gone

#: A player that takes its time to stop: its shell ignores SIGTERM (the player itself exits on it) and lives on
#: until the SIGKILL that ends ``stop_grace``.
SLOW_TO_STOP = f'["/bin/sh", "-c", "trap \\"\\" TERM; {PLAYER} --static-frame; exec sleep 60"]'


def _config(text: str):
    return loads(textwrap.dedent(text))


def _demo(text: str) -> EnvironmentConfig:
    return _config(text).environments["demo"]


def _players(sup, name: str = "demo") -> list[tuple[int, str, int | None]]:
    with sup.lock:
        env = sup.environments.get(name)
        return [] if env is None else [(p.index, p.state.value, p.pid) for p in env.players]


def _ticks(ticks: list[float], n: int, sup) -> None:
    """Wait until the supervisor's loop has run ``n`` more passes (woken at each poll)."""
    start = len(ticks)

    def passed() -> bool:
        sup.wake()
        return len(ticks) >= start + n

    wait_for(passed, DEADLINE, f"{n} passes of the supervisor's loop")


def _counting():
    ticks: list[float] = []

    def tick(now: float) -> None:
        ticks.append(now)

    return ticks, tick


# -- 1. keys a running player never sees ------------------------------------------------------------------------
def test_only_the_keys_a_player_is_started_with_need_new_players():
    from renderd.config import IN_PLACE_KEYS

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
    assert answer["players"][0]["outdated"] is False, answer


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
