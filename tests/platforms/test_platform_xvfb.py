"""Managed displays: real Xvfb servers started, shared, released and stopped by the DisplayManager, and
none left behind, even when the owner dies."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

from renderd.errors import PlatformError
from renderd.platforms import PlatformRequest, select
from renderd.platforms.xvfb import DisplayManager

from .conftest import wait_until, xvfb_children

pytestmark = [pytest.mark.xvfb, pytest.mark.usefixtures("no_xvfb_left")]


@pytest.fixture
def manager(xvfb):  # the xvfb fixture skips when Xvfb is missing
    m = DisplayManager()
    yield m
    m.shutdown()


def test_acquire_share_release(manager):
    first = manager.acquire(320, 240)
    second = manager.acquire(320, 240)
    other = manager.acquire(200, 100, screens=2)
    assert first.name == second.name and first.pid == second.pid
    assert other.name != first.name and other.screen_name(1) == f"{other.name}.1"
    assert {p.pid for p in xvfb_children()} >= {first.pid, other.pid}
    cmdline = psutil.Process(first.pid).cmdline()
    assert "-displayfd" in cmdline and "+extension" in cmdline and "GLX" in cmdline and "320x240x24" in cmdline
    assert os.getpgid(first.pid) == first.pid  # its own process group
    first.release()
    first.release()  # idempotent: does not drop the second user's reference
    assert second.alive()
    second.release()
    assert not first.alive()
    assert other.alive()
    manager.shutdown()
    assert not other.alive()
    with pytest.raises(PlatformError, match="shut down"):
        manager.acquire(320, 240)


def test_context_manager_and_socket_cleanup(manager):
    with manager.acquire(100, 100) as display:
        socket = f"/tmp/.X11-unix/X{display.number}"
        assert os.path.exists(socket)
    assert not display.alive()
    assert not os.path.exists(socket) and not os.path.exists(f"/tmp/.X{display.number}-lock")


def test_a_dead_server_is_replaced(manager):
    display = manager.acquire(100, 100)
    user = manager.acquire(100, 100)
    os.kill(display.pid, signal.SIGKILL)
    assert wait_until(lambda: not display.alive(), 5)
    socket = f"/tmp/.X11-unix/X{display.number}"
    fresh = manager.acquire(100, 100)
    assert fresh.alive() and fresh.pid != display.pid
    if fresh.number != display.number:
        assert not os.path.exists(socket)  # the killed server's stale socket was removed
    display.release()
    user.release()
    assert fresh.alive()  # releasing handles on the dead server does not touch the new one
    fresh.release()
    assert not fresh.alive()


def test_survives_the_thread_that_started_it(manager):
    """PR_SET_PDEATHSIG follows the forking thread: displays are forked by a long-lived thread instead."""
    holder = []
    worker = threading.Thread(target=lambda: holder.append(manager.acquire(100, 100)))
    worker.start()
    worker.join(30)
    display = holder[0]
    assert not wait_until(lambda: not display.alive(), 0.5)
    display.release()


def test_dies_with_its_owner(xvfb, tmp_path):
    """An owner that is SIGKILLed (no atexit, no cleanup) still takes its Xvfb with it."""
    code = textwrap.dedent(
        """
        import sys, time
        from renderd.platforms.xvfb import DisplayManager
        d = DisplayManager.default().acquire(100, 100)
        print(d.pid, flush=True)
        time.sleep(60)
        """
    )
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(owner.stdout.readline())
        assert psutil.pid_exists(pid)
        owner.kill()
        owner.wait(10)
        assert wait_until(lambda: not _running(pid), 10), "Xvfb outlived its SIGKILLed owner"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(10)
        owner.stdout.close()


def test_atexit_stops_displays(xvfb):
    code = textwrap.dedent(
        """
        from renderd.platforms.xvfb import DisplayManager
        d = DisplayManager.default().acquire(100, 100)
        print(d.pid, flush=True)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    pid = int(done.stdout)
    assert wait_until(lambda: not _running(pid), 5)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _fake_xvfb(tmp_path, body: str) -> str:
    path = tmp_path / "Xvfb"
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(0o755)
    return str(path)


