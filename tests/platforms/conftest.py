"""Fixtures for the platform tests: real Xvfb servers started here with -displayfd and stopped by pid."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator

import psutil
import pytest

#: Deadline for a test Xvfb to announce its display number.
XVFB_START_DEADLINE = 15.0
#: Grace between SIGTERM and SIGKILL when a test stops its Xvfb.
XVFB_STOP_GRACE = 5.0

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "gpu")


def fixture_text(name: str) -> str:
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return f.read()


class XvfbServer:
    """An Xvfb started by a test: ``name`` is ``:N``; ``stop()`` TERMs, waits, KILLs and reaps it."""

    def __init__(self, args: list[str]) -> None:
        binary = shutil.which("Xvfb")
        assert binary is not None
        read_fd, write_fd = os.pipe()
        self.proc = subprocess.Popen(
            [binary, "-displayfd", str(write_fd), "-nolisten", "tcp", "-noreset", *args],
            pass_fds=(write_fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            process_group=0,
        )
        os.close(write_fd)
        try:
            data = b""
            deadline = time.monotonic() + XVFB_START_DEADLINE
            while b"\n" not in data:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError("test Xvfb did not announce its display")
                ready, _, _ = select.select([read_fd], [], [], remaining)
                if ready:
                    chunk = os.read(read_fd, 64)
                    if not chunk:
                        raise AssertionError(f"test Xvfb exited: {self.proc.wait(5)}")
                    data += chunk
        except BaseException:
            self.stop()
            raise
        finally:
            os.close(read_fd)
        self.number = int(data.strip())
        self.name = f":{self.number}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(XVFB_STOP_GRACE)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(XVFB_STOP_GRACE)


@pytest.fixture
def xvfb() -> Iterator:
    """``xvfb("-screen", "0", "320x240x24", "+extension", "GLX")`` starts a real Xvfb; all are stopped after."""
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    started: list[XvfbServer] = []

    def start(*args: str) -> XvfbServer:
        server = XvfbServer(list(args))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def xvfb_children() -> list[psutil.Process]:
    """Xvfb processes that are children of this test process (there must be none after a test)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.name() == "Xvfb" and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def wait_until(predicate, timeout: float, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return bool(value)
        time.sleep(interval)


@pytest.fixture(autouse=True)
def _only_this_tests_displays(monkeypatch) -> None:
    """Discovery sees only the X displays a test starts: one already running on the machine (a developer's
    Xvfb, another test run's) would otherwise be a candidate, and change what discovery picks.

    A display is the test's when the process listening on its socket descends from this one (the test's
    own Xvfbs, and those of the processes it starts). A name alone is not enough: a number held by another
    process when the test began can be freed and then taken by the test's own server, and another
    process's server can appear while the test runs. A socket nobody listens on (a stale one a test made)
    counts as the test's unless it was there when the test began."""
    from renderd.platforms import x11, xvfb as xvfb_mod

    real = x11.socket_displays
    foreign = set(real())
    me = os.getpid()

    def ours(name: str, socket_dir: str) -> bool:
        pid = xvfb_mod._listener_pid(os.path.join(socket_dir, "X" + name[1:]))
        if pid is None:
            return name not in foreign
        try:
            return any(parent.pid == me for parent in psutil.Process(pid).parents())
        except psutil.Error:
            return name not in foreign

    def displays(*args, **kwargs):
        socket_dir = kwargs.get("socket_dir", args[0] if args else x11.X11_SOCKET_DIR)
        return [name for name in real(*args, **kwargs) if ours(name, socket_dir)]

    monkeypatch.setattr(x11, "socket_displays", displays)


@pytest.fixture
def no_xvfb_left() -> Iterator[None]:
    """Fail the test if it leaves an Xvfb child behind."""
    before = {p.pid for p in xvfb_children()}
    yield
    left = [p for p in xvfb_children() if p.pid not in before]
    assert not left, f"Xvfb left behind: {left}"
