"""Fixtures for the HTTP transport tests: a served registry on loopback and leak checks."""

from __future__ import annotations

import threading
import time

import pytest

from renderd.transport.http import MAX_CONNECTIONS
from tests.helpers.http_util import DEADLINE, small_server
from tests.helpers.leaks import Leaks


@pytest.fixture
def served():
    """(registry, server): a PlayerHttpServer on 127.0.0.1, stopped afterwards (threads checked)."""
    before = {t.ident for t in threading.enumerate()}
    with small_server(MAX_CONNECTIONS) as made:  # (the server's default number of connections)
        yield made
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
