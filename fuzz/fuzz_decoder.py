"""Coverage-guided fuzzing of the frame decoder with atheris (run on demand, not in the test suite).

    pip install atheris
    python fuzz/fuzz_decoder.py -atheris_runs=200000

Any exception other than renderd.ProtocolError is a finding. Each event's metadata is read too: building an
event only scans it, and what a full decode finds is raised on that first access (docs/protocol.md).
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from renderd.errors import ProtocolError
    from renderd.event import FrameAssembler
    from renderd.protocol import NEED_DATA, Decoder


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    chunk = fdp.ConsumeIntInRange(1, 4096)
    stream = fdp.ConsumeBytes(fdp.remaining_bytes())
    d = Decoder(max_body_size=1 << 20)
    fa = FrameAssembler()
    try:
        for pos in range(0, len(stream), chunk):
            d.receive_data(stream[pos : pos + chunk])
            while (m := d.next_message()) is not NEED_DATA:
                for event in fa.event(m).events:
                    event.metadata  # noqa: B018  (decoded on first access)
        d.end_of_input()
    except ProtocolError:
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
