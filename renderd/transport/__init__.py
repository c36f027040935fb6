"""Transports carry encoded messages between a client and a player.

Every transport offers the client the same small interface (:class:`Channel`), so a
:class:`renderd.client.Session` never knows whether its player talks over named pipes (``fifo``) or
posts frames over HTTP (``http``). Framing lives in :mod:`renderd.protocol` and is shared by all of them.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from renderd.protocol import Message


class Channel(Protocol):
    """The client's end of one player's message stream. Deadlines are ``time.monotonic()`` values.

    ``recv`` returns the next whole message or raises: :class:`~renderd.errors.PlayerTimeout` when the
    deadline passes, :class:`~renderd.errors.PlayerCrashed` when the player's end closes or the player
    exits, :class:`~renderd.errors.ProtocolError` on malformed bytes. ``send`` writes one encoded
    message (a list of buffers from :func:`renderd.protocol.encode_action`) completely or raises the same.
    ``close`` is idempotent.
    """

    def recv(self, deadline: float, deadline_name: str = "step_timeout") -> Message: ...

    def send(self, buffers: Sequence[Any], deadline: float, deadline_name: str = "step_timeout") -> None: ...

    def close(self) -> None: ...
