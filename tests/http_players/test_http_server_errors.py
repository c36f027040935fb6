"""PlayerHttpServer and launch_http on their error paths (a start that fails part-way, a misspelt
keyword, no descriptor left to accept with) and request versions at the edge of HTTP/1. Real sockets,
pipes and descriptor limits; every wait has a deadline."""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import socket
import tempfile
import threading
import time
from typing import Iterator

import pytest

from renderd.errors import PlayerTimeout
from renderd.protocol import Message
from renderd.transport import http as http_transport
from renderd.transport.http import PlayerBridgeRegistry, PlayerHttpServer, launch_http

from tests.helpers.http_util import DEADLINE, connect, frame_body, request_bytes
from tests.helpers.leaks import wait_for


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


def test_running_out_of_descriptors_is_logged_once_not_at_every_retry(caplog, no_leaks):
    # The pending connection keeps the listening socket readable, so the accept loop retries every
    # ACCEPT_RETRY_INTERVAL for as long as no descriptor is free: it logged an error at every retry (ten
    # lines a second). Once descriptors are free again, the waiting connection is served.
    caplog.set_level(logging.ERROR, logger="renderd.transport.http")
    with PlayerHttpServer(PlayerBridgeRegistry()) as server:
        with one_free_descriptor():
            client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # the last descriptor
            try:
                client.settimeout(DEADLINE)
                client.connect(("127.0.0.1", server.port))
                wait_for(lambda: any("cannot accept" in r.getMessage() for r in caplog.records), DEADLINE, "a failed accept")
                time.sleep(6 * http_transport.ACCEPT_RETRY_INTERVAL)  # the retries to count
            except BaseException:
                client.close()
                raise
        with client:
            failures = [r for r in caplog.records if "cannot accept" in r.getMessage()]
            assert len(failures) == 1, [r.getMessage() for r in failures]
            assert "too many open files" in failures[0].getMessage()
            client.sendall(b"GET /ping HTTP/1.1\r\n\r\n")
            assert client.recv(1000).endswith(b"pong")


@pytest.mark.parametrize("version", ["HTTP/1.2", "HTTP/1.9"])
def test_a_later_http_1_minor_version_is_served_as_http_1_1(served, version):
    # docs/http.md: 505 is for what is not HTTP/1.x; RFC 9110 6.2 serves a later minor version as the
    # highest one the server speaks (it was answered 505 and the connection closed).
    client = connect(served)
    for _ in range(2):  # kept alive, as HTTP/1.1
        client.send(f"GET /ping {version}\r\n\r\n".encode())
        response = client.response()
        assert (response.status, response.body) == (200, b"pong")
    client.send(b"GET /ping HTTP/1.10\r\n\r\n")  # not HTTP-version syntax (one digit each side)
    assert client.response().status == 505


@pytest.mark.parametrize("watched", [False, True])
def test_a_nan_deadline_counts_as_passed(served, watched):
    # session.step_timeout = nan makes the deadline NaN, which never compares as passed: recv waited for
    # ever (Condition.wait(nan) never returns). As on the FIFO transport, it is a PlayerTimeout at once.
    registry, _, _ = served
    bridge = registry.register(alive=(lambda: True) if watched else None)
    outcome: list = []

    def receive() -> None:
        try:
            bridge.recv(float("nan"))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    thread.join(2.0)
    if thread.is_alive():
        bridge.close()  # ends the wait (CallOrderError), so the thread does not outlive the test
        thread.join(DEADLINE)
    assert outcome and isinstance(outcome[0], PlayerTimeout), outcome


def test_an_infinite_deadline_waits_for_the_frame(served):
    # A caller with no deadline passes inf (or one far off): recv raised OverflowError at once (a lock
    # takes no timeout that large) instead of waiting for the player's frame.
    registry, _, _ = served
    bridge = registry.register()
    outcome: list = []

    def receive() -> None:
        try:
            outcome.append(bridge.recv(float("inf")))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    wait_for(lambda: outcome or thread.is_alive(), DEADLINE, "recv to start")
    client = connect(served)
    client.send(request_bytes(frame_body(bridge.token)))
    thread.join(DEADLINE)
    assert outcome and isinstance(outcome[0], Message), outcome
    bridge.close()  # the post waiting for its action is answered 410
    assert client.response().status == 410
