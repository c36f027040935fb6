"""A fake player for the daemon's tests: it sends one well-formed first frame whose metadata carries
``renderdTestFault`` (a key a test's injected fault looks for), opens ``client.pipe`` as a player does,
then waits to be stopped (at most a minute, so it never outlives a test).

    python tests/daemon/odd_player.py

``ODD_PLAYER_IDLE`` in its environment makes it misbehave once it is ready, while nobody sends it an action:
``close`` closes its end of ``server.pipe`` (and lives on), ``chatter`` writes one more message to it.
``ODD_PLAYER_IMAGE`` set: its first frame carries an RGB image (a body of 120,000 bytes).
"""

from __future__ import annotations

import os
import select
import signal
import sys

from renderd.protocol import HEADER, FieldType, encode_message, encode_metadata

LIFETIME = 60.0
ENV_IDLE = "ODD_PLAYER_IDLE"
ENV_AFTER_FIRST = "ODD_PLAYER_AFTER_FIRST"  # garbage | message: bytes right behind the first frame
ENV_IMAGE = "ODD_PLAYER_IMAGE"  # set: its first frame carries a black RGB image of IMAGE_SIZE x IMAGE_SIZE
IMAGE_SIZE = 200


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    size = IMAGE_SIZE if os.environ.get(ENV_IMAGE) else 2
    metadata = encode_metadata({
        "agents": [{"screenWidth": size, "screenHeight": size, "lastAction": "", "lastActionSuccess": True,
                    "renderdTestFault": True}],
        "sequenceId": 0,
        "activeAgentId": 0,
    })
    fields = [(FieldType.METADATA, metadata)]
    if os.environ.get(ENV_IMAGE):
        fields.append((FieldType.RGB_IMAGE, bytes(size * size * 3)))
    server = os.open(os.environ["AI2THOR_FIFO_SERVER_PIPE_PATH"], os.O_WRONLY)
    first = [bytes(memoryview(b).cast("B")) for b in encode_message(fields)]
    after = os.environ.get(ENV_AFTER_FIRST, "")
    if after == "garbage":  # a field of unknown type 42, in the same write as the first frame
        first.append(HEADER.pack(42, 1) + b"x")
    elif after == "message":  # a second whole message, in the same write
        first += [bytes(memoryview(b).cast("B")) for b in encode_message([(FieldType.METADATA, metadata)])]
    os.write(server, b"".join(first))
    client = os.open(os.environ["AI2THOR_FIFO_CLIENT_PIPE_PATH"], os.O_RDONLY)
    idle = os.environ.get(ENV_IDLE, "")
    if idle == "close":
        os.close(server)
        server = -1
    elif idle == "chatter":
        os.writev(server, encode_message([(FieldType.METADATA, metadata)]))
    select.select([], [], [], LIFETIME)  # until SIGTERM (or the lifetime) ends it
    os.close(client)
    if server >= 0:
        os.close(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
