"""Feeding the wire codec in tests: encoded buffers joined into bytes, a decoder drained of its messages, and
bytes fed through the decoder's zero-copy path."""

from __future__ import annotations

from renderd.protocol import NEED_DATA, Decoder


def join(buffers) -> bytes:
    return b"".join(bytes(memoryview(b).cast("B")) for b in buffers)


def drain(decoder: Decoder) -> list:
    out = []
    while True:
        m = decoder.next_message()
        if m is NEED_DATA:
            return out
        out.append(m)


def feed_readv(decoder: Decoder, data: bytes, chunk: int) -> None:
    """Feed through the zero-copy path the FIFO transport uses (get_buffers / buffers_updated)."""
    pos = 0
    while pos < len(data):
        want = min(chunk, len(data) - pos)
        got = 0
        for buf in decoder.get_buffers():
            n = min(buf.nbytes, want - got)
            buf[:n] = data[pos + got : pos + got + n]
            got += n
            if got == want:
                break
        decoder.buffers_updated(got)
        pos += got
