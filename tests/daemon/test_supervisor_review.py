"""The supervisor over time: players and managed displays that fail at awkward moments, with a real daemon
(``renderd start``), real players, real Xvfbs; after each scenario nothing it made is left over."""

from __future__ import annotations

import os
import shutil
import signal

import psutil
import pytest

from renderd.daemon.client import connect
from tests.daemon.conftest import PLAYER, fast_config
from tests.helpers.leaks import pid_gone, wait_for

DEADLINE = 20.0

needs_xvfb = pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed")

MANAGED = 'platform = "Linux64"\n    x_display = "managed"\n    width = 64\n    height = 48'


def _named(pid: int, name: str) -> list[psutil.Process]:
    """The running descendants of ``pid`` called ``name``."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.name() == name and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def _fd_count(pid: int) -> int:
    """The daemon's descriptors other than sockets: its pipes, pidfds, epolls and files. A control
    connection's socket may still be open for a moment after its client has the answer, so counting
    sockets made a count taken right after a request one too high now and then."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:  # closed meanwhile
            continue
        n += not target.startswith("socket:")
    return n


def _pipes(d) -> list[str]:
    """The FIFOs under the daemon's players directory."""
    found = []
    for top, _dirs, files in os.walk(os.path.join(d.runtime_dir, "players")):
        found += [os.path.join(top, f) for f in files]
    return sorted(found)


@needs_xvfb
def test_a_player_released_after_its_managed_display_died_is_restarted_not_handed_on(daemon):
    """The managed Xvfb dies while its only player is leased; the client then releases cleanly (it had
    finished its step). The player must not go back to READY on the dead display (the next client's first
    step would fail): it is restarted on a new display, and the next lease gets a new player there."""
    d = daemon(fast_config().replace('platform = "headless"', MANAGED))
    (xvfb,) = _named(d.pid, "Xvfb")
    fds = _fd_count(d.pid)
    with connect("demo", socket=d.socket, timeout=10) as session:
        session.step("Pass")
        first = session.pid
        xvfb.kill()
        wait_for(lambda: pid_gone(xvfb.pid), DEADLINE, "the Xvfb to die")
    (player,) = d.wait_players(lambda ps: ps[0]["state"] == "READY" and ps[0]["pid"] != first,
                               what="a new READY player")
    assert "died" in d.output() and "restarting it on a new display" in d.output()
    (new_xvfb,) = _named(d.pid, "Xvfb")
    assert new_xvfb.pid != xvfb.pid
    assert pid_gone(first)
    with connect("demo", socket=d.socket, timeout=10) as session:
        assert session.pid == player["pid"]
        assert session.step("Pass")
    wait_for(lambda: _fd_count(d.pid) == fds and len(_pipes(d)) == 2, DEADLINE,
             "the daemon's descriptors and pipes to be back to one player's")


@needs_xvfb
def test_an_environment_removed_from_a_shared_managed_display_leaves_no_descriptor(daemon):
    """Two environments of the same geometry share one managed Xvfb; declaring and removing the second one
    again and again must leave the daemon's descriptors as they were (the second's watch on the shared
    Xvfb was kept, one pidfd per cycle, for as long as the Xvfb lived)."""
    d = daemon(fast_config().replace('platform = "headless"', MANAGED))
    (xvfb,) = _named(d.pid, "Xvfb")
    body = {"executable": [PLAYER, "--static-frame"], "platform": "Linux64", "x_display": "managed",
            "width": 64, "height": 48, "instances": 1, "start_timeout": DEADLINE}
    fds = _fd_count(d.pid)
    for _ in range(2):
        status, answer = d.client.request("PUT", "/v1/environments/other", body)
        assert status in (200, 201), answer
        d.wait_players(lambda ps: ps and ps[0]["state"] == "READY", name="other", what="other's player")
        assert [x.pid for x in _named(d.pid, "Xvfb")] == [xvfb.pid]  # shared, not a second server
        d.client.request("DELETE", "/v1/environments/other")
        wait_for(lambda: all(e["name"] != "other" for e in d.environments()), DEADLINE, "other to go")
    assert [x.pid for x in _named(d.pid, "Xvfb")] == [xvfb.pid]
    wait_for(lambda: _fd_count(d.pid) == fds, DEADLINE,
             f"the daemon's descriptors to be back to {fds} (has {_fd_count(d.pid)})")


@needs_xvfb
def test_a_hung_managed_display_is_killed_and_replaced_when_a_player_cannot_start_on_it(daemon):
    """The managed Xvfb hangs (SIGSTOP: alive, accepting connections from its backlog, never answering),
    then its player dies. A new player cannot start on it (the GL player waits for the X server): after its
    start_timeout the daemon finds that the display does not answer, kills it, and the player is restarted
    on a new display. Before, every restart timed out on the same hung server until the slot was FAILED,
    and a reload or PUT kept that server."""
    pytest.importorskip("moderngl")
    gl = f'["{PLAYER}", "--renderer", "gl"]'
    d = daemon(fast_config(executable=gl).replace('platform = "headless"', MANAGED)
               .replace("start_timeout = 20.0", "start_timeout = 1.0"),  # (a GL player is up in about 0.2 s)
               preamble="import renderd.daemon.supervisor as s; s.DISPLAY_CHECK_TIMEOUT = 0.5")
    (xvfb,) = _named(d.pid, "Xvfb")
    (first,) = d.players()
    try:
        xvfb.suspend()
        os.kill(first["pid"], signal.SIGKILL)
        (player,) = d.wait_players(lambda ps: ps[0]["state"] == "READY" and ps[0]["pid"] != first["pid"],
                                   what="a READY player on a new display")
    finally:
        if not pid_gone(xvfb.pid):
            xvfb.resume()
    assert "did not answer a connection within 0.5 s: it is hung" in d.output()
    wait_for(lambda: pid_gone(xvfb.pid), DEADLINE, "the hung Xvfb to be gone")
    assert [x.pid for x in _named(d.pid, "Xvfb")] != [xvfb.pid]
    with connect("demo", socket=d.socket, timeout=10) as session:
        assert session.pid == player["pid"]
        assert session.step("Pass").frame.shape == (48, 64, 3)
