"""The FIFO transport against real named pipes and real processes."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import signal
import stat
import sys
import time
from collections.abc import Iterator

import pytest

from renderd.errors import PlayerCrashed, PlayerTimeout, ProtocolError, RenderdError
from renderd.process import LeasedPlayer, PlayerProcess, player_env
from renderd.protocol import FieldType, encode_action
from renderd.transport import fifo
from renderd.transport.fifo import (
    DEFAULT_PIPE_SIZE,
    EOF_CLASSIFY_TIMEOUT,
    F_GETPIPE_SZ,
    FifoChannel,
    FifoPair,
    pipe_max_size,
)

from .conftest import peer_argv, wait_until

pytestmark = pytest.mark.usefixtures("no_leaks")

#: Slack allowed on top of a deadline (process start-up on a busy 2-CPU machine).
SLACK = 1.0
#: EOF_CLASSIFY_TIMEOUT in the tests whose player stays alive after closing a pipe: no exit ever comes, so the wait
#: for one is only waited out ("still running"), and a short one says the same.
ALIVE_CLASSIFY_TIMEOUT = 0.2


def spawn(pair: FifoPair, argv: list[str], tmp_path, **env) -> PlayerProcess:
    environ = player_env(None, server_pipe=pair.server_path, client_pipe=pair.client_path, extra=env)
    return PlayerProcess.spawn(argv, environ, tmp_path / "player.log")


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@contextlib.contextmanager
def attached_channel(tmp_path, argv: list[str], **env: str) -> Iterator[tuple[FifoChannel, PlayerProcess]]:
    """A FifoChannel attached to the process ``argv`` started on a new pair; both closed, the pipes removed,
    after."""
    with FifoPair.create(tmp_path) as pair:
        channel = FifoChannel(pair.server_path, pair.client_path)
        proc = spawn(pair, argv, tmp_path, **env)
        channel.attach(proc)
        try:
            yield channel, proc
        finally:
            channel.close()
            proc.stop()


def partial_field_then_exit(code: int) -> str:
    """A player script: 10 bytes of a 1000-byte RGB_IMAGE body on server.pipe, then exit with ``code``."""
    return (
        "import os, struct\n"
        "fd = os.open(os.environ['AI2THOR_FIFO_SERVER_PIPE_PATH'], os.O_WRONLY)\n"
        "os.write(fd, struct.pack('!BI', 4, 1000) + b'x' * 10)\n"
        "print('wrote a partial field', flush=True)\n"
        f"raise SystemExit({code})\n"
    )


def peer_channel(tmp_path, mode: str, *args: object, **env: str):
    """:func:`attached_channel` on the scripted peer started in ``mode``."""
    return attached_channel(tmp_path, peer_argv(mode, *args), **env)


class TestFifoPair:
    def test_private_directory_and_pipes(self, tmp_path):
        pair = FifoPair.create(tmp_path)
        try:
            assert os.path.dirname(pair.directory) == str(tmp_path)
            assert stat.S_IMODE(os.stat(pair.directory).st_mode) == 0o700
            for path in (pair.server_path, pair.client_path):
                st = os.stat(path)
                assert stat.S_ISFIFO(st.st_mode)
                assert stat.S_IMODE(st.st_mode) == 0o600
        finally:
            pair.remove()
        assert not os.path.exists(pair.directory)
        pair.remove()  # idempotent
        assert pair.removed

    def test_context_manager_removes_everything(self, tmp_path):
        with FifoPair.create(tmp_path) as pair:
            (tmp_path / os.path.basename(pair.directory) / "player.log").write_text("x")
        assert os.listdir(tmp_path) == []

    def test_unwritable_parent_is_a_renderd_error(self, tmp_path):
        with pytest.raises(RenderdError, match="private directory"):
            FifoPair.create(tmp_path / "missing")


class TestOpening:
    def test_opening_before_the_player_never_blocks(self, tmp_path):
        with FifoPair.create(tmp_path) as pair:
            started = time.monotonic()
            channel = FifoChannel(pair.server_path, pair.client_path)
            assert time.monotonic() - started < 0.5
            try:
                with pytest.raises(PlayerTimeout) as info:
                    channel.recv(time.monotonic() + 0.2, "start_timeout")
                assert info.value.deadline == "start_timeout"
                assert "start_timeout" in str(info.value)
            finally:
                channel.close()

    def test_pipe_buffer_is_enlarged(self, tmp_path):
        with FifoPair.create(tmp_path) as pair, FifoChannel(pair.server_path, pair.client_path) as channel:
            size = fcntl.fcntl(channel.fileno(), F_GETPIPE_SZ)
            assert size == channel.pipe_size
            assert size >= min(DEFAULT_PIPE_SIZE, pipe_max_size())

    def test_missing_pipe_is_a_renderd_error(self, tmp_path):
        with pytest.raises(RenderdError, match="server.pipe") as info:
            FifoChannel(str(tmp_path / "nope"), str(tmp_path / "nope2"))
        assert isinstance(info.value.__cause__, FileNotFoundError)

    def test_regular_file_is_refused(self, tmp_path):
        path = tmp_path / "file"
        path.write_text("")
        with pytest.raises(RenderdError, match="not a named pipe"):
            FifoChannel(str(path), str(path))

    def test_exit_before_opening_is_reported_at_once(self, tmp_path):
        dies = python("import sys; print('dying early'); sys.exit(3)")
        with attached_channel(tmp_path, dies) as (channel, _):
            started = time.monotonic()
            with pytest.raises(PlayerCrashed) as info:
                channel.recv(time.monotonic() + 30, "start_timeout")
            assert time.monotonic() - started < 1.0 + SLACK
            err = info.value
            assert err.returncode == 3
            assert "exit code 3" in str(err)
            assert "dying early" in err.log_tail

    def test_killed_before_opening_names_the_signal(self, tmp_path):
        crashes = python("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
        with attached_channel(tmp_path, crashes) as (channel, _):
            with pytest.raises(PlayerCrashed, match="SIGSEGV") as info:
                channel.recv(time.monotonic() + 30, "start_timeout")
            assert info.value.signal_name == "SIGSEGV"


class TestStreaming:
    def test_steps_and_frames(self, tmp_path):
        from renderd.event import FrameAssembler

        with peer_channel(tmp_path, "serve", PEER_WIDTH="200", PEER_HEIGHT="150") as (channel, _):
            assembler = FrameAssembler()
            first = assembler.event(channel.recv(time.monotonic() + 30, "start_timeout"), 0)
            assert first.sequence_id == 0
            for seq in range(1, 51):
                channel.send(encode_action({"action": "Pass", "sequenceId": seq}), time.monotonic() + 10)
                event = assembler.event(channel.recv(time.monotonic() + 10), seq)
                assert event.sequence_id == seq
                assert event.frame.shape == (150, 200, 3)
                assert (event.frame == seq % 251).all()

    def test_an_answer_already_in_the_pipe_is_taken_after_the_deadline(self, tmp_path):
        """Past its deadline, recv still returns a whole answer that is waiting in the pipe, and only
        then, with nothing left to read, times out at once."""
        import array
        import termios

        def pending(fd: int) -> int:
            buf = array.array("i", [0])
            fcntl.ioctl(fd, termios.FIONREAD, buf)
            return buf[0]

        with peer_channel(tmp_path, "serve", PEER_WIDTH="200", PEER_HEIGHT="150") as (channel, _):
            channel.recv(time.monotonic() + 30, "start_timeout")
            channel.send(encode_action({"action": "Pass", "sequenceId": 1}), time.monotonic() + 10)
            frame_bytes = 200 * 150 * 3
            assert wait_until(lambda: pending(channel.fileno()) > frame_bytes, timeout=10)
            message = channel.recv(time.monotonic() - 1.0)
            assert message.first(FieldType.RGB_IMAGE).nbytes == frame_bytes
            started = time.monotonic()
            with pytest.raises(PlayerTimeout, match="step_timeout"):
                channel.recv(time.monotonic() - 1.0)
            assert time.monotonic() - started < SLACK

    def test_large_action_waits_for_a_slow_reader(self, tmp_path):
        """An action bigger than client.pipe's buffer is written in parts as the player drains it."""
        with peer_channel(tmp_path, "slow-reader", 0.3) as (channel, _):
            channel.recv(time.monotonic() + 30, "start_timeout")
            blob = "x" * (512 * 1024)
            channel.send(encode_action({"action": "Pass", "sequenceId": 1, "blob": blob}), time.monotonic() + 10)
            message = channel.recv(time.monotonic() + 10)
            assert message.first(FieldType.METADATA) is not None

    def test_player_that_never_opens_client_pipe_times_out(self, tmp_path):
        with peer_channel(tmp_path, "no-client") as (channel, _):
            channel.recv(time.monotonic() + 30, "start_timeout")
            started = time.monotonic()
            with pytest.raises(PlayerTimeout, match="did not open client.pipe within step_timeout"):
                channel.send(encode_action({"action": "Pass"}), time.monotonic() + 0.3)
            assert 0.3 <= time.monotonic() - started < 0.3 + SLACK

    def test_player_that_exits_instead_of_opening_client_pipe_is_a_crash(self, tmp_path):
        with peer_channel(tmp_path, "exit-first", 7) as (channel, _):
            channel.recv(time.monotonic() + 30, "start_timeout")
            with pytest.raises(PlayerCrashed, match="exit code 7"):
                channel.send(encode_action({"action": "Pass"}), time.monotonic() + 30)

    def test_closed_client_pipe_is_a_crash_with_epipe_chained(self, tmp_path, monkeypatch):
        monkeypatch.setattr(fifo, "EOF_CLASSIFY_TIMEOUT", ALIVE_CLASSIFY_TIMEOUT)  # (the player stays alive)
        with peer_channel(tmp_path, "close-client") as (channel, _):
            channel.recv(time.monotonic() + 30, "start_timeout")
            deadline = time.monotonic() + 30
            with pytest.raises(PlayerCrashed, match="closed client.pipe") as info:
                # The first write may land before the player closes its end; the next cannot.
                for seq in range(1, 1000):
                    channel.send(encode_action({"action": "Pass", "sequenceId": seq}), deadline)
                    time.sleep(0.01)
            assert isinstance(info.value.__cause__, BrokenPipeError)
            assert "still running" in str(info.value)


