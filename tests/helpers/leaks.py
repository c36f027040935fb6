"""Leak checks shared by the suites: what a test leaves behind, compared with what was there before it.

``Leaks()`` records this process's file descriptors (``/proc/self/fd``), child processes and threads when
it is made; :meth:`Leaks.check` then polls, for a short settle time, until the descriptors are the same
set again, no new child process is left (zombies count only with ``zombies=True``), no new thread is
alive (with ``threads=True``) and the ``runtime`` directory, if given, is empty, and fails naming what is
left. Processes that were there before (a daemon shared by several tests) and those added to
``ignore`` (a daemon a test started itself), with their descendants, are not counted. A process left
behind is killed before the failure is raised, so one leaking test does not spill into the next.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil

#: How long, after a test, leftovers get to go away (renderd reaps and closes synchronously; this only
#: absorbs a busy machine's scheduling).
SETTLE_TIMEOUT = 3.0
#: How often the helpers poll.
POLL = 0.01


def open_fds() -> set[str]:
    """This process's open descriptors (by number), without the one the listing itself used."""
    out = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(name))
        except OSError:  # the directory listing's own descriptor, closed by now
            continue
        out.add(name)
    return out


def fd_targets(fds: Iterable[str]) -> dict[str, str]:
    """What each descriptor refers to (``?`` if it closed meanwhile)."""
    out = {}
    for fd in sorted(fds, key=int):
        try:
            out[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            out[fd] = "?"
    return out


def children(ignore: Iterable[int] = (), *, zombies: bool = True) -> list[psutil.Process]:
    """Every descendant of this process, except ``ignore`` and their descendants (and zombies, unless
    ``zombies``)."""
    skip = set(ignore)
    out = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.pid in skip or any(p.pid in skip for p in proc.parents()):
                continue
            if not zombies and proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.NoSuchProcess:
            continue
        out.append(proc)
    return out


def live_children() -> list[psutil.Process]:
    """Every descendant of this process that is still running (zombies left out)."""
    return children(zombies=False)


def describe(procs: Iterable[psutil.Process]) -> list[str]:
    out = []
    for proc in procs:
        try:
            status = proc.status()
            cmdline = " ".join(proc.cmdline())[:120] if status != psutil.STATUS_ZOMBIE else proc.name()
        except psutil.Error:
            status, cmdline = "gone", ""
        out.append(f"{proc.pid} {status} {cmdline}")
    return out


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(POLL)


def pid_gone(pid: int) -> bool:
    """True once ``pid`` has exited (reaped, or a zombie waiting to be)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class Leaks:
    """What a test started with; :meth:`check` fails naming what is left (see the module docstring)."""

    def __init__(self, runtime: Path | None = None, *, threads: bool = False, zombies: bool = False) -> None:
        self.runtime = runtime
        self.zombies = zombies
        self.fds = open_fds()
        # Processes that were there before (a daemon shared by several tests) and what they start.
        self.ignore: set[int] = {p.pid for p in psutil.Process().children()}
        # The Thread objects themselves, not their identifiers: a new thread may reuse a finished one's.
        self.threads: set[threading.Thread] | None = set(threading.enumerate()) if threads else None

    def _new_threads(self) -> list[threading.Thread]:
        if self.threads is None:
            return []
        return [t for t in threading.enumerate() if t not in self.threads and t.is_alive()]

    def check(self, timeout: float = SETTLE_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            extra_fds = open_fds() - self.fds
            procs = children(self.ignore, zombies=self.zombies)
            threads = self._new_threads()
            left = sorted(os.listdir(self.runtime)) if self.runtime is not None else []
            if not (extra_fds or procs or threads or left):
                return
            if time.monotonic() > deadline:
                break
            time.sleep(POLL)
        named = describe(procs)
        for proc in procs:
            try:
                proc.kill()
            except psutil.Error:
                pass
        assert not extra_fds, f"file descriptors left open: {fd_targets(extra_fds)}"
        assert not procs, f"processes left: {named}"
        assert not threads, f"threads left running: {threads}"
        assert not left, f"left in the runtime directory: {left}"
