"""A FifoPump's errors name the pipe they came from (its path), over real FIFOs."""

from __future__ import annotations

import os
import threading
import time

from renderd.errors import ProtocolError
from renderd.protocol import FieldType, encode_metadata
from renderd.transport.fifo import FifoPair
from renderd.transport.http import FifoPump, PlayerBridgeRegistry

from tests.helpers.http_util import DEADLINE


def _posting(bridge) -> threading.Thread:
    """A player's post of one frame, waiting for its action on a thread until the bridge closes."""

    def post() -> None:
        try:
            bridge.post([(FieldType.METADATA, encode_metadata({"agents": []}))])
        except Exception:  # (BridgeClosed at the end of the test)
            pass

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread


def test_a_malformed_client_message_is_reported_with_the_client_pipes_path(no_leaks):
    pair = FifoPair.create()
    bridge = PlayerBridgeRegistry().register(name="pumped player")
    done: list = []
    ended = threading.Event()
    rfd = wfd = None
    pump = thread = None
    try:
        rfd = os.open(pair.server_path, os.O_RDONLY | os.O_NONBLOCK)  # the daemon's reader of server.pipe
        pump = FifoPump(bridge, pair.server_path, pair.client_path,
                        on_done=lambda error: (done.append(error), ended.set())).start()
        thread = _posting(bridge)
        deadline = time.monotonic() + DEADLINE
        while pump.frames == 0 and time.monotonic() < deadline:  # the first frame is on server.pipe
            time.sleep(0.005)
        assert pump.frames == 1
        while wfd is None and time.monotonic() < deadline:  # the pump opens client.pipe after its first write
            try:
                wfd = os.open(pair.client_path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.005)
        os.write(wfd, b"\xff" * 32)  # no field type renderd knows
        assert ended.wait(DEADLINE)
        (error,) = done
        assert isinstance(error, ProtocolError) and f"client.pipe ({pair.client_path})" in str(error), error
        assert pair.client_path in pump.reason
    finally:
        bridge.close()
        if pump is not None:
            pump.stop()
        if thread is not None:
            thread.join(DEADLINE)
        for fd in (rfd, wfd):
            if fd is not None:
                os.close(fd)
        pair.remove()


def test_a_pipe_that_cannot_be_opened_is_reported_with_its_path(no_leaks, tmp_path):
    bridge = PlayerBridgeRegistry().register(name="pumped player")
    missing = str(tmp_path / "gone" / "server.pipe")
    done: list = []
    ended = threading.Event()
    pump = FifoPump(bridge, missing, str(tmp_path / "client.pipe"),
                    on_done=lambda error: (done.append(error), ended.set())).start()
    thread = _posting(bridge)
    try:
        assert ended.wait(DEADLINE)
        (error,) = done
        assert missing in str(error) and "ENOENT" in str(error), error
    finally:
        bridge.close()
        pump.stop()
        thread.join(DEADLINE)
