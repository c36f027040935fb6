"""A managed Xvfb killed under a running player (``x_display="managed"``, ``--renderer gl``): the next
step raises PlayerCrashed naming the display; closing the session leaves nothing (no player, no Xvfb, no
zombie, no descriptor, no pipe), and the next launch gets a new display. On a display renderd does not
watch, the reference GL player notices the lost X connection itself and exits non-zero (as a Unity
player dies of the X I/O error).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys

import psutil
import pytest

import renderd
from renderd.errors import PlayerCrashed
from renderd.platforms import xvfb

from .conftest import Timer, wait_for

pytest.importorskip("moderngl")
pytestmark = [
    pytest.mark.xvfb,
    pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed"),
]

GL_PLAYER = ["renderd-player", "--renderer", "gl"]
#: The reference player installed next to this interpreter (not a version manager's shim found first on PATH,
#: which costs every start a tenth of a second or more).
PLAYER = shutil.which("renderd-player", path=os.path.dirname(sys.executable)) or shutil.which("renderd-player")
START = 20.0
STEP = 5.0


def xvfb_children() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.name() == "Xvfb":
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def descendants_named(pid: int, name: str) -> list[psutil.Process]:
    """The descendants of ``pid`` called ``name`` (ones that end while they are listed are skipped)."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.name() == name:
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def launch_gl(**kwargs):
    return renderd.launch(GL_PLAYER, platform="Linux64", x_display="managed", width=64, height=48,
                          start_timeout=START, step_timeout=STEP, **kwargs)


def test_managed_xvfb_killed_under_a_running_player(nothing_left) -> None:
    with launch_gl() as session:
        assert session.step("MoveAhead").frame.shape == (48, 64, 3)
        (xvfb,) = xvfb_children()
        xvfb.kill()
        wait_for(lambda: xvfb.status() == psutil.STATUS_ZOMBIE if xvfb.is_running() else True, 5,
                 "the Xvfb to die")
        player = psutil.Process(session.pid)
    # Closed: the player is stopped and reaped, the dead Xvfb is reaped, pipes and descriptors are gone
    # (nothing_left), whatever the player made of losing its display.
    assert not player.is_running()
    assert not xvfb_children()
    with launch_gl() as session:  # the display manager starts a new Xvfb for the next player
        (again,) = xvfb_children()
        assert again.pid != xvfb.pid
        assert session.step("Pass")
    assert not xvfb_children()


def test_managed_xvfb_killed_is_a_crash_for_the_client(nothing_left) -> None:
    """renderd watches the Xvfb it started next to the player: its death ends the session at once."""
    with launch_gl() as session:
        session.step("MoveAhead")
        (xvfb,) = xvfb_children()
        xvfb.kill()
        # Dead, not only signalled: on a loaded machine a SIGKILLed Xvfb can take longer to go than the
        # player takes for three steps, and until then its display still answers.
        wait_for(lambda: xvfb.status() == psutil.STATUS_ZOMBIE if xvfb.is_running() else True, 5,
                 "the Xvfb to die")
        with Timer() as t, pytest.raises(PlayerCrashed) as info:
            for _ in range(3):  # the next steps render: a player that lost its display must die
                session.step("RotateLeft", degrees=10)
        assert t.elapsed < STEP
    assert not xvfb_children()
    assert re.search(rf"managed X display :\d+ \(Xvfb pid {xvfb.pid}\) the player renders on died \(killed by "
                     r"SIGKILL\)", str(info.value)), info.value


def test_the_gl_player_exits_when_its_x_server_dies(tmp_path, nothing_left) -> None:
    """Without renderd watching the display (a display it did not start), the reference player notices
    the lost X connection itself at its next frame and exits non-zero, saying why in its log (as a Unity
    player dies of the X I/O error)."""
    manager = xvfb.DisplayManager()
    try:
        display = manager.acquire(64, 48)
        log_path = tmp_path / "player.log"
        with renderd.launch(GL_PLAYER, platform="Linux64", x_display=display.screen_name(0), width=64, height=48,
                            start_timeout=START, step_timeout=STEP, log_path=log_path) as session:
            session.step("MoveAhead")
            os.kill(display.pid, signal.SIGKILL)
            wait_for(lambda: not display.alive(), 5, "the Xvfb to die")
            with Timer() as t, pytest.raises(PlayerCrashed) as info:
                session.step("RotateLeft", degrees=10)
            assert t.elapsed < STEP
        assert info.value.returncode is not None and info.value.returncode > 0, info.value
        assert "lost the X display" in info.value.log_tail, info.value
        assert f"lost the X display {display.screen_name(0)}" in log_path.read_text()
        display.release()
    finally:
        manager.shutdown()


