"""The player side of the FIFO transport, in the order an AI2-THOR build follows.

1. open ``server.pipe`` for writing (this blocks until the client opens it for reading);
2. write one complete first message (sequenceId 0): the readiness signal;
3. open ``client.pipe`` for reading (blocks until the client opens it for writing);
4. loop: read one ACTION field + end-of-message, act, write one message.

Messages are written with ``os.writev`` straight from the image arrays (partial writes are resumed).
The image fields' buffers are encoded once and reused while the player returns the same image list (a
static frame, an unchanged view), and the metadata comes packed from the player's per-state cache, so
an answer that goes out whole costs one ``writev`` and no bookkeeping. Actions are read with ``readv``
straight into the decoder's buffer.
Both descriptors are non-blocking once open and every wait is a ``select`` that also watches the signal
wakeup pipe (:mod:`renderd.player.signals`), so SIGTERM ends the player at any point, including while it
waits for room in a full pipe (a blocking ``writev`` of the whole message measured no faster, and a
signal arriving just before it would be noticed only once the client reads); the blocking FIFO opens
run in a helper thread for the same reason.
End of input on ``client.pipe`` at a message boundary means the client is done: exit 0; so does a client
that closes ``server.pipe`` before it ever opens ``client.pipe`` (it read what it wanted, or died: nobody
would open ``client.pipe``, and a blocked open would wait forever). Anything the
player cannot parse (bad framing, an ACTION that is not a JSON object) is logged and ends the player with
:data:`EXIT_PROTOCOL_ERROR`, the way a build's message loop dies on an exception: the stream cannot be
trusted after it, and renderd reports the exit with the log's tail. A well-framed ACTION nested deeper
than :data:`~renderd.protocol.MAX_ACTION_DEPTH` is not such a message: it is answered as a failed action
(``InvalidArgument``) and the player carries on. A client that closes ``server.pipe`` while the player
writes (EPIPE) ends the player with :data:`EXIT_IO_ERROR`.
"""

from __future__ import annotations

import fcntl
import logging
import os
from typing import Any, Callable, Sequence

from renderd.errors import ProtocolError, os_error_message
from renderd.player import faults, signals
from renderd.player.core import Answer, Player
from renderd.protocol import (
    DEFAULT_MAX_BODY_SIZE,
    HEADER,
    HEADER_SIZE,
    MAX_ACTION_SIZE,
    MESSAGE_SIZE_IN_BODIES,
    NEED_DATA,
    ActionTooDeep,
    Decoder,
    FieldType,
    byte_views,
    decode_action,
    drop_written,
    encode_message,
    message_nbytes,
)

__all__ = ["run_fifo", "write_all", "EXIT_OK", "EXIT_IO_ERROR", "EXIT_PROTOCOL_ERROR", "ACTION_MAX_BODY_SIZE"]

EXIT_OK = 0
EXIT_IO_ERROR = 1
EXIT_PROTOCOL_ERROR = 4
#: Largest ACTION body the player accepts (actions are small JSON objects).
ACTION_MAX_BODY_SIZE = MAX_ACTION_SIZE
#: Largest message a client's decoder accepts (its default ``max_message_size``): the player refuses an
#: action after which an answer could be larger (:meth:`~renderd.player.core.Player.limit_answer_size`).
MAX_ANSWER_SIZE = MESSAGE_SIZE_IN_BODIES * DEFAULT_MAX_BODY_SIZE
#: Bytes read from client.pipe per read.
READ_SIZE = 64 * 1024
#: Most buffers passed to one writev (Linux's IOV_MAX is 1024).
MAX_IOV = 512

logger = logging.getLogger(__name__)


