"""Helpers shared by the in-process Supervisor tests of the one-player ``demo`` environment
(``supervisor_with`` from tests/daemon/conftest.py)."""

from __future__ import annotations

from renderd.daemon.supervisor import Player, State, Supervisor
from tests.daemon.conftest import wait_for

DEADLINE = 20.0


def only_player(sup: Supervisor) -> Player | None:
    """The demo environment's player slot (None before it has one); fails if it has more than one."""
    with sup.lock:
        players = sup.environments["demo"].players
        assert len(players) <= 1, players
        return players[0] if players else None


def ready_pid(sup: Supervisor, *, watched: bool = False) -> int:
    """The pid of the demo player once it is READY (and, with ``watched``, once the loop watches its idle
    server.pipe again); fails after DEADLINE."""

    def ready() -> int | None:
        with sup.lock:
            p = only_player(sup)
            if p is None or p.state != State.READY:
                return None
            if watched and p.holder.fileno() not in sup._registered:
                return None
            return p.pid

    return wait_for(ready, DEADLINE, "the demo player READY and watched" if watched else "the demo player READY")


def send_slow_action(client_pipe: str, seconds: float, sequence_id: int) -> None:
    """Write, as a client driving the pipes by hand, an action the player answers ``seconds`` later, and wait
    until the player has read it (client.pipe empty); its answer is left unread."""
    import os

    from renderd.daemon.supervisor import _pending_bytes
    from renderd.protocol import encode_action

    wfd = os.open(client_pipe, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(wfd, b"".join(encode_action({"action": "RenderdFault", "fault": "sleep", "seconds": seconds,
                                              "sequenceId": sequence_id})))
        wait_for(lambda: _pending_bytes(wfd) == 0, DEADLINE, "the player to read the action")
    finally:
        os.close(wfd)
