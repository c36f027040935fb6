"""The FIFO link's write path: reused image encodings, whole and partial writes, and SIGTERM while the
player is blocked writing an answer nobody reads."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import termios
import threading
import time

import numpy as np
import pytest

from renderd.player.core import Player
from renderd.player.fifo_link import _AnswerEncoder, encode_answer, write_all
from renderd.protocol import message_nbytes

#: Deadline for things that must happen promptly.
PROMPT = 10.0
#: A frame larger than the 64 KiB default pipe the test driver uses: every answer takes several writes.
BIG = ["-screen-width", "200", "-screen-height", "150"]


def _bytes(buffers) -> bytes:
    return b"".join(bytes(memoryview(b).cast("B")) for b in buffers)


@pytest.mark.parametrize("static_frame", [True, False])
def test_encoder_gives_encode_answer_bytes_and_reuses_image_fields(static_frame):
    p = Player(width=24, height=16, static_frame=static_frame, platform="Linux64")
    encoder = _AnswerEncoder()
    actions = [{"action": "Pass"}, {"action": "Pass", "renderDepthImage": True}, {"action": "RotateRight"},
               {"action": "Pass"}, {"action": "ChangeResolution", "x": 10, "y": 8}, {"action": "Pass"},
               {"action": "Initialize", "renderInstanceSegmentation": True}, {"action": "Pass"},
               {"action": "Pass", "renderImage": False}]
    for action in actions:
        answer = p.answer(action)
        buffers, nbytes = encoder.encode(answer)
        assert _bytes(buffers) == _bytes(encode_answer(answer))
        assert nbytes == message_nbytes(buffers)


def test_encoder_reuses_the_encoding_of_an_unchanged_static_frame():
    p = Player(width=24, height=16, static_frame=True)
    encoder = _AnswerEncoder()
    first, _ = encoder.encode(p.answer({"action": "Pass"}))
    second, _ = encoder.encode(p.answer({"action": "MoveAhead"}))
    assert len(first) == len(second) and all(a is b for a, b in zip(first[2:], second[2:]))
    assert first[1] != second[1]  # the metadata differs (lastAction, sequenceId, position)
    p.answer({"action": "ChangeResolution", "x": 10, "y": 8})
    third, _ = encoder.encode(p.answer({"action": "Pass"}))
    assert third[3] is not first[3] and memoryview(third[3]).nbytes == 10 * 8 * 3  # a new frame: re-encoded


def _reader(fd: int, total: int, out: list, deadline: float) -> None:
    got = bytearray()
    while len(got) < total and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            got += os.read(fd, 1 << 16)
    out.append(bytes(got))


@pytest.mark.parametrize("with_size", [True, False])
def test_write_all_resumes_partial_writes_on_a_nonblocking_pipe(with_size):
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        fcntl.fcntl(w, fcntl.F_SETFL, fcntl.fcntl(w, fcntl.F_GETFL) | os.O_NONBLOCK)
        rng = np.random.default_rng(7)
        buffers = [b"head", rng.integers(0, 256, 300_000, dtype=np.uint8), b"", memoryview(b"x" * 70_000), b"end"]
        expected = _bytes(buffers)
        out: list = []
        thread = threading.Thread(target=_reader, args=(r, len(expected), out, time.monotonic() + PROMPT))
        thread.start()
        views = [memoryview(b).cast("B") for b in buffers]
        assert write_all(w, views, len(expected) if with_size else None) == len(expected)
        thread.join(PROMPT)
        assert out == [expected]
    finally:
        os.close(r)
        os.close(w)


def test_write_all_whole_message_in_one_call():
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        buffers = [b"abc", memoryview(b"defg"), b"h"]
        assert write_all(w, buffers, 8) == 8
        assert os.read(r, 100) == b"abcdefgh"
    finally:
        os.close(r)
        os.close(w)


def test_static_frame_steps_over_the_pipe(spawn):
    p = spawn([*BIG, "--static-frame"], platform="Linux64")
    first = p.start_session()
    for i in range(1, 60):
        action = ["Pass", "RotateRight", "MoveAhead", "NoSuchAction"][i % 4]
        ev = p.step(action)
        assert ev.sequence_id == i
        assert ev.metadata["lastAction"] == action
        assert ev.metadata["lastActionSuccess"] is (action != "NoSuchAction")
        assert np.array_equal(ev.frame, first.frame)


def _pipe_bytes(fd: int) -> int:
    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), "little")


@pytest.mark.parametrize("signum, name", [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")])
def test_signal_while_blocked_writing_an_unread_answer(spawn, signum, name):
    p = spawn([*BIG, "--static-frame"], platform="Linux64")
    p.start_session()
    p.send("Pass")  # the answer (90 KB) does not fit the 64 KiB pipe, and nobody reads it
    deadline = time.monotonic() + PROMPT
    while _pipe_bytes(p.server_fd) < 65536:
        assert time.monotonic() < deadline, "the player never filled server.pipe"
        time.sleep(0.01)
    time.sleep(0.05)  # well inside its wait for room in the pipe
    started = time.monotonic()
    p.proc.send_signal(signum)
    assert p.wait(PROMPT) == 0
    assert time.monotonic() - started < 2.0
    assert f"received {name}" in p.log_text()
