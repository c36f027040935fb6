"""FifoChannel, review 9: what a send keeps of the caller's buffers. Real named pipes; nothing may be left
behind (``no_leaks``)."""

from __future__ import annotations

import os
import tempfile
import time

import pytest

from renderd.errors import RenderdError
from renderd.transport.fifo import FifoChannel, FifoPair

pytestmark = pytest.mark.usefixtures("no_leaks")


def drain(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


def test_a_message_queued_behind_an_unsent_rest_is_copied_not_borrowed(tmp_path):
    # With partial_sends, a message sent while an earlier one's rest is still unsent is queued behind it.
    # The caller may reuse its buffer as soon as send() returns (a bytearray it encodes the next message
    # into), as it may when the message is written at once or its own rest kept: the bytes queued must be
    # the ones given, not what the buffer holds later.
    with FifoPair.create(tmp_path) as pair:
        channel = FifoChannel(pair.server_path, pair.client_path)
        reader = os.open(pair.client_path, os.O_RDONLY | os.O_NONBLOCK)  # (the player's end, read here)
        try:
            channel.partial_sends = True
            first = b"a" * (1 << 20)  # far more than client.pipe holds
            channel.send([first], time.monotonic() + 5)
            assert channel.unsent > 0
            buffer = bytearray(b"second message")
            channel.send([buffer], time.monotonic() + 5)
            buffer[:] = b"XXXXXXXXXXXXXX"  # reused by the caller
            received = b""
            deadline = time.monotonic() + 10
            while channel.unsent and time.monotonic() < deadline:
                received += drain(reader)
                channel.flush()
            received += drain(reader)
            assert not channel.unsent
            assert received == first + b"second message"
        finally:
            os.close(reader)
            channel.close()


def test_no_usable_temporary_directory_is_said_so(tmp_path, monkeypatch):
    # Every place Python looks for a temporary directory (TMPDIR, /tmp, /var/tmp, /usr/tmp, the working
    # directory) is full, read-only or not writable: the error must say that, name them and what to do,
    # not "no such file or directory" about no path at all. (The candidates are substituted, since /tmp
    # is writable here; Python's own search then runs against them.)
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(tempfile, "_candidate_tempdir_list", lambda: [str(tmp_path / "missing"), "/proc"])
    with pytest.raises(RenderdError) as info:
        FifoPair.create()
    message = str(info.value)
    assert "temporary directory" in message and "/proc" in message and "TMPDIR" in message, message
    assert "no such file or directory" not in message, message
    assert isinstance(info.value.__cause__, OSError)
