"""Fuzzing the frame decoder and event assembly: random and mutated valid streams only ever raise
ProtocolError, and the decoder never allocates more than its named body limit."""

from __future__ import annotations

import tracemalloc

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from renderd.errors import ProtocolError
from renderd.event import FrameAssembler
from renderd.protocol import NEED_DATA, SCRATCH_SIZE, Decoder, FieldType, encode_message, encode_metadata

LIMIT = 256 * 1024


def _valid_stream() -> bytes:
    out = []
    for seq in range(3):
        md = {
            "agents": [{"screenWidth": 8, "screenHeight": 6, "lastActionSuccess": True, "thirdPartyCameras": []}],
            "sequenceId": seq,
            "activeAgentId": 0,
        }
        fields = [
            (FieldType.METADATA, encode_metadata(md)),
            (FieldType.RGB_IMAGE, np.full(8 * 6 * 3, seq, np.uint8)),
            (FieldType.DEPTH_IMAGE, np.full(8 * 6, 1.5, "<f4").view(np.uint8)),
        ]
        if seq == 2:
            fields = [(FieldType.METADATA_PATCH, encode_metadata({"agentId": 0, "lastAction": "X"}))]
        out.append(b"".join(bytes(memoryview(b).cast("B")) for b in encode_message(fields)))
    return b"".join(out)


VALID = _valid_stream()


def run_stream(data: bytes, cuts: list[int]) -> None:
    """Decode and assemble ``data`` fed in chunks; anything but ProtocolError escapes and fails the test."""
    d = Decoder(max_body_size=LIMIT)
    fa = FrameAssembler()
    pos, i = 0, 0
    try:
        while pos < len(data):
            n = cuts[i % len(cuts)] if cuts else len(data)
            i += 1
            d.receive_data(data[pos : pos + n])
            pos += n
            while (m := d.next_message()) is not NEED_DATA:
                fa.event(m)
        d.end_of_input()
    except ProtocolError:
        pass


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000), st.lists(st.integers(1, 64), max_size=8))
def test_random_bytes_only_raise_protocol_error(data, cuts):
    run_stream(data, cuts)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=6),
    st.integers(0, len(VALID)),
    st.lists(st.integers(1, 300), max_size=6),
)
def test_mutated_valid_streams_only_raise_protocol_error(flips, cut_at, cuts):
    data = bytearray(VALID)
    for pos, value in flips:
        data[pos] = value
    run_stream(bytes(data[: max(cut_at, 1)]), cuts)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 0xFFFFFFFF), st.sampled_from([int(t) for t in FieldType]))
def test_declared_lengths_never_allocate_past_the_limit(length, ftype):
    header = bytes([ftype]) + length.to_bytes(4, "big")
    tracemalloc.start()
    try:
        run_stream(header + b"\x00" * 64, [])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the scratch buffer, one body of at most LIMIT, and bookkeeping
    assert peak < LIMIT + SCRATCH_SIZE + 64 * 1024