class _ClientGone(Exception):
    """The client closed its end (EOF on client.pipe, or EPIPE on server.pipe)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def write_all(fd: int, buffers: Sequence[Any], nbytes: int | None = None) -> int:
    """Write every buffer to ``fd`` with ``os.writev``, resuming after partial writes. Returns the byte count.

    ``nbytes``, the buffers' total size when the caller knows it, lets a message that goes out in one
    call skip all bookkeeping (the buffers must then support the buffer protocol as they are). ``fd`` may
    be non-blocking: the writer then waits in :func:`renderd.player.signals.wait`. Raises OSError
    (BrokenPipeError when the reader is gone) or :class:`~renderd.player.signals.Terminated`.
    """
    done = 0
    if nbytes is not None and len(buffers) <= MAX_IOV:
        try:
            done = os.writev(fd, buffers)
        except BlockingIOError:
            done = 0
        if done == nbytes:
            return done
    views = byte_views(buffers)
    drop_written(views, done)
    total = done
    while views:
        try:
            n = os.writev(fd, views[:MAX_IOV])
        except BlockingIOError:
            signals.wait(write=[fd])
            continue
        total += n
        drop_written(views, n)
    return total


def _nonblocking(fd: int) -> int:
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    return fd


def encode_answer(answer: Answer) -> list[Any]:
    """The buffers of one player message: METADATA (packed from the answer's cached bytes), the images,
    end-of-message."""
    return encode_message([(FieldType.METADATA, answer.packed_metadata()), *answer.images])


class _AnswerEncoder:
    """:func:`encode_answer` that reuses the image fields' encoding while the player returns the same
    image list (a static frame, an unchanged view): per answer only the metadata header is packed."""

    def __init__(self) -> None:
        self._images: list | None = None
        self._tail: list[Any] = []
        self._tail_size = 0

    def encode(self, answer: Answer) -> tuple[list[Any], int]:
        """The message's buffers and their total size."""
        images = answer.images
        if images is not self._images:
            self._tail = encode_message(images)  # the image fields and the end-of-message marker
            self._tail_size = message_nbytes(self._tail)
            self._images = images
        metadata = answer.packed_metadata()
        return [HEADER.pack(FieldType.METADATA, len(metadata)), metadata, *self._tail], (
            HEADER_SIZE + len(metadata) + self._tail_size
        )


class FifoLink:
    """Owns the two pipe descriptors and runs the message loop for one :class:`Player`."""

    def __init__(self, player: Player, server_path: str, client_path: str) -> None:
        self.player = player
        self.server_path = server_path
        self.client_path = client_path
        self.server_fd: int | None = None
        self.client_fd: int | None = None
        self.decoder = Decoder(max_body_size=ACTION_MAX_BODY_SIZE)
        self.encoder = _AnswerEncoder()
        self.steps = 0
        player.limit_answer_size(MAX_ANSWER_SIZE)
        player.limit_metadata_size(DEFAULT_MAX_BODY_SIZE)  # a METADATA field is one body

    # -- pipes ---------------------------------------------------------------------------------------
    def open_server(self) -> None:
        logger.info("opening %s for writing (waits for the client to open it)", self.server_path)
        self.server_fd = _nonblocking(signals.open_blocking(self.server_path, os.O_WRONLY | os.O_CLOEXEC))

    def open_client(self) -> None:
        """Open client.pipe, waiting for the client as long as it holds server.pipe open: a client that closes
        server.pipe before opening client.pipe is gone (it died, or left after the first message), and nobody
        would ever open client.pipe."""
        logger.info("opening %s for reading (waits for the client to open it)", self.client_path)
        try:
            fd = signals.open_blocking(self.client_path, os.O_RDONLY | os.O_CLOEXEC, peer=self.server_fd)
        except BrokenPipeError:
            raise _ClientGone("the client closed server.pipe without opening client.pipe", EXIT_OK) from None
        self.client_fd = _nonblocking(fd)

    def close_server(self) -> None:
        if self.server_fd is not None:
            fd, self.server_fd = self.server_fd, None
            os.close(fd)

    def close(self) -> None:
        self.close_server()
        if self.client_fd is not None:
            fd, self.client_fd = self.client_fd, None
            os.close(fd)

    # -- I/O -------------------------------------------------------------------------------------------
    def send(self, buffers: Sequence[Any], nbytes: int | None = None) -> None:
        if self.server_fd is None:
            raise _ClientGone("server.pipe is closed", EXIT_IO_ERROR)
        try:
            write_all(self.server_fd, buffers, nbytes)
        except BrokenPipeError:
            raise _ClientGone("the client closed server.pipe while the player was writing (EPIPE)", EXIT_IO_ERROR)

    def send_answer(self, answer: Answer) -> None:
        self.send(*self.encoder.encode(answer))

    def recv_action(self) -> dict:
        """The next action. Raises _ClientGone at end of input, ProtocolError on bad bytes."""
        decoder = self.decoder
        while True:
            message = decoder.next_message()
            if message is not NEED_DATA:
                return decode_action(message)
            signals.wait(read=[self.client_fd])
            try:
                n = os.readv(self.client_fd, decoder.get_buffers())  # straight into the decoder's buffer
            except BlockingIOError:
                continue
            if not n:
                decoder.end_of_input()  # raises ProtocolError if it ended inside a message
                raise _ClientGone("the client closed client.pipe", EXIT_OK)
            decoder.buffers_updated(n)

    def drain_until_eof(self) -> None:
        """Discard whatever the client sends until it closes client.pipe (after a stream fault)."""
        if self.client_fd is None:
            self.open_client()
        while self._read():
            pass

    def _read(self) -> bytes:
        """The next bytes from client.pipe (b"" at end of input), waiting as long as it takes."""
        while True:
            signals.wait(read=[self.client_fd])
            try:
                return os.read(self.client_fd, READ_SIZE)
            except BlockingIOError:
                continue

    # -- the loop --------------------------------------------------------------------------------------
    def serve(self, *, garbage_first: bool = False, after_open: Callable[[], None] | None = None) -> int:
        """Open the pipes, send the first message, answer actions until the client leaves. Returns an exit code.

        ``after_open`` runs once server.pipe is open (the startup fault hooks); ``garbage_first`` sends a
        malformed first message. Raises :class:`~renderd.player.signals.Terminated` on SIGTERM/SIGINT.
        """
        try:
            self.open_server()
            if after_open is not None:
                after_open()
            answer = self.player.first_answer()
            if garbage_first:
                logger.warning("fault at start: sending a malformed first message")
                self.send([faults.garbage_message()])
            else:
                self.send_answer(answer)
            logger.info("first message sent (%d x %d); player is ready", self.player.width, self.player.height)
            self.open_client()
            while True:
                try:
                    action = self.recv_action()
                except ActionTooDeep as exc:  # whole and framed, but not an action it can take: answer it
                    self.reject(exc)
                    continue
                self.step(action)
        except _ClientGone as exc:
            signals.exiting()  # the exit code is decided: a signal from now on must not change it
            level = logging.INFO if exc.code == EXIT_OK else logging.ERROR
            logger.log(level, "%s after %d step(s); exiting", exc, self.steps)
            return exc.code
        except ProtocolError as exc:
            signals.exiting()
            logger.error("malformed message from the client: %s; exiting", exc)
            return EXIT_PROTOCOL_ERROR
        except OSError as exc:
            signals.exiting()
            logger.error("%s; exiting", os_error_message(exc, "pipe I/O failed"))
            return EXIT_IO_ERROR
        finally:
            self.close()

    def step(self, action: dict) -> None:
        """Answer ``action`` (faults included, see :func:`renderd.player.faults.serve_action`)."""
        self.steps += 1
        faults.serve_action(self.player, action, self.send_answer, self.stream_fault)

    def reject(self, exc: ActionTooDeep) -> None:
        """Answer an action the player cannot take as a failed action (``InvalidArgument``)."""
        self.steps += 1
        logger.warning("answering an unacceptable action as failed: %s", exc)
        self.send_answer(self.player.rejected_answer(exc.action, str(exc), "InvalidArgument"))

    def stream_fault(self, fault: faults.Fault, action: dict) -> None:
        if fault.kind == "garbage":
            self.send([faults.garbage_message()])
            return
        body = self.player.answer(action).packed_metadata()
        if fault.kind == "oversize":
            self.send([faults.oversize_header()])
            logger.warning("fault: oversize header sent; going silent until the client closes client.pipe")
            self.drain_until_eof()
            raise _ClientGone("the client closed client.pipe", EXIT_OK)
        if fault.kind == "truncate":
            self.send([faults.truncated_message(body)])
            self.close_server()
            logger.error("fault: truncated message sent, server.pipe closed; exiting with code %d", fault.code)
            faults.crash("exit", fault.code)
        if fault.kind == "close":
            self.send([faults.unterminated_message(body)])
            self.close_server()
            logger.warning("fault: server.pipe closed mid-message; staying alive until client.pipe closes")
            self.drain_until_eof()
            raise _ClientGone("the client closed client.pipe", EXIT_OK)


def run_fifo(player: Player, server_path: str, client_path: str, *, garbage_first: bool = False) -> int:
    """Serve ``player`` over the FIFO pair; returns the process exit code."""
    return FifoLink(player, server_path, client_path).serve(garbage_first=garbage_first)