def test_an_xvfb_that_fails_is_reported_with_its_output(tmp_path):
    binary = _fake_xvfb(tmp_path, 'echo "(EE) Fatal server error: cannot open log" >&2; exit 1')
    manager = DisplayManager(xvfb=binary)
    with pytest.raises(PlatformError) as info:
        manager.acquire(100, 100)
    assert "closed its display pipe without a display number (exit code 1)" in str(info.value)
    assert "Fatal server error" in str(info.value)
    manager.shutdown()


def test_an_xvfb_that_never_announces_is_stopped_at_the_deadline(tmp_path):
    binary = _fake_xvfb(tmp_path, "exec sleep 60")
    manager = DisplayManager(xvfb=binary, start_timeout=0.5, stop_grace=1.0)
    with pytest.raises(PlatformError, match="did not announce its display within 0.5 s"):
        manager.acquire(100, 100)
    assert not [p for p in psutil.Process().children(recursive=True) if p.name() == "sleep"]
    manager.shutdown()


def test_managed_selection_acquires_and_releases(xvfb):
    request = PlatformRequest(platform="Linux64", system="Linux", width=321, height=123, x_display="managed")
    selection = select(request)
    try:
        display = selection.display
        assert selection.env["DISPLAY"] == f"{display.name}.0" and display.alive()
        with select(request) as again:
            assert again.display.pid == display.pid  # shared
        assert display.alive()
    finally:
        selection.release()
        selection.release()
    assert not display.alive()


def test_a_selection_replaces_its_dead_display(xvfb):
    request = PlatformRequest(platform="Linux64", system="Linux", width=123, height=45, x_display="managed")
    with select(request) as selection:
        old = selection.display
        os.kill(old.pid, signal.SIGKILL)
        assert wait_until(lambda: not old.alive(), 5)
        env, _ = selection.for_instance(0)
        assert selection.display is not old and selection.display.alive()
        assert env["DISPLAY"] == f"{selection.display.name}.0" == selection.env["DISPLAY"]
        assert old.released
    assert not selection.display.alive()


def test_managed_without_xvfb_is_invalid():
    with pytest.raises(PlatformError, match="needs Xvfb, which is not installed"):
        select(PlatformRequest(system="Linux", x_display="managed", env={"PATH": "/nonexistent"}))


def test_a_managed_display_that_fails_verification_says_what_to_install(tmp_path):
    # An Xvfb whose GLX does not come up (its GL drivers missing): the fix is to install them; "let
    # renderd start an Xvfb" would send the user round in a circle, since renderd started this one.
    real = shutil.which("Xvfb")
    args = '"$@"'
    binary = _fake_xvfb(
        tmp_path,
        f'for a in {args}; do shift; [ "$a" = "+extension" ] && a="-extension"; set -- "$@" "$a"; done\n'
        f'exec {real} {args}',
    )
    manager = DisplayManager(xvfb=binary)
    try:
        with pytest.raises(PlatformError) as info:
            manager.acquire(64, 64)
    finally:
        manager.shutdown()
    message = str(info.value)
    assert "failed verification" in message and "no GLX extension" in message
    assert "libgl1-mesa-dri libglx-mesa0" in message
    assert 'x_display="managed"' not in message and "let renderd start" not in message


def test_sharing_a_running_display_does_not_wait_for_another_geometry_starting(tmp_path):
    # A server that hangs on start (it never announces its display) holds back only the callers that
    # want its geometry, not those that share a display already running.
    real = shutil.which("Xvfb")
    binary = _fake_xvfb(tmp_path, f'case "$*" in *11x11x24*) exec sleep 60;; esac\nexec {real} "$@"')
    manager = DisplayManager(xvfb=binary, start_timeout=2, stop_grace=1.0)  # (a real Xvfb starts in ~0.1 s)
    try:
        running = manager.acquire(64, 64)
        failed: list[BaseException] = []

        def start_hanging() -> None:
            try:
                manager.acquire(11, 11).release()
            except PlatformError as exc:
                failed.append(exc)

        starter = threading.Thread(target=start_hanging)
        starter.start()
        assert wait_until(lambda: any(p.name() == "sleep" for p in psutil.Process().children(recursive=True)), 5)
        started = time.monotonic()
        manager.acquire(64, 64).release()
        assert time.monotonic() - started < 1.0
        starter.join(10)
        assert failed and "did not announce its display" in str(failed[0])
        running.release()
    finally:
        manager.shutdown()
