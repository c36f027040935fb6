"""FifoChannel, review 9: what a send keeps of the caller's buffers. Real named pipes; nothing may be left
behind (``no_leaks``)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time

import pytest

from renderd.errors import RenderdError
from renderd.transport.fifo import DEFAULT_PIPE_SIZE, FifoChannel, FifoPair

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


def _as_nobody(tmp_dir: str) -> dict:
    """In a child forked from this process and running as ``nobody``: use up the user's pipe budget
    (``fs.pipe-user-pages-soft``), then make a pair and a channel; what the channel got and the warnings."""
    import fcntl
    import json
    import logging
    import pwd

    from renderd.transport.fifo import F_GETPIPE_SZ, F_SETPIPE_SZ

    nobody = pwd.getpwnam("nobody")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # (the child: only os._exit leaves it)
        result: dict = {}
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            held = []
            for _ in range(4096):  # 1 MiB pipes until the kernel refuses to grow one
                held += os.pipe()
                try:
                    fcntl.fcntl(held[-2], F_SETPIPE_SZ, 1 << 20)
                except PermissionError:
                    break
            result["budget_used"] = fcntl.fcntl(held[-2], F_GETPIPE_SZ) < (1 << 20)
            records: list[str] = []
            handler = logging.Handler(logging.WARNING)
            handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
            logging.getLogger("renderd").addHandler(handler)
            with FifoPair.create(tmp_dir) as pair:
                for _ in range(2):
                    channel = FifoChannel(pair.server_path, pair.client_path)
                    result["pipe_size"] = channel.pipe_size
                    channel.close()
            result["warnings"] = records
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            result["error"] = repr(exc)
        os.write(w, json.dumps(result).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a child as nobody")
def test_a_pipe_that_cannot_be_grown_over_the_users_budget_is_warned_about_once():
    # An unprivileged user's pipes may hold fs.pipe-user-pages-soft pages (64 MiB) in all: past that (64
    # players with their 1 MiB pipes), F_SETPIPE_SZ is refused and every new pipe gets 8 KiB, a frame needs
    # dozens of pipe fills and moves several times slower. That must be said (once), with what to do, not
    # only logged at debug level.
    tmp_dir = tempfile.mkdtemp(prefix="renderd-budget-")
    os.chmod(tmp_dir, 0o777)
    try:
        result = _as_nobody(tmp_dir)
    finally:
        shutil.rmtree(tmp_dir)
    assert "error" not in result, result
    assert result["budget_used"] and result["pipe_size"] < DEFAULT_PIPE_SIZE
    warnings = result["warnings"]
    assert len(warnings) == 1, warnings
    assert "pipe-user-pages-soft" in warnings[0] and str(result["pipe_size"]) in warnings[0], warnings[0]
    assert "pipe_size" in warnings[0]


def test_a_ctrl_c_while_the_pipes_are_made_leaves_no_directory(tmp_path, monkeypatch):
    made = []
    real_mkfifo = os.mkfifo

    def interrupted(path, mode=0o666):
        if made:
            raise KeyboardInterrupt  # (as a Ctrl-C between the two pipes)
        made.append(path)
        real_mkfifo(path, mode)

    monkeypatch.setattr(os, "mkfifo", interrupted)
    with pytest.raises(KeyboardInterrupt):
        FifoPair.create(tmp_path)
    assert made and os.listdir(tmp_path) == []
