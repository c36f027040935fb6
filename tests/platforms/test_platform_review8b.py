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
