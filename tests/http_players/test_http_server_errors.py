"""PlayerHttpServer and the bridge on their error paths: a start that fails part-way, and what is left
behind then. Real sockets, pipes and descriptor limits; every wait has a deadline."""

from __future__ import annotations

import contextlib
import os
import resource
import tempfile
from typing import Iterator

import pytest

from renderd.transport.http import PlayerBridgeRegistry, PlayerHttpServer, launch_http


@contextlib.contextmanager
def one_free_descriptor() -> Iterator[None]:
    """While the block runs, this process can open exactly one more file descriptor."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = min(soft, 512)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    fillers: list[int] = []
    try:
        try:
            while True:
                fillers.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            pass
        os.close(fillers.pop())
        yield
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_start_that_fails_after_binding_leaves_nothing_open_and_stop_still_works(no_leaks):
    # The listening socket takes the last descriptor; the wake-up pipe then cannot be made. start() must
    # close the socket it bound and raise an OSError naming the address, and stop() must not fail.
    server = PlayerHttpServer(PlayerBridgeRegistry())
    with one_free_descriptor():
        with pytest.raises(OSError, match="cannot listen on 127.0.0.1") as info:
            server.start()
    assert "too many open files" in str(info.value).lower()
    server.stop()  # what a caller's cleanup does after a failed start; it raised TypeError
    server.stop()


def test_launch_http_with_an_unknown_keyword_starts_nothing(no_leaks, tmp_path, monkeypatch):
    # A misspelt keyword is a TypeError, raised before the listener, its thread and the private
    # directory exist (they were left running, and the directory on disk, by a TypeError from the call
    # that would have owned them).
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(TypeError, match="widht"):
        launch_http("renderd-player", widht=64)
    assert list(tmp_path.iterdir()) == []
