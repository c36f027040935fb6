"""A small client-side driver for tests: a real mkfifo pair, a real player process, deadlines everywhere.

    with PlayerProcess(tmp_path, args=["-screen-width", "64"]) as p:
        first = p.recv_event()                     # the readiness message (sequenceId 0)
        ev = p.step({"action": "MoveAhead"})       # sends, then receives one event
        p.terminate()                              # SIGTERM, returns the exit code

It speaks the client side in AI2-THOR's order: open ``server.pipe`` for reading and receive the first
message, then open ``client.pipe`` for writing. Reads use ``select`` with a deadline and feed
:class:`renderd.protocol.Decoder` (zero-copy ``readv`` into the decoder's buffers); events come from
:class:`renderd.event.FrameAssembler`. Nothing here blocks without a deadline; :meth:`close` kills the
process group and removes the pipes.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from renderd.event import Event, FrameAssembler
from renderd.protocol import NEED_DATA, Decoder, Message, encode_action

__all__ = ["PlayerProcess", "PlayerExited", "DEFAULT_TIMEOUT", "player_command"]

#: Default deadline for one receive, an open, or a process exit (seconds).
DEFAULT_TIMEOUT = 15.0
#: How often to retry opening client.pipe for writing while the player has not opened it yet.
OPEN_RETRY_INTERVAL = 0.005


class PlayerExited(Exception):
    """End of input on server.pipe at a message boundary (the player closed it or died)."""


def player_command(args: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", "renderd.player", *args]


class PlayerProcess:
    """One player process on its own FIFO pair under ``directory``."""

    def __init__(
        self,
        directory: str | os.PathLike,
        args: Sequence[str] = (),
        *,
        env: dict[str, str] | None = None,
        platform: str | None = None,
        log_file: bool = True,
        command: Sequence[str] | None = None,
        start: bool = True,
    ) -> None:
        self.dir = Path(directory)
        self.server_path = self.dir / "server.pipe"
        self.client_path = self.dir / "client.pipe"
        self.log_path = self.dir / "player.log"
        self.stdout_path = self.dir / "player.stdout"
        self.stderr_path = self.dir / "player.stderr"
        os.mkfifo(self.server_path, 0o600)
        os.mkfifo(self.client_path, 0o600)
        full_env = dict(os.environ)
        for key in list(full_env):
            if key.startswith(("AI2THOR_", "RENDERD_")):
                del full_env[key]
        full_env.update(
            {
                "AI2THOR_SERVER_TYPE": "FIFO",
                "AI2THOR_FIFO_SERVER_PIPE_PATH": str(self.server_path),
                "AI2THOR_FIFO_CLIENT_PIPE_PATH": str(self.client_path),
                "AI2THOR_CLIENT_TOKEN": "test-token",
                "AI2THOR_SERVER_SIDE_SCREENSHOT": "True",  # as renderd's launchers set it: answers carry images
            }
        )
        if platform is not None:
            full_env["RENDERD_PLATFORM"] = platform
        full_env.update(env or {})
        argv = list(command) if command is not None else player_command(args)
        if log_file and command is None:
            argv += ["-logFile", str(self.log_path)]
        self.argv = argv
        self.env = full_env
        self.proc: subprocess.Popen | None = None
        self.server_fd: int | None = None
        self.client_fd: int | None = None
        self.decoder = Decoder()
        self.assembler = FrameAssembler()
        self.sequence_id = 0
        if start:
            self.start()

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> None:
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __enter__(self) -> PlayerProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def stdout_text(self) -> str:
        return self.stdout_path.read_text(encoding="utf-8", errors="replace")

    def stderr_text(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def wait(self, timeout: float = DEFAULT_TIMEOUT) -> int:
        """The exit code (negative: killed by that signal). Raises subprocess.TimeoutExpired."""
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout: float = DEFAULT_TIMEOUT) -> int:
        """SIGTERM the player; returns its exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def close_client_pipe(self) -> None:
        if self.client_fd is not None:
            fd, self.client_fd = self.client_fd, None
            os.close(fd)

    def close(self) -> None:
        """Close the pipes, stop the process group (TERM, then KILL), reap, remove the FIFOs."""
        self.close_client_pipe()
        if self.server_fd is not None:
            fd, self.server_fd = self.server_fd, None
            os.close(fd)
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=5)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        elif self.proc is not None:
            try:  # the leader is gone; make sure nothing else of its group is left
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for path in (self.server_path, self.client_path):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    # -- pipes -------------------------------------------------------------------------------------------
    def open_server(self) -> None:
        """Open server.pipe for reading (never blocks: O_NONBLOCK; reads wait in select)."""
        if self.server_fd is None:
            self.server_fd = os.open(self.server_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)

    def open_client(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Open client.pipe for writing once the player has opened it for reading."""
        if self.client_fd is not None:
            return
        deadline = time.monotonic() + timeout
        while True:
            try:
                fd = os.open(self.client_path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                break
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
            if not self.alive():
                raise PlayerExited(f"player exited ({self.proc.returncode}) before opening client.pipe")
            if time.monotonic() > deadline:
                raise TimeoutError(f"player did not open client.pipe within {timeout} s")
            time.sleep(OPEN_RETRY_INTERVAL)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        self.client_fd = fd

    def recv_message(self, timeout: float = DEFAULT_TIMEOUT) -> Message:
        """The next whole message. Raises TimeoutError, PlayerExited (clean EOF) or ProtocolError."""
        self.open_server()
        deadline = time.monotonic() + timeout
        while True:
            message = self.decoder.next_message()
            if message is not NEED_DATA:
                return message
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no complete message from the player within {timeout} s")
            readable, _, _ = select.select([self.server_fd], [], [], remaining)
            if readable:
                self._read_some()

    def _read_some(self) -> None:
        """Read what server.pipe holds into the decoder (a subclass may also keep the bytes)."""
        try:
            n = os.readv(self.server_fd, self.decoder.get_buffers())
        except BlockingIOError:
            return
        if n == 0:
            self.decoder.end_of_input()  # ProtocolError if inside a message
            raise PlayerExited("end of input on server.pipe")
        self.decoder.buffers_updated(n)

    def recv_event(self, timeout: float = DEFAULT_TIMEOUT) -> Event:
        message = self.recv_message(timeout)
        return self.assembler.event(message)

    def read_raw(self, timeout: float = DEFAULT_TIMEOUT, limit: int = 1 << 20) -> bytes:
        """Every byte until end of input (or ``limit`` bytes), bypassing the decoder."""
        self.open_server()
        deadline = time.monotonic() + timeout
        chunks = []
        total = 0
        while total < limit:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no end of input on server.pipe within {timeout} s")
            readable, _, _ = select.select([self.server_fd], [], [], remaining)
            if not readable:
                continue
            try:
                data = os.read(self.server_fd, limit - total)
            except BlockingIOError:
                continue
            if not data:
                break
            chunks.append(data)
            total += len(data)
        return b"".join(chunks)

    def send(self, action: dict[str, Any] | str, **kwargs: Any) -> int:
        """Send one action (sequenceId added as AI2-THOR's FifoServer does); returns its sequenceId."""
        if isinstance(action, str):
            action = {"action": action}
        action = {**action, **kwargs}
        if "sequenceId" in action:
            self.sequence_id = action["sequenceId"]
        else:
            self.sequence_id += 1
            action["sequenceId"] = self.sequence_id
        self.send_raw_buffers(encode_action(action))
        return self.sequence_id

    def send_raw_buffers(self, buffers: Sequence[Any]) -> None:
        self.open_client()
        data = b"".join(bytes(b) for b in buffers)
        view = memoryview(data)
        while view:
            n = os.write(self.client_fd, view)
            view = view[n:]

    def start_session(self, timeout: float = DEFAULT_TIMEOUT) -> Event:
        """Receive the first message, then open client.pipe: the player is ready for actions."""
        first = self.recv_event(timeout)
        self.open_client(timeout)
        return first

    def step(self, action: dict[str, Any] | str, *, timeout: float = DEFAULT_TIMEOUT, **kwargs: Any) -> Event:
        seq = self.send(action, **kwargs)
        event = self.recv_event(timeout)
        if event.metadata is not None and event.sequence_id != seq:
            raise AssertionError(f"sequenceId mismatch: sent {seq}, got {event.sequence_id}")
        return event
