"""A configuration whose players never come up, replaced by a PUT or reload that fixes it: the players still starting
on the previous configuration are replaced at once (one at a time), not after their start_timeout."""

from __future__ import annotations

import textwrap

from renderd.config import loads, parse_environment
from renderd.daemon.supervisor import State
from tests.daemon.conftest import PLAYER, wait_for

#: Far below the hanging configuration's start_timeout (300 s), far above what the replacement takes (a second).
DEADLINE = 60.0

HANGING = f"""
[daemon]
backoff_initial = 0.05
backoff_max = 0.2
stop_grace = 2.0
max_boot_failures = 3

[environments.demo]
executable = ["{PLAYER}", "--static-frame", "--fault-at-start", "hang"]
platform = "headless"
instances = 2
start_timeout = 300.0
"""

FIXED = {"executable": [PLAYER, "--static-frame"], "platform": "headless", "instances": 2, "start_timeout": 300.0}


def _states(sup) -> list[tuple[str, bool, int | None]]:
    with sup.lock:
        return [(p.state.value, p.outdated, p.pid) for p in sup.environments["demo"].players]


def _starting(sup) -> list[int]:
    states = _states(sup)
    if len(states) == 2 and all(s == "STARTING" for s, _, _ in states):
        return [pid for _, _, pid in states]
    return []


def _all_ready_on_new(sup) -> bool:
    with sup.lock:
        players = sup.environments["demo"].players
        return len(players) == 2 and all(
            p.state == State.READY and not p.outdated and not p.retire and p.boot_failures == 0 for p in players)


def test_put_replaces_players_still_starting_on_the_previous_configuration(supervisor_with):
    sup = supervisor_with(HANGING)
    hung = wait_for(lambda: _starting(sup), DEADLINE, "both hanging players STARTING")
    answer = sup.put_environment(parse_environment("demo", FIXED, source="PUT /v1/environments/demo"))
    assert answer["declared"] == "changed"
    wait_for(lambda: _all_ready_on_new(sup), DEADLINE,
             "both players READY on the fixed configuration (the hanging ones replaced before their start_timeout)")
    assert not set(hung) & {pid for _, _, pid in _states(sup)}


def test_reload_replaces_players_still_starting_on_the_previous_configuration(supervisor_with):
    sup = supervisor_with(HANGING)
    wait_for(lambda: _starting(sup), DEADLINE, "both hanging players STARTING")
    fixed = HANGING.replace(', "--fault-at-start", "hang"', "")
    assert sup.reload(loads(textwrap.dedent(fixed)))
    wait_for(lambda: _all_ready_on_new(sup), DEADLINE, "both players READY on the reloaded configuration")