class TestReady:
    """``ready()``: a waiter over many channels asks whether recv would return at once, never blocking."""

    def test_partial_whole_and_malformed(self, tmp_path):
        code = (
            "import os, signal, struct, msgpack\n"
            "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\n"
            "fd = os.open(os.environ['AI2THOR_FIFO_SERVER_PIPE_PATH'], os.O_WRONLY)\n"
            "body = msgpack.packb({'agents': [{'screenWidth': 1, 'screenHeight': 1}], 'sequenceId': 0})\n"
            "msg = struct.pack('!BI', 1, len(body)) + body + struct.pack('!BI', 255, 0)\n"
            "os.write(fd, msg[:7])\n"
            "signal.sigwait({signal.SIGUSR1})\n"
            "os.write(fd, msg[7:])\n"
            "signal.sigwait({signal.SIGUSR1})\n"
            "os.write(fd, struct.pack('!BI', 42, 0))\n"
            "signal.sigwait({signal.SIGUSR1})\n"
        )
        with attached_channel(tmp_path, python(code)) as (channel, proc):

            def readable() -> bool:
                return bool(select.select([channel.fileno()], [], [], 30)[0])

            assert readable()
            assert channel.ready() is False  # 7 bytes of a message: recv would wait
            assert channel.ready() is False  # asking again reads nothing and still does not wait
            os.kill(proc.pid, signal.SIGUSR1)
            assert readable() and channel.ready() is True
            started = time.monotonic()
            message = channel.recv(time.monotonic() + 30)
            assert time.monotonic() - started < SLACK and message.fields[0][0] == FieldType.METADATA
            os.kill(proc.pid, signal.SIGUSR1)
            assert readable() and channel.ready() is True
            with pytest.raises(ProtocolError, match="unknown field type 42"):
                channel.recv(time.monotonic() + 30)

    def test_end_of_file_and_exit_make_it_ready(self, tmp_path):
        with attached_channel(tmp_path, python(partial_field_then_exit(3))) as (channel, proc):
            assert proc.wait(30) == 3
            assert channel.ready() is True
            with pytest.raises(PlayerCrashed, match="in the middle of a message"):
                channel.recv(time.monotonic() + 30)


