"""Configuration changes on an in-process Supervisor: parsed configurations, a player slow to stop, and the
supervisor loop's passes counted (an ``on_tick`` that records them)."""

from __future__ import annotations

import textwrap

from renderd.config import EnvironmentConfig, loads
from tests.daemon.conftest import PLAYER, wait_for
from tests.daemon.supervisor_helpers import DEADLINE

#: A player that takes its time to stop: its shell ignores SIGTERM (the player itself exits on it) and lives on
#: until the SIGKILL that ends ``stop_grace``.
SLOW_TO_STOP = f'["/bin/sh", "-c", "trap \\"\\" TERM; {PLAYER} --static-frame; exec sleep 60"]'


def _config(text: str):
    return loads(textwrap.dedent(text))


def _demo(text: str) -> EnvironmentConfig:
    return _config(text).environments["demo"]


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