def test_the_daemon_replaces_ready_players_whose_managed_xvfb_died(tmp_path, nothing_left) -> None:
    """The daemon watches the Xvfb it started: a READY player on it is restarted on a new display before
    any client gets it, and the next lease renders."""
    from renderd.daemon.client import connect
    from tests.daemon.conftest import DaemonProcess, fast_config

    gl_player = f'["{PLAYER}", "--renderer", "gl"]'
    d = DaemonProcess(tmp_path / "d", fast_config(executable=gl_player).replace(
        'platform = "headless"', 'platform = "Linux64"\n    x_display = "managed"\n    width = 64\n    height = 48'))
    nothing_left.ignore.add(d.pid)
    try:
        d.wait_ready()
        (player,) = d.players()
        (xvfb,) = descendants_named(d.pid, "Xvfb")
        xvfb.kill()
        (again,) = d.wait_players(lambda ps: ps[0]["state"] == "READY" and ps[0]["pid"] != player["pid"],
                                  timeout=20, what="a new READY player")
        assert "managed X display" in d.output() and "restarting it on a new display" in d.output()
        (new_xvfb,) = descendants_named(d.pid, "Xvfb")
        assert new_xvfb.pid != xvfb.pid
        with connect("demo", socket=d.socket, timeout=10) as session:
            assert session.pid == again["pid"]
            assert session.step("RotateLeft", degrees=10).frame.shape == (48, 64, 3)
    finally:
        d.cleanup()


def test_the_control_api_answers_while_a_dead_managed_display_is_replaced(tmp_path, nothing_left) -> None:
    """Starting the replacement Xvfb happens off the supervisor's lock: with a replacement that takes
    seconds to come up, `GET /v1/health` keeps answering at once, and the new player gets ready after it."""
    from tests.daemon.conftest import DaemonProcess, fast_config

    slow = tmp_path / "slow"  # while this exists, the next Xvfb start takes SLOW_START seconds
    slow_start = 2
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "Xvfb"
    wrapper.write_text(f'#!/bin/sh\nif [ -e "{slow}" ]; then sleep {slow_start}; fi\nexec "{shutil.which("Xvfb")}" "$@"\n')
    wrapper.chmod(0o755)
    gl_player = f'["{PLAYER}", "--renderer", "gl"]'
    d = DaemonProcess(
        tmp_path / "d",
        fast_config(executable=gl_player).replace(
            'platform = "headless"', 'platform = "Linux64"\n    x_display = "managed"\n    width = 64\n    height = 48'
        ),
        env={"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"},
    )
    nothing_left.ignore.add(d.pid)
    try:
        d.wait_ready()
        (player,) = d.players()
        (server,) = descendants_named(d.pid, "Xvfb")
        slow.touch()
        server.kill()

        def replacing() -> bool:
            return bool(descendants_named(d.pid, "sleep"))

        wait_for(replacing, 20, "the replacement Xvfb to start (slowly)")
        slowest = 0.0
        answers = 0
        while replacing():
            with Timer() as t:
                assert d.client.health()["status"] in ("ready", "starting")
            slowest = max(slowest, t.elapsed)
            answers += 1
        assert answers >= 2 and slowest < 1.0, f"{answers} answers, slowest {slowest:.2f} s"  # (2 s under the lock)
        d.wait_players(lambda ps: ps[0]["state"] == "READY" and ps[0]["pid"] != player["pid"], timeout=30,
                       what="a new READY player on the new display")
    finally:
        if slow.exists():
            slow.unlink()
        d.cleanup()
