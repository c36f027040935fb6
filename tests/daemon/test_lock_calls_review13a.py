"""Review 13a: what the supervisor does with its lock held never waits on a player's processes or files. The
account of what a player that sent nothing by its start_timeout did with its pipes reads /proc/PID/fd of the
player and its descendants and stats what each descriptor names (a file on a hung network filesystem would hold
the lock for as long as the mount hangs): the loop gathers it without the lock. So is a player's process started
(fork and exec: milliseconds, or as long as a hung mount holding the program lasts). Real supervisor, real
players."""

from __future__ import annotations

import json
import logging
import os
import threading
from types import SimpleNamespace

import pytest

from renderd.daemon.supervisor import State, Supervisor
from renderd.process import PlayerProcess
from renderd.transport.fifo import FifoChannel
from tests.daemon.conftest import fast_config, wait_for
from tests.daemon.supervisor_helpers import DEADLINE, ready_pid
from tests.helpers.leaks import pid_gone


@pytest.fixture
def silences(monkeypatch):
    """Every call of FifoChannel.silence from now on, as ``(thread name, whether that thread held the lock of the
    supervisor given to record())``."""
    seen: list[tuple[str, bool]] = []
    sups: list = []
    original = FifoChannel.silence

    def silence(self):
        seen.append((threading.current_thread().name, any(sup.lock._is_owned() for sup in sups)))
        return original(self)

    monkeypatch.setattr(FifoChannel, "silence", silence)

    def record(sup):
        sups.append(sup)
        return seen

    return record


def _first_failure(sup) -> str | None:
    with sup.lock:
        players = sup.environments["demo"].players
        return players[0].reason if players and players[0].boot_failures else None


@pytest.mark.parametrize("script, says", [
    ("exec sleep 600", "it has not opened server.pipe"),
    ('exec 3<>"$AI2THOR_FIFO_SERVER_PIPE_PATH"; exec sleep 600', "it opened server.pipe but has sent nothing"),
])
def test_a_silent_players_account_is_gathered_without_the_lock(supervisor_with, silences, script, says):
    config = fast_config(executable=json.dumps(["sh", "-c", script, "player"]))
    config = config.replace("start_timeout = 20.0", "start_timeout = 0.3")
    config = config.replace("max_boot_failures = 3", "max_boot_failures = 1")
    sup = supervisor_with(config)
    seen = silences(sup)
    reason = wait_for(lambda: _first_failure(sup), DEADLINE, "the player's boot failure")
    assert reason.startswith("no first frame within start_timeout (0.3 s); " + says), reason
    wait_for(lambda: sup.describe("demo")["players"][0]["state"] == State.FAILED.value, DEADLINE, "FAILED")
    assert seen, "the account was not asked for"
    assert not [name for name, held in seen if held], seen


# -- starting a player's process ----------------------------------------------------------------------------------
# Fork and exec take milliseconds to tens of them (15-60 ms measured here for a daemon of 45 MB), and the exec of a
# program on a network filesystem that hangs lasts as long as the mount does: the loop starts the process without
# the lock, and a slot stopped meanwhile does not get it.


@pytest.fixture
def spawns(monkeypatch):
    """Every PlayerProcess.spawn from now on, as ``(thread name, whether the lock of a supervisor made since was
    held, the process)``, in ``spawns.seen``; a function appended to ``spawns.before`` runs just before the next
    spawn, on the spawning thread, with the supervisor."""
    sups: list[Supervisor] = []
    record = SimpleNamespace(seen=[], before=[])
    original_init = Supervisor.__init__
    original_spawn = PlayerProcess.spawn.__func__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        sups.append(self)

    def spawn(cls, *args, **kwargs):
        held = any(sup.lock._is_owned() for sup in sups)
        if record.before:
            record.before.pop()(sups[-1])
        proc = original_spawn(cls, *args, **kwargs)
        record.seen.append((threading.current_thread().name, held, proc))
        return proc

    monkeypatch.setattr(Supervisor, "__init__", init)
    monkeypatch.setattr(PlayerProcess, "spawn", classmethod(spawn))
    return record


def test_a_players_process_is_started_without_the_lock(supervisor_with, spawns):
    sup = supervisor_with()
    first = ready_pid(sup)
    lease, _answer = sup.acquire("demo", os.getpid(), DEADLINE)
    sup.release(lease.id, clean=False)  # recycled: a second start
    wait_for(lambda: ready_pid(sup) != first, DEADLINE, "the recycled player READY")
    assert len(spawns.seen) >= 2
    assert {name for name, _held, _proc in spawns.seen} == {"renderd-supervisor-test"}  # (the loop's thread)
    assert not [proc.pid for _name, held, proc in spawns.seen if held], "started with the supervisor's lock held"


def test_a_slot_stopped_while_its_process_starts_does_not_keep_it(supervisor_with, spawns, caplog):
    # Its environment is removed and declared again just before the process starts: the slot it was started for
    # is stopped (its removal goes on), and the process, which serves nothing, is stopped too; the new
    # declaration's player comes up.
    def redeclare(sup: Supervisor) -> None:
        config = sup.environments["demo"].config
        sup.delete_environment("demo")
        sup.put_environment(config)

    caplog.set_level(logging.INFO, logger="renderd.daemon.supervisor")
    spawns.before.append(redeclare)
    sup = supervisor_with()
    wait_for(lambda: len(spawns.seen) >= 2, DEADLINE, "a second start")
    stale = spawns.seen[0][2]
    assert wait_for(lambda: pid_gone(stale.pid), DEADLINE, "the stale process stopped")
    assert f"demo[0]: stopping pid {stale.pid}, started for a slot that has changed since" in caplog.text
    pid = ready_pid(sup)
    assert pid != stale.pid
    with sup.lock:
        assert [p.pid for p in sup.environments["demo"].players] == [pid]
