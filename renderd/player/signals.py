"""Signals for the player process: handlers that only record, and waits that never miss them.

The SIGTERM and SIGINT handlers record the signal number; Python's C-level handler also writes it to a
self-pipe (``signal.set_wakeup_fd``), and every place the player waits -- for a pipe to be readable or
writable, a sleep, a hang -- is a ``select`` that includes that pipe. So a signal that arrives just
before a wait begins still ends the wait at once (a plain blocking ``read`` or ``signal.pause`` could
miss it and block forever), and :func:`wait` raises :class:`Terminated`, which unwinds to ``main()``
for a logged, clean exit.

The handler also raises :class:`Terminated` itself, once (for the first signal only), so a blocking
call made outside this module (a socket read inside ``http.client``) is unwound too instead of being
retried; it never logs or allocates beyond that. Code that must not miss a signal waits with
:func:`wait`.

Blocking ``open()`` of a FIFO cannot be select-ed; :func:`open_blocking` runs it in a helper thread and
waits for the thread the same way (and, given the write end of the other pipe, for its reader to go away).
"""

from __future__ import annotations

import errno
import os
import select
import signal
import threading
import time
from typing import Sequence

__all__ = ["Terminated", "install", "installed", "exiting", "wait", "sleep", "wait_forever", "open_blocking", "check"]

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Seconds an open waited for with :func:`open_blocking` still has to complete once its peer is seen gone.
PEER_GONE_GRACE = 1.0


class Terminated(BaseException):
    """A handled signal arrived; ``signum`` says which. Raised by the waits in this module."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


_received: list[int] = []
_wakeup_r: int | None = None


def _record(signum: int, frame: object) -> None:
    first = not _received
    _received.append(signum)
    if first:  # unwind whatever the main thread blocks in; later signals only record (exit is under way)
        raise Terminated(signum)


def install() -> None:
    """Install the recording handlers and the wakeup pipe, and unblock the signals if the process was started
    with them blocked (main thread only; idempotent)."""
    global _wakeup_r
    if _wakeup_r is not None:
        return
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    for signum in HANDLED_SIGNALS:
        signal.signal(signum, _record)
    # A process inherits its parent's signal mask across exec: blocked, they would never be delivered.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED_SIGNALS)
    _wakeup_r = r


def installed() -> bool:
    return _wakeup_r is not None


def exiting() -> None:
    """The process is exiting with a status already decided: ignore SIGTERM and SIGINT from now on.

    Python puts the default dispositions back while the interpreter shuts down, before it tears the modules
    down, so a SIGTERM arriving then (a client that ends the player and then signals it) would kill the
    process (exit status -15) instead of the clean exit it is already making; one arriving a little earlier
    would raise :class:`Terminated` out of the exit path. Ignored, it changes nothing. Main thread only.

    Called as soon as the code is decided (a link's serve() ending, an unhandled error, a fault that ends the
    process), before the pipes are closed and the reason logged: a signal in between would otherwise turn
    that code into a clean exit 0. A no-op where :func:`install` was not called (library use).
    """
    if _wakeup_r is None:
        return
    for signum in HANDLED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def check() -> None:
    """Raise :class:`Terminated` if a handled signal has arrived."""
    if _received:
        raise Terminated(_received[0])


def _drain() -> None:
    # The C-level handler writes each signal's number to the pipe: act on it even if the Python-level
    # handler has not run yet.
    try:
        while True:
            data = os.read(_wakeup_r, 512)
            if not data:
                return
            for signum in data:
                if signum in HANDLED_SIGNALS and signum not in _received:
                    _received.append(signum)
    except BlockingIOError:
        pass


def wait(read: Sequence[int] = (), write: Sequence[int] = (), timeout: float | None = None) -> tuple[list, list]:
    """``select`` on ``read``/``write`` and the wakeup pipe. Returns the ready (read, write) lists (both
    empty on timeout). Raises :class:`Terminated` when a handled signal arrives."""
    check()
    if _wakeup_r is None:  # not installed (library use): a plain select
        r, w, _ = select.select(list(read), list(write), [], timeout)
        return r, w
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        r, w, _ = select.select([*read, _wakeup_r], list(write), [], remaining)
        if _wakeup_r in r:
            _drain()
            r.remove(_wakeup_r)
        check()  # a wakeup byte may also be a signal we do not handle (SIGCHLD...): then carry on
        if r or w or (deadline is not None and time.monotonic() >= deadline):
            return r, w


def sleep(seconds: float) -> None:
    """Sleep ``seconds``; raises :class:`Terminated` early on a handled signal."""
    deadline = time.monotonic() + seconds
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        wait(timeout=remaining)


def wait_forever() -> None:
    """Block until a handled signal arrives (raises :class:`Terminated`)."""
    while True:
        if _wakeup_r is None:
            signal.pause()
        else:
            wait()


def open_blocking(path: str, flags: int, peer: int | None = None) -> int:
    """``os.open(path, flags)`` that may block (a FIFO waiting for its other end), without missing a signal.

    The open runs in a daemon thread; this waits for it with :func:`wait`. Raises :class:`Terminated`
    (the thread is left blocked; the process is about to exit) or the OSError of the open.

    ``peer``, the write end of a pipe the same peer reads, is watched too: when its last reader closes it
    (POLLERR: the peer is gone, or will never read again) this raises :class:`BrokenPipeError` instead of
    waiting for an open that nobody will ever make (the thread is left blocked; the caller exits).
    """
    result: list = []
    notify_r, notify_w = os.pipe2(os.O_CLOEXEC)

    def opener() -> None:
        try:
            result.append(os.open(path, flags))
        except OSError as exc:
            result.append(exc)
        os.write(notify_w, b"x")

    thread = threading.Thread(target=opener, name=f"open {os.path.basename(path)}", daemon=True)
    thread.start()
    # On Terminated or BrokenPipeError the thread stays blocked; the process is about to exit.
    if peer is None:
        wait(read=[notify_r])
    else:
        _wait_watching(notify_r, peer, path)
    thread.join()
    os.close(notify_r)
    os.close(notify_w)
    outcome = result[0]
    if isinstance(outcome, OSError):
        raise outcome
    return outcome


def _wait_watching(fd: int, peer: int, path: str) -> None:
    """Wait until ``fd`` is readable, as :func:`wait` does; raise BrokenPipeError once ``peer`` (a pipe's write
    end) has no reader left. ``poll``, not ``select``: select reports that as writable, like room in the pipe."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    poller.register(peer, 0)  # only POLLERR (no reader left) and POLLHUP are reported for it
    if _wakeup_r is not None:
        poller.register(_wakeup_r, select.POLLIN)
    gone_by: float | None = None  # when the peer's end was seen closed: the open has until then to complete
    while True:
        check()
        timeout = None if gone_by is None else max(0.0, gone_by - time.monotonic()) * 1000
        ready = dict(poller.poll(timeout))
        if _wakeup_r is not None and _wakeup_r in ready:
            _drain()
            check()  # a wakeup byte may also be a signal we do not handle (SIGCHLD...): then carry on
        if fd in ready:
            return
        if peer in ready:  # POLLERR (POLLNVAL would be a bug: never spin on it)
            # The peer may have opened the other pipe just before it closed this one, and the opening thread not
            # have said so yet: its open is given PEER_GONE_GRACE to complete before the peer is taken as gone.
            poller.unregister(peer)
            gone_by = time.monotonic() + PEER_GONE_GRACE
        elif gone_by is not None and time.monotonic() >= gone_by:
            raise BrokenPipeError(errno.EPIPE, f"the peer closed its end of the other pipe while opening {path}")
