"""Fixtures for the HTTP transport tests: a served registry on loopback and leak checks."""

from __future__ import annotations

import threading
import time

import pytest

from renderd.transport.http import PlayerBridgeRegistry, PlayerHttpServer
from tests.helpers.http_util import DEADLINE, RawClient
from tests.helpers.leaks import Leaks


@pytest.fixture
def served():
    """(registry, server): a PlayerHttpServer on 127.0.0.1, stopped afterwards (threads checked)."""
    before = {t.ident for t in threading.enumerate()}
    registry = PlayerBridgeRegistry(max_request_size=1 << 20)
    server = PlayerHttpServer(registry).start()
    clients: list[RawClient] = []
    try:
        yield registry, server, clients
    finally:
        for client in clients:
            client.close()
        server.stop()
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        extra = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
        if not extra:
            break
        time.sleep(0.01)
    assert not extra, f"threads left behind: {extra}"


@pytest.fixture
def no_leaks():
    """Fail if the test leaves a child process, a thread or a file descriptor behind."""
    leaks = Leaks(threads=True)
    yield leaks
    leaks.check(DEADLINE)
