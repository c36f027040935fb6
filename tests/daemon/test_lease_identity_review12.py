"""A lease answer says when its player started, so a client's pidfd, opened by the pid, is checked to pin it."""

from __future__ import annotations

import renderd
from tests.daemon.conftest import fast_config


def _start_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rpartition(b")")[2].split()[19])  # (field 22, starttime)


def test_a_lease_answer_carries_the_players_start_time(daemon):
    # Without it, a client could only check that the process its pidfd pins started before the lease was
    # answered: a pid given to another process between the answer and the client's pidfd went unnoticed.
    d = daemon(fast_config())
    answer = d.client.lease("demo", timeout=20)
    try:
        assert answer["pid_start"] == _start_ticks(answer["pid"])
    finally:
        d.client.release(answer["lease"])


def test_a_session_from_connect_watches_the_leased_player(daemon):
    # connect() hands the start time on: the watch it makes pins the player (equal start times), and steps go on.
    d = daemon(fast_config())
    with renderd.connect("demo", socket=d.socket, timeout=20) as session:
        assert session.step("Pass").metadata["lastActionSuccess"]
        (player,) = d.players()
        assert session.pid == player["pid"]
