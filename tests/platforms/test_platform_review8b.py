"""Managed Xvfb displays, second review: a server stopped and cleaned up exactly once whoever lets go of it
last, and the reasons a managed display that fails verification gives."""

from __future__ import annotations

import logging
import os
import signal

import pytest

from renderd.errors import PlatformError
from renderd.platforms import xvfb as xvfb_mod
from renderd.platforms.xvfb import DisplayManager

from .conftest import wait_until

pytestmark = [pytest.mark.xvfb, pytest.mark.usefixtures("no_xvfb_left")]

XVFB_LOGGER = "renderd.platforms.xvfb"


def _script(path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def cleanups(monkeypatch, xvfb) -> list[tuple[int, int]]:  # the xvfb fixture skips when Xvfb is missing
    """Every ``(number, pid)`` the managers clean leftovers up for (the cleanup itself still runs)."""
    calls: list[tuple[int, int]] = []
    real = xvfb_mod._remove_leftovers

    def spy(number: int, pid: int) -> None:
        calls.append((number, pid))
        real(number, pid)

    monkeypatch.setattr(xvfb_mod, "_remove_leftovers", spy)
    return calls


def _stopped(caplog, pid: int) -> list[str]:
    return [
        r.getMessage() for r in caplog.records
        if r.name == XVFB_LOGGER and r.getMessage().startswith("stopped managed display") and f"pid {pid}," in r.getMessage()
    ]


# -- 1. each server is stopped and cleaned up once ------------------------------------------------------


def test_handles_released_after_shutdown_do_not_stop_the_server_again(cleanups, caplog):
    # shutdown() stops every server whoever holds it; the handles still held were released later, and the
    # last of them stopped the (long gone) server a second time: "stopped" logged twice, and the leftover
    # cleanup run again on a display number another server may hold by then.
    caplog.set_level(logging.INFO, logger=XVFB_LOGGER)
    manager = DisplayManager()
    try:
        first = manager.acquire(64, 64)
        second = manager.acquire(64, 64)
        number, pid = first.number, first.pid
        manager.shutdown()
        assert not first.alive()
        first.release()
        second.release()
    finally:
        manager.shutdown()
    assert len(_stopped(caplog, pid)) == 1, _stopped(caplog, pid)
    assert cleanups == [(number, pid)], cleanups


def test_a_handle_on_a_replaced_dead_server_does_not_stop_it_again(cleanups, caplog):
    # A dead server is reaped and cleaned up when acquire() replaces it; the replacement usually takes the
    # same display number. Releasing the last handle on the dead one cleaned up that number a second time
    # (now the new server's) and logged "stopped managed display :N" for a display that runs.
    caplog.set_level(logging.INFO, logger=XVFB_LOGGER)
    manager = DisplayManager()
    try:
        old = manager.acquire(64, 64)
        number, pid = old.number, old.pid
        os.killpg(pid, signal.SIGKILL)
        assert wait_until(lambda: not old.alive(), 5)
        new = manager.acquire(64, 64)
        assert new.pid != pid and new.alive()
        old.release()
        assert new.alive()
        assert [d["pid"] for d in manager.displays()] == [new.pid]
        assert _stopped(caplog, pid) == [], _stopped(caplog, pid)
        assert cleanups == [(number, pid)], cleanups
        new.release()
        assert not new.alive()
    finally:
        manager.shutdown()
    assert len(_stopped(caplog, new.pid)) == 1
    assert cleanups == [(number, pid), (new.number, new.pid)], cleanups


# -- 2. a managed display that fails verification says what failed and what to install ------------------


def _free_number() -> int:
    for number in range(400, 700):
        if not os.path.lexists(f"/tmp/.X{number}-lock") and not os.path.lexists(f"/tmp/.X11-unix/X{number}"):
            return number
    pytest.skip("no free X display number in 400..699")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def test_an_xvfb_that_exits_after_announcing_its_display_says_why(tmp_path, xvfb):
    # An Xvfb that dies right after it wrote its display number (a crash loading its GLX driver): the
    # reason was "it is not reachable: cannot connect (...); fix: see Xvfb's output", naming nothing to
    # install or check and not saying that Xvfb had exited.
    number = _free_number()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _script(
        bindir / "Xvfb",
        f'echo {number} >/proc/self/fd/$2\necho "(EE) AIGLX error: dlopen of swrast_dri.so failed"\n'
        'echo "(EE) Fatal server error: GLX: could not load software renderer"\nexit 1',
    )
    manager = DisplayManager(start_timeout=10)
    try:
        with pytest.raises(PlatformError) as caught:
            manager.acquire(64, 64, env={"PATH": f"{bindir}:{os.environ['PATH']}"})
    finally:
        manager.shutdown()
    message = _one_line(caught.value)
    assert f"the managed display :{number}" in message and "failed verification" in message, message
    assert "exited (exit code 1)" in message, message
    assert "see Xvfb's output" not in message, message
    assert "apt-get install libgl1-mesa-dri libglx-mesa0" in message, message
    assert "apt-get install --reinstall xvfb" in message, message
    assert "| (EE) Fatal server error: GLX: could not load software renderer" in str(caught.value), message


def test_an_xvfb_that_exits_silently_is_not_said_to_have_output(tmp_path, xvfb):
    number = _free_number()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _script(bindir / "Xvfb", f"echo {number} >/proc/self/fd/$2\nexit 3")
    manager = DisplayManager(start_timeout=10)
    try:
        with pytest.raises(PlatformError) as caught:
            manager.acquire(64, 64, env={"PATH": f"{bindir}:{os.environ['PATH']}"})
    finally:
        manager.shutdown()
    message = _one_line(caught.value)
    assert "exited (exit code 3)" in message and "Xvfb wrote nothing" in message, message
    assert "quoted below" not in message, message


def test_managed_reasons_name_what_to_do():
    from renderd.platforms import x11

    hung = x11.DisplayFacts(":7", False, "the X probe failed: the probe did not finish within 9 s", "hung")
    (reason,) = x11.screen_reasons(hung, 0, 64, 64, managed=True)
    assert "does not answer" in reason and "did not finish within 9 s" in reason, reason
    assert "apt-get install" in reason and "see Xvfb's output" not in reason, reason

    broken = x11.DisplayFacts(":7", False, "the X probe failed: exit code 1", "probe")
    (reason,) = x11.screen_reasons(broken, 0, 64, 64, managed=True)
    assert "_x11probe.py :7" in reason, reason

    one = x11.DisplayFacts(":7", True, screen_count=1, glx=True, screens=[{"width": 64, "height": 64, "depth": 24}])
    (reason,) = x11.screen_reasons(one, 1, 64, 64, managed=True)
    assert "screen 1 does not exist" in reason and "see Xvfb's output" not in reason, reason
    assert "apt-get install" in reason and "Xvfb" in reason, reason

    no_glx = x11.DisplayFacts(":7", True, screen_count=1, glx=False, screens=[{"width": 64, "height": 64, "depth": 24}])
    (reason,) = x11.screen_reasons(no_glx, 0, 64, 64, managed=True)
    assert "+extension GLX" in reason and "libgl1-mesa-dri libglx-mesa0" in reason, reason


# -- 3. a hung managed display does not pass for one that answers -----------------------------------------


def test_a_frozen_display_does_not_answer_even_when_the_deadline_is_spent_connecting(xvfb):
    # answers() connects, sends a connection setup, then waits for a byte for what is left of its timeout.
    # When connecting had used it all, the wait became settimeout(0.0): a non-blocking recv whose EAGAIN
    # was taken for "the socket is gone", and a stopped server was said to answer.
    manager = DisplayManager()
    try:
        display = manager.acquire(64, 64)
        assert display.answers(5.0)
        os.kill(display.pid, signal.SIGSTOP)
        try:
            assert not display.answers(1e-9)
            assert not display.answers(0.3)
        finally:
            os.kill(display.pid, signal.SIGCONT)
        assert display.answers(5.0)
        display.release()
    finally:
        manager.shutdown()