class TestEndOfFile:
    def test_eof_mid_message_is_a_crash_with_the_protocol_error_chained(self, tmp_path):
        with attached_channel(tmp_path, python(partial_field_then_exit(5))) as (channel, _):
            with pytest.raises(PlayerCrashed) as info:
                channel.recv(time.monotonic() + 30, "start_timeout")
            err = info.value
            assert err.returncode == 5
            assert "in the middle of a message" in str(err)
            assert "RGB_IMAGE" in str(err)
            assert isinstance(err.__cause__, ProtocolError)
            assert "wrote a partial field" in err.log_tail

    def test_eof_while_the_player_lives_on_says_so(self, tmp_path, monkeypatch):
        monkeypatch.setattr(fifo, "EOF_CLASSIFY_TIMEOUT", ALIVE_CLASSIFY_TIMEOUT)  # (the player stays alive)
        code = (
            "import os, time\n"
            "fd = os.open(os.environ['AI2THOR_FIFO_SERVER_PIPE_PATH'], os.O_WRONLY)\n"
            "os.close(fd)\n"
            "time.sleep(60)\n"
        )
        with attached_channel(tmp_path, python(code)) as (channel, _):
            started = time.monotonic()
            with pytest.raises(PlayerCrashed, match="closed server.pipe.*still running"):
                channel.recv(time.monotonic() + 30, "start_timeout")
            # EOF is noticed at once; classifying the exit waits at most EOF_CLASSIFY_TIMEOUT.
            assert time.monotonic() - started < EOF_CLASSIFY_TIMEOUT + SLACK

    @pytest.mark.parametrize("exits", [False, True])
    def test_a_player_that_closes_client_pipe_while_an_answer_is_awaited_is_a_crash_at_once(self, tmp_path, exits,
                                                                                             monkeypatch):
        """The player reads the action, closes client.pipe (it will never read another) and sends nothing,
        keeping server.pipe open: the wait for its answer used to last the whole deadline."""
        if not exits:  # (the player stays alive; one that exits keeps the whole second to be seen exiting)
            monkeypatch.setattr(fifo, "EOF_CLASSIFY_TIMEOUT", ALIVE_CLASSIFY_TIMEOUT)
        code = (
            "import os, struct, sys, time\n"
            "fd = os.open(os.environ['AI2THOR_FIFO_SERVER_PIPE_PATH'], os.O_WRONLY)\n"
            "md = bytes([0x81, 0xaa]) + b'sequenceId' + bytes([0])\n"
            "os.write(fd, struct.pack('!BI', 1, len(md)) + md + struct.pack('!BI', 255, 0))\n"
            "inp = os.open(os.environ['AI2THOR_FIFO_CLIENT_PIPE_PATH'], os.O_RDONLY)\n"
            "data = b''\n"
            "while not data.endswith(struct.pack('!BI', 255, 0)):\n"
            "    data += os.read(inp, 4096)\n"
            "os.close(inp)\n"
            "print('closed client.pipe', flush=True)\n"
            f"time.sleep(0.2 if {exits} else 60)\n"
            "sys.exit(3)\n"
        )
        with attached_channel(tmp_path, python(code)) as (channel, proc):
            channel.recv(time.monotonic() + 30, "start_timeout")
            channel.send(encode_action({"action": "Pass", "sequenceId": 1}), time.monotonic() + 30)
            started = time.monotonic()
            with pytest.raises(PlayerCrashed, match="closed client.pipe") as info:
                channel.recv(time.monotonic() + 4)
            assert time.monotonic() - started < EOF_CLASSIFY_TIMEOUT + SLACK
            if exits:
                assert info.value.returncode == 3
            else:
                assert "still running" in str(info.value) and proc.poll() is None
            assert "closed client.pipe" in info.value.log_tail

    def test_malformed_bytes_are_a_protocol_error(self, tmp_path):
        code = (
            "import os, struct, time\n"
            "fd = os.open(os.environ['AI2THOR_FIFO_SERVER_PIPE_PATH'], os.O_WRONLY)\n"
            "os.write(fd, struct.pack('!BI', 42, 3) + b'abc')\n"
            "time.sleep(60)\n"
        )
        with attached_channel(tmp_path, python(code)) as (channel, _), pytest.raises(
            ProtocolError, match="unknown field type 42.*offset 0"
        ):
            channel.recv(time.monotonic() + 30, "start_timeout")


