"""`renderd status` shows a player that waits for its environment's platform selection as starting, not as
failed (BACKOFF); the API's player JSON says it with `awaiting_platform`. An in-process supervisor, real players."""

from __future__ import annotations

import threading

from renderd.daemon.commands import format_status
from renderd.daemon.service import _Platforms
from renderd.daemon.supervisor import State
from tests.daemon.conftest import wait_for
from tests.daemon.supervisor_helpers import DEADLINE, only_player, ready_pid

WAITING = "waiting for its platform to be selected"


class GatedPlatforms:
    """Real platform selection, held until ``gate`` opens (a slow probe of the machine)."""

    def __init__(self) -> None:
        self.real = _Platforms()
        self.gate = threading.Event()
        self.asked = threading.Event()

    def select(self, config):
        self.asked.set()
        self.gate.wait(DEADLINE)
        return self.real.select(config)


def test_a_player_waiting_for_its_platform_is_shown_starting_not_backoff(supervisor_with):
    platforms = GatedPlatforms()
    sup = supervisor_with(platforms=platforms)
    try:
        def waiting() -> bool:
            with sup.lock:
                p = only_player(sup)
                return p is not None and p.state == State.BACKOFF and p.awaiting_platform

        wait_for(lambda: platforms.asked.is_set() and waiting(), DEADLINE, "the player waiting for its platform")
        [player] = sup.describe("demo")["players"]
        assert player["state"] == "BACKOFF" and player["reason"] == WAITING  # (the JSON's fields kept as they were)
        assert player["awaiting_platform"] is True
        table = format_status(sup.health(), sup.describe())
        row = next(line for line in table.splitlines() if line.startswith("demo "))
        assert "STARTING (awaiting platform)" in row and "BACKOFF" not in table, table
        assert WAITING not in table, table  # (no note: nothing failed)
    finally:
        platforms.gate.set()
    ready_pid(sup)
    [player] = sup.describe("demo")["players"]
    assert player["awaiting_platform"] is False and player["state"] == "READY"


def test_a_waiting_player_after_boot_failures_is_shown_starting_with_its_last_failure():
    health = {"version": "0.1.0", "pid": 1, "status": "starting", "uptime": 3.0}
    player = {"index": 0, "state": "BACKOFF", "pid": None, "uptime": None, "restarts": 1, "boot_failures": 1,
              "reason": "exited before readiness: exit code 3", "lease": None, "awaiting_platform": True}
    table = format_status(health, [{"name": "demo", "wanted": 1, "players": [player]}])
    assert "STARTING (awaiting platform)" in table and "BACKOFF" not in table, table
    assert "demo[0] STARTING (awaiting platform) after 1 boot failure(s), the last: exited before readiness" in table
    # A daemon without the field (another version): shown as it says.
    del player["awaiting_platform"]
    assert "BACKOFF" in format_status(health, [{"name": "demo", "wanted": 1, "players": [player]}])
