"""Review 13a: the daemon notes its players' helpers (a walk of /proc over each player's descendants, milliseconds
for a player with many threads or processes) without holding the supervisor's lock, which every lease, status
and release request waits for; and it still stops the helpers a player started outside its process group once
that player has exited. Real supervisor, real players."""

from __future__ import annotations

import json
import os
import threading

import psutil
import pytest

import renderd.process as process_mod
from renderd.process import PlayerProcess
from tests.daemon.conftest import fast_config, wait_for
from tests.daemon.supervisor_helpers import DEADLINE, only_player, ready_pid
from tests.helpers.leaks import pid_gone


@pytest.fixture
def notes(monkeypatch):
    """Every note of a player's helpers from now on, as ``(thread name, whether that thread held the lock of
    the supervisor given to record())``. The interval between notes is 0: each pass of the loop notes."""
    monkeypatch.setattr(process_mod, "DESCENDANT_NOTE_INTERVAL", 0.0)
    seen: list[tuple[str, bool]] = []
    sups: list = []
    original = PlayerProcess.note_descendants

    def note_descendants(self, *args, **kwargs):
        held = any(sup.lock._is_owned() for sup in sups)
        seen.append((threading.current_thread().name, held))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(PlayerProcess, "note_descendants", note_descendants)

    def record(sup):
        sups.append(sup)
        return seen

    return record


def test_helpers_are_noted_without_the_supervisors_lock(supervisor_with, notes):
    sup = supervisor_with()
    seen = notes(sup)
    ready_pid(sup)
    # Passes of the loop (each polls every player), and a lease request (which polls the READY players under
    # the lock, to hand on none that exited unseen) and its release.
    lease, _answer = sup.acquire("demo", os.getpid(), DEADLINE)
    sup.release(lease.id)
    start = len(seen)

    def noted_often() -> bool:
        sup.wake()
        return len(seen) >= start + 5

    wait_for(noted_often, DEADLINE, "five notes of the player's helpers")
    assert seen, "nothing was noted"
    under_lock = [name for name, held in seen if held]
    assert not under_lock, f"noted with the supervisor's lock held, on {sorted(set(under_lock))}"


# A player that starts a helper in a session of its own, says its pid, and exits (code 3: a boot failure) once
# the test lets it; started again (a restart after that failure), it only sleeps, until the daemon stops it.
PLAYER = """
if [ -e "$1" ]; then exec sleep 600; fi
setsid sleep 600 &
echo "helper $!" > "$1.pid"
while [ ! -e "$1" ]; do sleep 0.01; done
exit 3
"""


def test_a_helper_noted_while_its_player_ran_is_stopped_after_the_player_exits(supervisor_with, notes, tmp_path):
    go = tmp_path / "go"
    config = fast_config(executable=f'["sh", "-c", {json.dumps(PLAYER)}, "player", {json.dumps(str(go))}]')
    config = config.replace("max_boot_failures = 3", "max_boot_failures = 100")
    sup = supervisor_with(config)
    seen = notes(sup)
    pid_file = tmp_path / "go.pid"
    wait_for(lambda: pid_file.exists() and pid_file.read_text().endswith("\n"), DEADLINE, "the helper's pid")
    helper = psutil.Process(int(pid_file.read_text().split()[1]))
    with sup.lock:
        proc = only_player(sup).proc
    # Outside the player's group once setsid has made its session: a signal to the group misses it.
    wait_for(lambda: os.getpgid(helper.pid) != proc.pgid, DEADLINE, "the helper in a session of its own")

    def noted() -> bool:
        sup.wake()  # (a pass of the loop notes it)
        return helper.pid in proc.noted_descendants()

    wait_for(noted, DEADLINE, "the helper noted")
    go.touch()  # the player exits; its helper, orphaned, is no longer its descendant
    try:
        assert wait_for(lambda: pid_gone(helper.pid), DEADLINE, "the helper stopped after its player's exit")
    finally:
        if not pid_gone(helper.pid):
            helper.kill()
    assert not [name for name, held in seen if held]