class TestLeasedPlayer:
    def test_watching_a_player_we_did_not_spawn(self, tmp_path):
        """A leased player (the daemon's child, not ours) is watched through a pidfd of its pid."""
        with FifoPair.create(tmp_path) as pair:
            channel = FifoChannel(pair.server_path, pair.client_path)
            proc = spawn(pair, peer_argv("serve"), tmp_path)
            leased = LeasedPlayer(proc.pid, log_path=str(tmp_path / "player.log"))
            channel.attach(leased)
            try:
                channel.recv(time.monotonic() + 30, "start_timeout")
                channel.send(encode_action({"action": "Pass", "sequenceId": 1}), time.monotonic() + 10)
                channel.recv(time.monotonic() + 10)
                os.kill(proc.pid, signal.SIGKILL)
                with pytest.raises(PlayerCrashed, match="leased player") as info:
                    # EPIPE on the send, or the pidfd/EOF on the receive, whichever comes first.
                    channel.send(encode_action({"action": "Pass", "sequenceId": 2}), time.monotonic() + 10)
                    channel.recv(time.monotonic() + 10)
                assert info.value.pid == proc.pid
                assert "first message sent" in info.value.log_tail
            finally:
                channel.close()
                leased.close()
                proc.stop()

    def test_without_a_pidfd_the_exit_is_polled(self, tmp_path):
        with FifoPair.create(tmp_path) as pair:
            channel = FifoChannel(pair.server_path, pair.client_path)
            proc = spawn(pair, python("import time; time.sleep(0.2)"), tmp_path)
            leased = LeasedPlayer(proc.pid)
            leased.close()  # drop the pidfd: the channel falls back to polling the pid
            assert leased.fileno() is None
            channel.attach(leased)
            try:
                proc.wait(10)  # reap it, as the daemon would
                with pytest.raises(PlayerCrashed, match="has exited"):
                    channel.recv(time.monotonic() + 10, "start_timeout")
            finally:
                channel.close()
                proc.stop()


