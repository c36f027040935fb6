"""Fixtures for the HTTP transport tests: a served registry on loopback and leak checks."""

from __future__ import annotations

import os
import threading
import time

import pytest

from renderd.transport.http import PlayerBridgeRegistry, PlayerHttpServer
from tests.helpers.http_util import DEADLINE, RawClient, live_children


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
    fds = set(os.listdir("/proc/self/fd"))
    threads = {t.ident for t in threading.enumerate()}
    yield
    deadline = time.monotonic() + DEADLINE
    while True:
        children = live_children()
        extra_threads = [t for t in threading.enumerate() if t.ident not in threads and t.is_alive()]
        extra_fds = set(os.listdir("/proc/self/fd")) - fds
        if not children and not extra_threads and not extra_fds:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    for child in children:
        child.kill()
    assert not children, f"processes left behind: {children}"
    assert not extra_threads, f"threads left behind: {extra_threads}"
    assert not extra_fds, f"file descriptors left behind: {sorted(extra_fds)}"
