"""Leases granted at the same moment as the loop handles something of the same player: what an idle player
wrote (or the end of file it gave) before a lease request took it must never reach that request's client."""

from __future__ import annotations

import os

from renderd.daemon.supervisor import State, Supervisor, _pending_bytes
from tests.daemon.conftest import fast_config, wait_for
from tests.daemon.test_robustness import supervisor_with  # noqa: F401  (a fixture)

DEADLINE = 20.0


def _player(sup: Supervisor):
    with sup.lock:
        players = sup.environments["demo"].players
        assert len(players) <= 1, players
        return players[0] if players else None


def _ready_pid(sup: Supervisor) -> int:
    def ready() -> int | None:
        with sup.lock:
            p = _player(sup)
            return p.pid if p is not None and p.state == State.READY and p.holder.fileno() in sup._registered else None

    return wait_for(ready, DEADLINE, "the demo player READY and watched")


def test_a_lease_request_never_takes_an_idle_player_whose_unasked_output_the_loop_has_not_read(supervisor_with):
    sup = supervisor_with(fast_config())
    pid = _ready_pid(sup)
    lease, _ = sup.acquire("demo", os.getpid(), DEADLINE)
    sup.release(lease.id)
    assert _ready_pid(sup) == pid
    with sup.lock:  # the loop cannot handle the bytes before the request below looks at the player
        p = _player(sup)
        fd = os.open(p.pair.server_path, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(fd, b"an answer nobody waited for")
        finally:
            os.close(fd)
        lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)
        try:
            # The old player is recycled first; the lease is of a new one, whose pipe holds nothing.
            assert answer["pid"] != pid
            assert _pending_bytes(lease.player.holder.fileno()) == 0
        finally:
            sup.release(lease.id)