def test_close_is_idempotent_and_closes_both_descriptors(tmp_path):
    with FifoPair.create(tmp_path) as pair:
        channel = FifoChannel(pair.server_path, pair.client_path)
        fd = channel.fileno()
        channel.close()
        channel.close()
        assert channel.closed
        with pytest.raises(OSError) as info:
            os.fstat(fd)
        assert info.value.errno == errno.EBADF
        with pytest.raises(ValueError):
            channel.recv(time.monotonic() + 1)
        assert wait_until(lambda: True)


def test_an_action_is_never_written_into_a_client_path_that_is_not_a_named_pipe(tmp_path):
    # server.pipe is checked to be a FIFO when it is opened; client.pipe is too, before an action is written
    # (a path given by somebody else must not make renderd write into one of this user's files).
    with FifoPair.create(tmp_path) as pair:
        victim = tmp_path / "victim.txt"
        victim.write_bytes(b"precious")
        channel = FifoChannel(pair.server_path, str(victim))
        try:
            with pytest.raises(RenderdError, match="is not a named pipe"):
                channel.send(encode_action({"action": "Pass", "sequenceId": 1}), time.monotonic() + 5)
        finally:
            channel.close()
        assert victim.read_bytes() == b"precious"


def test_an_answer_read_together_with_malformed_bytes_is_returned_before_the_error(tmp_path):
    """The player's whole answer and bad bytes after it arrive in one read: recv returns the answer, and the
    next recv raises the ProtocolError (the answer used to be dropped with the error)."""
    from renderd.protocol import encode_message, encode_metadata

    answer = b"".join(
        bytes(memoryview(b).cast("B"))
        for b in encode_message([(FieldType.METADATA, encode_metadata({"sequenceId": 1}))])
    )
    with FifoPair.create(tmp_path) as pair, FifoChannel(pair.server_path, pair.client_path) as channel:
        wfd = os.open(pair.server_path, os.O_WRONLY)
        try:
            os.write(wfd, answer + b"\x63\x00\x00\x00\x00")
            message = channel.recv(time.monotonic() + 5)
            assert message.first(FieldType.METADATA) is not None
            with pytest.raises(ProtocolError, match="unknown field type 99"):
                channel.recv(time.monotonic() + 5)
            assert channel.ready() is True
        finally:
            os.close(wfd)


@pytest.mark.parametrize("call", ["recv", "open", "write"])
def test_a_nan_deadline_is_a_timeout_not_an_endless_loop(tmp_path, call):
    """A deadline computed from a NaN timeout (``session.step_timeout = float("nan")``) compares as never
    passed: recv, the open of client.pipe and a write into a full pipe used to spin forever. It is a deadline
    already passed. (Run in a child process, which the test can kill if it spins.)"""
    code = f"""
import os, sys, time
sys.path.insert(0, {os.getcwd()!r})
from renderd.errors import PlayerTimeout
from renderd.protocol import encode_action
from renderd.transport.fifo import FifoChannel, FifoPair
pair = FifoPair.create({str(tmp_path)!r})
channel = FifoChannel(pair.server_path, pair.client_path, pipe_size=4096)
wfd = os.open(pair.server_path, os.O_WRONLY)  # a writer that never writes
if {call!r} == "write":
    rfd = os.open(pair.client_path, os.O_RDONLY | os.O_NONBLOCK)  # a reader that never reads
    channel.send(encode_action({{"action": "Pass"}}), time.monotonic() + 5)
    action = encode_action({{"action": "Pass", "blob": "x" * (1 << 20)}})
try:
    if {call!r} == "recv":
        channel.recv(float("nan"))
    else:
        channel.send(action if {call!r} == "write" else encode_action({{"action": "Pass"}}), float("nan"))
except PlayerTimeout as exc:
    print("timeout:", exc)
"""
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"{call} with a NaN deadline did not return within 5 s")
    assert "timeout:" in out, out
