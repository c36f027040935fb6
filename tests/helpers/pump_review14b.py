"""An HTTP player's bridge pumped onto a FIFO pair (:class:`FifoPump`), for the tests of the pump and of the players'
HTTP server: the server, the bridge, the pump and the reader of server.pipe made, and everything stopped and
removed afterwards; the player is a real one, or a raw connection that has posted its first frame."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from renderd.protocol import FieldType
from renderd.transport.fifo import FifoChannel, FifoPair
from renderd.transport.http import FifoPump, PlayerBridge, PlayerBridgeRegistry, PlayerHttpServer

from tests.helpers.http_util import DEADLINE, RawClient, frame_body, request_bytes


@dataclass
class Pumped:
    """What :func:`pumped_bridge` made. ``channel`` (None without a reader) reads server.pipe and writes client.pipe
    as a client does; ``done`` holds what the pump's ``on_done`` was given; ``player``: see :func:`raw_player`."""

    registry: PlayerBridgeRegistry
    server: PlayerHttpServer
    pair: FifoPair
    app: Any = None
    channel: FifoChannel | None = None
    bridge: PlayerBridge | None = None
    pump: FifoPump | None = None
    player: RawClient | None = None
    done: list = field(default_factory=list)


@contextlib.contextmanager
def pumped_bridge(
    *,
    name: str = "pumped player",
    alive: Callable[[], bool] | None = None,
    app: Callable[[PlayerBridgeRegistry], Any] | None = None,
    reader: bool = True,
) -> Iterator[Pumped]:
    """A server (its WSGI application ``app(registry)``, if given) with one bridge (``name``, ``alive``) pumped onto
    a new FIFO pair, whose server.pipe a channel reads (opened first, as the daemon does) unless ``reader`` is
    false. At the end the channel is closed, the pump stopped, the server stopped and the pair removed."""
    registry = PlayerBridgeRegistry()
    wsgi = app(registry) if app is not None else None
    made = Pumped(registry, PlayerHttpServer(registry, app=wsgi).start(), FifoPair.create(), wsgi)
    try:
        if reader:
            made.channel = FifoChannel(made.pair.server_path, made.pair.client_path)
        made.bridge = registry.register(name=name, alive=alive)
        made.pump = FifoPump(made.bridge, made.pair.server_path, made.pair.client_path, on_done=made.done.append).start()
        yield made
    finally:
        if made.channel is not None:
            made.channel.close()
        if made.pump is not None:
            made.pump.stop()
        made.server.stop()
        made.pair.remove()


@contextlib.contextmanager
def raw_player(**kwargs: Any) -> Iterator[Pumped]:
    """:func:`pumped_bridge` (``kwargs``) whose ``player`` is a raw connection that has posted the bridge's first
    frame, read from server.pipe when there is a reader; the connection is closed first at the end."""
    with pumped_bridge(**kwargs) as made:
        try:
            made.player = RawClient(made.server.port)
            made.player.send(request_bytes(frame_body(made.bridge.token)))
            if made.channel is not None:
                first = made.channel.recv(time.monotonic() + DEADLINE, "start_timeout")
                assert first.first(FieldType.METADATA) is not None
            yield made
        finally:
            if made.player is not None:
                made.player.close()


def wait_until_ended(pump: FifoPump) -> None:
    """Wait while ``pump`` runs, at most ``DEADLINE`` seconds (the caller asserts what it expects then)."""
    end = time.monotonic() + DEADLINE
    while pump.running and time.monotonic() < end:
        time.sleep(0.01)
