"""Health checks of an in-process Supervisor's one-player ``demo`` environment: its configuration, its player,
and one step driven by hand on a lease's pipes."""

from __future__ import annotations

import os
import select
import time

from renderd.daemon.supervisor import Supervisor
from renderd.protocol import Decoder, FieldType, decode_metadata, encode_action
from tests.daemon.conftest import fast_config

DEADLINE = 20.0


def _config(interval: float, step_timeout: float = 20.0) -> str:
    return fast_config(extra=f"health_interval = {interval}").replace(
        "step_timeout = 20.0", f"step_timeout = {step_timeout}"
    )


def _player(sup: Supervisor):
    with sup.lock:
        players = sup.environments["demo"].players
        return players[0] if players else None


def _step(answer: dict, seq: int) -> int:
    """As a leased client: send ``Pass`` with ``seq`` on the lease's pipes; the sequenceId of the answer."""
    rfd = os.open(answer["server_pipe"], os.O_RDONLY | os.O_NONBLOCK)
    wfd = os.open(answer["client_pipe"], os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(wfd, b"".join(encode_action({"action": "Pass", "sequenceId": seq})))
        decoder = Decoder()
        deadline = time.monotonic() + DEADLINE
        while not decoder.has_message:
            assert select.select([rfd], [], [], max(0.0, deadline - time.monotonic()))[0], "no answer in time"
            data = os.read(rfd, 1 << 20)
            assert data, "end of file"
            decoder.receive_data(data)
        message = decoder.next_message()
        return decode_metadata(message.first(FieldType.METADATA))["sequenceId"]
    finally:
        os.close(wfd)
        os.close(rfd)
