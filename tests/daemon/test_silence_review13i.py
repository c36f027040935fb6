"""Review 13i: the account of what a player silent at its start_timeout did with its pipes is gathered by the loop
without the lock, one pass before the boot failure that quotes it. What happens in between must not leave a stale
account in the reason: a PUT that raises start_timeout (the player fails later, if at all, and the account must say
what it did by then), or bytes that came after the account was taken ("sent nothing" would be false); and an exit in
between (the account's look at client.pipe gives a player that opened it first an end of file) is the boot failure
decided with that account, not a crash. The loop is held just after it gathered the account (threading events);
real supervisor, real (shell) players."""

from __future__ import annotations

import dataclasses
import json
import os
import threading

import pytest

from renderd.daemon.supervisor import Supervisor, _pending_bytes
from tests.daemon.conftest import fast_config, wait_for
from tests.daemon.supervisor_helpers import DEADLINE, only_player
from tests.helpers.leaks import pid_gone

#: The first 8 bytes of a first message: a METADATA header declaring 16 bytes, then 3 of them.
PARTIAL = r"printf '\001\000\000\000\020abc' >&3"
SERVER = '"$AI2THOR_FIFO_SERVER_PIPE_PATH"'


@pytest.fixture
def held_after_gather(monkeypatch):
    """The loop, once it has gathered a silent player's account, waits (at most DEADLINE) until the test sets
    ``go``; ``gathered`` is set when it waits there. Only the first gather is held."""
    gathered, go = threading.Event(), threading.Event()
    original = Supervisor._gather_silences

    def gather(self, players):
        original(self, players)
        if players and not gathered.is_set():
            gathered.set()
            go.wait(DEADLINE)

    monkeypatch.setattr(Supervisor, "_gather_silences", gather)
    yield gathered, go
    go.set()


def _config(tmp_path, script: str) -> str:
    config = fast_config(executable=json.dumps(["sh", "-c", script.replace("FLAG", str(tmp_path / "flag")),
                                                "player"]))
    config = config.replace("start_timeout = 20.0", "start_timeout = 0.3")
    return config.replace("max_boot_failures = 3", "max_boot_failures = 1")


def _first_failure(sup: Supervisor) -> str | None:
    p = only_player(sup)
    with sup.lock:
        return p.reason if p is not None and p.boot_failures else None


def _has_open(pid: int, path: str) -> bool:
    """Whether process ``pid`` has the file at ``path`` open."""
    target = os.stat(path)
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            st = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            return True
    return False


def test_an_account_gathered_before_a_put_raised_start_timeout_is_not_quoted_later(
        supervisor_with, held_after_gather, tmp_path):
    # Silent at its start_timeout (0.3 s), it has not opened server.pipe: that is what the loop gathers. A PUT then
    # raises start_timeout to 1 s, and the player opens server.pipe. When it fails at 1 s, its reason says what it
    # did by then (it opened server.pipe and sent nothing), not what it had done at 0.3 s.
    gathered, go = held_after_gather
    sup = supervisor_with(_config(tmp_path, f'while [ ! -e FLAG ]; do sleep 0.01; done; exec 3<>{SERVER}; '
                                            'exec sleep 600'))
    assert gathered.wait(DEADLINE), "the loop never gathered an account"
    p = only_player(sup)
    with sup.lock:
        assert "it has not opened server.pipe" in p.silence[-1]  # (what the loop found at 0.3 s)
        pid, server = p.pid, p.pair.server_path
        config = dataclasses.replace(sup.environments["demo"].config, start_timeout=1.0)
    assert sup.put_environment(config)["declared"] == "changed"
    (tmp_path / "flag").touch()
    wait_for(lambda: _has_open(pid, server), DEADLINE, "the player to open server.pipe")
    go.set()
    reason = wait_for(lambda: _first_failure(sup), DEADLINE, "the player's boot failure")
    assert reason.startswith("no first frame within start_timeout (1 s); it opened server.pipe but has sent "
                             "nothing"), reason


def test_an_account_of_silence_is_not_quoted_once_bytes_came(supervisor_with, held_after_gather, tmp_path):
    # It opened server.pipe and sent nothing by its start_timeout: gathered. Then it writes part of a message
    # before the pass that fails its boot: the reason must not say that it sent nothing (it says no more than that
    # no first frame came, as when bytes came before the account was gathered).
    gathered, go = held_after_gather
    sup = supervisor_with(_config(tmp_path, f'exec 3<>{SERVER}; while [ ! -e FLAG ]; do sleep 0.01; done; '
                                            f'{PARTIAL}; exec sleep 600'))
    assert gathered.wait(DEADLINE), "the loop never gathered an account"
    p = only_player(sup)
    with sup.lock:
        # (that it opened server.pipe and sent nothing; or, on a machine too slow to have run the shell's open by
        # then, that it has not opened it: either is false once bytes came)
        assert p.silence[-1].startswith("; it "), p.silence
        fd = p.holder.fileno()
    (tmp_path / "flag").touch()
    wait_for(lambda: _pending_bytes(fd) == 8, DEADLINE, "the player's 8 bytes in server.pipe")
    go.set()
    reason = wait_for(lambda: _first_failure(sup), DEADLINE, "the player's boot failure")
    assert reason == "no first frame within start_timeout (0.3 s)", reason


#: A player of the wrong order: it opens client.pipe first (waiting for a writer), and exits once the writer it got is
#: gone (end of file), as a build whose read of an action fails may.
WRONG_ORDER = 'exec 3<"$AI2THOR_FIFO_CLIENT_PIPE_PATH"; read -r line <&3; exit 3'


def test_a_player_that_exits_once_its_account_was_gathered_fails_with_that_account(
        supervisor_with, held_after_gather, tmp_path):
    # Telling that it opened client.pipe first takes a writer that opens and closes client.pipe: this player then
    # reads end of file and exits. Its boot failure was decided when its start_timeout passed without a first frame;
    # that exit, which comes a pass later now that the account is gathered without the lock (sooner than the next
    # pass when several players are silent at once), must not take the account's place: the reason says what it did
    # wrong, not "exited before readiness: exit code 3".
    gathered, go = held_after_gather
    sup = supervisor_with(_config(tmp_path, WRONG_ORDER))
    assert gathered.wait(DEADLINE), "the loop never gathered an account"
    p = only_player(sup)
    with sup.lock:
        assert "it opened client.pipe to read an action before sending its first message" in p.silence[-1]
        pid = p.pid
    wait_for(lambda: pid_gone(pid), DEADLINE, "the player to exit")
    go.set()
    reason = wait_for(lambda: _first_failure(sup), DEADLINE, "the player's boot failure")
    assert reason.startswith("no first frame within start_timeout (0.3 s); it opened client.pipe to read an action "
                             "before sending its first message on server.pipe (the wrong order"), reason
