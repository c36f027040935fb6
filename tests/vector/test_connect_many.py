"""connect_many against a real daemon: leases in parallel, a crashed player replaced by a new lease, leases
released at close, and a clear error when the daemon has too few players."""

from __future__ import annotations

import pytest

import renderd
from renderd.errors import LeaseError, PlayerCrashed
from tests.daemon.conftest import daemon, fast_config  # noqa: F401 - daemon is a fixture

FAULT = "RenderdFault"


def test_connect_many_replaces_a_crashed_lease(daemon):
    d = daemon(fast_config(instances=2))
    with renderd.connect_many("demo", 2, replace_on_crash=True, socket=d.socket, timeout=15) as vs:
        first_pids = vs.pids
        assert sorted(first_pids) == sorted(p["pid"] for p in d.players())
        assert all(s.last_event is None for s in vs.sessions)  # leased players: no event until a step
        obs = vs.reset(scene="FloorPlan2").observations
        assert [e.metadata["sceneName"] for e in obs] == ["FloorPlan2", "FloorPlan2"]
        obs, _, dones, infos = vs.step([{"action": FAULT, "fault": "segfault"}, "MoveAhead"], wait_resets=True)
        assert dones == [True, False] and isinstance(infos[0]["error"], PlayerCrashed)
        # A new lease (the daemon restarted the crashed player), reset to the slot's scene.
        assert infos[0]["replaced"] and infos[0]["reset_complete"]
        assert obs[0].metadata["sceneName"] == "FloorPlan2"
        assert vs.pids[0] != first_pids[0] and vs.pids[1] == first_pids[1]
        assert vs.step(["Pass", "Pass"]).observations[0].metadata["lastAction"] == "Pass"
    # Released: both players are READY for the next client.
    d.wait_players(lambda ps: len(ps) == 2 and all(p["state"] == "READY" for p in ps), what="released players")


def test_connect_many_without_enough_players_names_the_slot(daemon):
    d = daemon(fast_config(instances=2))
    with pytest.raises(LeaseError) as info:
        renderd.connect_many("demo", 3, socket=d.socket, timeout=1.0)
    # The three leases are requested concurrently: which slot goes without is up to the daemon's order.
    assert len(info.value.slots) == 1 and info.value.slots[0] in (0, 1, 2)
    slot = info.value.slots[0]
    assert "1 of 3 players could not be leased" in str(info.value) and f"slot {slot}" in str(info.value)
    # The two leases that were granted were released again.
    d.wait_players(lambda ps: all(p["state"] == "READY" for p in ps), what="released players")
