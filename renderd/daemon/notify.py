"""Telling systemd how the service is doing: the ``sd_notify`` protocol, written by hand.

With ``Type=notify`` systemd passes ``NOTIFY_SOCKET``: the path of an AF_UNIX datagram socket, or an
abstract-namespace name written with a leading ``@``. Each datagram is newline-separated ``KEY=VALUE``
assignments: ``READY=1``, ``RELOADING=1``, ``STOPPING=1``, ``STATUS=...``, ``WATCHDOG=1``, ``MAINPID=...``.
Without ``NOTIFY_SOCKET`` every call does nothing. Notification is best effort: a failure to send is logged
once and never stops the daemon. Nor does a service manager that stops reading: datagrams are sent without
waiting (``MSG_DONTWAIT``), so a full socket fails the send instead of blocking the supervisor's loop.
"""

from __future__ import annotations

import logging
import os
import socket
import threading

__all__ = ["Notifier", "watchdog_interval"]

log = logging.getLogger(__name__)


def watchdog_interval(environ: dict[str, str] | None = None) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings: half of ``WATCHDOG_USEC``, or ``None`` when systemd asked for
    none (unset, unparsable, or ``WATCHDOG_PID`` naming another process)."""
    env = os.environ if environ is None else environ
    usec = env.get("WATCHDOG_USEC")
    if not usec:
        return None
    pid = env.get("WATCHDOG_PID")
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    if value <= 0:
        return None
    return value / 1_000_000 / 2


class Notifier:
    """Sends state changes to the service manager named by ``NOTIFY_SOCKET`` (if any).

    ``Notifier()`` reads the environment once; it never raises from :meth:`notify`.
    """

    def __init__(self, address: str | None = None) -> None:
        if address is None:
            address = os.environ.get("NOTIFY_SOCKET") or None
        self._address: str | bytes | None = None
        self._sock: socket.socket | None = None
        # notify() is called from the supervisor's loop and from control API threads (status changes on
        # lease and release): the socket is made, used and closed under this lock, so two first calls at
        # once do not each make one (the loser's would leak) and close() never pulls it from under a send.
        self._lock = threading.Lock()
        self._warned = False
        #: True once READY=1 has been announced (sent or not): later READY=1s (after a reload) only then.
        self.declared_ready = False
        if address:
            if address.startswith("@"):
                self._address = b"\0" + address[1:].encode()
            elif address.startswith("/"):
                self._address = address
            else:
                log.warning("ignoring NOTIFY_SOCKET=%r: neither an absolute path nor an @abstract name", address)

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def notify(self, *assignments: str) -> bool:
        """Send ``KEY=VALUE`` assignments in one datagram. Returns whether it was sent."""
        if self._address is None:
            return False
        data = "\n".join(a.replace("\n", " ") for a in assignments).encode("utf-8", "replace")
        try:
            with self._lock:
                if self._sock is None:
                    self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.sendto(data, socket.MSG_DONTWAIT, self._address)
        except OSError as exc:
            if not self._warned:
                log.warning("cannot notify the service manager at %r: %s", os.environ.get("NOTIFY_SOCKET"), exc)
                self._warned = True
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        self.declared_ready = True
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, status: str) -> bool:
        return self.notify(f"STATUS={status}")

    def reloading(self) -> bool:
        return self.notify("RELOADING=1")

    def stopping(self, status: str | None = None) -> bool:
        return self.notify("STOPPING=1", *([f"STATUS={status}"] if status else []))

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
