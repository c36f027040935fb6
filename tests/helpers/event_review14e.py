"""Decoded messages for the event tests: one agent's metadata of a W x H screen, and a message decoded from
encoded fields."""

from __future__ import annotations

from renderd.protocol import Decoder, encode_message

W, H = 5, 4


def agent(**kw):
    a = {
        "screenWidth": W,
        "screenHeight": H,
        "lastAction": "Pass",
        "lastActionSuccess": True,
        "errorMessage": "",
        "depthFormat": "Meters",
        "thirdPartyCameras": [],
    }
    a.update(kw)
    return a


def message(fields):
    d = Decoder()
    d.receive_data(b"".join(bytes(memoryview(b).cast("B")) for b in encode_message(fields)))
    m = d.next_message()
    assert m
    return m
