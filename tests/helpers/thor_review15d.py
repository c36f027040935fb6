"""A real player's byte stream read twice: by renderd's decoder (a PlayerProcess that keeps every byte) and by
AI2-THOR's own FifoServer + create_event, for comparing the events attribute by attribute."""

from __future__ import annotations

import io
import os

from tests.helpers.fifo_driver import PlayerProcess

__all__ = ["RecordingPlayer", "ThorReader"]


class RecordingPlayer(PlayerProcess):
    """A PlayerProcess that keeps every byte the player sent."""

    def __init__(self, *args, **kwargs):
        self.raw = bytearray()
        super().__init__(*args, **kwargs)

    def _read_some(self):
        try:
            data = os.read(self.server_fd, 1 << 20)
        except BlockingIOError:
            return
        if not data:
            raise AssertionError("end of input on server.pipe")
        self.raw += data
        self.decoder.receive_data(data)


class ThorReader:
    """AI2-THOR's FifoServer reading recorded bytes, one message per ``receive``."""

    def __init__(self, fifo_server_module, width: int, height: int):
        self.server = fifo_server_module.FifoServer(width=width, height=height, timeout=None)
        self.stream = io.BytesIO()
        self.server.server_pipe = self.stream

    def receive(self, data: bytes, sequence_id: int):
        pos = self.stream.tell()
        self.stream.seek(0, io.SEEK_END)
        self.stream.write(data)
        self.stream.seek(pos)
        self.server.sequence_id = sequence_id
        return self.server.receive()

    def close(self):
        self.server.tmp_dir.cleanup()
