"""Leases: which client holds which player, and how the daemon notices the client is gone.

A lease is granted to one client process (``client_pid``). Its id is a random secret
(:func:`secrets.token_hex`) that only the holder learns: releasing needs it, listing never shows it.
The daemon watches the holder through a pidfd (which works for processes that are not its children); when
the holder exits without releasing, the lease ends uncleanly and the player is recycled.
"""

from __future__ import annotations

import enum
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from renderd.errors import LeaseError, os_error_message

if TYPE_CHECKING:
    from renderd.daemon.supervisor import Player

__all__ = ["Lease", "LeaseEnd", "LEASE_ID_BYTES", "MAX_LEASE_TIMEOUT", "open_client_pidfd"]

#: Random bytes in a lease id (hex-encoded: twice as many characters).
LEASE_ID_BYTES = 16
#: Longest a lease request may wait for a player, in seconds (a Unity build's cold start fits). A client
#: asking for longer waits this long (``ControlClient.lease`` sends no more).
MAX_LEASE_TIMEOUT = 3600.0


class LeaseEnd(str, enum.Enum):
    """How a lease ended. Only ``RELEASED`` hands the player on; every other end recycles it."""

    RELEASED = "released"  # DELETE /v1/leases/{id} after a whole step
    UNCLEAN = "unclean"  # DELETE with {"clean": false}: the client may have left bytes in the pipes
    CLIENT_EXITED = "client_exited"  # the holder process died
    PLAYER_EXITED = "player_exited"  # the player died under the lease
    STOPPED = "stopped"  # the daemon stopped or the environment was removed


def open_client_pidfd(pid: int) -> int:
    """A pidfd for the client process ``pid`` (readable once it exits).

    Raises LeaseError when no such process exists or it cannot be watched.
    """
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise LeaseError(f"client_pid must be a positive integer, got {pid!r}")
    try:
        return os.pidfd_open(pid)
    except (ProcessLookupError, OverflowError):  # (a pid beyond what the kernel's pid_t holds)
        raise LeaseError(f"client_pid {pid} is not a running process") from None
    except OSError as exc:
        raise LeaseError(os_error_message(exc, f"cannot watch client_pid {pid}")) from exc


@dataclass(eq=False)
class Lease:
    """One grant of one player to one client process."""

    player: Player
    client_pid: int
    pidfd: int | None
    player_pid: int | None = None  # the process leased (the slot's process changes after the lease)
    player_index: int | None = None  # its index then (a slot may take another at its next start)
    id: str = field(default_factory=lambda: secrets.token_hex(LEASE_ID_BYTES))
    granted_at: float = field(default_factory=time.monotonic)
    granted_wall: float = field(default_factory=time.time)
    ended: LeaseEnd | None = None
    #: Why the daemon ended the lease, when it did (``ended`` is ``stopped``): what stopped the player.
    ended_reason: str | None = None
    #: How the player exited, when it died under this lease (or while being recycled after it).
    player_returncode: int | None = None

    def close_pidfd(self) -> None:
        fd, self.pidfd = self.pidfd, None
        if fd is not None:
            os.close(fd)

    def public(self) -> dict[str, Any]:
        """What anyone may see of the lease (no id: the id is the holder's secret)."""
        return {
            "client_pid": self.client_pid,
            "since": self.granted_wall,
            "duration": round(time.monotonic() - self.granted_at, 3),
        }
