"""The supervisor when changes overlap: a scale-down undone while the players it retired are still leased; a
graceful stop whose player stops end as the loop ends; what a reload that scales an environment says.
Real players, real FIFOs, an in-process Supervisor (tests/daemon/conftest.py's ``supervisor_with``)."""

from __future__ import annotations

import json
import logging
import os
import signal
import textwrap
import threading
import time

from renderd.config import loads
from renderd.daemon.service import Daemon, _Platforms
from renderd.daemon.supervisor import State, Supervisor
from renderd.protocol import encode_action
from tests.daemon.conftest import PLAYER, fast_config, wait_for
from tests.daemon.supervisor_helpers import DEADLINE


def _demo(instances: int):
    return loads(textwrap.dedent(fast_config(instances=instances))).environments["demo"]


def _slots(sup) -> list[tuple[int, str, bool, int | None]]:
    with sup.lock:
        env = sup.environments["demo"]
        return [(p.index, p.state.value, p.retire, p.pid) for p in env.players]


def test_a_scale_down_undone_while_the_retired_player_is_leased_keeps_it(supervisor_with):
    # instances 2 -> 1 while both players are leased retires one of them (stopped when its lease ends); 1 -> 2
    # before that lease ends wants it again: it is kept, not stopped at its release while a third process is
    # started beside it (one player more than instances for as long as the lease lasts, "3/2 up").
    statuses: list[str] = []
    sup = supervisor_with(fast_config(instances=2), on_status=statuses.append)
    wait_for(lambda: [s for _, s, _, _ in _slots(sup)] == ["READY", "READY"], DEADLINE, "two READY players")
    first, _ = sup.acquire("demo", os.getpid(), DEADLINE)
    second, _ = sup.acquire("demo", os.getpid(), DEADLINE)
    pids = {first.player_pid, second.player_pid}
    sup.put_environment(_demo(1), source="file")
    wait_for(lambda: any(retire for _, _, retire, _ in _slots(sup)), DEADLINE, "a leased player retiring")
    sup.put_environment(_demo(2), source="file")
    wait_for(lambda: not any(retire for _, _, retire, _ in _slots(sup)) or len(_slots(sup)) > 2, DEADLINE,
             "the scale-up reconciled")
    slots = _slots(sup)
    assert [(i, s, r) for i, s, r, _ in slots] == [(0, "LEASED", False), (1, "LEASED", False)], slots
    assert {pid for *_, pid in slots} == pids
    sup.release(first.id)
    sup.release(second.id)
    wait_for(lambda: [s for _, s, _, _ in _slots(sup)] == ["READY", "READY"], DEADLINE, "both READY again")
    assert {pid for *_, pid in _slots(sup)} == pids  # the same processes: nothing stopped, nothing started
    assert not any("3/2" in s for s in statuses), statuses
    with sup.lock:
        assert all(p.state == State.READY for p in sup.environments["demo"].players)


def test_a_graceful_stop_does_not_say_it_waits_for_stops_that_are_done(supervisor_with, caplog, monkeypatch):
    # Each player is stopped on a thread of its own, which wakes the loop as its last act: the loop then finds
    # every player gone and ends while that thread is still finishing. That is no stop under way ("waiting for
    # the stop under way in renderd-stop-PID (at most 8.91 s)" on a plain `systemctl stop`).
    caplog.set_level(logging.INFO, logger="renderd.daemon.supervisor")
    sup = supervisor_with(fast_config(instances=1))
    wait_for(lambda: [s for _, s, _, _ in _slots(sup)] == ["READY"], DEADLINE, "a READY player")
    wake = sup.wake

    def wake_then_linger() -> None:
        wake()
        if threading.current_thread().name.startswith("renderd-stop-"):
            time.sleep(0.3)  # a stopper thread slow to end after its last act (a busy machine)

    monkeypatch.setattr(sup, "wake", wake_then_linger)
    sup.request_stop()
    (loop,) = [t for t in threading.enumerate() if t.name == "renderd-supervisor-test"]
    loop.join(DEADLINE)
    assert not loop.is_alive()
    assert not [r.message for r in caplog.records if "waiting for the stop under way" in r.message]
    assert not [t for t in threading.enumerate() if t.name.startswith("renderd-stop-")]  # (joined all the same)


def test_a_reload_that_changes_instances_says_players_are_added_or_retired(tmp_path):
    # A reload's line of changes said "(players kept; exited ones restart)" for instances 2 -> 1, while one of the
    # two is stopped (a leased one once its lease ends), and the same for 2 -> 3, where one is started.
    (tmp_path / "players").mkdir()
    (tmp_path / "logs").mkdir()
    running = loads(textwrap.dedent(fast_config(instances=2)))
    daemon = Daemon(running, config_path=str(tmp_path / "renderd.toml"))
    daemon.supervisor = Supervisor(running, players_dir=str(tmp_path / "players"), log_dir=str(tmp_path / "logs"),
                                   platforms=_Platforms())
    try:
        (fewer,) = daemon._reload_changes(loads(textwrap.dedent(fast_config(instances=1))))
        assert fewer.startswith("environments.demo.instances 2 -> 1 ("), fewer
        assert "1 player(s) retired" in fewer and "leased one when its lease ends" in fewer, fewer
        assert "players kept" not in fewer, fewer
        (more,) = daemon._reload_changes(loads(textwrap.dedent(fast_config(instances=3))))
        assert "1 player(s) added" in more and "players kept" not in more, more
        (both,) = daemon._reload_changes(loads(textwrap.dedent(fast_config(instances=1, extra="width = 200"))))
        assert "replaced one at a time" in both and "1 player(s) retired" in both, both
        (same,) = daemon._reload_changes(loads(textwrap.dedent(fast_config(instances=2, extra="step_timeout = 5.0"
                                                                           ).replace("step_timeout = 20.0", ""))))
        assert same.endswith("(players kept; exited ones restart)"), same
    finally:
        daemon.supervisor.close()


