"""Review 13a: what the supervisor does with its lock held never waits on a player's processes or files. The
account of what a player that sent nothing by its start_timeout did with its pipes reads /proc/PID/fd of the
player and its descendants and stats what each descriptor names (a file on a hung network filesystem would hold
the lock for as long as the mount hangs): the loop gathers it without the lock. Real supervisor, real players."""

from __future__ import annotations

import json
import threading

import pytest

from renderd.daemon.supervisor import State
from renderd.transport.fifo import FifoChannel
from tests.daemon.conftest import fast_config, wait_for
from tests.daemon.supervisor_helpers import DEADLINE
from tests.daemon.test_robustness import supervisor_with  # noqa: F401  (a fixture)


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
