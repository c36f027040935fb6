"""The daemon under odd-but-legal use: more waiting clients than control threads, and the like."""

from __future__ import annotations

import os
import threading
import time

from renderd.daemon.client import ControlClient
from renderd.errors import RenderdError
from tests.daemon.conftest import fast_config, wait_for

DEADLINE = 20.0


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_lease_requests_waiting_for_a_player_never_hold_up_a_release(daemon):
    """Every control thread taken by a lease request that waits for a player (more clients than players,
    as in a training run with many workers) must not keep the holder's release, or a status request, in
    the queue: the release is what lets the waiting requests be served."""
    d = daemon(fast_config(daemon="api_threads = 2"), args=("--log-level", "debug"))
    baseline = _threads(d.pid)
    held = d.client.lease("demo", timeout=5)
    results: dict[int, object] = {}

    def wait_for_lease(i: int) -> None:
        try:
            results[i] = ControlClient(d.socket).lease("demo", timeout=4)
        except RenderdError as exc:
            results[i] = exc

    waiters = [threading.Thread(target=wait_for_lease, args=(i,)) for i in range(3)]
    for t in waiters:
        t.start()
    try:
        wait_for(lambda: d.output().count("waits for a player of demo") >= 2, DEADLINE, "waiting lease requests")
        quick = ControlClient(d.socket, timeout=2.0)
        started = time.monotonic()
        assert quick.health()["status"] == "ready"
        assert quick.release(held["lease"]) == {"released": True, "recycled": False}
        assert time.monotonic() - started < 2.0
        # Each release hands the player to the next waiting request, in turn.
        for _ in range(3):
            got = wait_for(lambda: [r for r in results.values() if isinstance(r, dict) and "done" not in r],
                           DEADLINE, "a waiting request to get the player")
            for answer in got:
                assert quick.release(answer["lease"]) == {"released": True, "recycled": False}
                answer["done"] = True
    finally:
        for t in waiters:
            t.join(DEADLINE)
    assert len(results) == 3 and all(isinstance(r, dict) for r in results.values()), results
    # The threads the waiting requests had go away again.
    wait_for(lambda: _threads(d.pid) <= baseline, DEADLINE, f"the daemon back to {baseline} threads")