def test_a_retired_player_whose_lease_ends_uncleanly_is_retired_not_counted_as_recycled(supervisor_with, caplog):
    # A scale-down retired a leased player; its lease then ends uncleanly (the client's close after an error, or
    # its exit). The player is stopped and its slot removed, as after a clean release: no replacement is
    # started, so it is no recycle ("recycling demo[1]" and renderd_player_recycles_total said one was).
    caplog.set_level(logging.INFO, logger="renderd.daemon.supervisor")
    sup = supervisor_with(fast_config(instances=2))
    wait_for(lambda: [s for _, s, _, _ in _slots(sup)] == ["READY", "READY"], DEADLINE, "two READY players")
    leases = [sup.acquire("demo", os.getpid(), DEADLINE)[0] for _ in range(2)]
    sup.put_environment(_demo(1), source="file")
    wait_for(lambda: any(retire for _, _, retire, _ in _slots(sup)), DEADLINE, "a leased player retiring")
    (retired,) = [lease for lease in leases if lease.player.retire]
    sup.release(retired.id, clean=False)
    wait_for(lambda: len(_slots(sup)) == 1, DEADLINE, "the retired slot removed")
    assert sup.metrics.recycles.labels("demo")._value.get() == 0
    assert not [r.message for r in caplog.records if r.message.startswith("recycling")]
    assert any("retiring the player" in r.message for r in caplog.records)
    assert [(i, s) for i, s, _, _ in _slots(sup)] == [(1 - retired.player.index, "LEASED")]


def test_a_crash_under_a_lease_is_logged_with_the_last_line_of_the_players_log(supervisor_with, caplog):
    # docs/deploy.md: "A player's crash is logged with its exit code or signal and the last line of its log". A
    # crash while leased (the usual one) was logged as "demo[0] pid N exit code 3 while leased to client pid C":
    # the journal had no line of the player's log for it (only `renderd status` and the client did).
    caplog.set_level(logging.INFO, logger="renderd.daemon.supervisor")
    sup = supervisor_with(fast_config(instances=1))
    wait_for(lambda: [s for _, s, _, _ in _slots(sup)] == ["READY"], DEADLINE, "a READY player")
    lease, answer = sup.acquire("demo", os.getpid(), DEADLINE)
    fd = os.open(answer["client_pipe"], os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(fd, b"".join(encode_action({"action": "RenderdFault", "fault": "exit", "code": 3, "sequenceId": 1})))
    finally:
        os.close(fd)
    line = wait_for(lambda: next((r.message for r in caplog.records if "while leased to client pid" in r.message),
                                 None), DEADLINE, "the crash logged")
    assert f"pid {answer['pid']} exit code 3 while leased to client pid {os.getpid()}; last log line: " in line, line
    assert "fault" in line.split("; last log line: ", 1)[1], line
    assert sup.lease_status(lease.id)["player_exit"]["returncode"] == 3


def test_the_status_line_counts_players_left_exited_by_their_restart_policy(supervisor_with):
    # A player that exited and that `restart` does not restart stays EXITED until its environment changes; the
    # status line said only "demo 1/2 up (0 leased)", as if it were on its way back (a FAILED one is counted).
    statuses: list[str] = []
    sup = supervisor_with(fast_config(instances=2, extra='restart = "never"'), on_status=statuses.append)
    wait_for(lambda: [s for _, s, _, _ in _slots(sup)] == ["READY", "READY"], DEADLINE, "two READY players")
    pid = _slots(sup)[0][3]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: [s for _, s, _, _ in _slots(sup)] == ["EXITED", "READY"], DEADLINE, "player 0 EXITED")
    wait_for(lambda: statuses and statuses[-1] == "demo 1/2 up (0 leased), 1 exited", DEADLINE,
             "the status line counting it")


def test_ready_is_announced_once_every_player_came_up_even_if_one_crashed_since(supervisor_with, tmp_path):
    # READY=1 ("systemctl start" returns) waited for every player to be READY at the same moment: players that
    # crash soon after they come up (a build that dies once its scene loads) and restart with backoff are seldom
    # all up at once, and READY=1 could never come (systemd kills the daemon after TimeoutStartSec, and
    # Restart= starts it over). docs/deploy.md: once every player has sent its first frame.
    marker = tmp_path / "go"
    script = (f'case "$*" in *demo.1.log*) until [ -e {marker} ]; do sleep 0.02; done;; esac; '
              f'exec {PLAYER} --static-frame "$@"')
    ready: list[float] = []
    text = fast_config(instances=2, executable=f'["/bin/sh", "-c", {json.dumps(script)}, "sh"]')
    text = text.replace("backoff_initial = 0.05", "backoff_initial = 30.0").replace("backoff_max = 0.2",
                                                                                  "backoff_max = 30.0")
    sup = supervisor_with(text, on_ready=lambda: ready.append(time.monotonic()))
    wait_for(lambda: [s for _, s, _, _ in _slots(sup)] == ["READY", "STARTING"], DEADLINE, "player 0 READY")
    os.kill(_slots(sup)[0][3], signal.SIGKILL)  # it crashes: restarted 30 s later
    wait_for(lambda: _slots(sup)[0][1] == "BACKOFF", DEADLINE, "player 0 backing off")
    marker.touch()  # player 1 comes up now, while player 0 waits to restart
    wait_for(lambda: _slots(sup)[1][1] == "READY", DEADLINE, "player 1 READY")
    wait_for(lambda: ready, 2.0, "READY=1 once player 1 came up too")
    assert sup.health()["status"] == "ready"
