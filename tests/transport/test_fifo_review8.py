"""FifoChannel's send side: an action written only in part (a deadline passed while the player did not read,
or ``partial_sends``) is finished before anything else is written, so the stream stays framed."""

from __future__ import annotations

import contextlib
import select
import time
from collections.abc import Iterator

import pytest

from renderd.errors import PlayerTimeout
from renderd.event import FrameAssembler
from renderd.process import PlayerProcess, player_env
from renderd.protocol import encode_action
from renderd.transport.fifo import FifoChannel, FifoPair

from .conftest import peer_argv

pytestmark = pytest.mark.usefixtures("no_leaks")

#: Much larger than client.pipe's buffer (64 KiB).
BLOB = "x" * (1024 * 1024)


@contextlib.contextmanager
def peer(tmp_path, mode: str, *args: object) -> Iterator[FifoChannel]:
    with FifoPair.create(tmp_path) as pair:
        channel = FifoChannel(pair.server_path, pair.client_path)
        environ = player_env(None, server_pipe=pair.server_path, client_pipe=pair.client_path, extra={})
        proc = PlayerProcess.spawn(peer_argv(mode, *args), environ, tmp_path / "player.log")
        channel.attach(proc)
        try:
            channel.recv(time.monotonic() + 30, "start_timeout")
            yield channel
        finally:
            channel.close()
            proc.stop()


def _answer(channel: FifoChannel, assembler: FrameAssembler, seq: int) -> int:
    return assembler.event(channel.recv(time.monotonic() + 20), seq).sequence_id


def test_an_action_cut_by_its_deadline_is_finished_before_the_next_one(tmp_path):
    # The player reads nothing for a while: the first action's write times out half-way. The next send must
    # write the rest of it first: the player then reads both actions whole and answers both.
    with peer(tmp_path, "slow-reader", 1.0) as channel:
        assembler = FrameAssembler()
        with pytest.raises(PlayerTimeout, match="did not read its action"):
            channel.send(encode_action({"action": "Pass", "sequenceId": 1, "blob": BLOB}), time.monotonic() + 0.2)
        channel.send(encode_action({"action": "Pass", "sequenceId": 2}), time.monotonic() + 20)
        assert _answer(channel, assembler, 1) == 1
        assert _answer(channel, assembler, 2) == 2


def test_partial_sends_keep_the_rest_for_flush(tmp_path):
    # With partial_sends, send() writes what the pipe takes at once and returns; flush() writes more as the
    # player reads (the caller polls writer_fileno() for POLLOUT). A send meanwhile queues behind the rest.
    with peer(tmp_path, "serve") as channel:
        assembler = FrameAssembler()
        channel.partial_sends = True
        started = time.monotonic()
        channel.send(encode_action({"action": "Pass", "sequenceId": 1, "blob": BLOB}), time.monotonic() + 20)
        assert time.monotonic() - started < 1.0
        assert 0 < channel.unsent < len(BLOB)
        poller = select.poll()
        poller.register(channel.writer_fileno(), select.POLLOUT)
        deadline = time.monotonic() + 20
        while not channel.flush():
            assert time.monotonic() < deadline, "the player took no more of its action"
            poller.poll(1000)
        assert channel.unsent == 0
        assert _answer(channel, assembler, 1) == 1
        # Two large actions back to back: the second waits behind the first's rest, never between its bytes.
        channel.send(encode_action({"action": "Pass", "sequenceId": 2, "blob": BLOB}), time.monotonic() + 20)
        channel.send(encode_action({"action": "Pass", "sequenceId": 3, "blob": BLOB}), time.monotonic() + 20)
        deadline = time.monotonic() + 20
        while not channel.flush():
            assert time.monotonic() < deadline, "the player took no more of its actions"
            poller.poll(1000)
        assert _answer(channel, assembler, 2) == 2
        assert _answer(channel, assembler, 3) == 3


def test_flush_with_a_deadline_waits_for_the_rest(tmp_path):
    with peer(tmp_path, "slow-reader", 0.3) as channel:
        assembler = FrameAssembler()
        channel.partial_sends = True
        channel.send(encode_action({"action": "Pass", "sequenceId": 1, "blob": BLOB}), time.monotonic() + 20)
        assert channel.unsent > 0
        assert channel.flush(time.monotonic() + 20) is True
        assert channel.unsent == 0
        assert _answer(channel, assembler, 1) == 1
